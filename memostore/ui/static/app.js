// The dashboard's router and the runs view (table, charts, live refresh).
"use strict";

ms.view = function () { return document.getElementById("view"); };

ms.runsView = async function () {
  const view = ms.view();
  const route = ms.routes;
  view.replaceChildren(ms.el("p", {}, "loading…"));
  // The first page comes from the evaluation index at once; the full listing follows.
  const first = await ms.get("/api/runs?limit=" + ms.table.pageSize);
  ms.table.load(first);
  const tableBox = ms.el("div", { id: "table" });
  const chartBox = ms.el("div", { class: "charts", id: "charts" });
  const redrawCharts = () => ms.charts.render(chartBox, [...ms.table.selected]);
  const redrawTable = () => ms.table.render(tableBox);
  ms.table.onSelect = redrawCharts;
  const filters = ms.el("div", { id: "filters" });
  const refilter = () => { redrawTable(); };
  filters.append(ms.table.filters(refilter));
  view.replaceChildren(filters, tableBox,
    ms.el("h2", {}, "charts of the selected runs"), ms.charts.controls(() => {
      for (const chart of ms.charts.charts.values()) chart.window = null;
      redrawCharts();
    }), chartBox);
  if (!ms.table.selected.size) {
    // Start with the newest few runs that logged something, so the charts are not empty.
    for (const row of ms.table.rows.filter((r) => Object.keys(r.metrics).length).slice(0, 5)) ms.table.selected.add(row.id);
  }
  redrawTable();
  performance.mark("table-drawn");
  view.dataset.table = "drawn";
  const rest = first.complete ? Promise.resolve() : ms.get("/api/runs").then((all) => {
    if (ms.routes !== route) return;  // the reader went to another page meanwhile
    ms.table.load(all);
    filters.replaceChildren(ms.table.filters(refilter));
    redrawTable();
  });
  // Let the table paint before plotly.js is compiled (it holds the main thread).
  await new Promise((resolve) => setTimeout(resolve, 0));
  await Promise.all([redrawCharts(), rest]);
  view.dataset.listing = "complete";
  view.dataset.ready = "runs";
  ms.live = async () => {
    const running = (await ms.get("/api/live")).rows;
    const ids = new Set(running.map((r) => r.id));
    const known = new Set(ms.table.rows.filter((r) => r.status === "running").map((r) => r.id));
    const changed = running.some((r) => !ms.table.byId.has(r.id)) || [...known].some((id) => !ids.has(id));
    if (changed) {
      // A run started or ended: the listing changed, read it again (selection is kept).
      ms.table.load(await ms.get("/api/runs"));
      filters.replaceChildren(ms.table.filters(refilter));
      redrawTable();
      await redrawCharts();
      return;
    }
    ms.table.update(running);
    if (running.length) redrawTable();
    await ms.charts.tick(ids);
  };
};

ms.routes = 0;
ms.route = async function () {
  ms.live = null;
  ms.routes += 1;
  const hash = location.hash.replace(/^#\/?/, "");
  const [page, ...rest] = hash.split("/");
  const view = ms.view();
  delete view.dataset.ready;
  delete view.dataset.table;
  delete view.dataset.listing;
  try {
    if (page === "eval") await ms.pages.evaluation(rest[0]);
    else if (page === "diff") await ms.pages.diff(rest[0], rest[1]);
    else if (page === "lineage") await ms.lineage.page(rest[0], rest[1]);
    else await ms.runsView();
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
document.getElementById("refresh").addEventListener("change", ms.loop);
const initialRefresh = new URLSearchParams(location.search).get("refresh");
if (initialRefresh !== null) document.getElementById("refresh").value = initialRefresh;
ms.route().then(ms.loop);
