// Charts of the selected runs: one per tag, every run overlaid, reduced by the server
// to the visible window (min and max per pixel column), fetched again on zoom.
"use strict";

ms.charts = {
  settings: { smooth: "none", weight: 0.6, x: "step", logy: false },
  charts: new Map(),  // tag -> {div, ids, window, counts}
};

ms.charts.controls = function (onChange) {
  const s = ms.charts.settings;
  const choice = (id, key, options) => {
    const select = ms.el("select", { id, onchange: (e) => { s[key] = e.target.value; onChange(); } },
      options.map(([value, label]) => ms.el("option", { value }, label)));
    select.value = s[key];
    return select;
  };
  const weight = ms.el("input", { id: "weight", type: "number", min: "0", max: "0.999", step: "0.05", value: s.weight,
    onchange: (e) => { s.weight = Math.min(0.999, Math.max(0, Number(e.target.value) || 0)); onChange(); } });
  const logy = ms.el("input", { id: "logy", type: "checkbox", onchange: (e) => { s.logy = e.target.checked; onChange(); } });
  logy.checked = s.logy;
  return ms.el("div", { class: "controls" },
    ms.el("label", {}, "smoothing ", choice("smooth", "smooth", [["none", "none"], ["ema", "EMA"], ["tw-ema", "time-weighted EMA"]])),
    ms.el("label", {}, "weight ", weight),
    ms.el("label", {}, "x ", choice("xmode", "x", [["step", "step"], ["wall", "wall time"], ["relative", "relative time"]])),
    ms.el("label", {}, logy, " log y"));
};

ms.charts.query = function (tag, ids, window, width, after) {
  const s = ms.charts.settings;
  const params = new URLSearchParams({ tag, ids: ids.join(","), x: s.x, smooth: s.smooth,
    weight: String(s.smooth === "none" ? 0 : s.weight), buckets: String(Math.max(50, Math.round(width))) });
  if (window) { params.set("from", String(window[0])); params.set("to", String(window[1])); }
  if (after) params.set("after", after);
  return "/api/chart?" + params.toString();
};

// x as plotly wants it: seconds become dates on a wall-time axis.
ms.charts.toAxis = function (x) { return ms.charts.settings.x === "wall" ? x.map((v) => v === null ? null : v * 1000) : x; };
ms.charts.fromAxis = function (v) {
  if (ms.charts.settings.x !== "wall") return Number(v);
  return typeof v === "number" ? v / 1000 : Date.parse(String(v).replace(" ", "T") + "Z") / 1000;
};

ms.charts.trace = function (series) {
  const row = ms.table.byId.get(series.id);
  return {
    // Few points: markers too, so that a series of one point is seen at all.
    type: "scatter", mode: series.x.length < 30 ? "lines+markers" : "lines", marker: { size: 4 }, name: ms.short(series.id) + " " + ms.fname(row ? row.function : ""),
    x: ms.charts.toAxis(series.x), y: series.y, customdata: series.steps,
    line: { color: ms.colorOf(series.id), width: 1.5 },
    hovertemplate: "%{y:.5g} at step %{customdata}<extra>" + ms.short(series.id) + "</extra>",
  };
};

ms.charts.layout = function (tag) {
  const s = ms.charts.settings;
  return {
    title: { text: tag, font: { size: 13 } }, margin: { l: 50, r: 10, t: 30, b: 35 },
    showlegend: false, uirevision: tag + s.x + s.logy,
    xaxis: { type: s.x === "wall" ? "date" : "linear", title: { text: s.x === "relative" ? "seconds" : s.x === "step" ? "step" : "" } },
    yaxis: { type: s.logy ? "log" : "linear" },
    hovermode: "closest",
  };
};

ms.charts.draw = async function (tag, chart) {
  await ms.plotly();
  const width = chart.div.clientWidth || 600;
  const data = await ms.get(ms.charts.query(tag, chart.ids, chart.window, width));
  chart.counts = new Map(data.series.map((s) => [s.id, s.count]));
  await Plotly.react(chart.div, data.series.map(ms.charts.trace), ms.charts.layout(tag), { responsive: true, displaylogo: false });
  chart.div.dataset.series = String(data.series.length);
  chart.div.dataset.points = data.series.map((s) => s.x.length).join(",");
};

ms.charts.render = async function (container, ids) {
  await ms.plotly();
  const tags = new Set();
  for (const id of ids) {
    const row = ms.table.byId.get(id);
    for (const [tag, stats] of Object.entries((row && row.metrics) || {})) {
      if (stats.kind === "scalar" || stats.kind === "histogram") tags.add(tag);
    }
  }
  for (const [tag, chart] of ms.charts.charts) {
    if (!tags.has(tag)) { Plotly.purge(chart.div); ms.charts.charts.delete(tag); }
  }
  const draws = [];
  for (const tag of [...tags].sort()) {
    let chart = ms.charts.charts.get(tag);
    if (!chart) {
      const div = ms.el("div", { class: "chart", "data-tag": tag });
      chart = { div, ids: [], window: null, counts: new Map() };
      ms.charts.charts.set(tag, chart);
    }
    chart.ids = ids.slice();
    container.append(chart.div);
    draws.push(ms.charts.draw(tag, chart).then(() => ms.charts.watchZoom(tag, chart)));
  }
  await Promise.all(draws);
  container.dataset.ready = String(Date.now());
};

ms.charts.watchZoom = function (tag, chart) {
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
    ms.charts.draw(tag, chart);  // the server reduces the new window at full resolution
  });
};

// Bring the charts of running evaluations up to date, fetching only what is new.
ms.charts.tick = async function (runningIds) {
  for (const [tag, chart] of ms.charts.charts) {
    const live = chart.ids.filter((id) => runningIds.has(id));
    if (!live.length) continue;
    const after = live.map((id) => `${id}:${chart.counts.get(id) || 0}`).join(",");
    const width = chart.div.clientWidth || 600;
    const data = await ms.get(ms.charts.query(tag, live, chart.window, width, after));
    for (const series of data.series) {
      const index = chart.ids.indexOf(series.id);
      if (index < 0 || !chart.div.data) continue;
      const held = chart.counts.get(series.id) || 0;
      chart.counts.set(series.id, series.count);
      if (series.append) {
        if (series.count > held && series.x.length) {
          Plotly.extendTraces(chart.div, { x: [ms.charts.toAxis(series.x)], y: [series.y], customdata: [series.steps] }, [index]);
        }
      } else {
        Plotly.restyle(chart.div, { x: [ms.charts.toAxis(series.x)], y: [series.y], customdata: [series.steps] }, [index]);
      }
    }
    chart.div.dataset.points = chart.ids.map((id, i) => (chart.div.data[i] ? chart.div.data[i].x.length : 0)).join(",");
  }
};
