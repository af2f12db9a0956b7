// Webhooks: every endpoint with its status, cursor, lag and last error (/v1/webhooks), the recent failed
// attempts of each (/v1/webhooks/{id}/deliveries), and a replay from a position (POST …/replay).

import { get, needs, post } from "./api.js";
import { h } from "./charts.js";
import { count, when } from "./format.js";
import { fill, run, status } from "./page.js";

function lag(e) {
  if (e.lag_positions === 0) return "caught up";
  return `${count(e.lag_positions)} position${e.lag_positions === 1 ? "" : "s"}, ${e.lag_seconds < 90 ? `${e.lag_seconds.toFixed(1)} s` : `${(e.lag_seconds / 60).toFixed(0)} min`}`;
}

function replayForm(section, e) {
  const input = h("input", { type: "number", min: "1", value: String(Math.max(1, e.delivered_through)), size: "8", "aria-label": "from position" });
  const form = h("form", { class: "replay", "data-endpoint": e.id }, input, h("button", { type: "submit" }, "Replay"));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const from = Number.parseInt(input.value, 10);
    if (!Number.isFinite(from) || from < 1) return;
    if (!window.confirm(`Deliver every event from position ${from} on to ${e.url} again?`)) return;
    try {
      await post(`/v1/webhooks/${e.id}/replay`, { from_position: from }, needs.manage);
      load(section);
    } catch (error) {
      status(section, error.message, "error");
    }
  });
  return form;
}

async function load(section) {
  await run(section, async (isCurrent) => {
    const { webhooks } = await get("/v1/webhooks", needs.manage);
    const logs = await Promise.all(webhooks.map((e) => get(`/v1/webhooks/${e.id}/deliveries?limit=100`, needs.manage)));
    if (!isCurrent()) return;
    const table = section.querySelector("#webhooks-table");
    table.dataset.count = String(webhooks.length);
    fill(table, webhooks.length === 0
      ? h("p", { class: "note" }, "No webhook endpoint is registered (POST /v1/webhooks).")
      : h("table", { class: "numbers" },
        h("thead", {}, h("tr", {}, ["URL", "status", "delivered through", "lag", "held messages", "failed attempts", "next attempt", "last error", "replay from"]
          .map((c) => h("th", {}, c)))),
        h("tbody", {}, webhooks.map((e) => h("tr", { "data-endpoint": e.id, "data-status": e.status, "data-lag": String(e.lag_positions) },
          h("td", { title: e.description ?? "" }, e.url),
          // Why it is failing or disabled is what an operator opens this page for: on screen, not in a tooltip.
          h("td", { class: e.status === "active" ? "yes" : "no", "data-status-reason": e.status_reason ?? "" }, e.status,
            e.status_reason ? h("span", { class: "status-reason" }, e.status_reason) : null),
          h("td", { class: "num" }, count(e.delivered_through)),
          h("td", {}, lag(e)),
          h("td", { class: "num", "data-held": String(e.held_messages ?? 0), title: "messages held for a retry, and their subscribers' later messages queued behind them" },
            count(e.held_messages ?? 0)),
          h("td", { class: "num" }, count(e.failed_attempts)),
          h("td", {}, when(e.next_attempt_at)),
          h("td", {}, e.last_error ?? "—"),
          h("td", {}, replayForm(section, e)))))));
    const failures = webhooks.flatMap((e, i) => logs[i].deliveries.filter((d) => d.outcome !== "delivered").slice(0, 10).map((d) => ({ e, d })));
    fill(section.querySelector("#webhooks-failures"), failures.length === 0
      ? h("p", { class: "note" }, "No failed attempt among the last 100 of each endpoint.")
      : h("table", { class: "numbers" },
        h("thead", {}, h("tr", {}, ["when", "URL", "position", "attempt", "HTTP", "latency", "error", "next retry"].map((c) => h("th", {}, c)))),
        h("tbody", {}, failures.map(({ e, d }) => h("tr", { "data-delivery": String(d.id) },
          h("td", {}, when(d.attempted_at)), h("td", {}, e.url), h("td", { class: "num" }, count(d.position)),
          h("td", { class: "num" }, count(d.attempt)), h("td", {}, d.http_status === null ? "—" : String(d.http_status)),
          h("td", { class: "num" }, `${count(d.latency_ms)} ms`), h("td", {}, d.error ?? "—"), h("td", {}, when(d.next_retry_at)))))));
  });
}

export default {
  init(section) {
    section.querySelector("#webhooks-refresh").addEventListener("submit", (event) => { event.preventDefault(); load(section); });
  },
  show(section) { load(section); },
};
