// Stores: per store, how many messages wait in its inbox and why (the `waiting` counts and `top_reasons` of
// /v1/stores/{store}/inbox), each linking to the list of one store's messages (#stores/<store>), newest first,
// page by page (`next_after`).

import { get, needs, path } from "./api.js";
import { h } from "./charts.js";
import { count, when } from "./format.js";
import { fill, run } from "./page.js";

const STORES = ["apple", "google", "stripe"];
const NAMES = { apple: "App Store", google: "Google Play", stripe: "Stripe" };
const PAGE = 50;

function line(store, answer) {
  const w = answer.waiting;
  const parts = ["pending", "received", "failed"].filter((s) => w[s] > 0).map((s) => `${count(w[s])} ${s}`);
  return h("div", { class: "store-line", "data-store": store, "data-waiting": String(w.total) },
    h("a", { href: `#stores/${store}` }, NAMES[store]),
    " ", h("b", { class: "waiting-count" }, count(w.total)), ` waiting${parts.length ? ` (${parts.join(", ")})` : ""}`,
    answer.top_reasons.length === 0 ? null : h("ul", { class: "reasons" }, answer.top_reasons.map((r) =>
      h("li", { "data-reason": r.reason, "data-status": r.status, "data-count": String(r.messages) },
        h("b", {}, `${count(r.messages)} ${r.status}`), `: ${r.reason}`))));
}

function table(messages) {
  if (messages.length === 0) return h("p", { class: "note" }, "No message with this status.");
  return h("div", { class: "inbox-wrap" }, h("table", { class: "numbers inbox" },
    h("thead", {}, h("tr", {}, ["received", "message", "kind", "about", "account", "status", "why", "attempts", "next attempt", "updated"]
      .map((c) => h("th", {}, c)))),
    h("tbody", {}, messages.map((m) => h("tr", { "data-message": m.message_id, "data-status": m.status },
      h("td", {}, when(m.received_at)),
      h("td", {}, m.message_id),
      h("td", {}, m.subtype ? `${m.kind} ${m.subtype}` : m.kind),
      h("td", {}, m.summary ?? "—"),
      h("td", { class: "account", title: m.account_id ?? "" }, m.account_id ?? "—"),
      h("td", {}, m.status, m.subscriber_id ? h("span", { class: "status-reason" }, m.subscriber_id) : null),
      h("td", { class: "reason" }, m.reason ?? "—"),
      h("td", { class: "num" }, count(m.attempts)),
      h("td", {}, when(m.next_attempt_at)),
      h("td", {}, when(m.updated_at)))))));
}

async function load(section, selected) {
  const form = section.querySelector("#stores-form");
  const status = form.elements.status.value;
  await run(section, async (isCurrent) => {
    const answers = await Promise.all(STORES.map((s) => get(path(`/v1/stores/${s}/inbox`, { limit: 1 }), needs.stores)));
    const store = STORES.includes(selected) ? selected : null;
    const listPath = store ? path(`/v1/stores/${store}/inbox`, { status, limit: PAGE }) : null;
    const first = listPath ? await get(listPath, needs.stores) : null;
    if (!isCurrent()) return;
    fill(section.querySelector("#stores-lines"), STORES.map((s, i) => line(s, answers[i])));
    const list = section.querySelector("#stores-list");
    list.dataset.store = store ?? "";
    list.dataset.source = listPath ?? "";
    if (!store) {
      fill(list, h("p", { class: "note" }, "Choose a store above to list its messages."));
      return;
    }
    const messages = [...first.messages];
    const body = h("div", {});
    let next = first.next_after;
    const more = h("button", { type: "button", class: "link" }, "More");
    more.hidden = !next;
    more.addEventListener("click", async () => {
      const page = await get(path(`/v1/stores/${store}/inbox`, { status, limit: PAGE, after: next }), needs.stores);
      messages.push(...page.messages);
      next = page.next_after;
      more.hidden = !next;
      fill(body, table(messages));
    });
    fill(body, table(messages));
    fill(list, h("h3", {}, `${NAMES[store]}: ${status ? `${status} messages` : "waiting messages"}, newest first`), body, more);
  });
}

let current = null;

export default {
  init(section) {
    const form = section.querySelector("#stores-form");
    form.addEventListener("submit", (event) => { event.preventDefault(); load(section, current); });
    form.elements.status.addEventListener("change", () => load(section, current));
  },
  show(section, arg) {
    current = arg ?? null;
    load(section, current);
  },
};
