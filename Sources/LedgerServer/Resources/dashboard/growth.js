// Growth: the MRR movement of each period (/v1/reports/mrr-movement) as stacked bars, gains up and losses down,
// with the MRR at its start and end, per currency or in the reporting currency; and conversion to paying
// (/v1/reports/conversion): the subscribers first seen in each period and the share who paid within each window.

import { get, needs, path } from "./api.js";
import { barChart, h, legend, palette, table } from "./charts.js";
import { count, dateInput, lastPeriods, money, percent, periodLabel, shortPeriodLabel, ymd } from "./format.js";
import { params } from "./filters.js";
import { controls, countField, fill, part, perCurrency, run } from "./page.js";

let read = () => ({});

const movements = [
  { key: "new", label: "new", sign: 1 }, { key: "reactivation", label: "reactivation", sign: 1 },
  { key: "expansion", label: "expansion", sign: 1 }, { key: "transferred_in", label: "transferred in", sign: 1 },
  { key: "contraction", label: "contraction", sign: -1 }, { key: "churned", label: "churned", sign: -1 },
  { key: "transferred_out", label: "transferred out", sign: -1 },
];
// The start is a dot (it is the previous period's end): a period's dot and the end line's point differ by its net
// movement.
const ends = [{ key: "mrr_start", label: "MRR at the start", points: true }, { key: "mrr_end", label: "MRR at the end" }];
const subscriberColumns = ["subscribers_start", "new_subscribers", "reactivation_subscribers", "expansion_subscribers",
  "transferred_in_subscribers", "contraction_subscribers", "churned_subscribers", "transferred_out_subscribers", "subscribers_end"];

function movementBlock(currency, rows, interval) {
  const periods = rows.map((r) => r.period_start);
  const chart = barChart({
    periods,
    labels: periods.map((p) => shortPeriodLabel(p, interval)),
    bars: movements.map((m) => ({ ...m, color: palette[m.key], values: rows.map((r) => r[m.key]) })),
    lines: ends.map((e) => ({ ...e, color: palette[e.key], axis: "right", values: rows.map((r) => r[e.key]) })),
    leftFormat: (v, exact) => money(Math.abs(v), currency, !exact),
    rightFormat: (v, exact) => money(v, currency, !exact),
    title: `MRR movement in ${currency} per ${interval}`,
  });
  const m = (k) => ({ label: k.replaceAll("_", " "), key: k, num: true, value: (r) => money(r[k], currency), raw: (r) => r[k] });
  const n = (k) => ({ label: k.replace("_subscribers", "").replaceAll("_", " "), key: k, num: true, value: (r) => count(r[k]), raw: (r) => r[k] });
  return h("div", { class: "currency-block", "data-currency": currency },
    h("h3", {}, currency),
    h("div", { class: "chart" }, chart),
    legend([
      ...movements.map((x) => ({ color: palette[x.key], label: `${x.label} (${x.sign > 0 ? "up" : "down"})` })),
      ...ends.map((e) => ({ color: palette[e.key], label: `${e.label} (right axis)`, line: !e.points, dot: e.points })),
    ]),
    h("details", { open: "" }, h("summary", {}, `Numbers (${currency})`), h("div", { class: "heat-wrap" }, table(rows, [
      { label: "period", key: "period_start", value: (r) => periodLabel(r.period_start, interval), raw: (r) => r.period_start },
      m("mrr_start"), ...movements.map((x) => m(x.key)), m("mrr_end"),
      ...subscriberColumns.map(n),
    ], { caption: `Money in ${currency}; then the subscribers making each part` }))));
}

function conversionBlock(report, interval) {
  const rows = report.periods;
  const periods = rows.map((r) => r.period_start);
  const chart = barChart({
    periods,
    labels: periods.map((p) => shortPeriodLabel(p, interval)),
    bars: [{ key: "subscribers", label: "first seen", color: palette.subscribers, values: rows.map((r) => r.subscribers) }],
    // The longest window first, so that a shorter one drawn over it stays visible where they are equal.
    lines: report.days.map((d, i) => ({
      key: `conversion_rate_${d}d`, label: `paid within ${d} days`, color: palette.windows[i % palette.windows.length], axis: "right",
      values: rows.map((r) => r[`conversion_rate_${d}d`]),
    })).reverse(),
    leftFormat: (v) => count(v),
    rightFormat: (v) => percent(v, v < 0.1 ? 1 : 0),
    title: `Conversion to paying per ${interval}`,
  });
  return [
    h("div", { class: "chart" }, chart),
    legend([
      { color: palette.subscribers, label: "subscribers first seen" },
      ...report.days.map((d, i) => ({ color: palette.windows[i % palette.windows.length], label: `paid within ${d} days (right axis)`, line: true })),
    ]),
    h("details", { open: "" }, h("summary", {}, "Numbers"), table(rows, [
      { label: "period", key: "period_start", value: (r) => periodLabel(r.period_start, interval), raw: (r) => r.period_start },
      { label: "first seen", key: "subscribers", num: true, value: (r) => count(r.subscribers), raw: (r) => r.subscribers },
      ...report.days.flatMap((d) => [
        { label: `paid within ${d}d`, key: `converted_${d}d`, num: true, value: (r) => count(r[`converted_${d}d`]), raw: (r) => r[`converted_${d}d`] },
        { label: `rate ${d}d`, key: `conversion_rate_${d}d`, num: true, value: (r) => percent(r[`conversion_rate_${d}d`]),
          raw: (r) => r[`conversion_rate_${d}d`] },
      ]),
    ])),
  ];
}

async function load(section) {
  await run(section, async (isCurrent) => {
    const form = read();
    const interval = form.interval || "month";
    const { from, to } = lastPeriods(interval, countField(form.count, 12, 120), dateInput(form.ending));
    const range = { from: ymd(from), to: ymd(to), interval };
    const movementBox = section.querySelector("#movement-body");
    const conversionBox = section.querySelector("#conversion-body");
    const movementSource = path("/v1/reports/mrr-movement", { ...range, ...params(true) });
    const conversionSource = path("/v1/reports/conversion", { ...range, days: form.days?.replaceAll(" ", ""), ...params() });
    await Promise.all([
      part(movementBox, isCurrent, movementSource, async (source) => {
        const report = await get(source, needs.reports);
        return () => perCurrency(movementBox, report, movementBlock, interval, "No MRR in this range.");
      }),
      part(conversionBox, isCurrent, conversionSource, async (source) => {
        const report = await get(source, needs.reports);
        return () => {
          fill(conversionBox, conversionBlock(report, interval));
        };
      }),
    ]);
  });
}

export default {
  init(section) { read = controls(section, () => load(section)); },
  show(section) { load(section); },
};
