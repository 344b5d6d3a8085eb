// A small SVG line chart: one series of {x, y} points (x in ms since the epoch),
// with a time axis, a value axis (labels of class "chart-y-tick") and a dot per point
// (class "lag-point").

const NS = "http://www.w3.org/2000/svg";

function el(name, attrs = {}, text) {
  const node = document.createElementNS(NS, name);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  if (text !== undefined) node.textContent = text;
  return node;
}

// The value axis: up to `count` steps of a round size (1, 2 or 5 times a power of ten)
// from 0 to at least `value`. With `integer`, a step is never below 1, so a lag of 1
// reads 0 and 1 rather than 0, 0, 1, 1, 1 from rounding quarter steps.
export function ticks(value, { count = 4, integer = false } = {}) {
  const top = value > 0 ? value : 1;
  const raw = top / count;
  const p = Math.pow(10, Math.floor(Math.log10(raw)));
  let step = [1, 2, 5, 10].map((m) => m * p).find((s) => s >= raw);
  if (integer) step = Math.max(1, Math.round(step));
  const steps = Math.max(1, Math.ceil(top / step - 1e-9));
  return Array.from({ length: steps + 1 }, (_, i) => i * step);
}

export function lineChart(points, { width = 720, height = 240, label = "lag", format = String, integer = false } = {}) {
  const svg = el("svg", { viewBox: `0 0 ${width} ${height}`, class: "chart", role: "img", "aria-label": label });
  const pad = { left: 64, right: 16, top: 12, bottom: 32 };
  const w = width - pad.left - pad.right;
  const h = height - pad.top - pad.bottom;
  svg.appendChild(el("rect", { x: pad.left, y: pad.top, width: w, height: h, class: "chart-frame" }));
  if (!points.length) {
    svg.appendChild(el("text", { x: width / 2, y: height / 2, "text-anchor": "middle", class: "chart-empty" },
      "no measurements yet: run the lag job"));
    return svg;
  }
  const xs = points.map((p) => p.x);
  const x0 = Math.min(...xs);
  const x1 = Math.max(...xs);
  const yTicks = ticks(Math.max(...points.map((p) => p.y)), { integer });
  const yMax = yTicks[yTicks.length - 1];
  const sx = (x) => pad.left + (x1 === x0 ? w / 2 : ((x - x0) / (x1 - x0)) * w);
  const sy = (y) => pad.top + h - (y / yMax) * h;
  for (const v of yTicks) {
    const y = sy(v);
    svg.appendChild(el("line", { x1: pad.left, x2: pad.left + w, y1: y, y2: y, class: "chart-grid" }));
    svg.appendChild(el("text", { x: pad.left - 6, y: y + 4, "text-anchor": "end", class: "chart-tick chart-y-tick" }, format(v)));
  }
  const times = x1 === x0 ? [x0] : [x0, (x0 + x1) / 2, x1];
  const precise = x1 - x0 < 60000; // seconds apart: show milliseconds
  times.forEach((t, i) => {
    const text = new Date(t).toISOString().slice(11, precise ? 23 : 19);
    const anchor = times.length === 1 ? "middle" : ["start", "middle", "end"][i];
    svg.appendChild(el("text", { x: sx(t), y: height - 10, "text-anchor": anchor, class: "chart-tick" }, text));
  });
  const path = points.map((p) => `${sx(p.x).toFixed(1)},${sy(p.y).toFixed(1)}`).join(" ");
  svg.appendChild(el("polyline", { points: path, class: "chart-line" }));
  for (const p of points) {
    const dot = el("circle", { cx: sx(p.x).toFixed(1), cy: sy(p.y).toFixed(1), r: 3, class: "lag-point" });
    dot.appendChild(el("title", {}, `${new Date(p.x).toISOString()}: ${format(p.y)} ${label}`));
    svg.appendChild(dot);
  }
  return svg;
}
