// Subscriber lookup: the entitlement timeline (windows on a time axis), the event history beside it, an
// as-of slider over the positions of the subscriber's events (/windows and /entitlements with as_of=) and
// an "entitled at" date (/entitlements?at=).

import { get, needs, path, subscriberEvents } from "./api.js";
import { h } from "./charts.js";
import { minute, money, when } from "./format.js";
import { fill, run, status } from "./page.js";
import { timeline, timelineLegend } from "./timeline.js";

/** The subscriber on screen: id, its events (stream order) and their positions, ascending. */
let current = null;

function summary(e) {
  const d = e.data ?? {};
  switch (e.type) {
    case "purchase":
    case "renewal": {
      const span = d.period_end ? `until ${minute(d.period_end)}` : d.duration ?? "";
      const offer = d.offer && d.offer !== "none" ? ` ${d.offer}` : "";
      return `${d.product_id ?? ""}${offer} · ${d.price_minor !== undefined ? money(d.price_minor, d.currency ?? "USD") : ""} · ${span}`;
    }
    case "refund": return `${d.transaction_id} · −${money(d.amount_minor, d.currency ?? "USD")} · ${d.reason ?? ""}`;
    case "refund_reversal": return `${d.transaction_id}`;
    case "credit": return `${d.entitlement} +${d.duration ?? `${when(d.window_start)} → ${when(d.window_end)}`} · ${d.reason ?? ""} (${d.granted_by ?? ""})`;
    case "credit_reversal": return `credit ${String(d.credit_event_id ?? "").slice(0, 8)}`;
    case "cancellation": return `${(d.entitlements ?? []).join(", ") || "all"} · ${d.reason ?? ""}`;
    case "auto_renew_changed": return `auto-renew ${d.enabled ? "on" : "off"} · ${d.product_id ?? ""}`;
    case "billing_issue": return `${d.product_id ?? ""}${d.grace_until ? ` · grace until ${when(d.grace_until)}` : " · no grace"}`;
    case "expiration": return `${d.product_id ?? ""} · ${d.reason ?? ""}`;
    case "transfer_out": return `${d.store} purchase ${d.purchase_id} → ${d.to_subscriber} · ${d.reason}`;
    case "transfer_in": return `${d.store} purchase ${d.purchase_id} ← ${d.from_subscriber} · ${d.reason} · ${(d.windows ?? []).length} window(s)`;
    case "merged": return `merged into ${d.into}`;
    default: return "";
  }
}

function historyTable(events, asOf, onPick) {
  const rows = events.map((e, i) => {
    const tr = h("tr", {
      class: e.position > asOf ? "future" : e.position === asOf ? "as-of-row" : null,
      "data-position": String(e.position), "data-index": String(i), title: `event ${e.event_id}`,
    },
    h("td", { class: "num" }, e.version), h("td", { class: "num" }, e.position),
    h("td", {}, h("span", { class: `etype t-${e.type}` }, e.type), e.environment === "sandbox" ? h("span", { class: "sandbox" }, " sandbox") : null),
    h("td", { title: e.occurred_at }, minute(e.occurred_at)), h("td", { title: e.recorded_at }, minute(e.recorded_at)),
    h("td", { class: "detail" }, summary(e)));
    tr.addEventListener("click", () => onPick(i));
    return tr;
  });
  return h("table", { class: "numbers history-table" },
    h("thead", {}, h("tr", {}, ["v", "pos", "type", "occurred", "recorded", "details"].map((t) => h("th", {}, t)))),
    h("tbody", {}, rows));
}

/** The purchases the subscriber held as of the slider's position (who held what then, docs/identity.md). */
function purchasesTable(answer) {
  const merged = answer.merged_into ? h("p", { class: "note", "data-merged-into": answer.merged_into }, `Merged into ${answer.merged_into}.`) : null;
  if (!answer.purchases.length) return h("div", {}, merged, h("p", { class: "note" }, "No purchase held at that point."));
  return h("div", {}, merged, h("table", { class: "numbers" },
    h("thead", {}, h("tr", {}, ["store", "purchase", "since", "product", "active"].map((t) => h("th", {}, t)))),
    h("tbody", {}, answer.purchases.map((p) => h("tr", { "data-purchase": p.purchase_id, "data-active": String(p.active) },
      h("td", {}, p.store), h("td", {}, p.purchase_id), h("td", { title: p.since }, minute(p.since)), h("td", {}, p.product_id ?? "—"),
      h("td", { class: p.active ? "yes" : "no" }, p.active ? "active" : "not active"))))));
}

function entitlementsTable(answer) {
  if (!answer.entitlements.length) return h("p", { class: "note" }, "No entitlement known to the ledger at that point.");
  return h("table", { class: "numbers" },
    h("thead", {}, h("tr", {}, ["entitlement", "active", "expires at", "grace", "trial", "will renew", "product"].map((t) => h("th", {}, t)))),
    h("tbody", {}, answer.entitlements.map((e) => h("tr", {
      "data-entitlement": e.entitlement, "data-active": String(e.active), "data-will-renew": String(e.will_renew), "data-product": e.product_id ?? "",
    },
      h("td", {}, e.entitlement), h("td", { class: e.active ? "yes" : "no" }, e.active ? "active" : "not active"),
      h("td", {}, when(e.expires_at)), h("td", {}, e.in_grace ? "in grace" : "—"), h("td", {}, e.in_trial ? "in trial" : "—"),
      h("td", {}, e.will_renew ? "yes" : "no"), h("td", {}, e.product_id ?? "—")))));
}

/** Draws the ledger's answers as of the slider's position, for the "entitled at" date. */
async function replay(section) {
  if (!current) return;
  const slider = section.querySelector("#asof-slider");
  const atValue = section.querySelector("#at-input").value;
  await run(section, async (isCurrent) => {
    const { id, events, positions } = current;
    const index = Number(slider.value);
    const asOf = positions[index];
    const at = atValue ? `${atValue}T00:00:00Z` : null;
    const base = `/v1/subscribers/${encodeURIComponent(id)}`;
    const windowsPath = path(`${base}/windows`, { as_of: asOf });
    const entitlementsPath = path(`${base}/entitlements`, { at, as_of: asOf });
    const purchasesPath = path(`${base}/purchases`, { at, as_of: asOf });
    const [windows, entitlements, purchases] = await Promise.all([
      get(windowsPath, needs.history), get(entitlementsPath, needs.history), get(purchasesPath, needs.history),
    ]);
    if (!isCurrent()) return;
    const known = events.filter((e) => e.position <= asOf);
    const latest = index === positions.length - 1;
    const recorded = events.find((e) => e.position === asOf)?.recorded_at;
    section.querySelector("#asof-label").textContent =
      `position ${asOf} (${when(recorded)}) · event ${index + 1} of ${positions.length}${latest ? " · latest" : ""}`;
    const box = section.querySelector("#timeline");
    Object.assign(box.dataset, { source: windowsPath, asOf: String(asOf), windows: String(windows.windows.length) });
    const untilToday = section.querySelector("#until-today").checked;
    fill(box, timeline({ windows: windows.windows, events: known, at: at ? new Date(at) : new Date(entitlements.at), untilToday }));
    fill(section.querySelector("#timeline-legend"), timelineLegend());
    const ent = section.querySelector("#entitlements");
    Object.assign(ent.dataset, { source: entitlementsPath, at: entitlements.at });
    section.querySelector("#ent-title").textContent = `Entitlements at ${when(entitlements.at)}, as the ledger knew it at position ${asOf}`;
    fill(ent, entitlementsTable(entitlements));
    const held = section.querySelector("#purchases");
    Object.assign(held.dataset, { source: purchasesPath });
    fill(held, purchasesTable(purchases));
    const history = section.querySelector("#history");
    fill(history, historyTable(events, asOf, (i) => { slider.value = String(i); replay(section); }));
    const row = history.querySelector("tr.as-of-row");
    const scroller = history.closest(".history");
    if (row && scroller) scroller.scrollTop = row.offsetTop - scroller.clientHeight / 2;
  });
}

async function lookup(section, id) {
  current = null;
  section.querySelector("#lookup-body").hidden = true;
  if (!id) { status(section, "Type a subscriber id and press Look up."); section.dataset.state = "ready"; return; }
  await run(section, async (isCurrent) => {
    const events = await subscriberEvents(id);
    if (!isCurrent()) return;
    if (!events.length) {
      status(section, `The ledger has no events for subscriber “${id}”.`, "info");
      section.dataset.state = "empty";
      return;
    }
    current = { id, events, positions: events.map((e) => e.position).sort((a, b) => a - b) };
    const slider = section.querySelector("#asof-slider");
    slider.max = String(current.positions.length - 1);
    slider.value = slider.max;
    section.querySelector("#lookup-body").hidden = false;
  });
  if (current) await replay(section);
}

export default {
  init(section) {
    const input = section.querySelector("#lookup-id");
    section.querySelector("#lookup-form").addEventListener("submit", (e) => {
      e.preventDefault();
      const id = input.value.trim();
      if (location.hash !== `#subscriber/${encodeURIComponent(id)}`) location.hash = `subscriber/${encodeURIComponent(id)}`;
      else lookup(section, id);
    });
    section.querySelector("#asof-slider").addEventListener("input", () => replay(section));
    section.querySelector("#at-input").addEventListener("change", () => replay(section));
    section.querySelector("#until-today").addEventListener("change", () => replay(section));
    section.querySelector("#at-now").addEventListener("click", () => { section.querySelector("#at-input").value = ""; replay(section); });
  },
  show(section, id) {
    const input = section.querySelector("#lookup-id");
    if (id !== undefined) input.value = id;
    if (current && current.id === input.value.trim()) return;
    lookup(section, input.value.trim());
  },
};
