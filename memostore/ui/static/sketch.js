// A scalar chart's lines drawn on a canvas as soon as its points arrive, while plotly.js
// (4.8 MB, a second or more of the browser's time to compile) is still loading: the same
// points, colours, margins and grid as the plotly chart that replaces it, without the
// interaction (hover, zoom) that plotly brings a moment later.
"use strict";

ms.sketch = {};

// About *count* round values (1, 2 or 5 times a power of ten) from lo to hi.
ms.sketch.ticks = function (lo, hi, count) {
  if (!(hi > lo)) return [lo];
  const rough = (hi - lo) / count;
  const power = 10 ** Math.floor(Math.log10(rough));
  const step = [1, 2, 5, 10].map((m) => m * power).find((s) => s >= rough);
  const out = [];
  for (let k = Math.ceil(lo / step); k * step <= hi + step * 1e-9; k++) out.push(k * step);
  return out;
};

// The finite extent of the arrays *values* (after *map*), or null.
ms.sketch.extent = function (arrays, map) {
  let lo = Infinity, hi = -Infinity;
  for (const values of arrays) {
    for (const raw of values) {
      const v = raw === null ? NaN : map(raw);
      if (v < lo) lo = v;
      if (v > hi) hi = v;
    }
  }
  return lo <= hi ? [lo, hi] : null;
};

ms.sketch.label = function (value, dates) {
  if (!dates) return ms.num(Math.abs(value) < 1e-12 ? 0 : value);
  const d = new Date(value);
  const p = (v) => String(v).padStart(2, "0");
  return `${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
};

// Draw *traces* (plotly's, as ms.charts.traces makes them) in *div* on a canvas, with the
// axes *layout* asks for. Returns how many runs' lines it drew (0: nothing to draw, or the
// div has no size yet).
ms.sketch.draw = function (div, traces, layout) {
  const width = div.clientWidth, height = div.clientHeight;
  const log = layout.yaxis.type === "log";
  const dates = layout.xaxis.type === "date";
  const ty = log ? (v) => (v > 0 ? Math.log10(v) : NaN) : (v) => v;
  const xs = ms.sketch.extent(traces.map((t) => t.x), (v) => v);
  const ys = ms.sketch.extent(traces.map((t) => t.y), ty);
  if (!width || !height || !xs || !ys) return 0;
  const m = layout.margin;
  const plotW = width - m.l - m.r, plotH = height - m.t - m.b;
  if (xs[0] === xs[1]) xs[1] = xs[0] + 1;
  const pad = ys[1] > ys[0] ? (ys[1] - ys[0]) * 0.03 : 1;  // about as plotly pads a line's range
  // The range the chart asks for (outliers left out), as plotly will draw it.
  const [y0, y1] = layout.yaxis.range || [ys[0] - pad, ys[1] + pad];
  const px = (x) => m.l + ((x - xs[0]) / (xs[1] - xs[0])) * plotW;
  const py = (y) => m.t + (1 - (y - y0) / (y1 - y0)) * plotH;
  const ratio = window.devicePixelRatio || 1;
  const canvas = ms.el("canvas", { class: "sketch", width: String(Math.round(width * ratio)),
    height: String(Math.round(height * ratio)), style: `width:${width}px;height:${height}px;display:block` });
  const ctx = canvas.getContext("2d");
  ctx.scale(ratio, ratio);
  ctx.font = "11px sans-serif";
  const theme = ms.theme();
  ctx.fillStyle = theme.font;
  ctx.strokeStyle = theme.grid;
  ctx.lineWidth = 1;
  ctx.textAlign = "right";
  ctx.textBaseline = "middle";
  for (const t of ms.sketch.ticks(y0, y1, Math.max(2, Math.round(plotH / 40)))) {
    const y = Math.round(py(t)) + 0.5;
    ctx.beginPath(); ctx.moveTo(m.l, y); ctx.lineTo(m.l + plotW, y); ctx.stroke();
    ctx.fillText(log ? ms.num(10 ** t) : ms.sketch.label(t, false), m.l - 4, y);
  }
  ctx.textAlign = "center";
  ctx.textBaseline = "top";
  for (const t of ms.sketch.ticks(xs[0], xs[1], Math.max(2, Math.round(plotW / 110)))) {
    const x = Math.round(px(t)) + 0.5;
    ctx.beginPath(); ctx.moveTo(x, m.t); ctx.lineTo(x, m.t + plotH); ctx.stroke();
    ctx.fillText(ms.sketch.label(t, dates), x, m.t + plotH + 4);
  }
  const title = layout.xaxis.title && layout.xaxis.title.text;
  if (title) ctx.fillText(title, m.l + plotW / 2, m.t + plotH + 20);
  ctx.save();
  ctx.beginPath(); ctx.rect(m.l, m.t, plotW, plotH); ctx.clip();
  // x and y to pixels as one multiply and add each: the canvas draws hundreds of thousands.
  const ax = plotW / (xs[1] - xs[0]), bx = m.l - xs[0] * ax;
  const ay = -plotH / (y1 - y0), by = m.t + plotH - y0 * ay;
  let lines = 0;
  for (const trace of traces) {
    if (trace.mode === "markers") continue;  // NaN marks: plotly draws them
    ctx.globalAlpha = trace.opacity === undefined ? 1 : trace.opacity;
    ctx.strokeStyle = trace.line.color;
    ctx.lineWidth = trace.line.width;
    ctx.beginPath();
    const tx = trace.x, tyv = trace.y;
    let open = false, drawn = false;
    for (let i = 0; i < tx.length; i++) {
      const x = tx[i], raw = tyv[i];
      const y = raw === null ? NaN : log ? ty(raw) : raw;
      if (x === null || !Number.isFinite(y)) { open = false; continue; }
      if (open) ctx.lineTo(x * ax + bx, y * ay + by); else { ctx.moveTo(x * ax + bx, y * ay + by); open = true; }
      drawn = true;
    }
    // A lone point is drawn as a dot, as plotly's markers show it.
    if (tx.length === 1 && open) ctx.arc(px(tx[0]), py(ty(tyv[0])), trace.line.width + 1, 0, 2 * Math.PI);
    ctx.stroke();
    if (drawn && trace.uid.startsWith("line_")) lines += 1;
  }
  ctx.restore();
  div.replaceChildren(canvas);
  return lines;
};
