// The scalar charts' tooltip: every run shown, at the point nearest the hovered x, with its
// name, smoothed and raw value, step, wall time and time since its first point, sorted as
// the reader chose (the "tooltip" menu above the charts).
"use strict";

ms.tooltip = {};

ms.tooltip.box = function () {
  let box = document.getElementById("tooltip");
  if (!box) {
    box = ms.el("div", { id: "tooltip", class: "tooltip", role: "tooltip" });
    document.body.append(box);
  }
  return box;
};

// The rows of the tooltip of *chart* at axis position *x* (and cursor value *y*).
ms.tooltip.rows = function (chart, x, y) {
  const smoothed = ms.charts.smoothed();
  const rows = [];
  chart.series.forEach((series, order) => {
    const i = ms.nearest(series.x, x);
    if (i < 0) return;
    const rel = series.rel[i];
    rows.push({
      id: series.id, order, name: ms.nameOf(series.id), step: ms.charts.stepsOf(series)[i],
      smoothed: series.y[i], value: smoothed && series.raw ? series.raw[i] : series.y[i],
      wall: rel === null || series.start === null ? null : series.start + rel, relative: rel,
    });
  });
  const sort = ms.charts.settings.sort;
  const num = (v) => (typeof v === "number" ? v : NaN);
  const key = {
    descending: (a, b) => (num(b.smoothed) - num(a.smoothed)) || 0,
    ascending: (a, b) => (num(a.smoothed) - num(b.smoothed)) || 0,
    nearest: (a, b) => (Math.abs(num(a.smoothed) - y) - Math.abs(num(b.smoothed) - y)) || 0,
    name: (a, b) => a.name.localeCompare(b.name),
  }[sort];
  if (key && !(sort === "nearest" && typeof y !== "number")) rows.sort((a, b) => key(a, b) || a.order - b.order);
  return rows;
};

ms.tooltip.show = function (chart, event) {
  const axisX = event.xvals && event.xvals.length ? event.xvals[0] : (event.points && event.points[0] ? event.points[0].x : null);
  if (axisX === null || axisX === undefined) return;
  const x = ms.charts.fromAxis(axisX);
  const y = event.yvals && event.yvals.length ? Number(event.yvals[0]) : undefined;
  const rows = ms.tooltip.rows(chart, x, y);
  const smoothed = ms.charts.smoothed();
  const box = ms.tooltip.box();
  const head = ["", "run", ...(smoothed ? ["smoothed"] : []), "value", "step", "time", "relative"];
  box.replaceChildren(
    ms.el("div", { class: "tooltip-title" }, chart.tag),
    ms.el("table", {}, ms.el("thead", {}, ms.el("tr", {}, head.map((h) => ms.el("th", {}, h)))),
      ms.el("tbody", {}, rows.map((r) => ms.el("tr", { "data-id": r.id, "data-step": r.step, "data-value": r.value,
        "data-smoothed": r.smoothed, "data-wall": r.wall, "data-relative": r.relative },
        ms.el("td", {}, ms.el("span", { class: "swatch", style: `background:${ms.colorOf(r.id)}` })),
        ms.el("td", { class: "name" }, r.name),
        smoothed ? ms.el("td", { class: "num smoothed" }, ms.num(r.smoothed)) : null,
        ms.el("td", { class: "num value" }, ms.num(r.value)),
        ms.el("td", { class: "num step" }, String(r.step)),
        ms.el("td", { class: "time" }, ms.localTime(r.wall)),
        ms.el("td", { class: "num relative" }, ms.duration(r.relative)))))));
  box.dataset.tag = chart.tag;
  box.style.display = "block";
  // Beside the cursor, on the side with room; beside the chart when hovered by a script.
  const mouse = event.event && typeof event.event.clientX === "number" ? event.event : null;
  const rect = chart.div.getBoundingClientRect();
  const cx = mouse ? mouse.clientX : rect.left + rect.width / 2;
  const cy = mouse ? mouse.clientY : rect.top + 20;
  const w = box.offsetWidth, h = box.offsetHeight;
  const left = cx + 18 + w < window.innerWidth ? cx + 18 : Math.max(4, cx - 18 - w);
  const top = Math.min(Math.max(4, cy + 12), Math.max(4, window.innerHeight - h - 4));
  box.style.left = left + "px";
  box.style.top = top + "px";
};

ms.tooltip.hide = function () {
  const box = document.getElementById("tooltip");
  if (box) box.style.display = "none";
};
