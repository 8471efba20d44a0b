// The HParams tab: every run the table's filters let through, as parallel coordinates (its
// hyper-parameters, then its metrics; drag along an axis to keep a range) and as one scatter
// of a metric against each hyper-parameter. A run's hyper-parameters are its scalar arguments
// and what add_hparams recorded; its metrics are the last value of each scalar tag.
"use strict";

ms.hparams = { metric: null, max: 1000, batch: 150 };

// What add_hparams recorded, for *ids*, asked in batches (a URL holds about 150 ids).
ms.hparams.logged = async function (ids) {
  const out = {};
  for (let i = 0; i < ids.length; i += ms.hparams.batch) {
    const part = ids.slice(i, i + ms.hparams.batch);
    Object.assign(out, (await ms.get(`/api/hparams?ids=${part.join(",")}`)).runs);
  }
  return out;
};

// Runs as {id, hparams: {name: value}, metrics: {tag: number}}, and the columns to draw.
ms.hparams.collect = function (rows, logged) {
  const runs = [];
  const declared = new Set();
  for (const row of rows) {
    const hp = {};
    for (const [name, value] of Object.entries(row.args || {})) {
      if (typeof value === "number" || typeof value === "boolean" || (typeof value === "string" && value.length <= 80)) hp[name] = value;
    }
    const extra = logged[row.id];
    if (extra) {
      Object.assign(hp, extra.hparams);
      for (const tag of extra.metrics || []) declared.add(tag);
    }
    const metrics = {};
    for (const [tag, s] of Object.entries(row.metrics || {})) if (s.kind === "scalar" && typeof s.last === "number") metrics[tag] = s.last;
    if (Object.keys(metrics).length) runs.push({ id: row.id, hparams: hp, metrics });
  }
  const names = [...new Set(runs.flatMap((r) => Object.keys(r.hparams)))].sort();
  const varying = names.filter((n) => new Set(runs.map((r) => JSON.stringify(r.hparams[n]))).size > 1);
  const hparams = (varying.length ? varying : names).slice(0, 12);
  // add_hparams' metrics when runs declared some, else every scalar tag.
  const tags = [...new Set(runs.flatMap((r) => Object.keys(r.metrics)))].sort();
  const metrics = tags.filter((t) => !declared.size || declared.has(t));
  return { runs, hparams, metrics: metrics.length ? metrics : tags, tags };
};

// One axis of values: numbers as they are, anything else (or a missing value) as categories.
ms.hparams.axis = function (label, values) {
  const numeric = values.every((v) => typeof v === "number" && Number.isFinite(v));
  if (numeric) {
    const lo = Math.min(...values), hi = Math.max(...values);
    return { label: ms.plotText(label), values, range: lo === hi ? [lo - 1, hi + 1] : [lo, hi] };
  }
  const text = values.map((v) => (v === undefined || v === null ? "(none)" : typeof v === "number" ? ms.num(v) : String(v)));
  const categories = [...new Set(text)].sort();
  return { label: ms.plotText(label), values: text.map((t) => categories.indexOf(t)), tickvals: categories.map((_, i) => i),
    ticktext: categories.map(ms.plotText), range: [-0.25, Math.max(0.25, categories.length - 0.75)] };
};

ms.hparams.render = async function (container, rows) {
  const shown = rows.slice(0, ms.hparams.max);
  const logged = await ms.hparams.logged(shown.map((r) => r.id));
  const { runs, hparams, metrics, tags } = ms.hparams.collect(shown, logged);
  if (!runs.length || !hparams.length) {
    container.replaceChildren(ms.el("p", { class: "same" }, "no run among those the table shows has both hyper-parameters (scalar arguments or add_hparams) and scalar metrics"));
    container.dataset.ready = "hparams";
    return;
  }
  if (!tags.includes(ms.hparams.metric)) ms.hparams.metric = metrics[0];
  const metric = ms.hparams.metric;
  // The metrics add_hparams declared first (the parallel coordinates' axes), then any scalar.
  const choices = [...metrics, ...tags.filter((t) => !metrics.includes(t))];
  const pick = ms.el("select", { id: "hparams-metric", onchange: (e) => { ms.hparams.metric = e.target.value; ms.hparams.render(container, rows); } },
    choices.map((t) => ms.el("option", { value: t }, t)));
  pick.value = metric;
  const kept = runs.filter((r) => typeof r.metrics[metric] === "number");
  ms.assignColors(kept.map((r) => r.id));
  // Metric axes every kept run has a value on; the chosen one last, nearest the colour bar.
  const axes = metrics.filter((t) => t !== metric && kept.every((r) => typeof r.metrics[t] === "number")).slice(0, 5).concat([metric]);
  const dimensions = [
    ...hparams.map((name) => ms.hparams.axis(name, kept.map((r) => r.hparams[name]))),
    ...axes.map((tag) => ms.hparams.axis(tag, kept.map((r) => r.metrics[tag]))),
  ];
  const colors = kept.map((r) => r.metrics[metric]);
  const parallel = ms.el("div", { class: "chart parcoords", id: "parcoords" });
  const scatters = ms.el("div", { class: "cards scatter-cards", id: "scatters" });
  const note = rows.length > shown.length ? `, the first ${shown.length} of the ${rows.length} the table shows` : "";
  container.replaceChildren(
    ms.el("div", { class: "controls" }, ms.el("label", {}, "metric ", pick),
      ms.el("span", { class: "same" }, `${ms.plural(kept.length, "run")}${note}; drag along an axis to keep a range`)),
    ms.el("div", { class: "card wide" }, parallel), ms.el("h3", {}, `${metric} against each hyper-parameter`), scatters);
  await ms.plotly();
  const plots = [ms.react(parallel, [{
    type: "parcoords", dimensions,
    line: { color: colors, colorscale: "Viridis", showscale: true, colorbar: { title: { text: ms.plotText(metric), side: "right" }, thickness: 12 } },
    labelfont: { size: 11 }, tickfont: { size: 10 }, rangefont: { size: 9 },
  }], { margin: { l: 60, r: 90, t: 48, b: 24 }, font: { size: 11 } }, { responsive: true, displaylogo: false })];
  for (const name of hparams) {
    const div = ms.el("div", { class: "chart scatter", "data-hparam": name });
    scatters.append(ms.el("div", { class: "card" }, ms.el("div", { class: "card-head" }, ms.el("span", { class: "card-title" }, name)), div));
    const values = kept.map((r) => r.hparams[name]);
    const numeric = values.every((v) => typeof v === "number");
    plots.push(ms.react(div, [{
      type: "scatter", mode: "markers", x: values.map((v) => (numeric ? v : v === undefined ? "(none)" : ms.plotText(String(v)))),
      y: kept.map((r) => r.metrics[metric]), text: kept.map((r) => ms.plotText(ms.nameOf(r.id))),
      marker: { size: 9, color: kept.map((r) => ms.colorOf(r.id)), line: { color: "#fff", width: 1 } },
      hovertemplate: "%{text}<br>%{x}: %{y:.4g}<extra></extra>",
    }], { margin: { l: 52, r: 10, t: 6, b: 40 }, showlegend: false, font: { size: 10 }, hovermode: "closest",
      xaxis: { title: { text: ms.plotText(name) }, type: numeric ? "linear" : "category", zeroline: false },
      yaxis: { title: { text: ms.plotText(metric) }, zeroline: false } },
    { responsive: true, displaylogo: false }));
  }
  await Promise.all(plots);
  parallel.dataset.runs = String(kept.length);
  container.dataset.ready = "hparams";
};
