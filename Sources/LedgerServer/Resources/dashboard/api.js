// The ledger's public JSON API, called with the key the user typed in. No figure is computed here that
// the API does not answer: the pages only lay out what these calls return.

const KEY = "subledger.dashboard.key";

export const key = {
  get: () => sessionStorage.getItem(KEY),
  set: (value) => sessionStorage.setItem(KEY, value),
  forget: () => sessionStorage.removeItem(KEY),
};

/** What a page needs the key's role to allow, worded for the 403 message. */
export const needs = {
  reports: "read reports (roles: analyst, admin)",
  history: "read event history and as-of answers (roles: auditor, admin)",
  entitlements: "read entitlements (roles: reader, auditor, admin)",
  manage: "manage webhooks (role: admin)",
  stores: "read the stores' inboxes (role: admin)",
};

/** An API answer other than 2xx, with a message meant for the person looking at the page. */
export class APIError extends Error {
  constructor(status, code, message, path) {
    super(message);
    this.status = status;
    this.code = code;
    this.path = path;
  }
}

/** Listeners told when the key is refused (401), so the page can ask for another one. */
const unauthorizedListeners = [];
export function onUnauthorized(listener) { unauthorizedListeners.push(listener); }

/**
 * GET a `/v1` path with the key; answers the parsed JSON or throws an APIError whose message says what
 * to do. `need` words the 403 message ("this key's role cannot read reports …").
 */
export async function get(path, need) {
  return call("GET", path, need);
}

/** POST a JSON body to a `/v1` path with the key (webhook replay); answers and throws like `get`. */
export async function post(path, body, need) {
  return call("POST", path, need, body);
}

async function call(method, path, need, body) {
  const secret = key.get();
  if (!secret) throw new APIError(401, "unauthorized", "Enter an API key first.", path);
  let response;
  try {
    response = await fetch(path, {
      method,
      headers: { Authorization: `Bearer ${secret}`, Accept: "application/json", ...(body ? { "Content-Type": "application/json" } : {}) },
      body: body ? JSON.stringify(body) : undefined,
      cache: "no-store",
      credentials: "omit",
      referrerPolicy: "no-referrer",
    });
  } catch {
    throw new APIError(0, "network", "The ledger did not answer (is subledger serve running?).", path);
  }
  let answer = null;
  try { answer = await response.json(); } catch { answer = null; }
  if (response.ok) return answer;
  const code = answer?.error?.code ?? `http_${response.status}`;
  const serverMessage = answer?.error?.message ?? response.statusText;
  let message;
  switch (response.status) {
    case 401:
      message = "The ledger refused this key (unknown or revoked). Enter another key.";
      unauthorizedListeners.forEach((l) => l());
      break;
    case 403:
      message = `This key's role cannot ${need ?? "read this"}. Use a key with one of those roles.`;
      break;
    case 404:
      message = path.startsWith("/v1/reports")
        ? "This server has no reports API yet (404): it is older than the dashboard."
        : `Not found: ${serverMessage}`;
      break;
    case 422:
      if (code === "missing_fx_rate") {
        const target = new URLSearchParams(path.split("?")[1] ?? "").get("currency");
        message = `These figures cannot be shown in ${target}: the ledger has no exchange rate for `
          + `${answer.error.currency ?? "a currency"} on ${answer.error.date ?? "a transaction's date"} (nor in the 7 days before). `
          + "Load the rates (subledger fx import, PUT /v1/fx/rates), choose another range, or show them per currency.";
      } else {
        message = `${code}: ${serverMessage}`;
      }
      break;
    case 503:
      message = "The ledger's database is unavailable right now; try again in a moment.";
      break;
    default:
      message = `${response.status} ${code}: ${serverMessage}`;
  }
  throw new APIError(response.status, code, message, path);
}

/** A path with query parameters; empty and null values are left out. */
export function path(base, params = {}) {
  const query = Object.entries(params)
    .filter(([, v]) => v !== undefined && v !== null && v !== "")
    .map(([k, v]) => `${encodeURIComponent(k)}=${encodeURIComponent(v)}`)
    .join("&");
  return query ? `${base}?${query}` : base;
}

/** Every event of one subscriber's stream, following `next_after` page by page. */
export async function subscriberEvents(id) {
  const events = [];
  let after = 0;
  for (;;) {
    const page = await get(path(`/v1/subscribers/${encodeURIComponent(id)}/events`, { after, limit: 1000 }), needs.history);
    events.push(...page.events);
    if (page.events.length < 1000) return events;
    after = page.next_after;
  }
}
