// The evaluation page's views of what SummaryWriter logged beyond scalars: images and
// videos, audio players, text, histograms as an offset (ridge) view, PR curves with a
// step slider, embeddings as a 2-D projection; other kinds by their recorded fields.
"use strict";

ms.kinds = {};

ms.kinds.view = async function (id, tag) {
  const data = await ms.get(`/api/events?id=${id}&tag=${encodeURIComponent(tag)}`);
  const box = ms.el("div", { class: "tag-view", "data-kind": data.kind, "data-tag": tag },
    ms.el("h2", {}, `${tag} (${data.kind}, ${ms.plural(data.count, "point")})`));
  const draw = ms.kinds.draw[data.kind] || ms.kinds.draw.fields;
  await draw(box, data, { id, tag });
  return box;
};

ms.kinds.mediaUrl = function (where, e) {
  return `/api/media?id=${where.id}&tag=${encodeURIComponent(where.tag)}&i=${e.media}`;
};

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

ms.kinds.draw.image = function (box, data, where) {
  box.append(ms.el("div", { class: "media" }, data.events.slice(-24).map((e) => {
    const img = ms.el("img", { src: ms.kinds.mediaUrl(where, e), alt: `${where.tag} step ${e.step}` });
    img.style.width = ms.across.imageWidth(e.width) + "px";
    if ((e.width || 0) < 160) img.classList.add("pixelated");
    img.addEventListener("click", () => ms.across.lightbox(img.src, `${where.tag} · step ${e.step}`));
    return ms.el("figure", { style: "display:inline-block;margin:4px" }, img, ms.el("figcaption", {}, `step ${e.step}`));
  })));
};
ms.kinds.draw.video = ms.kinds.draw.image;  // GIFs play in an img

ms.kinds.draw.graph = async function (box, data, where) {
  box.append(ms.graph.tree(await ms.get(`/api/graph?id=${where.id}&tag=${encodeURIComponent(where.tag)}`)));
};

ms.kinds.draw.audio = function (box, data, where) {
  box.append(ms.el("div", {}, data.events.slice(-10).map((e) => ms.el("p", {},
    `step ${e.step} (${e.sample_rate} Hz, ${(e.frames / e.sample_rate).toFixed(2)} s) `,
    ms.el("audio", { controls: "", preload: "metadata", src: ms.kinds.mediaUrl(where, e) })))));
};

ms.kinds.draw.text = function (box, data) {
  box.append(ms.el("div", {}, data.events.slice(-20).map((e) => [ms.el("b", {}, `step ${e.step}`), ms.el("div", { class: "logged-text" }, ms.markdown.render(e.text))])));
};

// Histograms over steps as an offset view: one filled outline per step, the newest in
// front at the bottom, each scaled to its own peak (as TensorBoard's offset mode), drawn
// as the runs page draws them.
ms.kinds.draw.histogram = function (box, data, where) {
  const shown = data.events.slice(-30);
  const div = ms.kinds.plot(box, ms.across.histogramTraces(shown, ms.colorOf(where.id), "offset"), {
    ...ms.across.histogramLayout(shown, "offset"),
    title: { text: ms.plotText(`${where.tag}: offset view of the last ${shown.length} steps`), font: { size: 13 } },
    margin: { l: 50, r: 10, t: 30, b: 40 },
  }, "chart ridge");
  div.dataset.steps = String(shown.length);
};

// Precision against recall of one step; a slider picks the step (the last at first).
ms.kinds.draw.pr_curve = function (box, data, where) {
  const points = data.events;
  if (!points.length) return;
  const label = ms.el("span", { class: "step" });
  const slider = ms.el("input", { type: "range", min: "0", max: String(points.length - 1), value: String(points.length - 1), class: "pr-step" });
  const trace = (p) => ({ type: "scatter", mode: "lines+markers", x: p.recall, y: p.precision, marker: { size: 3 },
    line: { color: "#1f77b4" }, hovertemplate: "recall %{x:.3f}, precision %{y:.3f}<extra></extra>" });
  const layout = (p) => ({
    title: { text: ms.plotText(`${where.tag} at step ${p.step}`), font: { size: 13 } },
    xaxis: { title: { text: "recall" }, range: [0, 1.02] }, yaxis: { title: { text: "precision" }, range: [0, 1.02] },
  });
  const last = points[points.length - 1];
  label.textContent = `step ${last.step}`;
  const controls = ms.el("div", { class: "controls" }, ms.el("label", {}, "step ", slider), label);
  box.append(controls);
  const div = ms.kinds.plot(box, [trace(last)], layout(last), "chart pr");
  div.dataset.step = String(last.step);
  slider.addEventListener("input", () => {
    const p = points[Number(slider.value)];
    label.textContent = `step ${p.step}`;
    div.dataset.step = String(p.step);
    ms.plotly().then(() => ms.react(div, [trace(p)], { margin: { l: 50, r: 10, t: 30, b: 40 }, showlegend: false, ...layout(p) }));
  });
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
