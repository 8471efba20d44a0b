// A model graph logged by add_graph, drawn as a tree of modules: each module unfolds into its
// submodules, its parameters (with shapes) and the operations run directly in it; its line
// shows the shapes that enter and leave it. The server reads the stored GraphDef.
"use strict";

ms.graph = { run: null };

ms.graph.shape = function (shape) {
  if (shape === null || shape === undefined) return "?";
  if (!shape.length) return "scalar";
  return "[" + shape.map((n) => (n < 0 ? "?" : String(n))).join(", ") + "]";
};
ms.graph.shapes = function (shapes) { return (shapes || []).map(ms.graph.shape).join(", ") || "–"; };

ms.graph.tagOf = function (id) {
  const row = ms.table.byId.get(id);
  const found = Object.entries((row && row.metrics) || {}).find(([, s]) => s.kind === "graph");
  return found ? found[0] : null;
};

// The graph tab of the runs page: one run's graph at a time (a menu picks the run).
ms.graph.render = async function (container, ids) {
  const runs = ids.filter((id) => ms.graph.tagOf(id));
  if (!runs.length) {
    container.replaceChildren(ms.el("p", { class: "same" }, ids.length ? "the selected runs logged no graph (SummaryWriter.add_graph)" : "select runs in the table"));
    container.dataset.ready = "graph";
    return;
  }
  if (!runs.includes(ms.graph.run)) ms.graph.run = runs[0];
  const pick = ms.el("select", { id: "graph-run", onchange: (e) => { ms.graph.run = e.target.value; ms.graph.render(container, ids); } },
    runs.map((id) => ms.el("option", { value: id }, ms.nameOf(id))));
  pick.value = ms.graph.run;
  const data = await ms.get(`/api/graph?id=${ms.graph.run}&tag=${encodeURIComponent(ms.graph.tagOf(ms.graph.run))}`);
  container.replaceChildren(ms.el("div", { class: "controls" }, ms.el("label", {}, "run ", pick)), ms.graph.tree(data));
  container.dataset.ready = "graph";
};

ms.graph.tree = function (data) {
  const io = (items) => items.map((i) => `${i.name} ${ms.graph.shape(i.shape)}`).join(", ") || "–";
  const tree = ms.el("div", { class: "graph-tree", id: "graph-tree" }, ms.graph.module(data.root, 0));
  const all = (open) => { for (const d of tree.querySelectorAll("details")) d.open = open; };
  return ms.el("div", { class: "graph" },
    ms.el("p", { class: "graph-summary" }, `inputs ${io(data.inputs)} → outputs ${io(data.outputs)} · ${data.nodes} nodes` +
      (data.points > 1 ? ` · the last of ${data.points} graphs (step ${data.step})` : "")),
    ms.el("div", { class: "controls" }, ms.el("button", { onclick: () => all(true) }, "expand all"), ms.el("button", { onclick: () => all(false) }, "collapse all")),
    tree);
};

ms.graph.module = function (m, depth) {
  const name = m.attr !== null && m.attr !== undefined ? m.attr : m.type || "model";
  const summary = ms.el("summary", {},
    ms.el("span", { class: "mod-name" }, name),
    m.attr !== null && m.attr !== undefined ? ms.el("span", { class: "mod-type" }, m.type) : null,
    ms.el("span", { class: "mod-shapes" }, `${ms.graph.shapes(m.inputs)} → ${ms.graph.shapes(m.outputs)}`),
    ms.el("span", { class: "mod-count" }, `${m.count} op${m.count === 1 ? "" : "s"}`));
  const body = [];
  if (m.parameters.length) {
    body.push(ms.el("table", { class: "params" }, m.parameters.map((p) => ms.el("tr", { class: p.role },
      ms.el("td", { class: "param-name" }, p.name), ms.el("td", { class: "param-shape" }, ms.graph.shape(p.shape)),
      ms.el("td", { class: "param-dtype" }, `${p.dtype}${p.role === "buffer" ? " (buffer)" : ""}`)))));
  }
  for (const child of m.modules) body.push(ms.graph.module(child, depth + 1));
  if (m.ops.length) {
    body.push(ms.el("ul", { class: "ops" }, m.ops.map((op) => ms.el("li", {},
      ms.el("span", { class: "op" }, op.op), " → ", ms.el("span", { class: "op-shape" }, ms.graph.shapes(op.shapes))))));
  }
  const box = ms.el("details", { class: "module", "data-path": m.path, "data-type": m.type }, summary, ...body);
  box.open = depth < 2;
  return box;
};
