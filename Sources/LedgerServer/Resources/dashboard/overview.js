// Overview: active paid subscribers and MRR per currency now (/v1/reports/mrr), churn rate and trial
// conversion of the current period (/v1/reports/churn, /v1/reports/trials), each with a sparkline over
// the last 12 periods (MRR: asked at each period's start). The filters apply to all of them; the reporting
// currency to MRR, whose tiles are then one, in that currency.

import { get, needs, path } from "./api.js";
import { h, sparkline } from "./charts.js";
import { count, lastPeriods, money, percent, periodLabel, rfc3339, ymd } from "./format.js";
import { params } from "./filters.js";
import { controls, fill, run } from "./page.js";

const PERIODS = 12;
let read = () => ({});

function tile({ id, title, value, shown, source, sub, spark }) {
  return h("div", { class: "tile", "data-tile": id, "data-value": value === null ? "null" : String(value), "data-source": source },
    h("div", { class: "tile-title" }, title),
    h("div", { class: "tile-value" }, shown),
    h("div", { class: "tile-sub" }, sub),
    spark,
    h("div", { class: "spark-range" }, h("span", {}, spark.dataset.first), h("span", {}, spark.dataset.last)));
}

/** The API's row whose period starts at `date` (or undefined). */
function rowAt(rows, date) {
  return rows.find((r) => new Date(r.period_start).getTime() === date.getTime());
}

async function load(section) {
  await run(section, async (isCurrent) => {
    const interval = read().interval || "month";
    const now = new Date();
    const { from, to, starts } = lastPeriods(interval, PERIODS, now);
    const range = { from: ymd(from), to: ymd(to), interval, ...params() };
    const churnPath = path("/v1/reports/churn", range);
    const trialsPath = path("/v1/reports/trials", range);
    const nowPath = path("/v1/reports/mrr", { at: rfc3339(now), ...params(true) });
    const mrrPaths = starts.map((d) => path("/v1/reports/mrr", { at: rfc3339(d), ...params(true) }));
    const [churn, trials, mrrNow, ...mrrs] = await Promise.all(
      [churnPath, trialsPath, nowPath, ...mrrPaths].map((p) => get(p, needs.reports)));
    if (!isCurrent()) return;

    const labels = starts.map((d) => periodLabel(d.toISOString(), interval));
    const sumActive = (m) => m.currencies.reduce((a, c) => a + c.active_paid, 0);
    const currencies = [...new Set([mrrNow, ...mrrs].flatMap((m) => m.currencies.map((c) => c.currency)))].sort();
    const mrrOf = (m, cur) => m.currencies.find((c) => c.currency === cur)?.mrr_minor ?? 0;
    const sources = (ps) => JSON.stringify(ps);

    const activeSpark = sparkline(mrrs.map(sumActive), { labels, format: count, series: "active_paid" });
    activeSpark.dataset.sources = sources(mrrPaths);
    const tiles = [tile({
      id: "active_paid", title: "Active paid subscribers", value: sumActive(mrrNow), shown: count(sumActive(mrrNow)),
      source: nowPath,
      sub: mrrNow.currencies.length > 1
        ? mrrNow.currencies.map((c) => `${c.currency} ${count(c.active_paid)}`).join(" · ") : "now",
      spark: activeSpark,
    })];
    for (const cur of currencies) {
      const spark = sparkline(mrrs.map((m) => mrrOf(m, cur)), { labels, format: (v) => money(v, cur), series: `mrr_${cur}` });
      spark.dataset.sources = sources(mrrPaths);
      tiles.push(tile({
        id: `mrr_${cur}`, title: `MRR ${cur}`, value: mrrOf(mrrNow, cur), shown: money(mrrOf(mrrNow, cur), cur),
        source: nowPath, sub: "now (monthly recurring revenue)", spark,
      }));
    }

    const current = starts[starts.length - 1];
    const previous = starts[starts.length - 2];
    const cNow = rowAt(churn.periods, current), cPrev = rowAt(churn.periods, previous);
    const churnSpark = sparkline(starts.map((d) => rowAt(churn.periods, d)?.churn_rate ?? null),
      { labels, format: (v) => percent(v), series: "churn_rate" });
    churnSpark.dataset.sources = sources([churnPath]);
    tiles.push(tile({
      id: "churn_rate", title: `Churn rate this ${interval}`, value: cNow?.churn_rate ?? null, shown: percent(cNow?.churn_rate),
      source: churnPath,
      sub: `${count(cNow?.churned)} of ${count(cNow?.active_start)} churned · last ${interval}: ${percent(cPrev?.churn_rate)}`,
      spark: churnSpark,
    }));

    const tNow = rowAt(trials.periods, current), tPrev = rowAt(trials.periods, previous);
    const trialSpark = sparkline(starts.map((d) => rowAt(trials.periods, d)?.conversion_rate ?? null),
      { labels, format: (v) => percent(v), series: "conversion_rate" });
    trialSpark.dataset.sources = sources([trialsPath]);
    tiles.push(tile({
      id: "conversion_rate", title: `Trials converting this ${interval}`, value: tNow?.conversion_rate ?? null,
      shown: percent(tNow?.conversion_rate), source: trialsPath,
      sub: `${count(tNow?.converted)} of ${count(tNow?.started)} trials started converted · last ${interval}: ${percent(tPrev?.conversion_rate)}`,
      spark: trialSpark,
    }));

    fill(section.querySelector("#overview-tiles"), tiles);
    section.querySelector("#overview-note").textContent =
      `Now is ${rfc3339(now)}. Sparklines: the last ${PERIODS} ${interval}s (${labels[0]} – ${labels[labels.length - 1]}); `
      + `subscribers and MRR at the start of each, rates per ${interval}. The current ${interval} is still open: its churn counts `
      + "paid time that ends before the period does, and most of its trials have not ended yet.";
  });
}

export default {
  init(section) { read = controls(section, () => load(section)); },
  show(section) { load(section); },
};
