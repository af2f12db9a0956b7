// Reconciliations: the runs against the stores, newest first (/v1/reconciliations), each linking to its
// differences (#reconciliations/<id>, /v1/reconciliations/{id}): the member compared, the ledger's and the
// store's values, and whether the events appended repaired it or why not.

import { get, needs } from "./api.js";
import { h } from "./charts.js";
import { count, when } from "./format.js";
import { fill, run } from "./page.js";

const NAMES = { apple: "App Store", google: "Google Play", stripe: "Stripe" };

function runs(list) {
  if (list.length === 0) {
    return h("p", { class: "note" }, "No reconciliation has run (subledger reconcile apple|google|stripe, or serve --reconcile-interval).");
  }
  return h("table", { class: "numbers" },
    h("thead", {}, h("tr", {}, ["started", "store", "trigger", "status", "purchases", "differences", "repaired", "not repaired", "events appended", "error"]
      .map((c) => h("th", {}, c)))),
    h("tbody", {}, list.map((r) => h("tr", { "data-run": r.id, "data-status": r.status },
      h("td", {}, h("a", { href: `#reconciliations/${r.id}` }, when(r.started_at))),
      h("td", {}, NAMES[r.store] ?? r.store),
      h("td", {}, r.trigger),
      h("td", { class: r.status === "failed" ? "no" : "yes" }, r.status),
      h("td", { class: "num", "data-field": "purchases_compared" }, count(r.purchases_compared)),
      h("td", { class: "num", "data-field": "differences_found" }, count(r.differences_found)),
      h("td", { class: "num", "data-field": "repaired" }, count(r.repaired)),
      h("td", { class: "num", "data-field": "unrepaired" }, count(r.unrepaired)),
      h("td", { class: "num", "data-field": "events_appended" }, count(r.events_appended)),
      h("td", { class: "reason" }, r.error ?? "—")))));
}

function differences(run) {
  const head = h("p", { class: "note", "data-run": run.id },
    `${NAMES[run.store] ?? run.store}, ${when(run.started_at)}: ${count(run.purchases_compared)} purchases compared, `
      + `${count(run.differences_found)} differences, ${count(run.repaired)} repaired, ${count(run.unrepaired)} not repaired.`
      + (run.voided_since ? ` Voided purchases read since ${when(run.voided_since)}.` : ""));
  if (run.differences.length === 0) return h("div", {}, head, h("p", { class: "note" }, "No difference: the ledger agrees with the store."));
  return h("div", {}, head, h("div", { class: "inbox-wrap" }, h("table", { class: "numbers inbox" },
    h("thead", {}, h("tr", {}, ["subscriber", "purchase", "field", "ledger", "store", "outcome", "events appended", "why not"].map((c) => h("th", {}, c)))),
    h("tbody", {}, run.differences.map((d) => h("tr", { "data-ordinal": String(d.ordinal), "data-outcome": d.outcome },
      h("td", {}, h("a", { href: `#subscriber/${encodeURIComponent(d.subscriber_id)}` }, d.subscriber_id)),
      h("td", { class: "account" }, d.purchase_id),
      h("td", {}, d.field),
      h("td", {}, d.ledger_value ?? "—"),
      h("td", {}, d.store_value ?? "—"),
      h("td", { class: d.outcome === "repaired" ? "yes" : "no" }, d.outcome),
      h("td", { class: "num" }, count(d.event_ids.length)),
      h("td", { class: "reason" }, d.reason ?? "—")))))));
}

async function load(section, id) {
  await run(section, async (isCurrent) => {
    const { runs: list } = await get("/v1/reconciliations?limit=50", needs.history);
    const detail = id ? await get(`/v1/reconciliations/${encodeURIComponent(id)}?limit=1000`, needs.history) : null;
    if (!isCurrent()) return;
    const table = section.querySelector("#reconciliations-runs");
    table.dataset.count = String(list.length);
    fill(table, runs(list));
    fill(section.querySelector("#reconciliations-differences"), detail
      ? differences(detail)
      : h("p", { class: "note" }, list.length ? "Choose a run to see its differences." : ""));
  });
}

export default {
  init(section) {
    section.querySelector("#reconciliations-refresh").addEventListener("submit", (event) => {
      event.preventDefault();
      load(section, decodeURIComponent(location.hash.slice(1)).split("/")[1]);
    });
  },
  show(section, id) { load(section, id); },
};
