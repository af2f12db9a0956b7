// What every page shares: a loading / ready / error state on its <section> (data-state, which the browser
// test waits for), a status line, and its controls form.

import { h } from "./charts.js";

const tokens = new WeakMap();

/**
 * Runs one load of a page. Only the latest load of a section may touch it: an older one still in flight
 * (the user changed a control meanwhile) is dropped when it ends. `body(isCurrent)` draws the page.
 */
export async function run(section, body) {
  const token = (tokens.get(section) ?? 0) + 1;
  tokens.set(section, token);
  const isCurrent = () => tokens.get(section) === token;
  section.dataset.state = "loading";
  status(section, "Loading…", "loading");
  try {
    await body(isCurrent);
    if (!isCurrent()) return;
    if (section.dataset.state === "loading") {
      status(section, "");
      section.dataset.state = "ready";
    }
  } catch (error) {
    if (!isCurrent()) return;
    if (!(error && "status" in error)) console.error(error);
    status(section, error.message ?? String(error), "error");
    section.dataset.state = "error";
    section.dataset.errorStatus = error.status ?? "";
  }
}

/** The page's status line: empty, "Loading…", or an error in words. */
export function status(section, message, kind = "") {
  const el = section.querySelector("[data-status]");
  el.replaceChildren(message ? h("p", { class: `status-line ${kind}`, role: kind === "error" ? "alert" : null }, message) : "");
  el.dataset.kind = kind;
}

/** The period fields a controls form names in `data-fields`, in that order, before its own fields. */
const fields = {
  interval: () => h("label", {}, "Period ", h("select", { name: "interval" }, ["month", "week", "day"].map((v) => h("option", { value: v }, v)))),
  count: (form) => h("label", {}, `${form.dataset.countLabel ?? "Periods"} `, h("input", { name: "count", type: "number", min: "1", max: "120", value: "12" })),
  ending: () => h("label", { title: "the last period shown is the one containing this date (empty: today)" }, "Ending ", h("input", { name: "ending", type: "date" })),
};

/** Reads a controls form as an object; a submit or a change of a select/date reloads the page. */
export function controls(section, reload) {
  const form = section.querySelector("[data-controls]");
  if (!form) return () => ({});
  form.prepend(...(form.dataset.fields ?? "").split(" ").filter(Boolean).map((f) => fields[f](form)));
  form.addEventListener("submit", (e) => { e.preventDefault(); reload(); });
  form.querySelectorAll("select, input[type=date]").forEach((el) => el.addEventListener("change", () => reload()));
  return () => Object.fromEntries(new FormData(form).entries());
}

/** A positive whole number from a form field, within [1, max]. */
export function countField(value, fallback, max) {
  const n = Number.parseInt(value, 10);
  return Number.isFinite(n) ? Math.max(1, Math.min(max, n)) : fallback;
}

/** Empties `el` and appends `children`. */
export function fill(el, ...children) {
  el.replaceChildren(...children.flat().filter((c) => c !== null && c !== undefined));
}

/**
 * Draws one part of a page (one report of several). A 422 — a choice the data cannot answer, such as a
 * reporting currency without the rates it needs — is said in words in that part, and the rest of the page
 * still draws; any other failure is the page's (its status line). `load(source)` asks the API for `source` and
 * answers a function that fills `el`, called only if this load is still the page's latest. `el` names the path it
 * drew (or was refused) in data-source.
 */
export async function part(el, isCurrent, source, load) {
  let draw;
  try {
    draw = await load(source);
  } catch (error) {
    if (error?.status !== 422) throw error;
    if (!isCurrent()) return;
    el.dataset.source = source;
    el.dataset.state = "error";
    el.dataset.errorCode = error.code;
    fill(el, h("p", { class: "status-line error", role: "alert" }, error.message));
    return;
  }
  if (!isCurrent()) return;
  el.dataset.source = source;
  el.dataset.state = "ready";
  delete el.dataset.errorCode;
  draw();
}

/** A report's rows by their `currency`, currencies in alphabetical order: `[[currency, rows], …]`. */
export function byCurrency(rows) {
  const groups = new Map();
  for (const r of rows) {
    if (!groups.has(r.currency)) groups.set(r.currency, []);
    groups.get(r.currency).push(r);
  }
  return [...groups.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
}

/** A report's rows drawn into `box` as one block per currency by `block(currency, rows, interval)`, or the note
 * `empty` when there are none. */
export function perCurrency(box, report, block, interval, empty) {
  const groups = byCurrency(report.periods);
  fill(box, groups.length ? groups.map(([c, rows]) => block(c, rows, interval)) : h("p", { class: "note" }, empty));
}
