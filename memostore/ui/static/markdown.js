// Text logged with add_text, as TensorBoard shows it: Markdown (with its tables and fenced
// code extensions), in a safe subset: headings, paragraphs, emphasis, code, block quotes,
// lists, tables, rules and links to http, https or mailto addresses. The result is built
// from DOM nodes whose text is set, never from HTML: markup in the text (a <script>, an
// <img onerror>) is shown as the characters it is, and a link to any other scheme
// (javascript:, data:) is shown as its text.
"use strict";

ms.markdown = {};

// Longer texts are shown as they are, in a pre: emphasis is matched by scanning ahead, so
// a long text of unmatched asterisks would cost time quadratic in its length.
ms.markdown.MAX_CHARS = 20000;

// The DOM of *text* as Markdown: a div.markdown.
ms.markdown.render = function (text) {
  const source = String(text === null || text === undefined ? "" : text);
  if (source.length > ms.markdown.MAX_CHARS) return ms.el("div", { class: "markdown" }, ms.el("pre", {}, source));
  const lines = source.replace(/\r\n?/g, "\n").split("\n");
  return ms.el("div", { class: "markdown" }, ms.markdown.blocks(lines));
};

ms.markdown.FENCE = /^ {0,3}(`{3,}|~{3,})\s*([^`\s]*)[^`]*$/;
ms.markdown.HEADING = /^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$/;
ms.markdown.RULE = /^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$/;
ms.markdown.ITEM = /^( {0,3})([-*+]|\d{1,9}[.)])[ \t]+(.*)$/;
ms.markdown.QUOTE = /^ {0,3}> ?(.*)$/;
ms.markdown.TABLE_RULE = /^ {0,3}\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$/;

ms.markdown.blank = (line) => /^\s*$/.test(line);

// Block elements of *lines*.
ms.markdown.blocks = function (lines) {
  const md = ms.markdown;
  const out = [];
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    let m;
    if (md.blank(line)) { i++; continue; }
    if ((m = line.match(md.FENCE))) {
      const body = [];
      i++;
      while (i < lines.length && !(lines[i].trim().startsWith(m[1][0].repeat(m[1].length)) && lines[i].trim().replace(/[`~]/g, "") === "")) body.push(lines[i++]);
      i++;  // the closing fence (or the end)
      out.push(ms.el("pre", {}, ms.el("code", m[2] ? { "data-lang": m[2] } : {}, body.join("\n"))));
      continue;
    }
    if (/^( {4}|\t)/.test(line)) {
      const body = [];
      while (i < lines.length && (/^( {4}|\t)/.test(lines[i]) || md.blank(lines[i]))) body.push(lines[i++].replace(/^( {4}|\t)/, ""));
      while (body.length && md.blank(body[body.length - 1])) body.pop();
      out.push(ms.el("pre", {}, ms.el("code", {}, body.join("\n"))));
      continue;
    }
    if ((m = line.match(md.HEADING))) {
      out.push(ms.el("h" + m[1].length, {}, md.inline(m[2] || "")));
      i++;
      continue;
    }
    if (md.RULE.test(line)) { out.push(ms.el("hr", {})); i++; continue; }
    if (md.QUOTE.test(line)) {
      const body = [];
      while (i < lines.length && !md.blank(lines[i])) {
        const q = lines[i].match(md.QUOTE);
        body.push(q ? q[1] : lines[i]);
        i++;
      }
      out.push(ms.el("blockquote", {}, md.blocks(body)));
      continue;
    }
    if ((m = line.match(md.ITEM))) {
      const [list, next] = md.list(lines, i);
      out.push(list);
      i = next;
      continue;
    }
    if (line.includes("|") && i + 1 < lines.length && md.TABLE_RULE.test(lines[i + 1]) && lines[i + 1].includes("-")) {
      const [table, next] = md.table(lines, i);
      out.push(table);
      i = next;
      continue;
    }
    // A paragraph: up to a blank line or the start of another block.
    const body = [line];
    i++;
    while (i < lines.length && !md.blank(lines[i]) && !md.FENCE.test(lines[i]) && !md.HEADING.test(lines[i]) &&
      !md.QUOTE.test(lines[i]) && !md.ITEM.test(lines[i]) && !md.RULE.test(lines[i]) && !/^ {0,3}=+\s*$/.test(lines[i])) body.push(lines[i++]);
    // A line of = or - under a paragraph makes it a heading (a "setext" heading).
    const underline = i < lines.length ? lines[i].match(/^ {0,3}(=+|-+)\s*$/) : null;
    if (underline) { out.push(ms.el(underline[1][0] === "=" ? "h1" : "h2", {}, md.inline(body.join("\n")))); i++; continue; }
    out.push(ms.el("p", {}, md.inline(body.join("\n"))));
  }
  return out;
};

// A list starting at lines[start]: (ul or ol, the index after it). An item holds the lines
// indented under it, parsed as blocks (a nested list, a second paragraph).
ms.markdown.list = function (lines, start) {
  const md = ms.markdown;
  const first = lines[start].match(md.ITEM);
  const ordered = /\d/.test(first[2]);
  const indent = first[1].length;
  const items = [];
  let i = start;
  let loose = false;
  while (i < lines.length) {
    const m = lines[i].match(md.ITEM);
    if (!m || m[1].length !== indent || /\d/.test(m[2]) !== ordered) break;
    const width = m[1].length + m[2].length + 1;
    const body = [m[3]];
    i++;
    while (i < lines.length) {
      const line = lines[i];
      if (md.blank(line)) {
        // A blank line continues the item only when the next line is indented under it.
        if (i + 1 < lines.length && /^\s/.test(lines[i + 1]) && lines[i + 1].search(/\S/) > indent) {
          body.push("");
          loose = true;
          i++;
          continue;
        }
        break;
      }
      const at = line.search(/\S/);
      const sub = line.match(md.ITEM);
      if (sub && sub[1].length === indent) break;  // the next item
      if (at <= indent && (md.HEADING.test(line) || md.RULE.test(line) || md.QUOTE.test(line))) break;
      body.push(at >= width ? line.slice(width) : line.trimStart());
      i++;
    }
    items.push(body);
    if (i < lines.length && md.blank(lines[i])) {
      const after = lines.slice(i).find((l) => !md.blank(l));
      const next = after && after.match(md.ITEM);
      if (next && next[1].length === indent && /\d/.test(next[2]) === ordered) {
        loose = true;
        while (md.blank(lines[i])) i++;
      }
    }
  }
  const list = ms.el(ordered ? "ol" : "ul", {}, items.map((body) => {
    const blocks = md.blocks(body);
    // A tight item's one paragraph is its text, as Markdown lays it out.
    if (!loose) return ms.el("li", {}, blocks.flatMap((b) => (b.tagName === "P" ? [...b.childNodes] : [b])));
    return ms.el("li", {}, blocks);
  }));
  if (ordered) {
    const number = parseInt(first[2], 10);
    if (number !== 1) list.setAttribute("start", String(number));
  }
  return [list, i];
};

ms.markdown.cells = function (line) {
  let text = line.trim();
  if (text.startsWith("|")) text = text.slice(1);
  if (text.endsWith("|") && !text.endsWith("\\|")) text = text.slice(0, -1);
  const cells = [];
  let cell = "";
  for (let k = 0; k < text.length; k++) {
    if (text[k] === "\\" && text[k + 1] === "|") { cell += "|"; k++; continue; }
    if (text[k] === "|") { cells.push(cell.trim()); cell = ""; continue; }
    cell += text[k];
  }
  cells.push(cell.trim());
  return cells;
};

ms.markdown.table = function (lines, start) {
  const md = ms.markdown;
  const head = md.cells(lines[start]);
  const align = md.cells(lines[start + 1]).map((c) => (c.startsWith(":") && c.endsWith(":") ? "center" : c.endsWith(":") ? "right" : c.startsWith(":") ? "left" : null));
  const row = (cells, tag) => ms.el("tr", {}, head.map((_, k) => ms.el(tag, align[k] ? { style: `text-align:${align[k]}` } : {}, md.inline(cells[k] || ""))));
  const body = [];
  let i = start + 2;
  while (i < lines.length && !md.blank(lines[i]) && lines[i].includes("|")) body.push(row(md.cells(lines[i++]), "td"));
  return [ms.el("table", {}, ms.el("thead", {}, row(head, "th")), ms.el("tbody", {}, body)), i];
};

// A link's address if it is http, https or mailto (as the browser itself reads it: tabs,
// line breaks and case do not hide a javascript: scheme from this check), else null.
ms.markdown.safeUrl = function (href) {
  let url;
  try { url = new URL(href, location.href); } catch (error) { return null; }
  return ["http:", "https:", "mailto:"].includes(url.protocol) ? url.href : null;
};

ms.markdown.link = function (label, href, title) {
  const safe = ms.markdown.safeUrl(href);
  if (safe === null) return ms.el("span", { class: "unsafe-link", title: "not a link: only http, https and mailto addresses are" }, label);
  return ms.el("a", { href: safe, title: title || null, target: "_blank", rel: "noopener noreferrer nofollow" }, label);
};

// Inline Markdown: code spans, backslash escapes, links, emphasis and hard line breaks.
// Each rule is tried where the text stands (sticky expressions); what none matches is text.
ms.markdown.INLINE = [
  [/(`+)([^`]|[^`][\s\S]*?[^`])\1(?!`)/y, (m) => ms.el("code", {}, m[2].trim() || m[2])],
  [/\\([\\`*_{}[\]()#+\-.!|>~<])/y, (m) => m[1]],
  [/!\[([^\]]*)\]\(\s*<?([^\s<>()]*)>?(?:\s+"([^"]*)")?\s*\)/y, (m) => ms.markdown.link(m[1] || m[2], m[2], m[3])],
  [/\[((?:[^[\]]|\[[^\]]*\])*)\]\(\s*<?([^\s<>()]*)>?(?:\s+"([^"]*)")?\s*\)/y, (m) => ms.markdown.link(ms.markdown.inline(m[1]), m[2], m[3])],
  [/<((?:https?|mailto):[^\s<>]+)>/y, (m) => ms.markdown.link(m[1], m[1])],
  [/\*\*(?=\S)([\s\S]*?\S)\*\*/y, (m) => ms.el("strong", {}, ms.markdown.inline(m[1]))],
  [/(?<![A-Za-z0-9])__(?=\S)([\s\S]*?\S)__(?![A-Za-z0-9])/y, (m) => ms.el("strong", {}, ms.markdown.inline(m[1]))],
  [/\*(?=[^\s*])([\s\S]*?[^\s*])\*/y, (m) => ms.el("em", {}, ms.markdown.inline(m[1]))],
  [/(?<![A-Za-z0-9])_(?=[^\s_])([\s\S]*?[^\s_])_(?![A-Za-z0-9])/y, (m) => ms.el("em", {}, ms.markdown.inline(m[1]))],
  [/ {2,}\n/y, () => ms.el("br", {})],
];

ms.markdown.inline = function (text) {
  const out = [];
  let plain = "";
  let at = 0;
  while (at < text.length) {
    let matched = null;
    for (const [pattern, make] of ms.markdown.INLINE) {
      pattern.lastIndex = at;
      const m = pattern.exec(text);
      if (m) { matched = [m, make]; break; }
    }
    if (!matched) { plain += text[at++]; continue; }
    if (plain) { out.push(plain); plain = ""; }
    out.push(matched[1](matched[0]));
    at += matched[0][0].length;
  }
  if (plain) out.push(plain);
  return out;
};
