// Small helpers shared by the dashboard's scripts.
"use strict";

const ms = {};

// plotly.js (4.8 MB) is loaded on first use, once the table is drawn: compiling it
// takes the browser's main thread for a while, which would delay the table.
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
  if (Number.isInteger(value)) return String(value);
  const abs = Math.abs(value);
  return abs !== 0 && (abs < 1e-3 || abs >= 1e6) ? value.toExponential(3) : value.toPrecision(5).replace(/\.?0+$/, "");
};

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

// One colour per run, stable for the page's life, so a run keeps its colour in every chart.
ms.palette = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
  "#e377c2", "#17becf", "#bcbd22", "#7f7f7f", "#393b79", "#637939"];
ms.colors = new Map();
ms.colorOf = function (id) {
  if (!ms.colors.has(id)) ms.colors.set(id, ms.palette[ms.colors.size % ms.palette.length]);
  return ms.colors.get(id);
};

ms.refreshMs = function () { return Number(document.getElementById("refresh").value); };
