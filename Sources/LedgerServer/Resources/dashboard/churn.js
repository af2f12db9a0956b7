// Churn: per period, new and reactivated subscribers up, churned ones down by reason, and the churn rate
// line — all from one call to /v1/reports/churn.

import { get, needs, path } from "./api.js";
import { barChart, legend, palette, table } from "./charts.js";
import { count, dateInput, lastPeriods, percent, periodLabel, shortPeriodLabel, ymd } from "./format.js";
import { definitionList, definitions } from "./definitions.js";
import { params } from "./filters.js";
import { controls, countField, fill, run } from "./page.js";

let read = () => ({});

const series = [
  { key: "new", label: "new", sign: 1 },
  { key: "reactivated", label: "reactivated", sign: 1 },
  { key: "churned_voluntary", label: "churned: voluntary", sign: -1 },
  { key: "churned_involuntary", label: "churned: involuntary", sign: -1 },
  { key: "churned_refund", label: "churned: refund", sign: -1 },
  { key: "churned_other", label: "churned: other", sign: -1 },
];

async function load(section) {
  await run(section, async (isCurrent) => {
    const form = read();
    const interval = form.interval || "month";
    const { from, to } = lastPeriods(interval, countField(form.count, 12, 120), dateInput(form.ending));
    const source = path("/v1/reports/churn", { from: ymd(from), to: ymd(to), interval, entitlement: form.entitlement?.trim(), ...params() });
    const report = await get(source, needs.reports);
    if (!isCurrent()) return;
    const rows = report.periods;
    const periods = rows.map((r) => r.period_start);
    const chart = barChart({
      periods,
      labels: periods.map((p) => shortPeriodLabel(p, interval)),
      bars: series.map((s) => ({ ...s, color: palette[s.key], values: rows.map((r) => r[s.key]) })),
      lines: [{ key: "churn_rate", label: "churn rate", color: palette.churn_rate, axis: "right", values: rows.map((r) => r.churn_rate) }],
      leftFormat: (v) => count(Math.abs(v)),
      rightFormat: (v) => percent(v, v < 0.1 ? 1 : 0),
      title: `Churn per ${interval}`,
    });
    const box = section.querySelector("#churn-chart");
    box.dataset.source = source;
    box.dataset.periods = String(rows.length);
    fill(box, chart);
    fill(section.querySelector("#churn-legend"), legend([
      ...series.map((s) => ({ color: palette[s.key], label: s.label, title: definitions[s.key] ?? null })),
      { color: palette.churn_rate, label: "churn rate (right axis)", line: true },
    ]));
    const n = (k) => ({
      label: k.replace("churned_", "churned: ").replace("_", " "), key: k, num: true, title: definitions[k] ?? null, value: (r) => count(r[k]),
      raw: (r) => r[k],
    });
    fill(section.querySelector("#churn-table"), table(rows, [
      { label: "period", key: "period_start", value: (r) => periodLabel(r.period_start, interval), raw: (r) => r.period_start },
      n("active_start"), n("new"), n("reactivated"), n("churned"),
      n("churned_voluntary"), n("churned_involuntary"), n("churned_refund"), n("churned_other"), n("active_end"),
      { label: "churn rate", key: "churn_rate", num: true, value: (r) => percent(r.churn_rate), raw: (r) => r.churn_rate },
    ], { caption: `${report.entitlement ? `Entitlement ${report.entitlement}` : "All entitlements"}, per ${interval}, production only` }),
    definitionList(["churned_other"], () => "churned: other"));
  });
}

export default {
  init(section) { read = controls(section, () => load(section)); },
  show(section) { load(section); },
};
