// The filters every report page shares: the reporting currency and the store, country and product dimensions.
// They live in the URL fragment after the page's name (#revenue?currency=EUR&store=google), so a filtered view
// can be linked and survives a reload; the nav links carry them from one report page to the next. Changing one
// rewrites the fragment, and the page reloads from the hashchange like any other navigation.

import { get, needs, path } from "./api.js";
import { h } from "./charts.js";

export const DIMENSIONS = ["store", "country", "product_id"];
const KEYS = ["currency", ...DIMENSIONS];
const LABELS = { currency: "Currency", store: "Store", country: "Country", product_id: "Product" };
const ALL = { currency: "per currency", store: "all stores", country: "all countries", product_id: "all products" };

/** The fragment without `#`, split into the page part (`revenue`, `subscriber/<id>`) and the filter query. */
export function fragment(hash = location.hash) {
  const raw = hash.replace(/^#/, "");
  const i = raw.indexOf("?");
  return { head: i < 0 ? raw : raw.slice(0, i), query: i < 0 ? "" : raw.slice(i + 1) };
}

/** The filters in the fragment now: `{currency, store, country, product_id}`, "" where none is chosen. */
export function current() {
  const params = new URLSearchParams(fragment().query);
  return Object.fromEntries(KEYS.map((k) => [k, params.get(k) ?? ""]));
}

/** The query parameters a report request gets from the filters: the dimensions, and `currency` when `money`. */
export function params(money = false) {
  const c = current();
  return { ...(money ? { currency: c.currency } : {}), store: c.store, country: c.country, product_id: c.product_id };
}

/** `#<page>?<the filters>`: a nav link that keeps them. */
export function linkTo(page) {
  const p = new URLSearchParams();
  const c = current();
  for (const k of KEYS) if (c[k]) p.set(k, c[k]);
  const q = p.toString();
  return `#${page}${q ? `?${q}` : ""}`;
}

function choose(key, value) {
  const p = new URLSearchParams(fragment().query);
  if (value) p.set(key, value); else p.delete(key);
  const q = p.toString();
  location.hash = `${fragment().head}${q ? `?${q}` : ""}`;
}

/**
 * The values each filter offers, asked once per page load: the currencies of the rate table (GET /v1/fx/rates,
 * plus EUR, the rates' base) and the stores, countries and products of the paying subscribers now (the MRR
 * report grouped by each dimension). A table too large to list (400: over 100,000 rates) is asked again for
 * its last 400 days. A failure leaves that filter with its current value only: the page itself says why.
 */
let offered = null;
async function loadOptions() {
  const rates = async () => {
    let answer;
    try {
      answer = await get("/v1/fx/rates", needs.reports);
    } catch (error) {
      if (error?.status !== 400) throw error;
      const since = new Date(Date.now() - 400 * 86400000).toISOString().slice(0, 10);
      answer = await get(path("/v1/fx/rates", { from: since }), needs.reports);
    }
    const codes = new Set(answer.rates.map((r) => r.currency));
    if (codes.size) codes.add(answer.base);
    return [...codes].sort();
  };
  const grouped = async (dimension) => {
    const answer = await get(path("/v1/reports/mrr", { group_by: dimension }), needs.reports);
    return [...new Set(answer.currencies.map((c) => c[dimension]).filter((v) => v !== null && v !== undefined))].sort();
  };
  const quiet = (p) => p.catch(() => []);
  const [currency, ...dims] = await Promise.all([quiet(rates()), ...DIMENSIONS.map((d) => quiet(grouped(d)))]);
  return { currency, ...Object.fromEntries(DIMENSIONS.map((d, i) => [d, dims[i]])) };
}

/**
 * Shows the filter bar above a report page (`section.dataset.filters` names the filters it takes; the others
 * are shown disabled, with why) or hides it on the other pages.
 */
export async function show(bar, section) {
  const takes = (section?.dataset.filters ?? "").split(" ").filter(Boolean);
  bar.hidden = takes.length === 0;
  if (bar.hidden) return;
  const chosen = current();
  offered ??= loadOptions();
  draw(bar, takes, chosen, null, section.dataset.currencyNote ?? "");
  const options = await offered;
  if (JSON.stringify(current()) !== JSON.stringify(chosen)) return;
  draw(bar, takes, chosen, options, section.dataset.currencyNote ?? "");
}

function draw(bar, takes, chosen, options, currencyNote) {
  bar.replaceChildren(...KEYS.map((k) => {
    const values = [...new Set([...(options?.[k] ?? []), ...(chosen[k] ? [chosen[k]] : [])])].sort();
    const enabled = takes.includes(k);
    const select = h("select", {
      name: k, "data-filter": k, disabled: !enabled,
      title: enabled ? (k === "currency" ? currencyNote || null : null) : "this page's reports do not take it",
    }, h("option", { value: "" }, ALL[k]), values.map((v) => h("option", { value: v }, v)));
    select.value = enabled ? chosen[k] : "";
    select.addEventListener("change", () => choose(k, select.value));
    return h("label", {}, `${LABELS[k]} `, select);
  }));
  bar.dataset.ready = options ? "true" : "false";
}
