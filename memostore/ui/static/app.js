// The dashboard's router and the runs view (table, charts, live refresh).
"use strict";

ms.view = function () { return document.getElementById("view"); };

// The views below the table, as TensorBoard's dashboards: each shows the selected runs.
ms.tabs = [["scalars", "scalars"], ["images", "images"], ["audio", "audio"], ["histograms", "histograms"], ["text", "text"],
  ["pr", "PR curves"], ["custom", "custom scalars"], ["graph", "graph"], ["hparams", "hparams"]];
ms.tab = "scalars";
ms.follow = ms.saved("follow", true);

// How many things a tab would show for the runs *ids* (null: not counted).
ms.tabCount = function (tab, ids) {
  if (tab === "scalars") return ms.charts.tagsOf(ids).length;
  if (tab === "graph") return ids.filter((id) => ms.graph.tagOf(id)).length;
  if (tab === "hparams") return null;
  if (tab === "custom") return ms.custom.runsWithLayout(ids).length;
  return ms.across.count(ids, tab);
};

// A run that ended while selected: its recorded evaluation (same function, same start)
// takes its place in the selection, with its colour. The record may be listed a moment
// after the run stops being listed as running: until then (ten refreshes at most) the run
// is awaited, and the listing read again on each refresh.
ms.awaiting = new Map();  // run id -> [its last row, refreshes left]
ms.adoptEnded = function (before, selected) {
  const t = ms.table;
  for (const id of selected) {
    if (!t.byId.has(id) && before.has(id) && !ms.awaiting.has(id)) ms.awaiting.set(id, [before.get(id), 10]);
  }
  for (const [id, [old, left]] of ms.awaiting) {
    const record = t.rows.find((r) => r.function === old.function && r.status !== "running" &&
      typeof r.started === "number" && Math.abs(r.started - old.started) < 0.5);
    if (record) {
      t.selected.add(record.id);
      if (ms.colors.has(id)) ms.colors.set(record.id, ms.colors.get(id));
      ms.awaiting.delete(id);
    } else if (left <= 1) ms.awaiting.delete(id);
    else ms.awaiting.set(id, [old, left - 1]);
  }
};

// Runs listed now that were not before (of the function filtered on, if any): selected, so
// they are charted without a click, as TensorBoard charts a new run.
ms.followNew = function (before) {
  const t = ms.table;
  const functions = t.filter.fn ? new Set([t.filter.fn]) : null;
  // The record of a run listed before as running is that run, not a new one: it is
  // selected only if the run was (adoptEnded).
  const ran = [...before.values()].filter((r) => r.status === "running");
  const wasRunning = (row) => ran.some((r) => r.function === row.function && Math.abs(r.started - row.started) < 0.5);
  for (const row of t.rows) {
    if (before.has(row.id) || t.selected.has(row.id)) continue;
    if (functions && !functions.has(row.function)) continue;
    if (!wasRunning(row)) t.selected.add(row.id);
  }
};

ms.runsView = async function (tab) {
  if (ms.tabs.some(([name]) => name === tab)) ms.tab = tab;
  const view = ms.view();
  const route = ms.routes;
  view.replaceChildren(ms.el("p", {}, "loading…"));
  const wanted = ms.viewOf();
  ms.restoreView(wanted);
  ms.wanted = wanted.has("runs") ? wanted.get("runs").split(",").filter(Boolean) : null;
  if (ms.wanted) ms.table.selected.clear();
  // The first page comes from the evaluation index at once; the full listing follows. The
  // listing's version is read first: a run recorded or removed meanwhile is seen (ms.live).
  const [first, live] = await Promise.all([ms.get("/api/runs?limit=" + ms.table.pageSize), ms.get("/api/live")]);
  ms.listingVersion = live.version;
  ms.table.load(first);
  ms.selectWanted();
  const tableBox = ms.el("div", { id: "table" });
  const chartBox = ms.el("div", { id: "charts", class: "scalars" });
  const kindBox = ms.el("div", { id: "kind-panel" });
  const tabBar = ms.el("div", { class: "tabs", id: "tabs", role: "tablist" });
  const redrawTable = () => ms.table.render(tableBox);
  const tagFilter = ms.el("input", { id: "tag-filter", type: "text", placeholder: "filter tags (regular expression)", value: ms.charts.filter });
  const follow = ms.el("input", { id: "follow", type: "checkbox" });
  follow.checked = ms.follow;
  follow.addEventListener("change", () => { ms.follow = follow.checked; ms.save("follow", ms.follow); });
  const scalarControls = ms.charts.controls((key) => {
    if (key === "x") for (const chart of ms.charts.charts.values()) chart.window = null;
    redrawPanel();
  });
  const drawTabs = (ids) => {
    tabBar.replaceChildren(...ms.tabs.map(([name, title]) => {
      const count = ms.tabCount(name, ids);
      return ms.el("button", { class: `tab${name === ms.tab ? " active" : ""}${count === 0 ? " empty" : ""}`, role: "tab", "data-tab": name,
        onclick: () => { ms.tab = name; redrawPanel(); } },
      title, count === null ? null : ms.el("span", { class: "count" }, String(count)));
    }));
  };
  let drawing = Promise.resolve();
  let linesDrawn = null;
  const lines = new Promise((resolve) => { linesDrawn = resolve; });
  const redrawPanel = () => {
    // One drawing at a time: a click during a drawing draws again after it.
    drawing = drawing.catch(() => {}).then(async () => {
      if (ms.routes === route) ms.saveView();
      const ids = [...ms.table.selected];
      drawTabs(ids);
      const scalars = ms.tab === "scalars";
      chartBox.hidden = !scalars;
      scalarControls.hidden = !scalars;
      kindBox.hidden = scalars;
      if (scalars) return ms.charts.render(chartBox, ids, { legend: true, onLines: linesDrawn });
      ms.tooltip.hide();
      delete kindBox.dataset.ready;
      if (ms.tab === "graph") return ms.graph.render(kindBox, ids);
      if (ms.tab === "hparams") return ms.hparams.render(kindBox, ms.table.visible());
      if (ms.tab === "custom") return ms.custom.render(kindBox, ids);
      return ms.across.render(kindBox, ms.tab, ids);
    });
    return drawing;
  };
  tagFilter.addEventListener("input", () => {
    ms.charts.filter = tagFilter.value;
    tagFilter.classList.toggle("invalid", ms.regex(tagFilter.value) instanceof Error);
    redrawPanel();
  });
  ms.table.onSelect = redrawPanel;
  const filters = ms.el("div", { id: "filters" });
  const refilter = () => { redrawTable(); ms.saveView(); if (ms.tab === "hparams") redrawPanel(); };
  filters.append(ms.table.filters(refilter));
  view.replaceChildren(filters, tableBox,
    ms.el("div", { class: "panel-bar" }, tabBar, ms.el("span", { class: "panel-tools" }, tagFilter,
      ms.el("label", { title: "select new runs of the functions shown as they start" }, follow, " follow new runs"))),
    scalarControls, chartBox, kindBox);
  if (!ms.table.selected.size && !ms.wanted) {
    // Start with the newest runs that logged something (20, or ?select=N up to the first
    // page's 100), so the charts are not empty.
    for (const row of ms.table.rows.filter((r) => Object.keys(r.metrics).length).slice(0, ms.firstSelection())) ms.table.selected.add(row.id);
  }
  // The charts' points are asked for first and their lines drawn, then the table (drawing it
  // meanwhile would hold the browser's main thread, which takes in the points as they
  // arrive); plotly.js is loaded after both (compiling it holds the page for a while).
  ms.table.relabel();
  const panel = redrawPanel();
  if (ms.tab === "scalars") await Promise.race([panel, lines.then(ms.painted)]);
  else await new Promise((resolve) => setTimeout(resolve, 0));
  redrawTable();
  performance.mark("table-drawn");
  view.dataset.table = "drawn";
  const rest = first.complete ? Promise.resolve() : ms.get("/api/runs").then((all) => {
    if (ms.routes !== route) return;  // the reader went to another page meanwhile
    ms.table.load(all);
    filters.replaceChildren(ms.table.filters(refilter));
    redrawTable();
    if (ms.selectWanted()) return redrawPanel();  // runs the URL named beyond the first page
  });
  await Promise.all([panel, rest]);
  view.dataset.listing = "complete";
  view.dataset.ready = "runs";
  ms.live = async () => {
    const live = await ms.get("/api/live");
    const running = live.rows;
    const ids = new Set(running.map((r) => r.id));
    const known = new Set(ms.table.rows.filter((r) => r.status === "running").map((r) => r.id));
    const changed = live.version !== ms.listingVersion || running.some((r) => !ms.table.byId.has(r.id)) ||
      [...known].some((id) => !ids.has(id));
    ms.listingVersion = live.version;
    if (changed || ms.awaiting.size) {
      // A run started, ended, was recorded or removed: read the listing again. A selected
      // run that ended is followed by its record; a new run is selected (when following);
      // a removed one leaves the table, the selection and the charts.
      const before = new Map(ms.table.byId);
      const selected = [...ms.table.selected];
      ms.table.load(await ms.get("/api/runs"));
      ms.adoptEnded(before, selected);
      if (ms.follow) ms.followNew(before);
      filters.replaceChildren(ms.table.filters(refilter));
      redrawTable();
      await redrawPanel();
      return;
    }
    ms.table.update(running);
    if (running.length) redrawTable();
    const selected = [...ms.table.selected];
    if (ms.tab === "scalars") {
      // A running run logged a tag no chart shows yet: its chart is added.
      if (ms.charts.tagsOf(selected).join("\n") !== (ms.charts.tags || []).join("\n")) await redrawPanel();
      else await ms.charts.tick(ids);
    } else if (ms.across.tabs[ms.tab]) {
      // The same for images, histograms, text and PR curves: a new tag is drawn, the cards
      // of the others updated in place.
      if (ms.across.tagsOf(selected, ms.across.tabs[ms.tab].kinds).join("\n") !== ms.across.tags.join("\n")) await redrawPanel();
      else await ms.across.tick(ids);
    }
  };
};

// The view in the URL's hash (#/runs/TAB?runs=...&tags=...), as TensorBoard keeps its
// view in its URL: reloaded or shared, the page opens as it was left. Only what differs
// from the defaults is written; the selected runs always are.
ms.VIEW_DEFAULTS = { ...ms.charts.settings };
ms.viewOf = function () {
  const query = location.hash.includes("?") ? location.hash.slice(location.hash.indexOf("?") + 1) : "";
  return new URLSearchParams(query);
};
ms.saveView = function () {
  const params = new URLSearchParams();
  params.set("runs", [...ms.table.selected].join(","));
  if (ms.charts.filter) params.set("tags", ms.charts.filter);
  for (const [key, name] of [["text", "run"], ["fn", "fn"], ["status", "status"], ["args", "where"]]) {
    if (ms.table.filter[key]) params.set(name, ms.table.filter[key]);
  }
  for (const [key, value] of Object.entries(ms.charts.settings)) {
    if (value !== ms.VIEW_DEFAULTS[key]) params.set(key, String(value));
  }
  history.replaceState(null, "", `#/runs/${ms.tab}?${params.toString().replace(/%2C/g, ",").replace(/%2F/g, "/")}`);
};
ms.restoreView = function (params) {
  if (params.has("tags")) ms.charts.filter = params.get("tags");
  for (const [key, name] of [["text", "run"], ["fn", "fn"], ["status", "status"], ["args", "where"]]) {
    if (params.has(name)) ms.table.filter[key] = params.get(name);
  }
  const s = ms.charts.settings;
  for (const [key, fallback] of Object.entries(ms.VIEW_DEFAULTS)) {
    if (!params.has(key)) continue;
    const text = params.get(key);
    if (typeof fallback === "boolean") s[key] = text === "true";
    else if (typeof fallback === "number") s[key] = Math.min(0.99, Math.max(0, Number(text) || 0));
    else s[key] = text;
  }
};
// The runs the URL names that the listing holds: selected (the others wait for the full one).
ms.selectWanted = function () {
  let added = false;
  for (const id of ms.wanted || []) {
    if (ms.table.byId.has(id) && !ms.table.selected.has(id)) { ms.table.selected.add(id); added = true; }
  }
  return added;
};

// How many of the newest runs the page opens with selected: ?select=N, else 20.
ms.firstSelection = function () {
  const asked = Number(new URLSearchParams(location.search).get("select"));
  return Number.isInteger(asked) && asked > 0 ? Math.min(asked, ms.table.pageSize) : 20;
};

ms.routes = 0;
ms.route = async function () {
  ms.live = null;
  ms.routes += 1;
  const hash = location.hash.replace(/^#\/?/, "").replace(/\?.*$/, "");
  const [page, ...rest] = hash.split("/");
  const view = ms.view();
  delete view.dataset.ready;
  delete view.dataset.table;
  delete view.dataset.listing;
  ms.tooltip.hide();
  try {
    if (page === "eval") await ms.pages.evaluation(rest[0]);
    else if (page === "diff") await ms.pages.diff(rest[0], rest[1]);
    else if (page === "lineage") await ms.lineage.page(rest[0], rest[1]);
    else await ms.runsView(page === "runs" ? rest[0] : undefined);
  } catch (error) {
    view.replaceChildren(ms.el("p", { class: "error" }, String(error.message || error)));
    view.dataset.ready = "error";
  }
};

ms.loop = function () {
  clearTimeout(ms.timer);
  const every = ms.refreshMs();
  if (!every) return;
  ms.timer = setTimeout(async () => {
    try { if (ms.live) await ms.live(); } catch (error) { console.warn(error); }
    ms.loop();
  }, every);
};

window.addEventListener("hashchange", ms.route);
// A new theme redraws the page (the charts take its colours).
document.getElementById("theme").addEventListener("click", () => {
  ms.themeChoice = ms.THEMES[(ms.THEMES.indexOf(ms.themeChoice) + 1) % ms.THEMES.length];
  ms.save("theme", ms.themeChoice);
  ms.applyTheme();
  ms.route();
});
ms.darkQuery.addEventListener("change", () => { if (ms.themeChoice === "auto") { ms.applyTheme(); ms.route(); } });
document.getElementById("refresh").addEventListener("change", ms.loop);
const initialRefresh = new URLSearchParams(location.search).get("refresh");
if (initialRefresh !== null) document.getElementById("refresh").value = initialRefresh;
ms.route().then(ms.loop);
