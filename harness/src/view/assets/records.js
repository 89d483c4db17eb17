// Crucible decisions and search lineages, key by key: whatever a record holds is shown, so a
// richer decision record (rule, thresholds, bound, method, reasons, next step) needs no change.

import { el, api, href, badge, kv, num } from "./dom.js";

export async function decisionView(params) {
  const d = await api("decision", { id: params.id });
  const r = d.decision || {};
  const known = new Set(["verdict", "reasons", "rule", "statistics", "contract_hash", "stage"]);
  const rest = Object.fromEntries(Object.entries(r).filter(([k]) => !known.has(k)));
  return {
    node: el("div", { "data-test": "decision" },
      el("h1", {}, "Decision ", d.id),
      el("div", { class: "grid" },
        el("div", {}, el("span", { class: "label" }, "verdict"), badge(d.verdict || "?", (d.verdict || "").toLowerCase(), { "data-test": "verdict" })),
        el("div", {}, el("span", { class: "label" }, "stage"), d.stage || "–"),
        el("div", {}, el("span", { class: "label" }, "contract"), d.contract_hash || "–"),
        el("div", {}, el("span", { class: "label" }, "trials journaled"), d.journal_trials),
        el("div", {}, el("span", { class: "label" }, "folder"), d.path),
        d.arms ? el("div", {}, el("span", { class: "label" }, "arms"), el("a", { href: href("compare", { baseline: d.arms[0], candidate: d.arms[1] }), "data-test": "arms" }, "paired view of the two arms")) : null),
      el("h2", {}, "Reasons"),
      el("div", { "data-test": "reasons" }, (d.reasons || []).length ? d.reasons.map((x) => badge(x, "flag")) : el("span", { class: "muted" }, "none")),
      el("h2", {}, "Rule"), el("div", { "data-test": "rule" }, kv(r.rule)),
      el("h2", {}, "Statistics"),
      r.statistics ? el("div", { class: "grid" },
        ["estimate", "lower_bound", "lower_bound_method", "baseline_mean", "candidate_mean", "tasks", "families", "pairs"].map((k) =>
          el("div", {}, el("span", { class: "label" }, k), typeof r.statistics[k] === "number" && !Number.isInteger(r.statistics[k]) ? num(r.statistics[k]) : String(r.statistics[k] ?? "–")))) : el("span", { class: "muted" }, "none (no comparison was made)"),
      r.statistics ? el("details", {}, el("summary", {}, "every statistic"), kv(r.statistics)) : null,
      el("h2", {}, "The rest of the record"), el("div", { "data-test": "record" }, kv(rest)),
      el("h2", {}, "Contract"), d.contract ? el("details", {}, el("summary", {}, "every key"), kv(d.contract)) : el("span", { class: "muted" }, "no contract.json"),
      d.problems.length ? el("div", { class: "problems" }, d.problems.map((p) => el("div", {}, p))) : null),
    crumbs: [el("a", { href: "#/" }, "runs"), el("span", {}, d.id)],
  };
}

export async function searchView(params) {
  const s = await api("search", { id: params.id });
  const decisions = new Set(s.decisions);
  const rows = s.lineage.map((e) => {
    const dec = `${s.id}/candidates/${e.id}`;
    return el("tr", { "data-entry": e.id },
      el("td", {}, decisions.has(dec) ? el("a", { href: href("decision", { id: dec }) }, e.id) : e.id),
      el("td", {}, e.kind || ""), el("td", {}, e.parent || "–"), el("td", {}, e.mutation ? JSON.stringify(e.mutation) : "–"),
      el("td", {}, e.hypothesis || ""),
      el("td", {}, e.verdict ? badge(e.verdict, e.verdict.toLowerCase()) : "–", (e.reasons || []).map((x) => badge(x))),
      el("td", { class: "num" }, num(e.estimate)), el("td", { class: "num" }, num(e.lower_bound)),
      el("td", {}, e.champion || ""), el("td", { class: "muted" }, e.spent ? kv(e.spent) : ""));
  });
  return {
    node: el("div", { "data-test": "search" },
      el("h1", {}, "Search ", s.id, " ", el("span", { class: "muted" }, s.path)),
      el("table", { "data-test": "lineage" },
        el("thead", {}, el("tr", {}, ["entry", "kind", "parent", "mutation", "hypothesis", "verdict", "estimate", "lower bound", "champion", "spent"].map((h) => el("th", {}, h)))),
        el("tbody", {}, rows)),
      el("h2", {}, "Promotion"), s.promotion ? kv(s.promotion) : el("span", { class: "muted" }, "not promoted yet"),
      s.decisions.filter((x) => x.includes("/promotion")).map((x) => el("div", {}, el("a", { href: href("decision", { id: x }) }, x))),
      el("h2", {}, "Configuration"), el("details", {}, el("summary", {}, "search.json"), kv(s.config)),
      s.problems.length ? el("div", { class: "problems" }, s.problems.map((p) => el("div", {}, p))) : null),
    crumbs: [el("a", { href: "#/" }, "runs"), el("span", {}, s.id)],
  };
}
