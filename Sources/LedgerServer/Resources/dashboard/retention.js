// Retention: the cohort table of /v1/reports/retention as a heat map (rows: cohort months, columns: months
// since the cohort started, cells: share still paid-active).

import { get, needs, path } from "./api.js";
import { h, heat } from "./charts.js";
import { count, dateInput, lastPeriods, percent, periodLabel, ymd } from "./format.js";
import { controls, countField, fill, run } from "./page.js";

let read = () => ({});

async function load(section) {
  await run(section, async (isCurrent) => {
    const form = read();
    const { from, to } = lastPeriods("month", countField(form.count, 12, 60), dateInput(form.ending));
    const source = path("/v1/reports/retention", { from: ymd(from), to: ymd(to) });
    const report = await get(source, needs.reports);
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

export default {
  init(section) { read = controls(section, () => load(section)); },
  show(section) { load(section); },
};
