// Audit: the latest sealed checkpoint (/v1/audit/checkpoints) and, on demand, a full verification of every
// hash chain and checkpoint (/v1/audit/verify).

import { get, needs } from "./api.js";
import { h } from "./charts.js";
import { count, when } from "./format.js";
import { fill, run } from "./page.js";

function facts(pairs) {
  return h("dl", { class: "facts" }, pairs.flatMap(([k, v, key]) => [h("dt", {}, k), h("dd", { "data-key": key ?? null }, v)]));
}

async function load(section) {
  await run(section, async (isCurrent) => {
    const { checkpoints } = await get("/v1/audit/checkpoints", needs.history);
    if (!isCurrent()) return;
    const box = section.querySelector("#checkpoint");
    const last = checkpoints[checkpoints.length - 1];
    box.dataset.checkpointId = last ? String(last.checkpoint_id) : "";
    fill(box, last
      ? [facts([
        ["checkpoint", `#${last.checkpoint_id}`, "checkpoint_id"],
        ["sealed at", when(last.created_at), "created_at"],
        ["log position", count(last.position), "position"],
        ["streams", count(last.streams), "streams"],
        ["events", count(last.events), "events"],
        ["Merkle root", h("code", { class: "hash" }, last.merkle_root), "merkle_root"],
      ]), h("p", { class: "note" }, `${count(checkpoints.length)} checkpoint${checkpoints.length === 1 ? "" : "s"} sealed in all.`)]
      : h("p", { class: "note" }, "No checkpoint has been sealed yet (subledger checkpoint, or POST /v1/audit/checkpoints)."));
  });
}

async function verify(section) {
  const out = section.querySelector("#verify-result");
  const button = section.querySelector("#verify-now");
  button.disabled = true;
  fill(out, h("p", { class: "status-line loading" }, "Verifying every chain and checkpoint…"));
  out.dataset.state = "loading";
  try {
    const r = await get("/v1/audit/verify", needs.history);
    out.dataset.ok = String(r.ok);
    fill(out,
      h("p", { class: `verdict ${r.ok ? "ok" : "broken"}` }, r.ok ? "✓ Every chain and checkpoint verifies." : "✗ The ledger does not verify."),
      facts([
        ["events checked", count(r.events_checked), "events_checked"],
        ["streams checked", count(r.streams_checked), "streams_checked"],
        ["broken events", count(r.broken_events), "broken_events"],
        ["checkpoints checked", count(r.checkpoints_checked), "checkpoints_checked"],
        ["broken checkpoints", r.broken_checkpoints.length ? r.broken_checkpoints.map((c) => `#${c}`).join(", ") : "none", "broken_checkpoints"],
        ...(r.first_broken ? [["first broken event", `${r.first_broken.subscriber_id} v${r.first_broken.version} (position ${r.first_broken.position}): ${r.first_broken.reason}`, "first_broken"]] : []),
      ]),
      h("p", { class: "note" }, `Verified at ${when(new Date().toISOString())}.`));
    out.dataset.state = "ready";
  } catch (error) {
    fill(out, h("p", { class: "status-line error", role: "alert" }, error.message));
    out.dataset.state = "error";
  } finally {
    button.disabled = false;
  }
}

export default {
  init(section) { section.querySelector("#verify-now").addEventListener("click", () => verify(section)); },
  show(section) { load(section); },
};
