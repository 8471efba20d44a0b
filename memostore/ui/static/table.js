// The runs table: every evaluation, filtered, sorted and paged in the browser.
"use strict";

ms.table = {
  rows: [], args: [], tags: [], byId: new Map(),
  selected: new Set(),
  sort: { key: "started", desc: true },
  filter: { fn: "", status: "", args: "", text: "" },
  page: 0, pageSize: 100,
  labels: new Map(),  // id -> "train lr=0.1 seed=4", for runs without a name of their own
  onSelect: () => {},
};

// Labels for *rows*: per function, the function's name and the scalar arguments whose values
// differ among those rows (at most four), so runs of one sweep read apart; a label two rows
// share gets their short ids.
ms.table.label = function (rows) {
  const byFunction = new Map();
  for (const row of rows) {
    if (!byFunction.has(row.function)) byFunction.set(row.function, []);
    byFunction.get(row.function).push(row);
  }
  const labels = new Map();
  for (const [fn, group] of byFunction) {
    const values = new Map();
    for (const row of group) {
      for (const [name, value] of Object.entries(row.args || {})) {
        if (!["number", "string", "boolean"].includes(typeof value)) continue;
        if (!values.has(name)) values.set(name, new Set());
        values.get(name).add(String(value));
      }
    }
    const differ = [...values.entries()].filter(([name, seen]) => seen.size > 1 ||
      group.some((row) => !(name in (row.args || {})))).map(([name]) => name).slice(0, 4);
    const counts = new Map();
    for (const row of group) {
      const parts = differ.filter((name) => name in (row.args || {})).map((name) => `${name}=${ms.num(row.args[name])}`);
      const label = [ms.fname(fn), ...parts].join(" ");
      labels.set(row.id, label);
      counts.set(label, (counts.get(label) || 0) + 1);
    }
    for (const row of group) if (counts.get(labels.get(row.id)) > 1) labels.set(row.id, `${labels.get(row.id)} · ${ms.short(row.id)}`);
  }
  return labels;
};

ms.table.load = function (data) {
  const t = ms.table;
  t.rows = data.rows; t.args = data.args; t.tags = data.tags;
  // A first page (complete: false) names every function and status of the store already.
  t.complete = data.complete !== false;
  t.indexed = data.indexed || data.rows.length;
  t.functions = data.functions || [...new Set(data.rows.map((r) => r.function))].sort();
  t.statuses = data.statuses || [...new Set(data.rows.map((r) => r.status))].sort();
  t.byId = new Map(data.rows.map((r) => [r.id, r]));
  for (const id of [...t.selected]) if (!t.byId.has(id)) t.selected.delete(id);
};

// Replace the rows of running evaluations with fresher ones (same ids).
ms.table.update = function (rows) {
  const t = ms.table;
  for (const row of rows) {
    const old = t.byId.get(row.id);
    if (old) Object.assign(old, row);
  }
};

ms.table.columns = function () {
  const t = ms.table;
  const cols = [
    { key: "select", title: "" },
    { key: "id", title: "id", get: (r) => r.id },
    { key: "name", title: "name", get: (r) => ms.nameOf(r.id) },
    { key: "function", title: "function", get: (r) => ms.fname(r.function) },
    { key: "status", title: "status", get: (r) => r.status },
    { key: "started", title: "created", get: (r) => r.started, show: (r) => (r.created || "").slice(0, 19).replace("T", " ") },
    { key: "duration_s", title: "duration", get: (r) => r.duration_s, show: (r) => ms.duration(r.duration_s), num: true },
    { key: "hits", title: "hits", get: (r) => r.hits, num: true },
    { key: "last_used", title: "last used", get: (r) => r.last_used, show: (r) => ms.time(r.last_used) },
  ];
  for (const name of t.args) cols.push({ key: "arg:" + name, title: name, get: (r) => r.args[name], num: true });
  for (const tag of t.tags) {
    for (const stat of ["last", "min", "max"]) {
      cols.push({ key: `m:${tag}:${stat}`, title: `${tag} ${stat}`, get: (r) => (r.metrics[tag] || {})[stat], num: true });
    }
  }
  return cols;
};

// "lr>0.01, epochs=3, model~res, hparam/acc>0.55": comparisons on argument columns, or on
// a metric's last value (two terms on one metric keep a range, as TensorBoard's min and max).
ms.table.parseArgFilter = function (text) {
  const terms = [];
  for (const part of text.split(",")) {
    const m = part.trim().match(/^([^<>=!~]+?)\s*(>=|<=|!=|=|<|>|~)\s*(.*)$/);
    if (m) terms.push({ name: m[1].trim(), op: m[2], value: m[3].trim() });
  }
  return terms;
};

ms.table.matchTerm = function (row, term) {
  const metric = row.metrics && row.metrics[term.name];
  const value = term.name in row.args ? row.args[term.name] : metric ? metric.last : undefined;
  if (value === undefined) return false;
  const a = Number(value), b = Number(term.value);
  const numeric = typeof value === "number" && !Number.isNaN(b) && term.value !== "";
  switch (term.op) {
    case "=": return numeric ? a === b : String(value) === term.value;
    case "!=": return numeric ? a !== b : String(value) !== term.value;
    case "~": return String(value).includes(term.value);
    case ">": return numeric && a > b;
    case "<": return numeric && a < b;
    case ">=": return numeric && a >= b;
    case "<=": return numeric && a <= b;
  }
  return false;
};

ms.table.visible = function () {
  const t = ms.table, f = t.filter;
  const terms = t.parseArgFilter(f.args);
  // The run filter is a regular expression (case-insensitive), as TensorBoard's, matched
  // against the id, name, function, status and arguments; one that does not parse filters
  // nothing (the input says so).
  const re = ms.regex(f.text);
  const fields = (r) => [r.id, ms.nameOf(r.id), r.function, r.status, JSON.stringify(r.args)];
  let rows = t.rows.filter((r) =>
    (!f.fn || r.function === f.fn) &&
    (!f.status || r.status === f.status) &&
    terms.every((term) => t.matchTerm(r, term)) &&
    (!f.text || re instanceof Error || fields(r).some((field) => re.test(field))));
  const col = t.columns().find((c) => c.key === t.sort.key);
  if (col && col.get) {
    const sign = t.sort.desc ? -1 : 1;
    const present = rows.filter((r) => col.get(r) !== undefined && col.get(r) !== null);
    const missing = rows.filter((r) => col.get(r) === undefined || col.get(r) === null);
    present.sort((x, y) => {
      const a = col.get(x), b = col.get(y);
      if (typeof a === "number" && typeof b === "number") return sign * (a - b);
      return sign * String(a).localeCompare(String(b));
    });
    rows = present.concat(missing);  // rows without the value go last either way
  }
  return rows;
};

ms.table.filters = function (onChange) {
  const t = ms.table;
  const functions = t.functions, statuses = t.statuses;
  const select = (id, values, key, label) => ms.el("select", {
    id, onchange: (e) => { t.filter[key] = e.target.value; t.page = 0; onChange(); },
  }, ms.el("option", { value: "" }, label), values.map((v) => {
    const option = ms.el("option", { value: v }, key === "fn" ? ms.fname(v) : v);
    if (t.filter[key] === v) option.selected = true;
    return option;
  }));
  const input = (id, key, placeholder) => ms.el("input", {
    id, type: "text", placeholder, value: t.filter[key],
    oninput: (e) => { t.filter[key] = e.target.value; t.page = 0; onChange(); },
  });
  const runs = input("filter-text", "text", "runs (regular expression)");
  const problem = ms.el("span", { class: "filter-error", id: "filter-text-error" });
  const check = () => {
    const re = ms.regex(t.filter.text);
    runs.classList.toggle("invalid", re instanceof Error);
    problem.textContent = re instanceof Error ? `not a regular expression (${re.message.replace(/^.*: /, "")}): no run filtered` : "";
  };
  runs.addEventListener("input", check);
  check();
  return ms.el("div", { class: "filters" },
    select("filter-function", functions, "fn", "all functions"),
    select("filter-status", statuses, "status", "all statuses"),
    input("filter-args", "args", "arguments, metrics: lr>0.01, hparam/acc>0.55"),
    runs, problem,
    ms.el("button", { id: "compare", onclick: () => {
      const ids = [...t.selected];
      if (ids.length === 2) location.hash = `#/diff/${ids[0]}/${ids[1]}`;
      else alert("select two evaluations to compare");
    } }, "diff selected (2)"),
    ms.el("button", { id: "clear", onclick: () => { t.selected.clear(); t.onSelect(); onChange(); } }, "clear selection"));
};

// Name the runs shown (the table's rows and the selected ones) among themselves; the rows.
ms.table.relabel = function () {
  const t = ms.table;
  const rows = t.visible();
  t.labels = t.label([...new Set([...rows, ...[...t.selected].map((id) => t.byId.get(id)).filter(Boolean)])]);
  return rows;
};

ms.table.render = function (container) {
  const t = ms.table;
  const rows = t.relabel();
  const cols = t.columns();
  const pages = Math.max(1, Math.ceil(rows.length / t.pageSize));
  t.page = Math.min(t.page, pages - 1);
  const shown = rows.slice(t.page * t.pageSize, (t.page + 1) * t.pageSize);
  const head = ms.el("tr", {}, cols.map((c) => {
    if (c.key === "select") {
      return ms.el("th", {}, ms.el("input", { type: "checkbox", title: "select the rows of this page", onchange: (e) => {
        for (const r of shown) e.target.checked ? t.selected.add(r.id) : t.selected.delete(r.id);
        t.onSelect(); t.render(container);
      } }));
    }
    const arrow = t.sort.key === c.key ? (t.sort.desc ? " ▼" : " ▲") : "";
    return ms.el("th", { "data-key": c.key, onclick: () => {
      t.sort = { key: c.key, desc: t.sort.key === c.key ? !t.sort.desc : false };
      t.render(container);
    } }, c.title + arrow);
  }));
  const body = shown.map((r) => ms.el("tr", { "data-id": r.id }, cols.map((c) => {
    if (c.key === "select") {
      const swatch = ms.el("span", { class: "swatch" });
      const paint = () => { swatch.style.background = t.selected.has(r.id) ? ms.colorOf(r.id) : "transparent"; };
      const box = ms.el("input", { type: "checkbox", class: "select", onchange: (e) => {
        e.target.checked ? t.selected.add(r.id) : t.selected.delete(r.id);
        paint();
        t.onSelect();
      } });
      box.checked = t.selected.has(r.id);
      paint();
      return ms.el("td", {}, box, swatch);
    }
    if (c.key === "id") return ms.el("td", {}, ms.el("a", { href: `#/eval/${r.id}` }, ms.short(r.id)));
    if (c.key === "status") return ms.el("td", { class: "status-" + r.status }, r.status);
    if (c.key === "name") return ms.el("td", { class: "name", title: ms.nameOf(r.id) }, ms.nameOf(r.id));
    const value = c.show ? c.show(r) : ms.num(c.get(r));
    return ms.el("td", { class: c.num ? "num" : "" }, value);
  })));
  const pager = ms.el("div", { class: "pager" },
    ms.el("button", { onclick: () => { t.page = Math.max(0, t.page - 1); t.render(container); } }, "‹"),
    ms.el("span", { id: "row-count" }, t.complete ? `${rows.length} of ${t.rows.length} evaluations · page ${t.page + 1}/${pages}`
      : `the newest ${t.rows.length} of about ${t.indexed} evaluations (reading the rest…)`),
    ms.el("button", { onclick: () => { t.page = Math.min(pages - 1, t.page + 1); t.render(container); } }, "›"));
  // Redrawn on every live refresh: keep the reader's scroll position.
  const old = container.querySelector(".table-wrap");
  const wrap = ms.el("div", { class: "table-wrap" },
    ms.el("table", { class: "runs", id: "runs" }, ms.el("thead", {}, head), ms.el("tbody", {}, body)));
  container.replaceChildren(pager, wrap);
  if (old) { wrap.scrollTop = old.scrollTop; wrap.scrollLeft = old.scrollLeft; }
};
