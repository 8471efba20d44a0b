// The runs page's views of what the selected runs logged beyond scalars, run beside run:
// images (a step slider per tag, a click for full size), histograms (offset, overlay, or
// distribution bands as TensorBoard's distributions), text and PR curves with a step slider.
"use strict";

ms.across = {
  histMode: "offset",
  steps: new Map(),  // tag -> the step the reader picked (absent: the last)
  tabs: {
    images: { kinds: ["image", "video"], title: "images" },
    audio: { kinds: ["audio"], title: "audio" },
    histograms: { kinds: ["histogram"], title: "histograms" },
    text: { kinds: ["text"], title: "text" },
    pr: { kinds: ["pr_curve"], title: "PR curves" },
  },
};

// The tags of *kinds* the runs *ids* logged, matching the tag filter, sorted.
ms.across.tagsOf = function (ids, kinds) {
  const re = ms.regex(ms.charts.filter);
  const tags = new Set();
  for (const id of ids) {
    const row = ms.table.byId.get(id);
    for (const [tag, stats] of Object.entries((row && row.metrics) || {})) {
      if (kinds.includes(stats.kind) && (re instanceof Error || re.test(tag))) tags.add(tag);
    }
  }
  return [...tags].sort();
};

ms.across.count = function (ids, tab) {
  const kinds = tab === "graph" ? ["graph"] : ms.across.tabs[tab].kinds;
  return ms.across.tagsOf(ids, kinds).length;
};

// What the open tab shows, per tag: {section, ids, runs, counts, update}, so that a live
// refresh updates the cards in place (ms.across.tick).
ms.across.shown = new Map();
ms.across.tags = [];

ms.across.render = async function (container, tab, ids) {
  const tags = ms.across.tagsOf(ids, ms.across.tabs[tab].kinds);
  const shown = ms.across.shown = new Map();
  ms.across.tags = tags;
  const parts = [];
  if (tab === "histograms") {
    const mode = ms.el("select", { id: "hist-mode", onchange: (e) => { ms.across.histMode = e.target.value; ms.across.render(container, tab, ids); } },
      [["offset", "offset (one outline per step)"], ["overlay", "overlay (steps on one axis)"], ["distribution", "distribution (percentile bands over steps)"]]
        .map(([value, label]) => ms.el("option", { value }, label)));
    mode.value = ms.across.histMode;
    parts.push(ms.el("div", { class: "controls" }, ms.el("label", {}, "view ", mode)));
  }
  if (!tags.length) parts.push(ms.el("p", { class: "same" }, ids.length ? `the selected runs logged no ${ms.across.tabs[tab].title}` + (ms.charts.filter ? ` matching /${ms.charts.filter}/` : "") : "select runs in the table"));
  container.replaceChildren(...parts);
  const draws = tags.map(async (tag) => {
    const section = ms.el("section", { class: "kind-tag", "data-tag": tag, "data-tab": tab }, ms.el("h3", {}, tag));
    container.append(section);
    const data = await ms.get(`/api/tag?ids=${ids.join(",")}&tag=${encodeURIComponent(tag)}`);
    const runs = data.runs.filter((r) => r.events.length);
    const counts = new Map(data.runs.map((r) => [r.id, r.count]));
    const update = await ms.across.draw[tab](section, tag, runs);
    shown.set(tag, { section, ids, runs, counts, update });
  });
  await Promise.all(draws);
  container.dataset.ready = tab;
};

// How many points of *tag* the table's row of *id* counts (a running run's grows).
ms.across.countOf = function (id, tag) {
  const row = ms.table.byId.get(id);
  const stats = row && row.metrics && row.metrics[tag];
  return (stats && stats.count) || 0;
};

// Bring the open tab up to date with the running runs *liveIds* (their rows just refreshed):
// a tag is asked for again only for the running runs whose count of its points grew, and
// their cards are updated in place (the new image, text, histogram or curve, the slider's
// new steps), nothing else drawn again. A slider left at the last step follows new steps.
ms.across.tick = async function (liveIds) {
  for (const [tag, shown] of ms.across.shown) {
    if (!shown.section.isConnected) continue;
    const grown = shown.ids.filter((id) => liveIds.has(id) && ms.across.countOf(id, tag) !== (shown.counts.get(id) || 0));
    if (!grown.length) continue;
    const data = await ms.get(`/api/tag?ids=${grown.join(",")}&tag=${encodeURIComponent(tag)}`);
    for (const id of grown) shown.counts.set(id, ms.across.countOf(id, tag));
    const fresh = new Map(data.runs.filter((r) => r.events.length).map((r) => [r.id, r]));
    if (!fresh.size) continue;
    for (const run of fresh.values()) shown.counts.set(run.id, run.count);
    const held = new Map(shown.runs.map((r) => [r.id, r]));
    shown.runs = shown.ids.filter((id) => fresh.has(id) || held.has(id)).map((id) => fresh.get(id) || held.get(id));
    await shown.update(shown.runs, new Set(fresh.keys()));
  }
};

// The event of *events* at *step*: the last one logged at or before it, else the first.
ms.across.at = function (events, step) {
  let found = events[0];
  for (const e of events) if (e.step <= step && (found.step > step || e.step >= found.step)) found = e;
  return found;
};

// A slider over every step any run logged the tag at; *onStep(step)* draws that step.
// setRuns(runs) takes the steps of runs that logged more: a slider at the last step moves
// to the new last one, one the reader moved stays at its step.
ms.across.slider = function (tag, runs, onStep) {
  let steps = [];
  const label = ms.el("span", { class: "step-label" });
  const input = ms.el("input", { type: "range", class: "step-slider", min: "0" });
  const setRuns = (fresh) => {
    steps = [...new Set(fresh.flatMap((r) => r.events.map((e) => e.step)))].sort((a, b) => a - b);
    const picked = ms.across.steps.get(tag);
    const at = picked !== undefined && steps.includes(picked) ? steps.indexOf(picked) : steps.length - 1;
    input.max = String(Math.max(0, steps.length - 1));
    input.value = String(Math.max(0, at));
    input.disabled = steps.length < 2;
  };
  const show = () => {
    const step = steps[Number(input.value)];
    label.textContent = `step ${step}` + (steps.length > 1 ? ` (${Number(input.value) + 1} of ${steps.length})` : "");
    onStep(step);
  };
  input.addEventListener("input", () => {
    const step = steps[Number(input.value)];
    if (Number(input.value) === steps.length - 1) ms.across.steps.delete(tag); else ms.across.steps.set(tag, step);
    show();
  });
  setRuns(runs);
  const box = ms.el("div", { class: "controls step-controls" }, ms.el("label", {}, "step ", input), label);
  return { box, show, setRuns };
};

ms.across.head = function (id, detail) {
  return ms.el("div", { class: "card-head" }, ms.runLabel(id), detail || null);
};

ms.across.mediaUrl = function (id, tag, e) {
  return `/api/media?id=${id}&tag=${encodeURIComponent(tag)}&i=${e.media}`;
};

// An image at a readable size: small ones scaled up by a whole factor (pixels stay sharp),
// big ones down to the card's width.
ms.across.imageWidth = function (width) {
  if (!width) return 240;
  if (width < 160) return width * Math.max(1, Math.floor(240 / width));
  return Math.min(width, 420);
};

ms.across.draw = {};

// Each draw function shows one tag of *runs* in *section* and returns update(runs, changed):
// the same tag again with the runs' latest points, *changed* the ids whose points grew.
ms.across.draw.images = function (section, tag, runs) {
  return ms.across.cards(section, tag, runs, "media-cards", (run, caption) => {
    const img = ms.el("img", { alt: `${tag} of ${ms.nameOf(run.id)}`, loading: "lazy" });
    img.addEventListener("click", () => ms.across.lightbox(img.src, `${ms.nameOf(run.id)} · ${tag} · ${caption.textContent}`));
    return img;
  }, (img, e) => {
    if (e.media === undefined) return null;
    const src = ms.across.mediaUrl(e.id, tag, e);
    if (img.getAttribute("src") !== src) img.src = src;
    img.style.width = ms.across.imageWidth(e.width) + "px";
    img.classList.toggle("pixelated", (e.width || 0) < 160);
    return e.width ? ` · ${e.width}×${e.height}` : "";
  });
};

// One card per run, showing its point at the slider's step: *make(run, caption)* gives the
// card's body, *show(body, point)* shows a point there and returns what the caption adds to
// its step (null: nothing to show). Returns the update of ms.across.follow.
ms.across.cards = function (section, tag, runs, kind, make, show) {
  const grid = ms.el("div", { class: `cards ${kind}` });
  const cards = new Map();
  const add = (run) => {
    const caption = ms.el("span", { class: "step-of" });
    const body = make(run, caption);
    const card = ms.el("div", { class: `card${kind === "media-cards" ? " media-card" : ""}`, "data-id": run.id }, ms.across.head(run.id, caption), body);
    grid.append(card);
    cards.set(run.id, { run, body, caption, card });
  };
  const slider = ms.across.slider(tag, runs, (step) => {
    for (const c of cards.values()) {
      const e = ms.across.at(c.run.events, step);
      const more = show(c.body, { ...e, id: c.run.id });
      if (more === null) continue;
      c.caption.textContent = `step ${e.step}${more}`;
      c.card.dataset.step = String(e.step);
      c.body.dataset.step = String(e.step);
    }
  });
  section.append(slider.box, grid);
  return ms.across.follow(cards, add, slider, runs);
};

// Audio as TensorBoard's Audio dashboard: per tag, a player per run at the slider's step.
ms.across.draw.audio = function (section, tag, runs) {
  return ms.across.cards(section, tag, runs, "media-cards", () => ms.el("audio", { controls: "", preload: "metadata" }), (player, e) => {
    if (e.media === undefined) return null;
    const src = ms.across.mediaUrl(e.id, tag, e);
    if (player.getAttribute("src") !== src) player.src = src;
    return e.sample_rate ? ` · ${(e.frames / e.sample_rate).toFixed(2)} s, ${e.sample_rate} Hz` : "";
  });
};

// Full size, over the page: small images at the largest whole factor that fits the window.
ms.across.lightbox = function (src, caption) {
  const img = ms.el("img", { src, alt: caption });
  const box = ms.el("div", { class: "lightbox", id: "lightbox", title: "click or press Escape to close" },
    ms.el("figure", {}, img, ms.el("figcaption", {}, caption)));
  const close = () => { box.remove(); document.removeEventListener("keydown", onKey); };
  const onKey = (e) => { if (e.key === "Escape") close(); };
  box.addEventListener("click", close);
  document.addEventListener("keydown", onKey);
  img.addEventListener("load", () => {
    const fit = Math.min((window.innerWidth * 0.92) / img.naturalWidth, (window.innerHeight * 0.82) / img.naturalHeight);
    const scale = fit >= 1 ? Math.max(1, Math.floor(fit)) : fit;
    img.style.width = Math.round(img.naturalWidth * scale) + "px";
    img.classList.toggle("pixelated", scale > 1);
    box.dataset.scale = String(scale);
  });
  document.body.append(box);
};

ms.across.rgba = function (hex, alpha) {
  const n = parseInt(hex.slice(1), 16);
  return `rgba(${(n >> 16) & 255}, ${(n >> 8) & 255}, ${n & 255}, ${alpha})`;
};

// A histogram point's buckets as (left, right, count), edges clamped to its min and max
// (TensorBoard's outer edges reach +-1e308).
ms.across.buckets = function (e) {
  const clamp = (x) => Math.min(Math.max(x, e.min), e.max);
  return e.counts.map((count, i) => [clamp(i === 0 ? e.min : e.limits[i - 1]), clamp(e.limits[i]), count]);
};

// A histogram point on *n* equal buckets from its min to its max, each bucket's count
// spread over the new ones it overlaps (TensorBoard's edges grow away from zero, so raw
// counts would show the bucket widths, not the distribution).
ms.across.rebin = function (e, n) {
  const buckets = ms.across.buckets(e);
  const total = buckets.reduce((sum, b) => sum + b[2], 0);
  if (!(e.max > e.min)) return [[e.min - 0.5, e.max + 0.5, total]];
  const width = (e.max - e.min) / n;
  const out = Array.from({ length: n }, (_, i) => [e.min + i * width, e.min + (i + 1) * width, 0]);
  const index = (x) => Math.min(n - 1, Math.max(0, Math.floor((x - e.min) / width)));
  for (const [left, right, count] of buckets) {
    if (!count) continue;
    if (!(right > left)) { out[index(left)][2] += count; continue; }
    for (let i = index(left); i <= index(right); i++) {
      const overlap = Math.min(right, out[i][1]) - Math.max(left, out[i][0]);
      if (overlap > 0) out[i][2] += (count * overlap) / (right - left);
    }
  }
  return out;
};

// The values below which the fractions *ps* of a histogram's counts lie (linear in a bucket).
ms.across.percentiles = function (e, ps) {
  const buckets = ms.across.buckets(e);
  const total = buckets.reduce((sum, b) => sum + b[2], 0);
  if (!total) return ps.map(() => null);
  return ps.map((p) => {
    const target = p * total;
    let seen = 0;
    for (const [left, right, count] of buckets) {
      if (count > 0 && seen + count >= target) return left + ((target - seen) / count) * (right - left);
      seen += count;
    }
    return e.max;
  });
};

// TensorBoard's distribution basis points: min, 7, 16, 31, 50, 69, 84, 93 %, max.
ms.across.BASIS = [0, 0.0668, 0.1587, 0.3085, 0.5, 0.6915, 0.8413, 0.9332, 1];

ms.across.histogramTraces = function (events, color, mode) {
  if (mode === "distribution") {
    const steps = events.map((e) => e.step);
    const bands = events.map((e) => ms.across.percentiles(e, ms.across.BASIS));
    const at = (k) => bands.map((b) => b[k]);
    const traces = [];
    // From the outer band inwards, each filled down to its lower edge, darker inside.
    [[0, 8, 0.14], [1, 7, 0.22], [2, 6, 0.32], [3, 5, 0.45]].forEach(([lo, hi, alpha]) => {
      traces.push({ type: "scatter", mode: "lines", x: steps, y: at(lo), line: { width: 0, color }, hoverinfo: "skip" });
      traces.push({ type: "scatter", mode: "lines", x: steps, y: at(hi), fill: "tonexty", fillcolor: ms.across.rgba(color, alpha),
        line: { width: 0, color }, hoverinfo: "skip" });
    });
    traces.push({ type: "scatter", mode: "lines", x: steps, y: at(4), line: { color, width: 1.6 }, name: "median",
      hovertemplate: "step %{x}: median %{y:.4g}<extra></extra>" });
    return traces;
  }
  const shown = events.slice(-30);
  return shown.map((e, i) => {
    const buckets = ms.across.rebin(e, 40);
    const xs = [buckets[0][0], ...buckets.map((b) => b[1])];
    const ys = [0, ...buckets.map((b) => b[2])];
    const age = shown.length > 1 ? i / (shown.length - 1) : 1;  // 0 oldest, 1 newest
    if (mode === "overlay") {
      return { type: "scatter", mode: "lines", x: xs, y: ys, line: { color, width: age === 1 ? 2 : 1, shape: "vh" },
        opacity: 0.15 + 0.85 * age, name: `step ${e.step}`, hovertemplate: `step ${e.step}: %{y:.4g} up to %{x:.4g}<extra></extra>` };
    }
    // offset: one filled outline per step, older further up and back, each scaled to its peak.
    const peak = Math.max(...ys, 0) || 1;
    const base = shown.length - 1 - i;
    return { type: "scatter", mode: "lines", x: [xs[0], ...xs, xs[xs.length - 1]], y: [base, base, ...ys.slice(1).map((c) => base + 2.5 * c / peak), base],
      fill: "toself", fillcolor: ms.across.rgba(color, 0.25 + 0.6 * age), line: { color: ms.theme().paper, width: 0.8, shape: "vh" },
      name: `step ${e.step}`, hovertemplate: `step ${e.step}<br>%{x:.4g}<extra></extra>` };
  });
};

// The scale the cards of one tag share, so that runs compare at a glance: the values' range
// over every run's steps shown, and (overlay) the highest count.
ms.across.histogramScale = function (runs, mode) {
  let lo = Infinity, hi = -Infinity, peak = 0;
  for (const run of runs) {
    const events = mode === "distribution" ? run.events : run.events.slice(-30);
    for (const e of events) {
      lo = Math.min(lo, e.min);
      hi = Math.max(hi, e.max);
      if (mode === "overlay") for (const b of ms.across.rebin(e, 40)) peak = Math.max(peak, b[2]);
    }
  }
  if (!(hi >= lo)) return null;
  const pad = hi > lo ? (hi - lo) * 0.03 : 0.5;
  return { values: [lo - pad, hi + pad], peak };
};

ms.across.histogramLayout = function (events, mode, scale) {
  const values = scale ? { range: scale.values } : {};
  const base = { margin: { l: 48, r: 10, t: 6, b: 34 }, showlegend: false, font: { size: 10 }, hovermode: "closest",
    xaxis: { zeroline: false, ...(mode === "distribution" ? {} : values) }, yaxis: { zeroline: false } };
  if (mode === "distribution") return { ...base, xaxis: { ...base.xaxis, title: { text: "step" } }, yaxis: { ...base.yaxis, ...values } };
  if (mode === "overlay") return { ...base, yaxis: { ...base.yaxis, title: { text: "count" }, ...(scale && scale.peak ? { range: [0, scale.peak * 1.05] } : {}) } };
  const shown = events.slice(-30);
  const every = Math.max(1, Math.ceil(shown.length / 8));
  const ticks = shown.map((e, i) => [shown.length - 1 - i, String(e.step)]).filter((_, i) => (shown.length - 1 - i) % every === 0);
  return { ...base, yaxis: { ...base.yaxis, tickvals: ticks.map((t) => t[0]), ticktext: ticks.map((t) => t[1]), title: { text: "step" } } };
};

ms.across.draw.histograms = function (section, tag, runs) {
  const mode = ms.across.histMode;
  const grid = ms.el("div", { class: "cards" });
  section.append(grid);
  const cards = new Map();
  let scale = null;
  const draw = (run) => {
    let c = cards.get(run.id);
    if (!c) {
      const div = ms.el("div", { class: "chart small", "data-mode": mode });
      const caption = ms.el("span", { class: "step-of" });
      grid.append(ms.el("div", { class: "card", "data-id": run.id }, ms.across.head(run.id, caption), div));
      c = { div, caption };
      cards.set(run.id, c);
    }
    c.caption.textContent = run.count <= 30 || mode === "distribution" ? ms.plural(run.count, "step") : `the last 30 of ${run.count} steps`;
    return ms.plotly().then(() => ms.react(c.div, ms.across.histogramTraces(run.events, ms.colorOf(run.id), mode),
      ms.across.histogramLayout(run.events, mode, scale), { responsive: true, displaylogo: false }))
      .then(() => { c.div.dataset.drawn = String(c.div.data.length); c.div.dataset.steps = String(run.count); });
  };
  const update = (fresh, changed) => {
    // The runs that logged more are drawn again; the others take a scale that grew.
    const before = JSON.stringify(scale);
    scale = ms.across.histogramScale(fresh, mode);
    const rescaled = JSON.stringify(scale) !== before;
    return Promise.all(fresh.map((run) => {
      if (!changed || changed.has(run.id)) return draw(run);
      const c = cards.get(run.id);
      if (!rescaled || !c || !c.div.data) return null;
      const layout = ms.across.histogramLayout(run.events, mode, scale);
      return Plotly.relayout(c.div, { "xaxis.range": layout.xaxis.range || null, "yaxis.range": layout.yaxis.range || null });
    }));
  };
  return update(runs).then(() => update);
};

// Text as TensorBoard shows it: Markdown (markdown.js), at the slider's step.
ms.across.draw.text = function (section, tag, runs) {
  return ms.across.cards(section, tag, runs, "text-cards", () => ms.el("div", { class: "logged-text" }), (text, e) => {
    if (text.shownText !== e.text) text.replaceChildren(ms.markdown.render(e.text));
    text.shownText = e.text;  // drawn again only when it changed
    return "";
  });
};

ms.across.draw.pr = function (section, tag, runs) {
  const div = ms.el("div", { class: "chart pr" });
  const card = ms.el("div", { class: "card wide" }, div);
  let shown = runs;
  let drawn = null;
  const slider = ms.across.slider(tag, runs, (step) => {
    const traces = shown.map((run) => {
      const p = ms.across.at(run.events, step);
      return { type: "scatter", mode: "lines+markers", x: p.recall, y: p.precision, marker: { size: 3 }, name: ms.plotText(ms.nameOf(run.id)),
        line: { color: ms.colorOf(run.id), width: 1.7 }, customdata: p.recall.map(() => p.step),
        hovertemplate: `${ms.plotText(ms.nameOf(run.id))}<br>step %{customdata}: recall %{x:.3f}, precision %{y:.3f}<extra></extra>` };
    });
    const layout = { margin: { l: 52, r: 12, t: 8, b: 40 }, showlegend: false, font: { size: 11 }, hovermode: "closest",
      xaxis: { title: { text: "recall" }, range: [0, 1.02] }, yaxis: { title: { text: "precision" }, range: [0, 1.02] } };
    drawn = (drawn || ms.plotly()).then(() => ms.react(div, traces, layout, { responsive: true, displaylogo: false }))
      .then(() => { div.dataset.step = String(step); div.dataset.drawn = String(traces.length); });
  });
  section.append(slider.box, card);
  const update = (fresh) => {
    shown = fresh;
    slider.setRuns(fresh);
    slider.show();
    return drawn;
  };
  // Drawn once the card is on the page, so that plotly sizes it.
  return new Promise((resolve) => setTimeout(() => { slider.show(); drawn.then(() => resolve(update)); }, 0));
};

// Draws *runs* and returns the update of a running run's cards: a run already shown
// gets its new points in its card, a new one gets a card; the slider takes every step.
ms.across.follow = function (cards, add, slider, runs) {
  const update = (fresh) => {
    for (const run of fresh) if (cards.has(run.id)) cards.get(run.id).run = run; else add(run);
    slider.setRuns(fresh);
    slider.show();
  };
  update(runs);
  return update;
};
