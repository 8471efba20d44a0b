// The lineage page: results passed from parent to child, as a layered SVG graph. A big
// store is drawn as one node per function, or as the neighbourhood of one evaluation;
// each layer holds at most a bounded number of nodes (the rest are counted), so the
// drawing stays as wide as the screen allows whatever the store's size.
"use strict";

ms.lineage = { maxPerLayer: 24 };

ms.lineage.page = async function (focus, depth) {
  const view = ms.view();
  const params = new URLSearchParams();
  if (focus) params.set("focus", focus);
  if (depth) params.set("depth", depth);
  const g = await ms.get("/api/lineage?" + params.toString());
  const input = ms.el("input", { type: "text", id: "lineage-focus", placeholder: "evaluation id (6+ digits)", value: focus || "" });
  const depthSelect = ms.el("select", { id: "lineage-depth" }, [1, 2, 3, 4, 6].map((d) => ms.el("option", { value: String(d) }, `depth ${d}`)));
  depthSelect.value = String(g.depth || depth || 2);
  const go = () => {
    const id = input.value.trim().toLowerCase();
    location.hash = id ? `#/lineage/${id}/${depthSelect.value}` : "#/lineage";
  };
  input.addEventListener("keydown", (e) => { if (e.key === "Enter") go(); });
  depthSelect.addEventListener("change", go);
  const controls = ms.el("div", { class: "controls" }, ms.el("label", {}, "around ", input), depthSelect,
    ms.el("button", { onclick: go }, "show"), ms.el("a", { href: "#/lineage" }, "all functions"));
  const title = {
    full: `${g.nodes.length} evaluations, ${g.edges.length} edges; click one to open it`,
    functions: `${g.total} evaluations of ${g.nodes.length} functions: one node per function (click one for the neighbourhood of its newest evaluation)`,
    focus: `the neighbourhood of ${ms.short(g.focus)} (depth ${g.depth}) among ${g.total} evaluations; click one to open it`,
  }[g.mode];
  const started = performance.now();
  const svg = ms.lineage.draw(g);
  view.replaceChildren(ms.el("h1", {}, "lineage: results passed from parent to child"), controls,
    ms.el("p", { id: "lineage-summary" }, title), ms.el("div", { id: "lineage", "data-mode": g.mode }, svg));
  view.dataset.drawMs = String(Math.round(performance.now() - started));
  view.dataset.ready = "lineage";
};

// Layers: given by the server (a neighbourhood), else by the longest path from a root.
ms.lineage.layers = function (g) {
  const byId = new Map(g.nodes.map((n) => [n.id, n]));
  const depth = new Map();
  if (g.mode === "focus") for (const n of g.nodes) depth.set(n.id, n.layer);
  const depthOf = (id) => {
    // Iterative, so a long chain of thousands of generations cannot overflow the stack.
    const stack = [[id, false]];
    const onPath = new Set();
    while (stack.length) {
      const [cur, expanded] = stack.pop();
      if (depth.has(cur)) continue;
      const parents = byId.get(cur).parents.filter((p) => byId.has(p));
      if (expanded) {
        onPath.delete(cur);
        depth.set(cur, parents.length ? 1 + Math.max(...parents.map((p) => depth.get(p) ?? 0)) : 0);
        continue;
      }
      onPath.add(cur);
      stack.push([cur, true]);
      for (const p of parents) if (!depth.has(p) && !onPath.has(p)) stack.push([p, false]);
    }
    return depth.get(id);
  };
  const layers = new Map();
  for (const node of [...g.nodes].reverse()) {
    const d = depthOf(node.id);
    if (!layers.has(d)) layers.set(d, []);
    layers.get(d).push(node);
  }
  return [...layers.entries()].sort((a, b) => a[0] - b[0]);
};

ms.lineage.draw = function (g) {
  const NS = "http://www.w3.org/2000/svg";
  const make = (tag, attrs, text) => {
    const node = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    return node;
  };
  const w = 150, h = 34, gapX = 20, gapY = 50, gapRow = 10;
  const max = ms.lineage.maxPerLayer;
  // A wide layer wraps onto several rows, so the graph fits the window's width.
  const perRow = Math.max(3, Math.floor(((ms.view().clientWidth || 1300) - gapX) / (w + gapX)));
  const pos = new Map();
  const extra = [];
  const layers = ms.lineage.layers(g);
  let widest = 0, top = gapY / 2;
  for (const [d, nodes] of layers) {
    // Newest first within a layer; beyond the bound, one box counts the rest.
    nodes.sort((a, b) => (b.started || 0) - (a.started || 0) || String(a.id).localeCompare(String(b.id)));
    const shown = nodes.slice(0, max);
    const more = nodes.length - shown.length + ((g.hidden || {})[String(d)] || 0);
    const boxes = shown.length + (more > 0 ? 1 : 0);
    const at = (i) => [gapX + (i % perRow) * (w + gapX), top + Math.floor(i / perRow) * (h + gapRow)];
    shown.forEach((node, i) => pos.set(node.id, at(i)));
    if (more > 0) extra.push([...at(shown.length), more]);
    widest = Math.max(widest, Math.min(boxes, perRow));
    top += Math.ceil(boxes / perRow) * (h + gapRow) - gapRow + gapY;
  }
  const svg = make("svg", { width: Math.max(400, widest * (w + gapX) + gapX), height: top });
  for (const [p, c, count] of g.edges) {
    if (!pos.has(p) || !pos.has(c)) continue;
    const [x1, y1] = pos.get(p), [x2, y2] = pos.get(c);
    svg.append(make("line", { x1: x1 + w / 2, y1: y1 + h, x2: x2 + w / 2, y2 }));
    if (count !== undefined) svg.append(make("text", { x: (x1 + x2 + w) / 2 + 4, y: (y1 + h + y2) / 2, "font-size": "10", class: "edge-count" }, `×${count}`));
  }
  for (const node of g.nodes) {
    if (!pos.has(node.id)) continue;
    const [x, y] = pos.get(node.id);
    const isFunction = g.mode === "functions";
    const target = isFunction ? `#/lineage/${node.newest}` : `#/eval/${node.id}`;
    const status = isFunction ? (node.failed ? "failed" : "ok") : node.status;
    const group = make("g", { class: `node ${status}${node.id === g.focus ? " focus" : ""}`, "data-id": node.id });
    group.addEventListener("click", () => { location.hash = target; });
    group.append(make("rect", { x, y, width: w, height: h, rx: 4 }),
      make("text", { x: x + 6, y: y + 14, "font-size": "11" }, ms.fname(node.function).slice(0, 22)),
      make("text", { x: x + 6, y: y + 28, "font-size": "10" },
        isFunction ? `${node.count} evaluations${node.failed ? `, ${node.failed} failed` : ""}` : `${ms.short(node.id)} ${node.status}`));
    svg.append(group);
  }
  for (const [x, y, more] of extra) {
    const group = make("g", { class: "more" });
    group.append(make("rect", { x, y, width: w, height: h, rx: 4 }), make("text", { x: x + 6, y: y + 21, "font-size": "11" }, `+${more} more`));
    svg.append(group);
  }
  return svg;
};
