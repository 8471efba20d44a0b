// Scalar charts of the selected runs: one per tag, every run overlaid in its colour, the
// smoothed line over the faded raw one. The server smooths the whole series, then reduces
// it to the visible window (first, min, max and last per pixel column), again on zoom.
// Tags are filtered by a regular expression and grouped by prefix (train/, val/); a pinned
// chart stays at the top. Hovering lists every run at that step (tooltip.js). As in
// TensorBoard, a NaN is marked with a triangle at its step and the line breaks at an
// infinity; the y axis leaves outliers out (the 5th to 95th percentile) unless asked not to.
"use strict";

ms.charts = {
  // TensorBoard's defaults: its debiased EMA at 0.6, the raw line faded behind, outliers
  // left out of the y axis's range.
  settings: { smooth: "ema", weight: 0.6, x: "step", logy: false, raw: true, outliers: true, sort: "default" },
  charts: new Map(),  // tag -> {tag, card, div, ids, window, counts, series, drawn}
  pinned: new Set(ms.saved("pinned", [])),
  collapsed: new Set(ms.saved("collapsed", [])),
  filter: "",  // a regular expression over tags, shared by every tab
};

ms.charts.controls = function (onChange) {
  const s = ms.charts.settings;
  const choice = (id, key, options) => {
    const select = ms.el("select", { id, onchange: (e) => { s[key] = e.target.value; onChange(key); } },
      options.map(([value, label]) => ms.el("option", { value }, label)));
    select.value = s[key];
    return select;
  };
  const shown = ms.el("span", { class: "weight-value" }, s.weight.toFixed(2));
  const weight = ms.el("input", { id: "weight", type: "range", min: "0", max: "0.99", step: "0.01", value: String(s.weight),
    oninput: (e) => { shown.textContent = Number(e.target.value).toFixed(2); },
    onchange: (e) => { s.weight = Math.min(0.99, Math.max(0, Number(e.target.value) || 0)); onChange("weight"); } });
  const box = (id, key, label) => {
    const input = ms.el("input", { id, type: "checkbox", onchange: (e) => { s[key] = e.target.checked; onChange(key); } });
    input.checked = s[key];
    return ms.el("label", {}, input, " " + label);
  };
  return ms.el("div", { class: "controls" },
    ms.el("label", {}, "smoothing ", choice("smooth", "smooth", [["ema", "EMA (TensorBoard)"], ["tw-ema", "time-weighted EMA"], ["none", "none"]])),
    ms.el("label", {}, weight, " ", shown),
    box("raw", "raw", "raw line"),
    ms.el("label", {}, "x ", choice("xmode", "x", [["step", "step"], ["relative", "relative time"], ["wall", "wall time"]])),
    box("logy", "logy", "log y"),
    box("outliers", "outliers", "ignore outliers in chart scaling"),
    ms.el("label", {}, "tooltip ", choice("tooltip-sort", "sort", [["default", "in run order"], ["descending", "highest first"],
      ["ascending", "lowest first"], ["nearest", "nearest the cursor"], ["name", "by name"]])));
};

// The steps of a chart's points: on a step axis the server sends them once, as x.
ms.charts.stepsOf = function (series) { return series.steps || series.x; };

ms.charts.smoothed = function () { const s = ms.charts.settings; return s.smooth !== "none" && s.weight > 0; };

ms.charts.query = function (tag, ids, window, width, after) {
  const s = ms.charts.settings;
  const params = new URLSearchParams({ tag, ids: ids.join(","), x: s.x, smooth: s.smooth,
    weight: String(ms.charts.smoothed() ? s.weight : 0), buckets: String(Math.max(50, Math.round(width))) });
  if (window) { params.set("from", String(window[0])); params.set("to", String(window[1])); }
  if (after) params.set("after", after);
  return "/api/chart?" + params.toString();
};

// Values as sent: NaN and infinities come as strings (JSON has no such numbers).
ms.charts.numbers = function (series) {
  for (const field of ["y", "raw"]) {
    const values = series[field];
    if (values && values.some((v) => typeof v === "string")) series[field] = values.map((v) => (typeof v === "string" ? Number(v) : v));
  }
  return series;
};

// x as plotly wants it: seconds become dates on a wall-time axis.
ms.charts.toAxis = function (x) { return ms.charts.settings.x === "wall" ? x.map((v) => v === null ? null : v * 1000) : x; };
ms.charts.fromAxis = function (v) {
  if (ms.charts.settings.x !== "wall") return Number(v);
  return typeof v === "number" ? v / 1000 : Date.parse(String(v).replace(" ", "T") + "Z") / 1000;
};

// The traces of a chart: every run's raw line first (faded, behind), then the drawn lines.
ms.charts.traces = function (chart) {
  const raws = [], lines = [];
  const withRaw = ms.charts.smoothed() && ms.charts.settings.raw;
  for (const series of chart.series) {
    const color = ms.colorOf(series.id);
    const name = ms.plotText(ms.nameOf(series.id));
    const x = ms.charts.toAxis(series.x);
    // Few points: markers too (bigger for one or two), so that a lone point is seen at all.
    const few = series.x.length < 30;
    const size = series.x.length < 3 ? 7 : 4;
    if (withRaw && series.raw) {
      raws.push({ type: "scatter", mode: few ? "lines+markers" : "lines", uid: "raw_" + series.id, name, x, y: series.raw,
        line: { color, width: 1 }, marker: { size: 3 }, opacity: 0.28, hoverinfo: "none" });
    }
    lines.push({ type: "scatter", mode: few ? "lines+markers" : "lines", uid: "line_" + series.id, name, x, y: series.y,
      line: { color, width: 1.7 }, marker: { size }, hoverinfo: "none" });
    const nan = ms.charts.nanMarks(series, x);
    if (nan.x.length) {
      lines.push({ type: "scatter", mode: "markers", uid: "nan_" + series.id, name, x: nan.x, y: nan.y, hoverinfo: "none", line: { color, width: 0 },
        marker: { symbol: "triangle-up", size: 10, color, line: { width: 1, color: ms.theme().paper } } });
    }
  }
  return raws.concat(lines);
};

// Where a series logged NaN: at the last value drawn before it (the first after, if none),
// as TensorBoard draws its triangles. Infinities break the line (plotly draws no point).
ms.charts.nanMarks = function (series, x) {
  const logged = series.raw || series.y;
  const out = { x: [], y: [] };
  let last = null;
  logged.forEach((v, i) => {
    const drawn = series.y[i];
    if (Number.isFinite(drawn)) last = drawn;
    if (!Number.isNaN(v)) return;
    out.x.push(x[i]);
    out.y.push(last);
  });
  const first = series.y.find((v) => Number.isFinite(v));
  out.y = out.y.map((v) => (v === null ? (first === undefined ? 0 : first) : v));
  return out;
};

// The y axis's range, as TensorBoard computes it over the values the lines draw: from the
// 5th to the 95th percentile when outliers are ignored (else from min to max), padded by a
// fifth of the span, down to just below zero when that less than doubles the span. One
// value gets a range around it that holds zero ([0, 2v]).
ms.charts.yRange = function (chart) {
  const s = ms.charts.settings;
  const values = [];
  for (const series of chart.series) {
    for (const v of series.y) if (Number.isFinite(v) && (!s.logy || v > 0)) values.push(s.logy ? Math.log10(v) : v);
  }
  if (!values.length) return null;
  values.sort((a, b) => a - b);
  const at = (p) => {  // linear between ranks, as d3.quantile
    const i = (values.length - 1) * p, lo = Math.floor(i), hi = Math.min(lo + 1, values.length - 1);
    return values[lo] + (values[hi] - values[lo]) * (i - lo);
  };
  const [a, b] = s.outliers ? [at(0.05), at(0.95)] : [values[0], values[values.length - 1]];
  const span = b - a;
  if (s.logy) return span > 0 ? [a - span * 0.05, b + span * 0.05] : [a - 0.5, b + 0.5];
  if (span === 0) return a === 0 ? [-1, 1] : a > 0 ? [0, 2 * a] : [2 * a, 0];
  return [a >= 0 && a < span ? -0.1 * b : a - span * 0.2, b + span * 0.2];
};

ms.charts.layout = function (chart) {
  const s = ms.charts.settings;
  const axisTitle = { step: "step", relative: "seconds since the run's first point", wall: "" }[s.x];
  const range = ms.charts.yRange(chart);
  // Points at one step only (add_hparams's metrics): the step between its neighbours, in
  // whole steps, not a -1..1 axis in halves.
  const steps = new Set(chart.series.flatMap((series) => series.x));
  const lone = s.x === "step" && steps.size === 1 ? [...steps][0] : null;
  return ms.themed({
    margin: { l: 52, r: 12, t: 8, b: 38 }, showlegend: false, uirevision: chart.tag + s.x + s.logy + s.outliers,
    hovermode: "x", font: { size: 11 },
    xaxis: { type: s.x === "wall" ? "date" : "linear", title: { text: axisTitle, font: { size: 11 } },
      showspikes: true, spikemode: "across", spikethickness: 1, spikecolor: "#90a4ae", spikedash: "dot", zeroline: false,
      ...(lone === null ? {} : { range: [lone - 1, lone + 1], dtick: 1 }) },
    yaxis: { type: s.logy ? "log" : "linear", zeroline: false, exponentformat: "e", ...(range ? { range, autorange: false } : {}) },
  });
};

ms.charts.config = { responsive: true, displaylogo: false, modeBarButtonsToRemove: ["select2d", "lasso2d", "toImage"] };

// The chart as an image file (the card's PNG and SVG buttons), in the page's colours.
ms.charts.image = async function (chart, format) {
  await ms.plotly();
  const { width, height } = chart.div.getBoundingClientRect();
  const url = await Plotly.toImage(chart.div, { format, width: Math.round(width) || 600, height: Math.round(height) || 300, scale: format === "png" ? 2 : 1 });
  ms.download(ms.fileName(chart.tag, format), url);
};

ms.charts.draw = async function (chart) {
  await ms.charts.fetch(chart);
  await ms.charts.plot(chart);
};

// A chart's points from the server. Before plotly.js has loaded (the page's first charts),
// its lines are drawn at once on a canvas (sketch.js), which the plotly chart replaces.
ms.charts.fetch = async function (chart) {
  const width = chart.div.clientWidth || 600;
  const data = await ms.get(ms.charts.query(chart.tag, chart.ids, chart.window, width));
  chart.series = data.series.map(ms.charts.numbers);
  chart.counts = new Map(data.series.map((s) => [s.id, s.count]));
  if (!window.Plotly) {
    const lines = ms.sketch.draw(chart.div, ms.charts.traces(chart), ms.charts.layout(chart));
    if (lines) chart.div.dataset.lines = String(lines);
  }
};

// The fetched points as a plotly chart (zoom, pan, the tooltip of every run).
ms.charts.plot = async function (chart) {
  await ms.plotly();
  const sketch = chart.div.querySelector(":scope > canvas.sketch");
  if (sketch) sketch.remove();
  await Plotly.react(chart.div, ms.charts.traces(chart), ms.charts.layout(chart), ms.charts.config);
  ms.charts.watch(chart);
  chart.div.dataset.yrange = JSON.stringify(chart.div.layout.yaxis.range);
  chart.div.dataset.nan = String(chart.div.data.filter((t) => t.uid.startsWith("nan_")).reduce((n, t) => n + t.x.length, 0));
  chart.div.dataset.series = String(chart.series.length);
  chart.div.dataset.lines = String(chart.series.filter((s) => s.x.length).length);
  chart.div.dataset.points = chart.series.map((s) => s.x.length).join(",");
};

// What a chart is drawn from: when it changes, the chart is fetched again.
ms.charts.key = function (chart) {
  const { sort, ...drawn } = ms.charts.settings;  // the tooltip's order draws nothing
  return JSON.stringify([chart.ids, chart.window, drawn, ms.theme().paper]);
};

ms.charts.tagsOf = function (ids) {
  const tags = new Set();
  for (const id of ids) {
    const row = ms.table.byId.get(id);
    for (const [tag, stats] of Object.entries((row && row.metrics) || {})) if (stats.kind === "scalar") tags.add(tag);
  }
  return [...tags].sort();
};

// The group of a tag: its prefix up to the first slash ("train/loss" is in "train").
ms.charts.groupOf = function (tag) { const at = tag.indexOf("/"); return at > 0 ? tag.slice(0, at) : ""; };

ms.charts.card = function (tag) {
  let chart = ms.charts.charts.get(tag);
  if (chart) return chart;
  const div = ms.el("div", { class: "chart", "data-tag": tag });
  const pin = ms.el("button", { class: "pin", title: "keep this chart at the top" });
  const card = ms.el("div", { class: "card", "data-tag": tag },
    ms.el("div", { class: "card-head" }, ms.el("span", { class: "card-title", title: tag }, tag),
      ms.el("span", { class: "card-tools" }, pin,
        ms.el("button", { class: "csv", title: "the points drawn, as CSV", onclick: () => ms.charts.save(chart, "csv") }, "CSV"),
        ms.el("button", { class: "json", title: "the points drawn, as JSON", onclick: () => ms.charts.save(chart, "json") }, "JSON"),
        ms.el("button", { class: "png", title: "the chart as a PNG image", onclick: () => ms.charts.image(chart, "png") }, "PNG"),
        ms.el("button", { class: "svg", title: "the chart as an SVG image", onclick: () => ms.charts.image(chart, "svg") }, "SVG"))),
    div);
  chart = { tag, card, div, pin, ids: [], window: null, counts: new Map(), series: [], drawn: null };
  pin.addEventListener("click", () => ms.charts.togglePin(tag));
  ms.charts.charts.set(tag, chart);
  return chart;
};

ms.charts.togglePin = function (tag) {
  const pinned = ms.charts.pinned;
  if (pinned.has(tag)) pinned.delete(tag); else pinned.add(tag);
  ms.save("pinned", [...pinned]);
  if (ms.charts.container) ms.charts.render(ms.charts.container, ms.charts.ids, ms.charts.options);
};

// A section of charts: the pinned ones, or one prefix group (collapsible).
ms.charts.section = function (name, title, tags, collapsible, onToggle) {
  const grid = ms.el("div", { class: "charts" });
  for (const tag of tags) grid.append(ms.charts.card(tag).card);
  const count = ms.el("span", { class: "count" }, `${tags.length} chart${tags.length === 1 ? "" : "s"}`);
  if (!collapsible) return ms.el("section", { class: "group pinned", "data-group": name }, ms.el("div", { class: "group-title" }, title, count), grid);
  const box = ms.el("details", { class: "group", "data-group": name }, ms.el("summary", { class: "group-title" }, title, count), grid);
  box.open = !ms.charts.collapsed.has(name);
  box.addEventListener("toggle", () => {
    // Also fired for the state set just above: only a change by the reader counts.
    if (box.open !== ms.charts.collapsed.has(name)) return;
    if (box.open) ms.charts.collapsed.delete(name); else ms.charts.collapsed.add(name);
    ms.save("collapsed", [...ms.charts.collapsed]);
    onToggle();
  });
  return box;
};

// Draw the charts of *ids* in *container*: the legend, the pinned charts, then one group per
// prefix. Only charts in open groups are fetched, and only when what they show changed.
ms.charts.render = async function (container, ids, options) {
  ms.charts.container = container;
  ms.charts.ids = ids;
  ms.charts.options = options || {};
  ms.assignColors(ids);
  const tags = ms.charts.tagsOf(ids);
  ms.charts.tags = tags;
  for (const [tag, chart] of ms.charts.charts) {
    if (tags.includes(tag)) continue;
    if (window.Plotly) Plotly.purge(chart.div);
    ms.charts.charts.delete(tag);
  }
  const re = ms.regex(ms.charts.filter);
  const pinned = tags.filter((t) => ms.charts.pinned.has(t));
  const matched = tags.filter((t) => !ms.charts.pinned.has(t) && (re instanceof Error || re.test(t)));
  const groups = new Map();
  for (const tag of matched) {
    const group = ms.charts.groupOf(tag);
    if (!groups.has(group)) groups.set(group, []);
    groups.get(group).push(tag);
  }
  // Prefix groups by name, then the tags without one, then hparam/ (add_hparams's metrics,
  // one point each) last, as TensorBoard lists them.
  const rank = (name) => (name === "hparam" ? 2 : name === "" ? 1 : 0);
  const names = [...groups.keys()].sort((a, b) => rank(a) - rank(b) || a.localeCompare(b));
  const again = () => ms.charts.render(container, ids, options);
  const parts = [];
  if (ms.charts.options.legend && ids.length) parts.push(ms.charts.legend(ids));
  if (pinned.length) parts.push(ms.charts.section("pinned", "pinned", pinned, false));
  for (const name of names) parts.push(ms.charts.section(name, name ? name + "/" : "other tags", groups.get(name), true, again));
  if (!tags.length) parts.push(ms.el("p", { class: "same" }, ids.length ? "the selected runs logged no scalars" : "select runs in the table to chart them"));
  else if (!pinned.length && !matched.length) parts.push(ms.el("p", { class: "same" }, `no tag matches /${ms.charts.filter}/`));
  container.replaceChildren(...parts);
  const stale = [];
  for (const tag of [...pinned, ...matched]) {
    const chart = ms.charts.charts.get(tag);
    chart.pin.textContent = ms.charts.pinned.has(tag) ? "unpin" : "pin";
    chart.card.classList.toggle("is-pinned", ms.charts.pinned.has(tag));
    if (!ms.charts.pinned.has(tag) && ms.charts.collapsed.has(ms.charts.groupOf(tag))) continue;
    if (chart.ids.join() !== ids.join()) chart.window = null;
    chart.ids = ids.slice();
    if (chart.drawn !== ms.charts.key(chart) || !chart.div.data) stale.push(chart);
  }
  // The first charts are drawn now; the others when scrolled near (as TensorBoard's cards),
  // so fifty tags do not cost fifty requests before the first chart shows.
  if (ms.charts.observer) ms.charts.observer.disconnect();
  ms.charts.observer = new IntersectionObserver((entries) => {
    for (const entry of entries) {
      if (!entry.isIntersecting) continue;
      ms.charts.observer.unobserve(entry.target);
      const chart = ms.charts.charts.get(entry.target.dataset.tag);
      if (chart && chart.div === entry.target) ms.charts.redraw(chart);
    }
  }, { rootMargin: "600px 0px" });
  const eager = stale.slice(0, ms.charts.EAGER);
  for (const chart of stale.slice(ms.charts.EAGER)) ms.charts.observer.observe(chart.div);
  // Every first chart's points first (its lines sketched at once), then plotly.js, whose
  // compiling holds the page for a while, then the plotly charts.
  const fetched = eager.map((chart) => {
    chart.drawn = ms.charts.key(chart);
    return ms.charts.fetch(chart).catch((error) => { chart.drawn = null; throw error; });
  });
  await Promise.all(fetched);
  container.dataset.drawn = String(Date.now());
  if (ms.charts.options.onLines) ms.charts.options.onLines();
  if (!window.Plotly) await ms.painted();  // the lines are painted before plotly.js is compiled
  await Promise.all(eager.map((chart) => ms.charts.plot(chart)));
  container.dataset.ready = String(Date.now());
};

// Charts drawn at once by a render; those after them wait until scrolled near.
ms.charts.EAGER = 12;

// Fetch and draw *chart* unless what it shows is drawn already.
ms.charts.redraw = function (chart) {
  const key = ms.charts.key(chart);
  if (chart.drawn === key && chart.div.data) return Promise.resolve();
  chart.drawn = key;
  return ms.charts.draw(chart).catch((error) => { chart.drawn = null; throw error; });
};

ms.charts.legend = function (ids) {
  return ms.el("div", { class: "legend", id: "legend" }, ids.map((id) => ms.el("span", { class: "legend-item", "data-id": id }, ms.runLabel(id))));
};

ms.charts.watch = function (chart) {
  if (chart.watching) return;
  chart.watching = true;
  chart.div.on("plotly_relayout", (event) => {
    let window = chart.window;
    if (event["xaxis.autorange"]) window = null;
    else if (event["xaxis.range[0]"] !== undefined) {
      window = [ms.charts.fromAxis(event["xaxis.range[0]"]), ms.charts.fromAxis(event["xaxis.range[1]"])];
    } else if (event["xaxis.range"]) {
      window = event["xaxis.range"].map(ms.charts.fromAxis);
    } else return;
    chart.window = window;
    chart.drawn = ms.charts.key(chart);
    ms.charts.draw(chart);  // the server reduces the new window at full resolution
  });
  chart.div.on("plotly_hover", (event) => ms.tooltip.show(chart, event));
  chart.div.on("plotly_unhover", () => ms.tooltip.hide());
};

// Bring the charts of running evaluations up to date, fetching only what is new.
ms.charts.tick = async function (runningIds) {
  for (const chart of ms.charts.charts.values()) {
    const live = chart.ids.filter((id) => runningIds.has(id));
    if (!live.length || !chart.div.data || !chart.div.isConnected) continue;
    const after = live.map((id) => `${id}:${chart.counts.get(id) || 0}`).join(",");
    const width = chart.div.clientWidth || 600;
    const data = await ms.get(ms.charts.query(chart.tag, live, chart.window, width, after));
    let replaced = false;
    for (const fresh of data.series.map(ms.charts.numbers)) {
      const held = chart.series.find((s) => s.id === fresh.id);
      if (!held) continue;
      const before = chart.counts.get(fresh.id) || 0;
      chart.counts.set(fresh.id, fresh.count);
      if (!fresh.append) { Object.assign(held, fresh); replaced = true; continue; }
      if (fresh.count <= before || !fresh.x.length) continue;
      if ((fresh.raw || fresh.y).some(Number.isNaN)) replaced = true;  // a new NaN gets its mark
      for (const field of ["x", "y", "raw", "steps", "rel"]) if (held[field] && fresh[field]) held[field] = held[field].concat(fresh[field]);
      held.count = fresh.count;
      const index = (uid) => chart.div.data.findIndex((t) => t.uid === uid);
      const x = ms.charts.toAxis(fresh.x);
      const line = index("line_" + fresh.id), raw = index("raw_" + fresh.id);
      if (line >= 0) Plotly.extendTraces(chart.div, { x: [x], y: [fresh.y] }, [line]);
      if (raw >= 0 && fresh.raw) Plotly.extendTraces(chart.div, { x: [x], y: [fresh.raw] }, [raw]);
    }
    if (replaced) await Plotly.react(chart.div, ms.charts.traces(chart), ms.charts.layout(chart), ms.charts.config);
    else {
      const range = ms.charts.yRange(chart);  // new points may move the y axis's range
      if (range && JSON.stringify(range) !== JSON.stringify(chart.div.layout.yaxis.range)) await Plotly.relayout(chart.div, { "yaxis.range": range });
    }
    chart.div.dataset.points = chart.series.map((s) => s.x.length).join(",");
  }
};

// The points a chart draws, per run: step, wall time, relative time, value (and smoothed).
ms.charts.points = function (chart) {
  const smoothed = ms.charts.smoothed();
  return chart.series.map((s) => {
    const value = smoothed ? (s.raw || s.y) : s.y;
    const out = { id: s.id, name: ms.nameOf(s.id), step: ms.charts.stepsOf(s).slice(),
      wall_time: s.rel.map((r) => (r === null || s.start === null ? null : Math.round((s.start + r) * 1000) / 1000)),
      relative_s: s.rel.slice(), value: value.slice() };
    if (smoothed) out.smoothed = s.y.slice();
    return out;
  });
};

// A CSV cell: quoted when it holds a separator, a quote or a line break; a name that a
// spreadsheet would read as a formula (=, +, -, @) starts with an apostrophe.
ms.charts.cell = function (value) {
  if (value === null || value === undefined) return "";
  if (typeof value === "number") return String(value);
  let text = String(value);
  if (/^[=+\-@\t\r]/.test(text)) text = "'" + text;
  return /[",\r\n]/.test(text) ? `"${text.replace(/"/g, '""')}"` : text;
};

ms.charts.csv = function (chart) {
  const smoothed = ms.charts.smoothed();
  const head = ["run", "name", "step", "wall_time", "relative_s", "value", ...(smoothed ? ["smoothed"] : [])];
  const lines = [head.join(",")];
  for (const p of ms.charts.points(chart)) {
    p.step.forEach((step, i) => {
      const row = [p.id, p.name, step, p.wall_time[i], p.relative_s[i], p.value[i], ...(smoothed ? [p.smoothed[i]] : [])];
      lines.push(row.map(ms.charts.cell).join(","));
    });
  }
  return lines.join("\r\n") + "\r\n";
};

ms.charts.json = function (chart) {
  const s = ms.charts.settings;
  return JSON.stringify({ tag: chart.tag, x: s.x, window: chart.window,
    smoothing: ms.charts.smoothed() ? { mode: s.smooth, weight: s.weight } : null, runs: ms.charts.points(chart) }, null, 1);
};

ms.charts.save = function (chart, format) {
  if (format === "csv") ms.download(ms.fileName(chart.tag, "csv"), ms.charts.csv(chart), "text/csv");
  else ms.download(ms.fileName(chart.tag, "json"), ms.charts.json(chart), "application/json");
};
