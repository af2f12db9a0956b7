// The entitlement timeline: one lane per entitlement, each window a bar on a UTC time axis. A cut window
// shows what it kept, the part it lost (hatched, when the granted end is known from its event) and a red
// cut mark; void windows (cut at or before their start) are a red cross; grace is striped, credits gold.

import { h, legend, s } from "./charts.js";
import { addDuration, when } from "./format.js";

export const kindColors = {
  paid: "#3a6ea5", intro: "#5b8fd0", promo: "#7aa6dd", trial: "#9cc3e6",
  free: "#8fbf8f", lifetime: "#2e9d5b", credit: "#e0a500", grace: "#e88a8a",
};
const CUT = "#c0262d";
const monthNames = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];

/** The end a window was granted with, before any cut: from its source event when that says. */
function grantedEnd(w, event) {
  const d = event?.data ?? {};
  if (w.kind === "credit" && d.window_end) return new Date(d.window_end);
  if (d.period_end && (event.type === "purchase" || event.type === "renewal")) return new Date(d.period_end);
  if (w.kind === "grace" && d.grace_until) return new Date(d.grace_until);
  if (d.duration) return addDuration(new Date(w.start), d.duration);
  return w.end ? new Date(w.end) : null;
}

function axisTicks(t0, t1) {
  const days = (t1 - t0) / 86400000;
  const out = [];
  if (days <= 70) {
    const step = days <= 20 ? 1 : 7;
    for (let t = new Date(Date.UTC(t0.getUTCFullYear(), t0.getUTCMonth(), t0.getUTCDate() + 1)); t < t1; t = new Date(t.getTime() + step * 86400000)) {
      out.push({ t, label: `${monthNames[t.getUTCMonth()]} ${t.getUTCDate()}` });
    }
    return out;
  }
  const months = days / 30.44;
  const every = months <= 14 ? 1 : months <= 28 ? 2 : months <= 42 ? 3 : months <= 84 ? 6 : 12;
  for (let t = new Date(Date.UTC(t0.getUTCFullYear(), t0.getUTCMonth() + 1, 1)); t < t1; t = new Date(Date.UTC(t.getUTCFullYear(), t.getUTCMonth() + 1, 1))) {
    if (t.getUTCMonth() % every !== 0) continue;
    out.push({ t, label: t.getUTCMonth() === 0 ? String(t.getUTCFullYear()) : `${monthNames[t.getUTCMonth()]} ${String(t.getUTCFullYear()).slice(2)}` });
  }
  return out;
}

/**
 * The axis spans the subscriber's history (events, windows, granted ends; an open window runs to today):
 * a history that ended a year ago fills the width instead of a sliver of it. `untilToday` stretches it to
 * today; the "at" line outside the history is drawn as an arrow at the right edge.
 */
export function timeline({ windows, events, at, untilToday = false }) {
  const now = new Date();
  const byId = new Map(events.map((e) => [e.event_id, e]));
  const items = windows.map((w) => {
    const start = new Date(w.start);
    const end = w.end ? new Date(w.end) : null;
    const event = byId.get(w.source_event_id);
    const granted = grantedEnd(w, event);
    // Where the window came from: the source of its event (apple, google, stripe, support, …).
    return { w, start, end, granted, source: event?.source ?? null, isVoid: end !== null && end.getTime() === start.getTime() };
  });
  const times = [];
  for (const i of items) times.push(i.start.getTime(), ...(i.end ? [i.end.getTime()] : []), ...(i.granted ? [i.granted.getTime()] : []));
  for (const e of events) times.push(new Date(e.occurred_at).getTime());
  let t0 = Math.min(...times, at.getTime()), t1 = Math.max(...times);
  if (items.some((i) => !i.end)) t1 = Math.max(t1, now.getTime());
  if (untilToday) t1 = Math.max(t1, now.getTime(), at.getTime());
  const pad = Math.max((t1 - t0) * 0.04, 86400000);
  t0 -= pad; t1 += pad;
  const atBeyond = at.getTime() > t1;

  const W = 820, L = 64, R = 14, top = 30, rowH = 24, gap = 6;
  const x = (t) => L + ((t - t0) / (t1 - t0)) * (W - L - R);
  const lanes = [...new Set(items.map((i) => i.w.entitlement))].sort();
  const laneRows = new Map();
  // Store windows (grace included) are packed first; credits, which run beside them, get rows below.
  const pack = (list, offset) => {
    const rows = [];
    for (const i of list.sort((a, b) => a.start - b.start)) {
      const reach = Math.max(i.end ? i.end.getTime() : t1, i.granted ? i.granted.getTime() : 0);
      let r = rows.findIndex((last) => last <= i.start.getTime());
      if (r < 0) { rows.push(0); r = rows.length - 1; }
      rows[r] = reach;
      i.row = offset + r;
    }
    return rows.length;
  };
  for (const lane of lanes) {
    const mine = items.filter((i) => i.w.entitlement === lane);
    const store = pack(mine.filter((i) => i.w.kind !== "credit"), 0);
    const credits = pack(mine.filter((i) => i.w.kind === "credit"), store);
    laneRows.set(lane, Math.max(store + credits, 1));
  }
  let y = top + 22;
  const laneY = new Map();
  for (const lane of lanes) { laneY.set(lane, y); y += laneRows.get(lane) * (rowH + gap) + 14; }
  const H = Math.max(y + 6, top + 80);

  const svg = s("svg", {
    viewBox: `0 0 ${W} ${H}`, class: "timeline", role: "img", "aria-label": "entitlement windows over time",
    "data-t0": new Date(t0).toISOString(), "data-t1": new Date(t1).toISOString(), "data-range": untilToday ? "today" : "history",
    "data-at-beyond": String(atBeyond),
  },
    s("defs", {},
      s("pattern", { id: "tl-stripes", width: 6, height: 6, patternUnits: "userSpaceOnUse", patternTransform: "rotate(45)" },
        s("rect", { width: 3, height: 6, fill: "#ffffff", "fill-opacity": 0.55 })),
      s("pattern", { id: "tl-lost", width: 5, height: 5, patternUnits: "userSpaceOnUse", patternTransform: "rotate(-45)" },
        s("rect", { width: 1.5, height: 5, fill: CUT, "fill-opacity": 0.45 }))));

  for (const tk of axisTicks(new Date(t0), new Date(t1))) {
    svg.append(s("line", { x1: x(tk.t), x2: x(tk.t), y1: top - 6, y2: H - 4, stroke: "#ececec" }));
    svg.append(s("text", { x: x(tk.t), y: top - 12, "text-anchor": "middle", class: "axis" }, tk.label));
  }
  svg.append(s("line", { x1: L, x2: W - R, y1: top, y2: top, stroke: "#999" }));

  const marks = s("g", { class: "events" });
  for (const e of events) {
    marks.append(s("circle", { cx: x(new Date(e.occurred_at).getTime()), cy: top + 9, r: 3.5, class: `ev t-${e.type}`, "data-position": e.position },
      s("title", {}, `${e.type} · occurred ${when(e.occurred_at)} · position ${e.position}`)));
  }
  svg.append(marks);

  for (const lane of lanes) {
    const y0 = laneY.get(lane);
    svg.append(s("text", { x: 4, y: y0 + rowH * 0.7, class: "lane" }, lane));
    svg.append(s("line", { x1: L, x2: W - R, y1: y0 - 7, y2: y0 - 7, stroke: "#f0f0f0" }));
  }

  const bars = s("g", { class: "windows" });
  for (const i of items) {
    const { w } = i;
    const yy = laneY.get(w.entitlement) + i.row * (rowH + gap);
    const color = kindColors[w.kind] ?? "#888";
    const attrs = {
      class: "window", "data-entitlement": w.entitlement, "data-kind": w.kind, "data-start": w.start, "data-end": w.end ?? "",
      "data-cut-at": w.cut_at ?? "", "data-cut-cause": w.cut_cause ?? "", "data-void": String(i.isVoid), "data-event-source": i.source ?? "",
      "data-product": w.product_id ?? "",
    };
    const desc = `${w.kind} ${w.entitlement}${w.product_id ? ` (${w.product_id})` : ""}${i.source ? ` from ${i.source}` : ""}: ${when(w.start)} → ${when(w.end)}`
      + (w.cut_at ? ` · cut at ${when(w.cut_at)} by ${w.cut_cause ?? "an event"}` : "") + (i.isVoid ? " · void" : "");
    if (i.isVoid) {
      const cx = x(i.start.getTime()), cy = yy + rowH / 2;
      bars.append(s("g", attrs,
        s("path", { d: `M${cx - 5},${cy - 5}L${cx + 5},${cy + 5}M${cx - 5},${cy + 5}L${cx + 5},${cy - 5}`, stroke: CUT, "stroke-width": 2.5 }),
        s("title", {}, desc)));
      continue;
    }
    const xs = x(i.start.getTime()), xe = i.end ? x(i.end.getTime()) : x(t1) - 6;
    const g = s("g", attrs, s("title", {}, desc));
    if (w.cut_at && i.granted && i.end && i.granted > i.end) {
      const xg = x(i.granted.getTime());
      g.append(s("rect", { x: xe, y: yy, width: Math.max(1, xg - xe), height: rowH, fill: "url(#tl-lost)", stroke: color, "stroke-dasharray": "3 2", class: "lost" }));
    }
    g.append(s("rect", { x: xs, y: yy, width: Math.max(2, xe - xs), height: rowH, fill: color, rx: 2, class: "kept" }));
    if (w.kind === "grace") g.append(s("rect", { x: xs, y: yy, width: Math.max(2, xe - xs), height: rowH, fill: "url(#tl-stripes)" }));
    if (w.kind === "credit") g.append(s("rect", { x: xs + 1, y: yy + 1, width: Math.max(1, xe - xs - 2), height: rowH - 2, fill: "none", stroke: "#7a5a00", "stroke-dasharray": "2 2" }));
    if (!i.end) g.append(s("path", { d: `M${xe},${yy}L${xe + 6},${yy + rowH / 2}L${xe},${yy + rowH}Z`, fill: color }));
    if (xe - xs > 44) {
      const label = i.source && xe - xs > 110 ? `${w.kind} · ${i.source}` : w.kind;
      g.append(s("text", { x: xs + 4, y: yy + rowH * 0.7, class: `wlabel${w.kind === "credit" || w.kind === "grace" || w.kind === "trial" ? " dark" : ""}` }, label));
    }
    if (w.cut_at) {
      const xc = x(new Date(w.cut_at).getTime());
      g.append(s("line", { x1: xc, x2: xc, y1: yy - 4, y2: yy + rowH + 4, stroke: CUT, "stroke-width": 2.5, class: "cut" }));
      g.append(s("path", { d: `M${xc - 4},${yy - 8}L${xc + 4},${yy - 8}L${xc},${yy - 3}Z`, fill: CUT }));
    }
    bars.append(g);
  }
  svg.append(bars);

  if (atBeyond) {
    // After the history: an arrow at the right edge says when, without squeezing the history to reach it.
    const xr = W - R;
    svg.append(s("g", { class: "at-line beyond", "data-at": at.toISOString() },
      s("path", { d: `M${xr - 8},${H - 16}L${xr},${H - 11}L${xr - 8},${H - 6}Z`, fill: "#1f3b73" }),
      s("text", { x: xr - 12, y: H - 6, "text-anchor": "end", class: "axis at" }, `at ${at.toISOString().slice(0, 10)} →`)));
  } else {
    const atX = x(at.getTime());
    svg.append(s("g", { class: "at-line", "data-at": at.toISOString() },
      s("line", { x1: atX, x2: atX, y1: top, y2: H - 2, stroke: "#1f3b73", "stroke-width": 1.5, "stroke-dasharray": "5 3" }),
      s("text", { x: atX > W - 120 ? atX - 4 : atX + 4, y: H - 6, "text-anchor": atX > W - 120 ? "end" : "start", class: "axis at" },
        `at ${at.toISOString().slice(0, 10)}`)));
  }
  if (!windows.length) svg.append(s("text", { x: W / 2, y: top + 50, "text-anchor": "middle", class: "axis" }, "no windows at this point of the log"));
  return svg;
}

export function timelineLegend() {
  return h("div", {}, legend([
    ...["paid", "intro", "promo", "trial", "lifetime", "free"].map((k) => ({ color: kindColors[k], label: k })),
    { color: kindColors.credit, label: "credit (support)", stroke: "#7a5a00", dash: "2 2" },
    { color: kindColors.grace, label: "grace (billing issue)" },
    { color: "#f6d5d6", label: "cut off (lost to a refund or cancellation)", stroke: CUT, dash: "3 2" },
    { color: CUT, label: "cut / void", line: true },
  ]));
}
