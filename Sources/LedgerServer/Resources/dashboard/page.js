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
