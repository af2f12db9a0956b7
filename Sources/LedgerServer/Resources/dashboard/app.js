// The dashboard's shell: the key form, the page switcher (#overview, #churn, … in the URL fragment) and the
// loading / error state every page shares.

import { key, onUnauthorized } from "./api.js";
import overview from "./overview.js";
import churn from "./churn.js";
import retention from "./retention.js";
import revenue from "./revenue.js";
import subscriber from "./subscriber.js";
import audit from "./audit.js";
import webhooks from "./webhooks.js";
import stores from "./stores.js";
import reconciliations from "./reconciliations.js";
import growth from "./growth.js";
import { fragment, linkTo, show as showFilters } from "./filters.js";

const pages = { overview, churn, retention, revenue, growth, subscriber, audit, webhooks, stores, reconciliations };
const $ = (sel) => document.querySelector(sel);

function showLogin(message) {
  document.querySelectorAll(".page").forEach((p) => { p.hidden = true; });
  $("#keybox").hidden = true;
  const login = $("#login");
  login.hidden = false;
  let note = login.querySelector(".status");
  if (message) {
    if (!note) { note = document.createElement("p"); note.className = "status error"; login.insertBefore(note, $("#key-form")); }
    note.textContent = message;
  } else if (note) {
    note.remove();
  }
  document.body.dataset.page = "login";
  $("#key-input").focus();
}

function route() {
  const [name, arg] = decodeURIComponent(fragment().head).split("/");
  const page = pages[name] ? name : "overview";
  if (!key.get()) { showLogin(); return; }
  $("#login").hidden = true;
  $("#keybox").hidden = false;
  $("#key-label").textContent = `key …${key.get().slice(-4)}`;
  document.querySelectorAll(".page").forEach((p) => { p.hidden = p.dataset.page !== page; });
  document.querySelectorAll("#nav a").forEach((a) => {
    a.classList.toggle("current", a.dataset.page === page);
    // Report pages pass the filters on to each other; the other pages' links stay plain.
    if (document.getElementById(`page-${a.dataset.page}`)?.dataset.filters) a.href = linkTo(a.dataset.page);
  });
  showFilters($("#filters"), document.getElementById(`page-${page}`));
  document.body.dataset.page = page;
  pages[page].show(document.getElementById(`page-${page}`), arg);
}

$("#key-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const value = $("#key-input").value.trim();
  if (!value) return;
  key.set(value);
  $("#key-input").value = "";
  route();
});

// Another key means other permissions: the page is reloaded so that nothing read with the old key stays.
const REFUSED = "subledger.dashboard.refused";

$("#forget-key").addEventListener("click", () => {
  key.forget();
  location.reload();
});

onUnauthorized(() => {
  key.forget();
  sessionStorage.setItem(REFUSED, "1");
  location.reload();
});

for (const [name, page] of Object.entries(pages)) page.init?.(document.getElementById(`page-${name}`));
window.addEventListener("hashchange", route);
if (sessionStorage.getItem(REFUSED)) {
  sessionStorage.removeItem(REFUSED);
  showLogin("The ledger refused that key (unknown or revoked). Enter another key.");
} else {
  route();
}
