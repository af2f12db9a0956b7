// Short definitions of the report terms that are not self-explanatory, in the words of docs/reports.md and
// docs/semantics.md: shown as the column's or legend item's tooltip and in a legend under the numbers.

import { h } from "./charts.js";

export const definitions = {
  tax: "Tax included in the period's billings, where the store says it (Google, Stripe; Apple does not): commission is taken on the price net of tax.",
  refunded_unrecognized: "The part of a refund that takes back money not yet recognised (still deferred) when it was refunded.",
  refunds_recognized: "The rest of a refund: contra revenue on what was already recognised (all of it for a refund after the service ended).",
  churned_other: "Lapsed for none of the other reasons: no refund or cancellation cut, no billing issue, auto-renew not turned off "
    + "(a non-renewing pack simply running out is other).",
};

/** A legend of the terms `keys` (with their labels), under a table or chart. */
export function definitionList(keys, label = (k) => k.replaceAll("_", " ")) {
  return h("dl", { class: "definitions" }, keys.flatMap((k) => [
    h("dt", { "data-term": k }, label(k)), h("dd", { "data-term": k }, definitions[k]),
  ]));
}
