// TensorBoard's custom scalars: the layouts add_custom_scalars logged, drawn over the selected
// runs. A multiline chart draws every scalar tag its regular expressions match, each run in
// its colour and each tag in its dash; a margin chart draws its value tag as a line over the
// band between its lower and upper tags. The runs' layouts are merged (a category and title
// shown once), as TensorBoard merges them.
"use strict";

ms.custom = { TAG: "custom_scalars__config__", DASHES: ["solid", "dash", "dot", "dashdot", "longdash"] };

// The selected runs that logged a layout.
ms.custom.runsWithLayout = function (ids) {
  return ids.filter((id) => { const row = ms.table.byId.get(id); return Boolean(row && row.metrics && row.metrics[ms.custom.TAG]); });
};

// The charts of the layouts of *runs* (from /api/tag): [{category, title, type, tags}].
ms.custom.charts = function (runs) {
  const charts = new Map();
  for (const run of runs) {
    for (const e of run.events) {
      for (const [category, entries] of e.layout || []) {
        for (const [title, type, tags] of entries) charts.set(`${category}\n${title}`, { category, title, type, tags });
      }
    }
  }
  return [...charts.values()];
};

// The scalar tags of *ids* a multiline chart's expressions match (searched, as TensorBoard).
ms.custom.matching = function (patterns, ids) {
  const res = patterns.map((p) => ms.regex(p)).filter((re) => !(re instanceof Error));
  return ms.charts.tagsOf(ids).filter((tag) => res.some((re) => re.test(tag)));
};

ms.custom.render = async function (container, ids) {
  const withLayout = ms.custom.runsWithLayout(ids);
  if (!withLayout.length) {
    container.replaceChildren(ms.el("p", { class: "same" }, "the selected runs logged no custom scalars layout (add_custom_scalars)"));
    container.dataset.ready = "custom";
    return;
  }
  const data = await ms.get(`/api/tag?ids=${withLayout.join(",")}&tag=${encodeURIComponent(ms.custom.TAG)}`);
  const charts = ms.custom.charts(data.runs);
  const parts = [];
  const draws = [];
  for (const category of [...new Set(charts.map((c) => c.category))]) {
    const grid = ms.el("div", { class: "charts" });
    for (const chart of charts.filter((c) => c.category === category)) {
      const div = ms.el("div", { class: "chart", "data-title": chart.title, "data-type": chart.type });
      grid.append(ms.el("div", { class: "card" }, ms.el("div", { class: "card-head" }, ms.el("span", { class: "card-title" }, chart.title)), div));
      draws.push(() => ms.custom.draw(div, chart, ids));
    }
    parts.push(ms.el("section", { class: "group", "data-group": category }, ms.el("div", { class: "group-title" }, category), grid));
  }
  container.replaceChildren(...parts);
  await Promise.all(draws.map((draw) => draw()));
  container.dataset.ready = "custom";
};

// One chart's lines: its tags' series of the runs *ids* (smoothed as the scalars tab is).
ms.custom.draw = async function (div, chart, ids) {
  const tags = chart.type === "Margin" ? chart.tags : ms.custom.matching(chart.tags, ids);
  const width = div.clientWidth || 600;
  const fetched = await Promise.all(tags.map((tag) => ms.get(ms.charts.query(tag, ids, null, width))));
  const byTag = new Map(tags.map((tag, i) => [tag, fetched[i].series.map(ms.charts.numbers)]));
  const traces = [];
  const drawn = [];
  if (chart.type === "Margin") {
    const [value, lower, upper] = tags.map((tag) => byTag.get(tag));
    value.forEach((series, i) => {
      const color = ms.colorOf(series.id);
      const x = ms.charts.toAxis(series.x);
      if (lower[i] && upper[i] && lower[i].x.length && upper[i].x.length) {
        traces.push({ type: "scatter", mode: "lines", x: ms.charts.toAxis(lower[i].x), y: lower[i].y, line: { width: 0, color }, hoverinfo: "skip" });
        traces.push({ type: "scatter", mode: "lines", x: ms.charts.toAxis(upper[i].x), y: upper[i].y, line: { width: 0, color },
          fill: "tonexty", fillcolor: ms.across.rgba(color, 0.2), hoverinfo: "skip" });
      }
      traces.push({ type: "scatter", mode: "lines", x, y: series.y, line: { color, width: 1.7 }, name: ms.plotText(ms.nameOf(series.id)),
        hovertemplate: `${ms.plotText(ms.nameOf(series.id))}: %{y:.4g} at %{x}<extra></extra>` });
      drawn.push(series, lower[i], upper[i]);
    });
  } else {
    tags.forEach((tag, k) => {
      for (const series of byTag.get(tag)) {
        if (!series.x.length) continue;
        const name = ms.plotText(`${ms.nameOf(series.id)} · ${tag}`);
        traces.push({ type: "scatter", mode: series.x.length < 30 ? "lines+markers" : "lines", x: ms.charts.toAxis(series.x), y: series.y, name,
          line: { color: ms.colorOf(series.id), width: 1.7, dash: ms.custom.DASHES[k % ms.custom.DASHES.length] }, hovertemplate: `${name}: %{y:.4g} at %{x}<extra></extra>` });
        drawn.push(series);
      }
    });
  }
  const range = ms.charts.yRange({ series: drawn.filter(Boolean) });
  await ms.plotly();
  await ms.react(div, traces, {
    margin: { l: 52, r: 12, t: 8, b: 38 }, showlegend: chart.type !== "Margin", legend: { orientation: "h", y: -0.2, font: { size: 10 } },
    font: { size: 11 }, hovermode: "closest", xaxis: { zeroline: false, type: ms.charts.settings.x === "wall" ? "date" : "linear" },
    yaxis: { zeroline: false, ...(range ? { range, autorange: false } : {}) },
  }, { responsive: true, displaylogo: false });
  div.dataset.tags = tags.join("\n");
  div.dataset.lines = String(traces.filter((t) => !t.fill && t.line.width).length);
};
