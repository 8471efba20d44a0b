// Detail pages: one evaluation, the diff of two, the lineage graph.
"use strict";

ms.pages = {};

ms.kv = function (pairs) {
  return ms.el("table", { class: "kv" }, pairs.filter(([, v]) => v !== undefined && v !== null && v !== "")
    .map(([k, v]) => ms.el("tr", {}, ms.el("td", {}, k), ms.el("td", {}, v instanceof Node ? v : String(v)))));
};

ms.link = function (id) { return ms.el("a", { href: `#/eval/${id}` }, ms.short(id)); };

ms.json = function (value) { return ms.el("pre", {}, JSON.stringify(value, null, 2)); };

ms.diffText = function (text) {
  return ms.el("pre", {}, String(text || "").split("\n").map((line) => {
    const cls = line.startsWith("+++") || line.startsWith("---") ? "" : line.startsWith("+") ? "diff-add"
      : line.startsWith("-") ? "diff-del" : line.startsWith("@@") ? "diff-hunk" : "";
    return ms.el("span", { class: cls }, line + "\n");
  }));
};

// Who signed an evaluation, as `memostore show` says it.
function signerText(signer) {
  if (!signer) return "nobody (unsigned)";
  if (!signer.verified) return `${signer.fingerprint} (signature does not match: not served)`;
  return signer.principal ? `${signer.principal} (${signer.fingerprint})` : `${signer.fingerprint} (not trusted)`;
}

ms.pages.evaluation = async function (id) {
  const view = ms.view();
  const r = await ms.get(`/api/eval/${id}`);
  const parts = [ms.el("h1", {}, `${ms.fname(r.function)} · ${ms.short(r.id)}`)];
  parts.push(ms.kv([["id", r.id], ["function", r.function], ["status", r.status], ["created", r.created],
    ["duration", ms.duration(r.duration_s)], ["key", r.key], ["version", r.version], ["refs", (r.refs || []).join(", ")],
    ["run id", r.run_id]]));
  if (r.error && r.status !== "ok") {
    parts.push(ms.el("h2", {}, r.status), ms.el("pre", {}, `${r.error.type || ""}: ${r.error.message || ""}\n${r.error.traceback || ""}`));
  }
  const code = r.code || {};
  parts.push(ms.el("h2", {}, `code ${code.digest || "(none recorded)"}`));
  for (const dep of code.dependencies || []) {
    parts.push(ms.el("details", {}, ms.el("summary", {}, `${dep.symbol} (${dep.kind}) ${String(dep.digest || "").slice(0, 12)}`),
      ms.el("pre", {}, dep.source || "(no source recorded)")));
  }
  parts.push(ms.el("h2", {}, "arguments"), Object.keys(r.args || {}).length ? ms.json(r.args) : ms.el("p", {}, "(none)"));
  if (Object.keys(r.effects || {}).length) parts.push(ms.el("h2", {}, "mutated arguments (state after the call)"), ms.json(r.effects));
  if (Object.keys(r.rng || {}).length) parts.push(ms.el("h2", {}, "random generators drawn from"), ms.json(r.rng));
  parts.push(ms.el("h2", {}, "result"), r.result_id ? ms.json(r.result) : ms.el("p", {}, "(none)"));
  const hp = r.logged_hparams || {};
  if (Object.keys(hp.hparams || {}).length) {
    parts.push(ms.el("h2", {}, "hparams (add_hparams)"), ms.kv(Object.entries(hp.hparams).map(([k, v]) => [k, ms.num(v)])));
  }
  const metrics = r.metrics || {};
  parts.push(ms.el("h2", {}, "metrics"));
  const tags = Object.keys(metrics).sort();
  if (!tags.length) parts.push(ms.el("p", {}, "(none)"));
  else {
    parts.push(ms.el("table", { class: "runs" }, ms.el("tr", {}, ["tag", "kind", "count", "first", "last", "min", "max"].map((h) => ms.el("th", {}, h))),
      tags.map((t) => ms.el("tr", {}, ms.el("td", {}, t), ms.el("td", {}, metrics[t].kind),
        ["count", "first", "last", "min", "max"].map((k) => ms.el("td", { class: "num" }, ms.num(metrics[t][k])))))));
  }
  const chartBox = ms.el("div", { class: "scalars", id: "charts" });
  parts.push(chartBox);
  const others = ms.el("div", { id: "media" });
  parts.push(others);
  parts.push(ms.el("h2", {}, "provenance"));
  if (r.status !== "running") parts.push(ms.el("p", { id: "signer" }, `signed by ${signerText(r.signer)}`));
  parts.push(ms.json(r.provenance || {}));
  if (r.status !== "running") parts.push(ms.el("p", {}, ms.el("a", { href: `#/lineage/${r.id}`, id: "lineage-link" }, "lineage around this evaluation")));
  for (const title of ["parents", "children"]) {
    if ((r[title] || []).length) parts.push(ms.el("h2", {}, title), ms.el("p", {}, r[title].map((p) => [ms.link(p), " "])));
  }
  if (r.status !== "running") {
    const why = ms.el("div", { id: "why" });
    parts.push(ms.el("h2", {}, "would the next call hit?"), ms.el("button", { onclick: async () => {
      why.replaceChildren(ms.pages.whyMiss(await ms.get(`/api/why/${r.id}`)));
    } }, "check (reads today's source, runs nothing)"), why);
  }
  view.replaceChildren(...parts);
  ms.charts.charts.clear();
  if (!ms.table.byId.has(r.id)) ms.table.byId.set(r.id, { id: r.id, function: r.function, metrics });
  await ms.charts.render(chartBox, [r.id]);
  for (const tag of tags.filter((t) => metrics[t].kind !== "scalar")) others.append(await ms.kinds.view(r.id, tag));
  if (r.status === "running") ms.live = async () => { await ms.charts.tick(new Set([r.id])); };
  view.dataset.ready = "eval";
};

ms.pages.whyMiss = function (record) {
  const verdict = { hit: "a call with the same arguments would hit now", miss: "a call with the same arguments would miss now",
    unknown: "cannot tell whether a call would hit now" }[record.verdict] || record.verdict;
  const parts = [ms.el("p", { class: record.verdict === "hit" ? "status-ok" : "status-failed" }, verdict),
    ms.el("ul", {}, (record.reasons || []).map((reason) => ms.el("li", {}, reason)))];
  for (const change of ((record.code || {}).changed || [])) {
    if (change.diff) parts.push(ms.el("b", {}, change.symbol), ms.diffText(change.diff));
  }
  for (const note of record.notes || []) parts.push(ms.el("p", { class: "same" }, "note: " + note));
  return ms.el("div", {}, parts);
};

// One argument's change in words: "changed: 0.1 → 0.2", per field for nested values.
ms.pages.changeText = function (change) {
  const fields = (change.fields || []).map((f) => `${f.path ? f.path + " " : ""}${f.change}: ${ms.num(f.a)} → ${ms.num(f.b)}`);
  if (fields.length) return fields.join("; ") + (change.more ? `; … ${change.more} more` : "");
  return String(change.change || "changed");
};

// Whether a tag differs: a non-zero delta, or logged on one side only.
ms.pages.metricDiffers = function (m) {
  const moved = (v) => typeof v === "number" && v !== 0;
  return moved(m.delta_last) || moved(m.delta_min) || !m.a !== !m.b;
};

ms.pages.diff = async function (a, b) {
  const view = ms.view();
  const d = await ms.get(`/api/diff/${a}/${b}`);
  const onlyDiff = ms.el("input", { type: "checkbox", id: "only-diff" });
  onlyDiff.checked = true;
  const body = ms.el("div", { id: "diff-body" });
  const draw = () => {
    const only = onlyDiff.checked;
    const parts = [];
    parts.push(ms.el("h2", {}, "arguments"));
    const names = [...new Set([...Object.keys(d.args_all.a), ...Object.keys(d.args_all.b), ...Object.keys(d.args)])].sort();
    const rows = names.filter((n) => !only || n in d.args).map((n) => {
      const changed = n in d.args;
      return ms.el("tr", { class: changed ? "changed" : "same" }, ms.el("td", {}, n),
        ms.el("td", { class: changed ? "diff-del" : "" }, ms.num(d.args_all.a[n])),
        ms.el("td", { class: changed ? "diff-add" : "" }, ms.num(d.args_all.b[n])),
        ms.el("td", {}, changed ? ms.pages.changeText(d.args[n]) : "same"));
    });
    parts.push(rows.length ? ms.el("table", { class: "runs", id: "diff-args" },
      ms.el("tr", {}, ["argument", "a", "b", "change"].map((h) => ms.el("th", {}, h))), rows) : ms.el("p", {}, "(same)"));
    const code = d.code || {};
    parts.push(ms.el("h2", {}, `code ${String(code.a || "-").slice(0, 12)} → ${String(code.b || "-").slice(0, 12)}`));
    if (!(code.changed || []).length && !(code.added || []).length && !(code.removed || []).length) parts.push(ms.el("p", {}, "(same)"));
    for (const change of code.changed || []) parts.push(ms.el("b", {}, `changed ${change.symbol} (${change.kind})`), ms.diffText(change.diff));
    for (const change of code.added || []) parts.push(ms.el("p", { class: "diff-add" }, `added ${change.symbol} (${change.kind})`));
    for (const change of code.removed || []) parts.push(ms.el("p", { class: "diff-del" }, `removed ${change.symbol} (${change.kind})`));
    const result = d.result || {};
    parts.push(ms.el("h2", {}, "result"));
    if (result.same) parts.push(ms.el("p", {}, "(same)"));
    else {
      if (result.error) parts.push(ms.el("p", { class: "error" }, result.error));
      const tensors = result.tensors || [];
      if (tensors.length) {
        parts.push(ms.el("table", { class: "runs", id: "diff-tensors" }, ms.el("tr", {}, ["tensor", "shape", "dtype", "max abs diff", "rel norm"].map((h) => ms.el("th", {}, h))),
          tensors.map((t) => ms.el("tr", {}, ms.el("td", {}, t.path), ms.el("td", {}, JSON.stringify(t.shape)), ms.el("td", {}, String(t.dtype)),
            ms.el("td", { class: "num" }, "max_abs_diff" in t ? ms.num(t.max_abs_diff) : String(t.note || t.error || "differs")),
            ms.el("td", { class: "num" }, ms.num(t.rel_norm))))));
      }
      for (const value of result.values || []) parts.push(ms.el("p", {}, `${value.path}: ${JSON.stringify(value)}`));
    }
    parts.push(ms.el("h2", {}, "metrics"));
    const metricTags = Object.keys(d.metrics || {}).sort();
    parts.push(metricTags.length ? ms.el("table", { class: "runs", id: "diff-metrics" },
      ms.el("tr", {}, ["tag", "last a", "last b", "Δ last", "min a", "min b", "Δ min"].map((h) => ms.el("th", {}, h))),
      metricTags.filter((t) => !only || ms.pages.metricDiffers(d.metrics[t])).map((t) => {
        const m = d.metrics[t], ma = m.a || {}, mb = m.b || {};
        return ms.el("tr", {}, ms.el("td", {}, t), [ma.last, mb.last, m.delta_last, ma.min, mb.min, m.delta_min].map((v) => ms.el("td", { class: "num" }, ms.num(v))));
      })) : ms.el("p", {}, "(none)"));
    body.replaceChildren(...parts);
  };
  onlyDiff.addEventListener("change", draw);
  view.replaceChildren(ms.el("h1", {}, "diff ", ms.link(a), ` (${ms.fname(d.a.function)}) → `, ms.link(b), ` (${ms.fname(d.b.function)})`),
    ms.el("label", {}, onlyDiff, " only differences"), body);
  draw();
  view.dataset.ready = "diff";
};
