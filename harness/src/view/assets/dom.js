// DOM helpers. Data from the jobs folder (agent output included) only ever becomes text nodes:
// nothing here parses a string as HTML.

export function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (k === "class") node.className = v;
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

export async function api(path, params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) {
    if (v !== undefined && v !== null && v !== "") q.set(k, v);
  }
  const url = "/api/" + path + (q.toString() ? "?" + q : "");
  const r = await fetch(url, { credentials: "same-origin", cache: "no-store" });
  const body = await r.json().catch(() => ({ error: `${url}: HTTP ${r.status}` }));
  if (!r.ok) throw new Error(body.error || `${url}: HTTP ${r.status}`);
  return body;
}

export function href(view, params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) {
    if (v !== undefined && v !== null && v !== "") q.set(k, v);
  }
  return "#/" + view + (q.toString() ? "?" + q : "");
}

export const num = (x, d = 3) => (x === null || x === undefined || Number.isNaN(x) ? "–" : Number(x).toFixed(d));
export const pct = (x) => (x === null || x === undefined ? "–" : (100 * x).toFixed(1) + "%");

export function seconds(s) {
  if (s === null || s === undefined) return "–";
  if (s < 60) return s.toFixed(1) + " s";
  if (s < 3600) return (s / 60).toFixed(1) + " min";
  return (s / 3600).toFixed(2) + " h";
}

export const usd = (x) => (x ? "$" + Number(x).toFixed(4) : "$0");

export function outcomeClass(outcome, infra) {
  if (!outcome) return "";
  if (infra) return "infra";
  return outcome;
}

export function badge(text, cls, attrs) {
  return el("span", Object.assign({ class: "badge " + (cls || "") }, attrs || {}), text);
}

// A value of any shape as a key/value table (records are shown this way, so keys a newer
// writer adds appear without a change here).
export function kv(value, depth = 0) {
  if (value === null || value === undefined) return el("span", { class: "muted" }, "–");
  if (Array.isArray(value)) {
    if (value.length === 0) return el("span", { class: "muted" }, "[]");
    if (value.every((v) => v === null || typeof v !== "object")) return value.map(String).join(", ");
    return el("table", { class: "kv" }, value.map((v, i) => el("tr", {}, el("td", {}, String(i)), el("td", {}, kv(v, depth + 1)))));
  }
  if (typeof value === "object") {
    const rows = Object.entries(value).map(([k, v]) =>
      el("tr", { "data-key": k }, el("td", {}, k), el("td", {}, depth > 4 ? JSON.stringify(v) : kv(v, depth + 1))));
    return el("table", { class: "kv" }, rows);
  }
  return String(value);
}

// Long text collapsed behind its first lines.
export function longText(text, lines = 12, attrs) {
  const s = String(text ?? "");
  const all = s.split("\n");
  if (all.length <= lines && s.length <= 3000) return el("pre", attrs || {}, s);
  const head = all.slice(0, lines).join("\n").slice(0, 3000);
  const d = el("details", attrs || {}, el("summary", {}, `${all.length} lines, ${s.length} characters: show all`), el("pre", {}, s));
  return el("div", {}, el("pre", {}, head + "\n…"), d);
}

export function errorBox(e) {
  return el("div", { class: "error-box", "data-test": "error" }, String(e && e.message ? e.message : e));
}
