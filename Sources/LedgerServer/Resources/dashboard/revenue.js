// Revenue: billings, recognized revenue and refunds per period, with the deferred balance at each period's
// end — one chart and one table per currency, all from one call to /v1/reports/revenue (minor units).

import { get, needs, path } from "./api.js";
import { barChart, h, legend, palette, table } from "./charts.js";
import { dateInput, lastPeriods, money, periodLabel, shortPeriodLabel, ymd } from "./format.js";
import { definitionList, definitions } from "./definitions.js";
import { controls, countField, fill, run } from "./page.js";

let read = () => ({});

const columns = ["billings", "tax", "commission", "proceeds", "refunds", "refunded_unrecognized", "refunds_recognized",
  "recognized", "deferred_start", "deferred_end"];

function currencyBlock(currency, rows, interval) {
  const periods = rows.map((r) => r.period_start);
  const fmt = (v) => money(v, currency, true);
  const chart = barChart({
    periods,
    labels: periods.map((p) => shortPeriodLabel(p, interval)),
    stacked: false,
    bars: ["billings", "recognized", "refunds"].map((k) => ({ key: k, label: k, color: palette[k], values: rows.map((r) => r[k]) })),
    lines: [{ key: "deferred_end", label: "deferred balance", color: palette.deferred_end, values: rows.map((r) => r.deferred_end) }],
    leftFormat: (v, exact) => (exact ? money(v, currency) : fmt(v)),
    title: `Revenue in ${currency} per ${interval}`,
  });
  const sum = (k) => rows.reduce((a, r) => a + r[k], 0);
  const last = rows[rows.length - 1];
  return h("div", { class: "currency-block", "data-currency": currency },
    h("h3", {}, currency),
    h("p", { class: "totals" },
      `Billings ${money(sum("billings"), currency)} · recognized ${money(sum("recognized"), currency)} · `
      + `refunds ${money(sum("refunds"), currency)} · deferred at the end ${money(last.deferred_end, currency)}`),
    h("div", { class: "chart" }, chart),
    legend([
      { color: palette.billings, label: "billings" }, { color: palette.recognized, label: "recognized" },
      { color: palette.refunds, label: "refunds (paid back)" }, { color: palette.deferred_end, label: "deferred balance (end of period)", line: true },
    ]),
    // Open, as on the Churn page: the numbers are what an accountant comes for.
    h("details", { open: "" }, h("summary", {}, `Numbers (${currency})`), table(rows, [
      { label: "period", key: "period_start", value: (r) => periodLabel(r.period_start, interval), raw: (r) => r.period_start },
      ...columns.map((k) => ({
        label: k.replaceAll("_", " "), key: k, num: true, title: definitions[k] ?? null, value: (r) => money(r[k], currency), raw: (r) => r[k],
      })),
    ]), definitionList(["refunded_unrecognized", "refunds_recognized"])));
}

async function load(section) {
  await run(section, async (isCurrent) => {
    const form = read();
    const interval = form.interval || "month";
    const { from, to } = lastPeriods(interval, countField(form.count, 12, 120), dateInput(form.ending));
    const source = path("/v1/reports/revenue", { from: ymd(from), to: ymd(to), interval });
    const report = await get(source, needs.reports);
    if (!isCurrent()) return;
    const byCurrency = new Map();
    for (const r of report.periods) {
      if (!byCurrency.has(r.currency)) byCurrency.set(r.currency, []);
      byCurrency.get(r.currency).push(r);
    }
    const box = section.querySelector("#revenue-body");
    box.dataset.source = source;
    fill(box, byCurrency.size
      ? [...byCurrency.keys()].sort().map((c) => currencyBlock(c, byCurrency.get(c), interval))
      : h("p", { class: "note" }, "No production revenue in this range."));
  });
}

export default {
  init(section) { read = controls(section, () => load(section)); },
  show(section) { load(section); },
};
