// Two runs paired task by task: the comparison `geode compare` prints (the graders' one pairing
// with the crucible's statistics), then every shared task's delta with its interval.

import { el, api, href, num, kv } from "./dom.js";

export async function compareView(params) {
  const { baseline, candidate } = params;
  const d = await api("compare", { baseline, candidate });
  const c = d.comparison;
  const s = c.statistics;
  const t = s.t || {};
  const interval = t.interval ? `[${num(t.interval.lower)}, ${num(t.interval.upper)}]` : "–";
  const summary = el("div", { class: "grid", "data-test": "compare-summary" },
    el("div", {}, el("span", { class: "label" }, "baseline"), el("a", { href: href("run", { run: baseline }) }, baseline), ` ${d.baseline.model}${d.baseline.agent && d.baseline.agent !== "geode" ? ` / ${d.baseline.agent}` : ""}`),
    el("div", {}, el("span", { class: "label" }, "candidate"), el("a", { href: href("run", { run: candidate }) }, candidate), ` ${d.candidate.model}${d.candidate.agent && d.candidate.agent !== "geode" ? ` / ${d.candidate.agent}` : ""}`),
    el("div", {}, el("span", { class: "label" }, "baseline mean"), num(s.baseline_mean)),
    el("div", {}, el("span", { class: "label" }, "candidate mean"), num(s.candidate_mean)),
    el("div", {}, el("span", { class: "label" }, "estimate (candidate − baseline)"), el("b", { "data-test": "estimate" }, num(s.estimate))),
    el("div", {}, el("span", { class: "label" }, `${Math.round(100 * s.confidence)}% t-interval`), interval),
    el("div", {}, el("span", { class: "label" }, `lower bound (${s.lower_bound_method})`), num(s.lower_bound)),
    el("div", {}, el("span", { class: "label" }, "sign-flip p (two-sided)"), num(c.p_two_sided)),
    el("div", {}, el("span", { class: "label" }, "minimum detectable effect"), num(s.minimum_detectable_effect)),
    el("div", {}, el("span", { class: "label" }, "correlation of task means"), num(c.correlation)),
    el("div", {}, el("span", { class: "label" }, "tasks / pairs"), `${s.tasks} / ${s.pairs}`),
    el("div", {}, el("span", { class: "label" }, "dropped pairs (infrastructure)"), c.dropped_pairs),
    el("div", {}, el("span", { class: "label" }, "only in baseline / candidate"), `${c.only_baseline} / ${c.only_candidate} tasks, ${c.unpaired_trials} unpaired trials`),
    s.degenerate ? el("div", {}, el("span", { class: "label" }, "degenerate"), JSON.stringify(s.degenerate)) : null);
  const tasks = [...c.tasks].sort((a, b) => (b.delta ?? -9) - (a.delta ?? -9) || a.task_id.localeCompare(b.task_id));
  const rows = tasks.map((x) => el("tr", { "data-task": x.task_id },
    el("td", {}, x.task_id), el("td", {}, x.category),
    el("td", { class: "num" }, x.pairs), el("td", { class: "num" }, x.dropped),
    el("td", { class: "num" }, el("a", { href: href("run", { run: baseline, task: x.task_id }) }, num(x.baseline_mean, 2))),
    el("td", { class: "num" }, el("a", { href: href("run", { run: candidate, task: x.task_id }) }, num(x.candidate_mean, 2))),
    el("td", { class: "num " + (x.delta > 0 ? "passed" : x.delta < 0 ? "failed" : ""), "data-test": "delta" }, num(x.delta, 2)),
    el("td", { class: "num muted" }, x.interval ? `[${num(x.interval[0], 2)}, ${num(x.interval[1], 2)}]` : "–")));
  return {
    node: el("div", {},
      el("h1", {}, "Paired comparison"),
      summary,
      el("h2", {}, `Tasks (${c.tasks.length} shared)`),
      el("table", { "data-test": "compare-tasks" },
        el("thead", {}, el("tr", {}, ["task", "category", "pairs", "dropped", "baseline", "candidate", "delta", "95% interval"].map((h) => el("th", {}, h)))),
        el("tbody", {}, rows)),
      el("h2", {}, "Per family"), kv(s.per_family),
      el("details", {}, el("summary", {}, "every statistic"), kv(s))),
    crumbs: [el("a", { href: "#/" }, "runs"), el("span", {}, `${baseline} vs ${candidate}`)],
  };
}

