// The runs page (runs with their scores, decisions, searches) and a run's trials page.

import { el, api, href, num, pct, seconds, usd, badge, outcomeClass, errorBox } from "./dom.js";

const INFRA = new Set(["environment_unsupported", "environment_setup_failed", "verifier_crashed",
  "verifier_timeout", "reward_missing", "reward_malformed", "sandbox_lost", "provider_unavailable",
  "task_hash_mismatch", "cancelled"]);

function outcomes(map) {
  return Object.entries(map || {}).map(([o, n]) => badge(`${o} ${n}`, outcomeClass(o, INFRA.has(o))));
}

function accuracy(s) {
  const ci = s.ci95 ? ` [${num(s.ci95[0])}, ${num(s.ci95[1])}]` : "";
  return `${num(s.accuracy)}${ci}`;
}

export async function runsView() {
  const page = await api("runs");
  const picked = [];
  const compareBtn = el("button", { disabled: true, "data-test": "compare-picked", onclick: () => {
    location.hash = href("compare", { baseline: picked[0], candidate: picked[1] });
  } }, "compare the two picked runs");
  const rows = page.runs.map((r) => {
    const box = el("input", { type: "checkbox", "data-pick": r.key, title: "pick for a paired comparison", onchange: (e) => {
      const i = picked.indexOf(r.key);
      if (e.target.checked && i < 0) picked.push(r.key);
      if (!e.target.checked && i >= 0) picked.splice(i, 1);
      while (picked.length > 2) {
        const old = picked.shift();
        const other = document.querySelector(`input[data-pick="${CSS.escape(old)}"]`);
        if (other) other.checked = false;
      }
      compareBtn.disabled = picked.length !== 2;
    } });
    const s = r.summary;
    const pk = (s.pass_at_k || []).map(([k, v]) => `pass@${k} ${num(v)}`).join(", ");
    return el("tr", { "data-run": r.key },
      el("td", {}, box),
      el("td", {}, el("a", { href: href("run", { run: r.key }) }, r.key), r.origin !== "geode" ? [" ", badge(r.origin)] : null),
      el("td", {}, r.pack), el("td", {}, r.agent === "geode" ? r.model : `${r.model} / ${r.agent}`), el("td", { class: "num" }, r.seed),
      el("td", {}, badge(r.status, r.status === "running" ? "infra" : ""),
        r.running_trials ? el("span", { class: "muted", "data-test": "running" }, ` ${r.running_trials} running`) : null),
      el("td", { class: "num", "data-test": "finished" }, r.finished_trials),
      el("td", { class: "num", "data-test": "accuracy" }, accuracy(s)),
      el("td", {}, pk), el("td", {}, outcomes(s.outcomes)),
      el("td", { class: "num" }, seconds(r.duration_seconds)), el("td", { class: "num" }, usd(s.cost_usd)));
  });
  const runs = el("table", { "data-test": "runs" },
    el("thead", {}, el("tr", {}, ["", "run", "pack", "model / agent", "seed", "status", "trials", "accuracy [95% CI]",
      "pass@k", "outcomes", "duration", "cost"].map((h) => el("th", {}, h)))),
    el("tbody", {}, rows.length ? rows : el("tr", {}, el("td", { colspan: 12, class: "muted" }, "no runs in this folder yet"))));
  const decisions = el("table", { "data-test": "decisions" },
    el("thead", {}, el("tr", {}, ["decision", "stage", "verdict", "reasons", "arms"].map((h) => el("th", {}, h)))),
    el("tbody", {}, page.decisions.map((d) => el("tr", { "data-decision": d.id },
      el("td", {}, el("a", { href: href("decision", { id: d.id }) }, d.id)),
      el("td", {}, d.stage || "–"),
      el("td", {}, badge(d.verdict || "?", (d.verdict || "").toLowerCase())),
      el("td", {}, (d.reasons || []).map((x) => badge(x))),
      el("td", {}, d.arms ? el("a", { href: href("compare", { baseline: d.arms[0], candidate: d.arms[1] }) }, "paired view") : "–")))));
  const searches = el("table", { "data-test": "searches" },
    el("thead", {}, el("tr", {}, ["search", "folder", "lineage entries", "champion", "promotion"].map((h) => el("th", {}, h)))),
    el("tbody", {}, page.searches.map((s) => el("tr", {},
      el("td", {}, el("a", { href: href("search", { id: s.id }) }, s.id)), el("td", { class: "muted" }, s.path),
      el("td", { class: "num" }, s.entries), el("td", {}, s.champion || "–"), el("td", {}, s.promotion || "–")))));
  return {
    node: el("div", {},
      el("h1", {}, "Runs ", el("span", { class: "muted" }, page.jobs)),
      el("div", { class: "pager" }, compareBtn),
      runs,
      page.decisions.length ? [el("h2", {}, "Crucible decisions"), decisions] : null,
      page.searches.length ? [el("h2", {}, "Searches"), searches] : null,
      page.problems.length ? el("div", { class: "problems", "data-test": "problems" }, el("h2", {}, "Files that could not be read"),
        page.problems.map((p) => el("div", {}, p))) : null),
    crumbs: [],
  };
}

const COLUMNS = [
  ["trial", "trial"], ["task", "task"], ["category", "category"], [null, "attempt"], ["outcome", "outcome"],
  ["reward", "reward"], [null, "exception"], [null, "integrity"], ["duration", "duration"], ["cost", "cost"],
];

export async function runView(params) {
  const run = params.run;
  const query = Object.assign({ limit: 100 }, params);
  let page;
  try {
    page = await api("trials", query);
  } catch (e) {
    return { node: errorBox(e), crumbs: [el("a", { href: "#/" }, "runs"), el("span", {}, run)] };
  }
  const go = (changes) => {
    const next = Object.assign({}, params, changes);
    if (!("offset" in changes)) delete next.offset;
    for (const k of Object.keys(next)) if (next[k] === "" || next[k] === undefined) delete next[k];
    location.hash = href("run", next);
  };
  const select = (name, label, options) => el("label", {}, label,
    el("select", { name, "data-filter": name, onchange: (e) => go({ [name]: e.target.value }) },
      el("option", { value: "" }, "all"),
      options.map(([v, text]) => el("option", { value: v, selected: params[name] === v }, text))));
  const input = (name, label, narrow) => el("label", {}, label,
    el("input", { name, "data-filter": name, value: params[name] || "", class: narrow ? "narrow" : "",
      onchange: (e) => go({ [name]: e.target.value.trim() }) }));
  const f = page.facets;
  const filters = el("div", { class: "filters", "data-test": "filters" },
    input("task", "task contains"),
    select("category", "category", Object.entries(f.categories).map(([c, n]) => [c, `${c || "(none)"} (${n})`])),
    select("outcome", "outcome", [["agent", "agent outcomes"], ["infrastructure", "infrastructure"],
      ...Object.entries(f.outcomes).map(([o, n]) => [o, `${o} (${n})`])]),
    select("exception", "exception class", Object.entries(f.exceptions).map(([c, n]) => [c, `${c} (${n})`])),
    select("integrity", "integrity flag", ["any", "denied_dangerous_calls", "reward_tampering", "network_attempts",
      "uncertain_effects", "sealed_data_access"].map((k) => [k, k])),
    input("reward_min", "reward ≥", true), input("reward_max", "reward ≤", true),
    input("min_seconds", "seconds ≥", true), input("max_seconds", "seconds ≤", true),
    input("q", "transcript contains"));
  const sortBy = params.sort || "trial";
  const desc = params.desc === "true";
  const head = el("tr", {}, COLUMNS.map(([key, label]) => el("th", {
    class: key ? "sortable" + (key === sortBy ? " sorted" + (desc ? "" : " asc") : "") : "",
    "data-sort": key || undefined,
    onclick: key ? () => go({ sort: key, desc: key === sortBy ? String(!desc) : "false" }) : undefined,
  }, label)));
  const body = page.items.map((t) => el("tr", { "data-trial": t.trial_name, "data-outcome": t.outcome || "running" },
    el("td", {}, el("a", { href: href("trial", { run, trial: t.trial_name }) }, t.trial_name)),
    el("td", {}, t.task_id), el("td", {}, t.category), el("td", { class: "num" }, t.attempt),
    el("td", { class: outcomeClass(t.outcome, t.infrastructure) }, t.outcome || t.status),
    el("td", { class: "num" }, num(t.reward, 2)), el("td", {}, t.exception_class || ""),
    el("td", {}, Object.entries(t.integrity || {}).map(([k, n]) => badge(`${k} ${n}`, "flag"))),
    el("td", { class: "num" }, seconds(t.duration_seconds)), el("td", { class: "num" }, usd(t.cost_usd))));
  const offset = page.offset;
  const pager = el("div", { class: "pager" },
    el("span", { "data-test": "count" }, `${page.total} of ${page.run_total} trials`,
      page.total ? `, showing ${offset + 1}–${offset + page.items.length}` : ""),
    el("button", { disabled: offset === 0, onclick: () => go({ offset: Math.max(0, offset - query.limit) }) }, "previous"),
    el("button", { disabled: offset + page.items.length >= page.total, onclick: () => go({ offset: offset + query.limit }) }, "next"));
  return {
    node: el("div", {}, el("h1", {}, "Run ", run), filters, pager,
      el("table", { "data-test": "trials" }, el("thead", {}, head), el("tbody", {}, body))),
    crumbs: [el("a", { href: "#/" }, "runs"), el("span", {}, run)],
  };
}
