// Retention: the cohort table of /v1/reports/retention as a heat map (rows: cohort months, columns: months
// since the cohort started, cells: share still paid-active), and the same cohorts' realized LTV per paying
// customer (/v1/reports/ltv), one heat map per currency (or one in the reporting currency), coloured by value.

import { get, needs, path } from "./api.js";
import { h, heat } from "./charts.js";
import { count, dateInput, lastPeriods, money, percent, periodLabel, ymd } from "./format.js";
import { params } from "./filters.js";
import { byCurrency, controls, countField, fill, part, run } from "./page.js";

let read = () => ({});

async function load(section) {
  await run(section, async (isCurrent) => {
    const form = read();
    const cohorts = countField(form.count, 12, 60);
    const { from, to } = lastPeriods("month", cohorts, dateInput(form.ending));
    const source = path("/v1/reports/retention", { from: ymd(from), to: ymd(to), ...params() });
    const ltvBox = section.querySelector("#ltv-table");
    const [report] = await Promise.all([
      get(source, needs.reports),
      part(ltvBox, isCurrent, path("/v1/reports/ltv", { from: ymd(from), to: ymd(to), months: cohorts, ...params(true) }), async (ltvSource) => {
        const ltv = await get(ltvSource, needs.reports);
        const groups = byCurrency(ltv.periods);
        return () => fill(ltvBox, groups.length
          ? groups.map(([currency, rows]) => ltvTable(currency, rows, ltv.months))
          : h("p", { class: "note" }, "No paying customer in these cohorts."));
      }),
    ]);
    if (!isCurrent()) return;
    const rows = report.periods;
    const width = Math.max(0, ...rows.map((r) => Math.max(-1, ...r.retained.map((x) => x.month)) + 1));
    const head = h("tr", {}, h("th", {}, "cohort"), h("th", { class: "num" }, "subscribers"),
      Array.from({ length: width }, (_, k) => h("th", { class: "num" }, `M${k}`)));
    const body = rows.map((r) => {
      const byMonth = new Map(r.retained.map((x) => [x.month, x]));
      return h("tr", { "data-cohort": r.period_start },
        h("th", { scope: "row" }, periodLabel(r.period_start, "month")),
        h("td", { class: "num", "data-key": "cohort_size", "data-value": String(r.cohort_size) }, count(r.cohort_size)),
        Array.from({ length: width }, (_, k) => {
          const cell = byMonth.get(k);
          if (!cell) return h("td", { class: "heat empty" }, "");
          const td = h("td", {
            class: `heat num${cell.ratio !== null && cell.ratio > 0.55 ? " dark" : ""}`,
            "data-cohort": r.period_start, "data-month": String(k),
            "data-subscribers": String(cell.subscribers), "data-ratio": cell.ratio === null ? "null" : String(cell.ratio),
            title: `${periodLabel(r.period_start, "month")} cohort, month ${k}: ${count(cell.subscribers)} of ${count(r.cohort_size)}`,
          }, percent(cell.ratio, 0));
          td.style.backgroundColor = heat(cell.ratio);
          return td;
        }));
    });
    const box = section.querySelector("#retention-table");
    box.dataset.source = source;
    fill(box, rows.length
      ? h("table", { class: "heatmap" }, h("thead", {}, head), h("tbody", {}, body))
      : h("p", { class: "note" }, "No cohort in this range: no subscriber started paying in these months."));
  });
}

/** One currency's LTV cohorts as a heat map: realized gross LTV per paying customer by month since the cohort
 * started, coloured against the largest value of the table. Every figure of the cell is in its data-*. */
function ltvTable(currency, rows, months) {
  const top = Math.max(1, ...rows.flatMap((r) => r.months.map((m) => m.ltv_gross ?? 0)));
  const head = h("tr", {}, h("th", {}, "cohort"), h("th", { class: "num", title: "members who paid in this currency" }, "customers"),
    Array.from({ length: months }, (_, k) => h("th", { class: "num" }, `M${k}`)));
  const body = rows.map((r) => {
    const byMonth = new Map(r.months.map((m) => [m.month, m]));
    return h("tr", { "data-cohort": r.period_start, "data-currency": currency },
      h("th", { scope: "row" }, periodLabel(r.period_start, "month")),
      h("td", { class: "num", "data-key": "cohort_size", "data-value": String(r.cohort_size) }, count(r.cohort_size)),
      Array.from({ length: months }, (_, k) => {
        const m = byMonth.get(k);
        if (!m) return h("td", { class: "heat empty" }, "");
        const ratio = Math.max(0, m.ltv_gross ?? 0) / top;
        const td = h("td", {
          class: `heat num${ratio > 0.55 ? " dark" : ""}`, "data-cohort": r.period_start, "data-currency": currency, "data-month": String(k),
          "data-ltv-gross": String(m.ltv_gross), "data-ltv-proceeds": String(m.ltv_proceeds),
          "data-realized-gross": String(m.realized_gross), "data-realized-proceeds": String(m.realized_proceeds),
          title: `${periodLabel(r.period_start, "month")} cohort, month ${k}: ${money(m.ltv_gross, currency)} gross, `
            + `${money(m.ltv_proceeds, currency)} proceeds per customer; ${money(m.realized_gross, currency)} gross, `
            + `${money(m.realized_proceeds, currency)} proceeds from ${count(r.cohort_size)} customers`,
        }, money(m.ltv_gross, currency));
        td.style.backgroundColor = heat(ratio);
        return td;
      }));
  });
  return h("div", { class: "currency-block", "data-currency": currency }, h("h3", {}, currency),
    h("table", { class: "heatmap" }, h("thead", {}, head), h("tbody", {}, body)));
}

export default {
  init(section) { read = controls(section, () => load(section)); },
  show(section) { load(section); },
};
