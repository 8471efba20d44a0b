// Small helpers shared by the dashboard's scripts.
"use strict";

const ms = {};

// plotly.js (4.8 MB) is loaded on first use, once the table and the first charts' lines
// are drawn: compiling it takes the browser's main thread for a while.
ms.plotly = function () {
  if (!ms.plotlyLoading) {
    ms.plotlyLoading = new Promise((resolve, reject) => {
      const script = document.createElement("script");
      script.src = "/static/plotly.min.js";
      script.onload = resolve;
      script.onerror = () => reject(new Error("plotly.min.js did not load"));
      document.head.append(script);
    });
  }
  return ms.plotlyLoading;
};

// Resolved once the browser has painted what the page holds now (after 200 ms at most: a
// page in a background tab paints nothing).
ms.painted = function () {
  return new Promise((resolve) => { requestAnimationFrame(() => setTimeout(resolve, 0)); setTimeout(resolve, 200); });
};

ms.get = async function (path) {
  const response = await fetch(path, { cache: "no-store" });
  const data = await response.json();
  if (!response.ok) throw new Error(data.error || response.statusText);
  return data;
};

ms.el = function (tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (value !== undefined && value !== null) node.setAttribute(key, value);
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
};

ms.num = function (value) {
  if (value === null || value === undefined || value === "") return "";
  if (typeof value !== "number") return String(value);
  if (!Number.isFinite(value)) return Number.isNaN(value) ? "NaN" : value > 0 ? "+inf" : "-inf";
  if (Number.isInteger(value)) return String(value);
  const abs = Math.abs(value);
  return abs !== 0 && (abs < 1e-3 || abs >= 1e6) ? value.toExponential(3) : value.toPrecision(5).replace(/\.?0+$/, "");
};

// "1 point", "3 points".
ms.plural = function (n, word) { return `${n} ${word}${n === 1 ? "" : "s"}`; };

ms.duration = function (seconds) {
  if (typeof seconds !== "number") return "";
  if (seconds < 1) return (seconds * 1000).toFixed(0) + " ms";
  if (seconds < 120) return seconds.toFixed(1) + " s";
  if (seconds < 7200) return (seconds / 60).toFixed(1) + " min";
  return (seconds / 3600).toFixed(1) + " h";
};

// A UNIX time as "YYYY-MM-DD HH:MM:SS" in UTC (as the created column shows it).
ms.time = function (seconds) {
  if (typeof seconds !== "number") return "";
  return new Date(seconds * 1000).toISOString().slice(0, 19).replace("T", " ");
};

ms.short = function (id) { return String(id).slice(0, 10); };

ms.fname = function (fn) { return String(fn || "").split(":").pop(); };

// Thirty colours that stay apart on a white page (each pair at least 26 CIELAB ΔE apart):
// Tableau's first nine and a dark slate, then the candidates farthest from those taken.
ms.palette = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
  "#17becf", "#bcbd22", "#263238", "#445500", "#0033bb", "#ff0077", "#88bb88", "#aa7722",
  "#880044", "#aa11aa", "#ff8888", "#2288ff", "#007766", "#883300", "#ff77ff", "#114499",
  "#aaaaee", "#663366", "#cc1188", "#ccaa77", "#9977ff", "#227733", "#00bbff"];

// A run's colour follows its id, not its position: the slot among the first ten (the most
// readable) its id hashes to, or the next free one when a run shown with it holds that slot. Kept for the browser's life
// (localStorage), so a run keeps its colour in every chart, page and reload.
ms.hash = function (text) {
  let h = 0x811c9dc5;  // FNV-1a, 32 bits
  for (let i = 0; i < text.length; i++) { h ^= text.charCodeAt(i); h = Math.imul(h, 0x01000193) >>> 0; }
  return h;
};
ms.saved = function (key, fallback) {
  try { const text = localStorage.getItem("memostore." + key); return text === null ? fallback : JSON.parse(text); }
  catch (error) { return fallback; }
};
ms.save = function (key, value) {
  try { localStorage.setItem("memostore." + key, JSON.stringify(value)); } catch (error) { /* private mode: kept for the page only */ }
};
ms.colors = new Map(Object.entries(ms.saved("colors", {})));
ms.assignColors = function (ids) {
  const n = ms.palette.length;
  const used = new Set();
  const pending = [];
  for (const id of new Set(ids)) {
    const slot = ms.colors.get(id);
    if (slot !== undefined && !used.has(slot)) used.add(slot); else pending.push(id);
  }
  for (const id of pending) {
    let slot = ms.hash(id) % 10;
    for (let k = 0; k < n && used.has(slot); k++) slot = (slot + 1) % n;
    used.add(slot);  // past thirty runs shown at once, colours repeat
    ms.colors.set(id, slot);
  }
  if (pending.length) {
    // The newest thousand assignments are kept: an old run's colour may be picked anew.
    const kept = [...ms.colors.entries()].slice(-1000);
    ms.colors = new Map(kept);
    ms.save("colors", Object.fromEntries(kept));
  }
};
ms.colorOf = function (id) {
  if (!ms.colors.has(id)) ms.assignColors([...(ms.table ? ms.table.selected : []), id]);
  return ms.palette[ms.colors.get(id)];
};

// A run's name: the one the server gives (a writer's log_dir), else the table's label for it
// (its function and the arguments that differ among the runs shown), else its short id.
ms.nameOf = function (id) {
  const row = ms.table && ms.table.byId.get(id);
  if (row && row.name) return String(row.name);
  const label = ms.table && ms.table.labels.get(id);
  return label || (row ? `${ms.fname(row.function)} ${ms.short(id)}` : ms.short(id));
};

// Text for plotly, which reads a few HTML tags in labels: a hostile tag or name stays text.
ms.plotText = function (text) {
  return String(text).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
};

// Save *text* (of media *type*), or what the data URL *text* holds without one, as a file
// named *name* (nothing leaves the browser).
ms.download = function (name, text, type) {
  const url = type ? URL.createObjectURL(new Blob([text], { type })) : text;
  const link = ms.el("a", { href: url, download: name });
  document.body.append(link);
  link.click();
  link.remove();
  if (type) setTimeout(() => URL.revokeObjectURL(url), 1000);
};

// A file name made of a tag: letters, digits, dot, dash and underscore.
ms.fileName = function (tag, ext) { return (String(tag).replace(/[^A-Za-z0-9._-]+/g, "_") || "chart") + "." + ext; };

// A wall time as local "YYYY-MM-DD HH:MM:SS".
ms.localTime = function (seconds) {
  if (typeof seconds !== "number") return "";
  const d = new Date(seconds * 1000);
  const p = (v) => String(v).padStart(2, "0");
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
};

// A regular expression from what the reader typed (case-insensitive), or an Error.
ms.regex = function (text) {
  try { return new RegExp(text || "", "i"); } catch (error) { return error; }
};

// The index of the point of *xs* nearest to *x* (xs sorted or not).
ms.nearest = function (xs, x) {
  let best = -1, gap = Infinity;
  let sorted = true;
  for (let i = 1; i < xs.length && sorted; i++) if (xs[i] < xs[i - 1]) sorted = false;
  if (sorted && xs.length) {
    let lo = 0, hi = xs.length - 1;
    while (hi - lo > 1) { const mid = (lo + hi) >> 1; if (xs[mid] <= x) lo = mid; else hi = mid; }
    return Math.abs(xs[lo] - x) <= Math.abs(xs[hi] - x) ? lo : hi;
  }
  xs.forEach((v, i) => { if (v !== null && Math.abs(v - x) < gap) { gap = Math.abs(v - x); best = i; } });
  return best;
};

// A run's swatch and name, as the legends, tooltips and cards show it.
ms.runLabel = function (id) {
  return ms.el("span", { class: "run-label", title: id },
    ms.el("span", { class: "swatch", style: `background:${ms.colorOf(id)}` }), ms.nameOf(id));
};

ms.refreshMs = function () { return Number(document.getElementById("refresh").value); };

// Light or dark: the reader's choice (the header's button: auto, light, dark), where auto
// follows the system's (prefers-color-scheme). Charts take their colours from ms.theme().
ms.THEMES = ["auto", "light", "dark"];
ms.themeChoice = ms.saved("theme", "auto");
ms.darkQuery = window.matchMedia("(prefers-color-scheme: dark)");
ms.applyTheme = function () {
  const dark = ms.themeChoice === "dark" || (ms.themeChoice === "auto" && ms.darkQuery.matches);
  document.documentElement.dataset.theme = dark ? "dark" : "light";
  const button = document.getElementById("theme");
  if (button) button.textContent = `theme: ${ms.themeChoice}`;
};
ms.theme = function () {
  return document.documentElement.dataset.theme === "dark"
    ? { paper: "#1e2326", font: "#d5dde1", grid: "#37424a" }
    : { paper: "#ffffff", font: "#263238", grid: "#eceff1" };
};
// *layout* in the page's colours (every plotly chart's layout goes through here).
ms.themed = function (layout) {
  const t = ms.theme();
  const axis = (a) => ({ gridcolor: t.grid, linecolor: t.grid, zerolinecolor: t.grid, ...(a || {}) });
  return { ...layout, paper_bgcolor: t.paper, plot_bgcolor: t.paper, font: { ...(layout.font || {}), color: t.font },
    xaxis: axis(layout.xaxis), yaxis: axis(layout.yaxis) };
};
ms.react = function (div, traces, layout, config) { return Plotly.react(div, traces, ms.themed(layout), config); };
ms.applyTheme();
