// Hand-written SVG charts. Every plotted mark carries the number it stands for in data-* attributes
// (data-series, data-period, data-value), so a test (or a curious analyst) can read exactly what is drawn.

const NS = "http://www.w3.org/2000/svg";

/** An SVG element with attributes and children (strings become text nodes). */
export function s(tag, attrs = {}, ...children) {
  const el = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) if (v !== undefined && v !== null) el.setAttribute(k, v);
  for (const c of children.flat()) if (c !== null && c !== undefined) el.append(typeof c === "string" ? document.createTextNode(c) : c);
  return el;
}

/** An HTML element, the same way. */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") el.className = v; else el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) if (c !== null && c !== undefined) el.append(typeof c === "string" || typeof c === "number" ? String(c) : c);
  return el;
}

export const palette = {
  new: "#2e9d5b", reactivated: "#7cc7a0",
  churned_voluntary: "#e69138", churned_involuntary: "#cc4125", churned_refund: "#8e2a6e", churned_other: "#9a9a9a",
  churn_rate: "#1f3b73",
  billings: "#3a6ea5", recognized: "#2e9d5b", refunds: "#cc4125", deferred_end: "#7b4fa0",
  reactivation: "#7cc7a0", expansion: "#3a6ea5", transferred_in: "#9cc3e6",
  contraction: "#e69138", churned: "#cc4125", transferred_out: "#b9b9b9", mrr_start: "#9a9a9a", mrr_end: "#1f3b73",
  amount: "#cc4125", refund_rate: "#1f3b73", subscribers: "#9cc3e6",
  windows: ["#1f3b73", "#2e9d5b", "#e69138", "#7b4fa0", "#cc4125", "#3a6ea5", "#8e2a6e", "#9a9a9a", "#e0a500", "#7cc7a0"],
};

/** Round tick values covering [min, max]. */
export function ticks(min, max, count = 5) {
  if (min === max) { max = min + 1; }
  const span = max - min;
  const step0 = span / count;
  const mag = 10 ** Math.floor(Math.log10(step0));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((x) => span / x <= count) ?? 10 * mag;
  const lo = Math.floor(min / step) * step;
  const hi = Math.ceil(max / step) * step;
  const out = [];
  for (let v = lo; v <= hi + step / 2; v += step) out.push(Math.round(v / step) * step);
  return out;
}

/** A small line of `values` (nulls are gaps); the values are in data-values as JSON. */
export function sparkline(values, { labels = [], format = String, series = "" } = {}) {
  const w = 220, hgt = 64, pad = 5;
  const nums = values.filter((v) => v !== null && v !== undefined);
  // The data's own range, so that a trend shows; a flat series sits in the middle.
  let min = Math.min(...nums), max = Math.max(...nums);
  if (!nums.length) { min = 0; max = 1; } else if (min === max) { min -= 1; max += 1; }
  const x = (i) => pad + (values.length === 1 ? 0 : (i * (w - 2 * pad)) / (values.length - 1));
  const y = (v) => hgt - pad - ((v - min) / (max - min)) * (hgt - 2 * pad);
  const svg = s("svg", {
    viewBox: `0 0 ${w} ${hgt}`, class: "sparkline", role: "img", "data-series": series,
    "data-values": JSON.stringify(values), "aria-label": `${series}: last ${values.length} periods`,
    "data-first": labels[0] ?? "", "data-last": labels[labels.length - 1] ?? "",
  });
  let d = "";
  values.forEach((v, i) => {
    if (v === null || v === undefined) return;
    d += `${d && values[i - 1] !== null && values[i - 1] !== undefined ? "L" : "M"}${x(i).toFixed(1)},${y(v).toFixed(1)}`;
  });
  svg.append(s("path", { d, fill: "none", stroke: "#3a6ea5", "stroke-width": 2 }));
  values.forEach((v, i) => {
    if (v === null || v === undefined) return;
    svg.append(s("circle", {
      cx: x(i), cy: y(v), r: i === values.length - 1 ? 3 : 1.6, fill: "#3a6ea5",
      "data-period": labels[i] ?? i, "data-value": v,
    }, s("title", {}, `${labels[i] ?? i}: ${format(v)}`)));
  });
  return svg;
}

/**
 * A bar chart over periods, with optional lines.
 *   bars: [{key, label, color, values, sign: 1|-1}]  stacked (positive up, negative down) or side by side
 *   lines: [{key, label, color, values, axis: "left"|"right", points}]  (points: dots only, no connecting line)
 *   periods: the API's period_start of each column; labels: what to print under them
 */
export function barChart({ periods, labels, bars, lines = [], stacked = true, leftFormat = String, rightFormat = String, title = "" }) {
  const W = 1200, H = 340, m = { l: 74, r: lines.some((l) => l.axis === "right") ? 64 : 16, t: 14, b: 44 };
  const n = periods.length;
  const iw = W - m.l - m.r, ih = H - m.t - m.b;
  let lo = 0, hi = 0;
  for (let i = 0; i < n; i++) {
    if (stacked) {
      let up = 0, down = 0;
      for (const b of bars) { const v = (b.values[i] ?? 0) * (b.sign ?? 1); if (v >= 0) up += v; else down += v; }
      hi = Math.max(hi, up); lo = Math.min(lo, down);
    } else {
      for (const b of bars) { const v = b.values[i] ?? 0; hi = Math.max(hi, v); lo = Math.min(lo, v); }
    }
  }
  for (const l of lines.filter((l) => l.axis !== "right")) for (const v of l.values) if (v !== null) { hi = Math.max(hi, v); lo = Math.min(lo, v); }
  const yt = ticks(lo, hi);
  const y0 = yt[0], y1 = yt[yt.length - 1];
  const y = (v) => m.t + ih - ((v - y0) / (y1 - y0)) * ih;
  const right = lines.filter((l) => l.axis === "right");
  const rvals = right.flatMap((l) => l.values).filter((v) => v !== null && v !== undefined);
  const rt = ticks(0, Math.max(...rvals, 0.01), 4);
  const ry = (v) => m.t + ih - (v / rt[rt.length - 1]) * ih;
  const band = iw / Math.max(n, 1);
  const cx = (i) => m.l + band * (i + 0.5);

  const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, class: "barchart", role: "img", "aria-label": title });
  const grid = s("g", { class: "grid" });
  for (const t of yt) {
    grid.append(s("line", { x1: m.l, x2: W - m.r, y1: y(t), y2: y(t), stroke: t === 0 ? "#777" : "#e3e3e3" }));
    grid.append(s("text", { x: m.l - 8, y: y(t) + 4, "text-anchor": "end", class: "axis" }, leftFormat(t)));
  }
  if (right.length) {
    for (const t of rt) grid.append(s("text", { x: W - m.r + 8, y: ry(t) + 4, class: "axis" }, rightFormat(t)));
  }
  svg.append(grid);

  const every = Math.ceil(n / 14);
  const marks = s("g", { class: "marks" });
  for (let i = 0; i < n; i++) {
    if (i % every === 0) svg.append(s("text", { x: cx(i), y: H - m.b + 18, "text-anchor": "middle", class: "axis" }, labels[i]));
    const bw = stacked ? Math.max(2, band * 0.62) : Math.max(1.5, (band * 0.8) / bars.length);
    let up = 0, down = 0;
    bars.forEach((b, j) => {
      const raw = b.values[i] ?? 0;
      const v = raw * (b.sign ?? 1);
      let top, bottom, x;
      if (stacked) {
        x = cx(i) - bw / 2;
        if (v >= 0) { bottom = up; up += v; top = up; } else { top = down; down += v; bottom = down; }
      } else {
        x = cx(i) - (bw * bars.length) / 2 + j * bw;
        top = Math.max(v, 0); bottom = Math.min(v, 0);
      }
      marks.append(s("rect", {
        x: x.toFixed(1), y: y(top).toFixed(1), width: (bw - (stacked ? 0 : 1)).toFixed(1),
        height: Math.max(0, y(bottom) - y(top)).toFixed(1), fill: b.color,
        "data-series": b.key, "data-period": periods[i], "data-value": raw,
      }, s("title", {}, `${labels[i]} — ${b.label}: ${leftFormat(raw, true)}`)));
    });
  }
  svg.append(marks);

  for (const l of lines) {
    const yy = l.axis === "right" ? ry : y;
    const fmt = l.axis === "right" ? rightFormat : leftFormat;
    let d = "";
    l.values.forEach((v, i) => {
      if (v === null || v === undefined) return;
      d += `${d && l.values[i - 1] !== null && l.values[i - 1] !== undefined ? "L" : "M"}${cx(i).toFixed(1)},${yy(v).toFixed(1)}`;
    });
    const g = s("g", { class: "line" });
    if (!l.points) g.append(s("path", { d, fill: "none", stroke: l.color, "stroke-width": 2.5 }));
    l.values.forEach((v, i) => {
      g.append(s("circle", {
        cx: cx(i), cy: v === null || v === undefined ? -100 : yy(v), r: v === null || v === undefined ? 0 : 3.5, fill: l.color,
        "data-series": l.key, "data-period": periods[i], "data-value": v === null || v === undefined ? "null" : v,
      }, s("title", {}, `${labels[i]} — ${l.label}: ${v === null || v === undefined ? "—" : fmt(v, true)}`)));
    });
    svg.append(g);
  }
  return svg;
}

/** A legend: a coloured swatch and a label per series; lines get a line swatch, dots (`dot`) a dot. */
export function legend(items) {
  return h("div", { class: "legend-items" }, items.map((it) => h("span", { class: "legend-item", title: it.title ?? null },
    s("svg", { viewBox: "0 0 14 14", width: 14, height: 14, "aria-hidden": "true" },
      it.line ? s("line", { x1: 0, x2: 14, y1: 7, y2: 7, stroke: it.color, "stroke-width": 3 })
        : it.dot ? s("circle", { cx: 7, cy: 7, r: 4, fill: it.color })
        : s("rect", { x: 1, y: 1, width: 12, height: 12, fill: it.color, stroke: it.stroke ?? "none", "stroke-dasharray": it.dash ?? null })),
    ` ${it.label}`)));
}

/** A table from column definitions: [{label, value(row), title?}] — every cell also carries data-key; a
 * column's `title` is its header's tooltip. */
export function table(rows, columns, { caption = "" } = {}) {
  return h("table", { class: "numbers" },
    caption ? h("caption", {}, caption) : null,
    h("thead", {}, h("tr", {}, columns.map((c) => h("th", { class: c.num ? "num" : null, title: c.title ?? null }, c.label)))),
    h("tbody", {}, rows.map((r) => h("tr", {}, columns.map((c) => h("td", {
      class: c.num ? "num" : null, "data-key": c.key ?? null, "data-value": c.raw ? String(c.raw(r)) : null,
    }, c.value(r)))))));
}

/** Background for a heat-map cell: white (0) to deep blue (1). */
export function heat(ratio) {
  const r = Math.max(0, Math.min(1, ratio ?? 0));
  const mix = (a, b) => Math.round(a + (b - a) * r);
  return `rgb(${mix(247, 24)}, ${mix(251, 78)}, ${mix(255, 140)})`;
}
