// A small SVG line chart: one series of {x, y} points (x in ms since the epoch),
// with a time axis, a value axis and a dot per point (class "lag-point").

const NS = "http://www.w3.org/2000/svg";

function el(name, attrs = {}, text) {
  const node = document.createElementNS(NS, name);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  if (text !== undefined) node.textContent = text;
  return node;
}

function niceMax(value) {
  if (value <= 0) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(value)));
  for (const m of [1, 2, 5, 10]) if (m * p >= value) return m * p;
  return 10 * p;
}

export function lineChart(points, { width = 720, height = 240, label = "lag", format = String } = {}) {
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
  const yMax = niceMax(Math.max(...points.map((p) => p.y)));
  const sx = (x) => pad.left + (x1 === x0 ? w / 2 : ((x - x0) / (x1 - x0)) * w);
  const sy = (y) => pad.top + h - (y / yMax) * h;
  for (let i = 0; i <= 4; i++) {
    const v = (yMax * i) / 4;
    const y = sy(v);
    svg.appendChild(el("line", { x1: pad.left, x2: pad.left + w, y1: y, y2: y, class: "chart-grid" }));
    svg.appendChild(el("text", { x: pad.left - 6, y: y + 4, "text-anchor": "end", class: "chart-tick" }, format(v)));
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
