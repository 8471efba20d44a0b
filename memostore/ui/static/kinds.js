// The evaluation page's views of what SummaryWriter logged beyond scalars: images and
// videos, audio, text, histograms and PR curves as the runs page's tabs draw them (a step
// slider each), embeddings as a 2-D projection; other kinds by their recorded fields.
"use strict";

ms.kinds = {};

ms.kinds.view = async function (id, tag) {
  const data = await ms.get(`/api/events?id=${id}&tag=${encodeURIComponent(tag)}`);
  const box = ms.el("div", { class: "tag-view", "data-kind": data.kind, "data-tag": tag },
    ms.el("h2", {}, `${tag} (${data.kind}, ${ms.plural(data.count, "point")})`));
  const tab = ms.kinds.ACROSS[data.kind];
  // Drawn as the runs page draws the runs side by side, for this run alone (not awaited:
  // a chart is sized once the box is on the page).
  if (tab) ms.across.draw[tab](box, tag, [{ id, count: data.count, events: data.events }]);
  else await (ms.kinds.draw[data.kind] || ms.kinds.draw.fields)(box, data, { id, tag });
  return box;
};

// The kinds the runs page's tabs draw: the tab that draws each.
ms.kinds.ACROSS = { image: "images", video: "images", audio: "audio", text: "text", histogram: "histograms", pr_curve: "pr" };

// A plotly chart in *box*, drawn once the box is on the page, so that plotly sizes it.
ms.kinds.plot = function (box, traces, layout, cls) {
  const div = ms.el("div", { class: cls || "chart" });
  box.append(div);
  setTimeout(() => ms.plotly().then(() => ms.react(div, traces,
    { margin: { l: 50, r: 10, t: 30, b: 40 }, showlegend: false, ...layout },
    { responsive: true, displaylogo: false }).then(() => { div.dataset.drawn = String(traces.length); })), 0);
  return div;
};

ms.kinds.draw = {};

ms.kinds.draw.graph = async function (box, data, where) {
  box.append(ms.graph.tree(await ms.get(`/api/graph?id=${where.id}&tag=${encodeURIComponent(where.tag)}`)));
};

// An embedding as a 2-D scatter: the server projects the stored matrix on its first two
// principal components; points are coloured by their first metadata column.
ms.kinds.draw.embedding = async function (box, data, where) {
  const last = [...data.events].reverse().find((e) => e.media !== undefined);
  if (!last) return ms.kinds.draw.fields(box, data);
  const p = await ms.get(`/api/projection?id=${where.id}&tag=${encodeURIComponent(where.tag)}&i=${last.media}`);
  const groups = new Map();
  p.x.forEach((x, i) => {
    const name = p.labels ? p.labels[i] : "";
    if (!groups.has(name)) groups.set(name, { x: [], y: [], text: [] });
    const g = groups.get(name);
    g.x.push(x); g.y.push(p.y[i]); g.text.push(ms.plotText(`row ${p.index[i]}${name ? " · " + name : ""}`));
  });
  const traces = [...groups.entries()].map(([name, g], i) => ({
    type: "scatter", mode: "markers", x: g.x, y: g.y, text: g.text, name: ms.plotText(name || "points"),
    marker: { size: 6, color: ms.palette[i % ms.palette.length] }, hovertemplate: "%{text}<extra></extra>",
  }));
  const share = (v) => `${(100 * v).toFixed(1)} %`;
  box.append(ms.el("p", {}, `step ${p.step}: ${ms.plural(p.shape[0], "point")} of ${p.shape[1]} dimensions` +
    (p.x.length < p.shape[0] ? `, ${p.x.length} drawn` : "") + "; principal components of the stored matrix"));
  const div = ms.kinds.plot(box, traces, {
    title: { text: ms.plotText(`${where.tag}: PCA`), font: { size: 13 } }, showlegend: groups.size > 1 && groups.size <= 30,
    xaxis: { title: { text: `PC 1 (${share(p.explained[0])})` } }, yaxis: { title: { text: `PC 2 (${share(p.explained[1])})` } },
  }, "chart embedding");
  div.dataset.points = String(p.x.length);
};

// A custom scalars layout is drawn where the runs' scalars are: the runs page's tab.
ms.kinds.draw.custom_scalars = function (box, data, where) {
  const charts = ms.custom.charts([data]);
  box.append(ms.el("p", {}, ms.el("a", { href: `#/runs/custom?runs=${where.id}`, class: "custom-link" }, "draw this layout"),
    ` (${ms.plural(charts.length, "chart")}: ${charts.map((c) => `${c.category} / ${c.title}`).join(", ")})`));
};

ms.kinds.draw.fields = function (box, data) {
  box.append(ms.json(data.events.slice(-5)));
};
