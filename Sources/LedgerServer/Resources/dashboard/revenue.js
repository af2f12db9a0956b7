// Revenue: billings, recognized revenue and refunds per period, with the deferred balance at each period's
// end — one chart and one table per currency, all from one call to /v1/reports/revenue (minor units); then the
// refunds of each period and the refund rate (/v1/reports/refunds). Both per currency or in the reporting
// currency, with the store, country and product filters.

import { get, needs, path } from "./api.js";
import { barChart, h, legend, palette, table } from "./charts.js";
import { count, dateInput, lastPeriods, money, percent, periodLabel, shortPeriodLabel, ymd } from "./format.js";
import { definitionList, definitions } from "./definitions.js";
import { params } from "./filters.js";
import { controls, countField, part, perCurrency, run } from "./page.js";

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

function refundsBlock(currency, rows, interval) {
  const periods = rows.map((r) => r.period_start);
  const chart = barChart({
    periods,
    labels: periods.map((p) => shortPeriodLabel(p, interval)),
    bars: [{ key: "amount", label: "refunded", color: palette.amount, values: rows.map((r) => r.amount) }],
    lines: [{ key: "refund_rate", label: "refund rate", color: palette.refund_rate, axis: "right", values: rows.map((r) => r.refund_rate) }],
    leftFormat: (v, exact) => money(v, currency, !exact),
    rightFormat: (v) => percent(v, v < 0.1 ? 1 : 0),
    title: `Refunds in ${currency} per ${interval}`,
  });
  const n = (k, label) => ({ label, key: k, num: true, value: (r) => count(r[k]), raw: (r) => r[k] });
  return h("div", { class: "currency-block", "data-currency": currency },
    h("h3", {}, `Refunds ${currency}`),
    h("div", { class: "chart" }, chart),
    legend([{ color: palette.amount, label: "refunded money" }, { color: palette.refund_rate, label: "refund rate (right axis)", line: true }]),
    h("details", { open: "" }, h("summary", {}, `Numbers (${currency})`), table(rows, [
      { label: "period", key: "period_start", value: (r) => periodLabel(r.period_start, interval), raw: (r) => r.period_start },
      n("refunds", "refunds"),
      { label: "amount", key: "amount", num: true, value: (r) => money(r.amount, currency), raw: (r) => r.amount },
      n("refunded_transactions", "refunded transactions"), n("paid_transactions", "paid transactions"),
      { label: "refund rate", key: "refund_rate", num: true, value: (r) => percent(r.refund_rate), raw: (r) => r.refund_rate },
    ])));
}

async function load(section) {
  await run(section, async (isCurrent) => {
    const form = read();
    const interval = form.interval || "month";
    const { from, to } = lastPeriods(interval, countField(form.count, 12, 120), dateInput(form.ending));
    const query = { from: ymd(from), to: ymd(to), interval, ...params(true) };
    const revenueBox = section.querySelector("#revenue-body");
    const refundsBox = section.querySelector("#refunds-body");
    await Promise.all([
      part(revenueBox, isCurrent, path("/v1/reports/revenue", query), async (source) => {
        const report = await get(source, needs.reports);
        return () => perCurrency(revenueBox, report, currencyBlock, interval, "No production revenue in this range.");
      }),
      part(refundsBox, isCurrent, path("/v1/reports/refunds", query), async (source) => {
        const report = await get(source, needs.reports);
        return () => perCurrency(refundsBox, report, refundsBlock, interval, "No paid transaction or refund in this range.");
      }),
    ]);
  });
}

export default {
  init(section) { read = controls(section, () => load(section)); },
  show(section) { load(section); },
};
