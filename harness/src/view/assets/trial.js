// A trial: its record (outcome, rewards, phases, image, integrity evidence), its transcript step
// by step (text, thinking, each tool call with input and output, errors marked), the timeline's
// pipeline decisions, and what the verifier left.

import { el, api, href, num, seconds, usd, badge, kv, longText, errorBox, outcomeClass } from "./dom.js";

// What the timeline says about each tool call (its outcome), to mark errors in the transcript.
function callOutcomes(timeline) {
  const out = new Map();
  for (const row of timeline) {
    if (row.kind === "tool.completed" && row.call_id) out.set(row.call_id, row.payload);
  }
  return out;
}

function outcomeText(o) {
  if (!o) return "";
  if (o.status === "denied") return `denied at ${o.step}: ${o.reason}`;
  if (o.reason) return `${o.status}: ${o.reason}`;
  return o.status || "";
}

function content(c, run, trial) {
  if (typeof c === "string") return longText(c, 12, { "data-test": "tool-output" });
  if (Array.isArray(c)) {
    return c.map((part) => {
      if (part && part.type === "image" && part.source && part.source.path) {
        const file = String(part.source.path).split("/").pop();
        return el("img", { class: "shot", alt: file, src: `/api/screenshot?${new URLSearchParams({ run, trial, file })}` });
      }
      if (part && part.type === "text") return longText(part.text, 12, { "data-test": "tool-output" });
      return el("pre", {}, JSON.stringify(part, null, 2));
    });
  }
  return el("pre", { "data-test": "tool-output" }, JSON.stringify(c, null, 2));
}

function transcript(traj, timeline, run, trial) {
  const outcomes = callOutcomes(timeline);
  const steps = traj.steps || [];
  return steps.map((s) => {
    const results = new Map(((s.observation || {}).results || []).map((r) => [r.source_call_id, r]));
    const calls = (s.tool_calls || []).map((c) => {
      const o = outcomes.get(c.tool_call_id);
      const failed = o && (o.is_error || (o.outcome && o.outcome.status !== "succeeded"));
      const r = results.get(c.tool_call_id);
      return el("div", { class: "call" + (failed ? " error" : ""), "data-test": "tool-call", "data-tool": c.function_name },
        el("div", { class: "name" }, c.function_name, failed ? ` — ${outcomeText(o.outcome) || "error"}` : "",
          o && o.duration_ms !== undefined ? el("span", { class: "muted" }, ` (${o.duration_ms} ms)`) : null),
        el("details", { open: true }, el("summary", {}, "input"),
          longText(c.arguments && c.arguments.command !== undefined && Object.keys(c.arguments).length === 1
            ? c.arguments.command : JSON.stringify(c.arguments, null, 2), 8, { "data-test": "tool-input" })),
        r ? el("div", {}, el("div", { class: "muted" }, "output"), content(r.content, run, trial))
          : el("div", { class: "muted" }, "no output recorded"));
    });
    const m = s.metrics || {};
    const anyError = (s.tool_calls || []).some((c) => {
      const o = outcomes.get(c.tool_call_id);
      return o && (o.is_error || (o.outcome && o.outcome.status !== "succeeded"));
    });
    return el("div", { class: `step ${s.source || ""}${anyError ? " error" : ""}`, "data-test": "step", "data-source": s.source },
      el("div", { class: "head" }, `#${s.step_id} ${s.source || ""} · ${s.timestamp || ""}`,
        s.model_name ? ` · ${s.model_name}` : "",
        m.prompt_tokens !== undefined ? ` · ${m.prompt_tokens} in / ${m.completion_tokens || 0} out` : "",
        m.cost_usd ? ` · ${usd(m.cost_usd)}` : ""),
      s.reasoning_content ? el("div", { class: "thinking", "data-test": "thinking" }, s.reasoning_content) : null,
      s.message ? el("div", { class: "text", "data-test": "message" }, typeof s.message === "string" ? s.message : JSON.stringify(s.message)) : null,
      calls);
  });
}

// Timeline rows that are decisions of the pipeline or the loop, not the conversation itself.
function isDecision(row) {
  if (row.kind === "tool.completed") return row.payload && row.payload.outcome && row.payload.outcome.status !== "succeeded";
  return !["message.user", "message.assistant", "tool.called", "tool.completed"].includes(row.kind);
}

function timelineTable(rows, all) {
  const shown = all ? rows : rows.filter(isDecision);
  const body = shown.map((r) => {
    const p = Object.assign({}, r.payload);
    delete p.kind;
    const denied = r.kind === "tool.completed" && p.outcome && p.outcome.status === "denied";
    return el("tr", { "data-kind": r.kind, class: denied ? "pick" : "" },
      el("td", { class: "num" }, r.seq), el("td", { class: "muted" }, r.ts),
      el("td", {}, badge(r.kind, denied || r.kind === "hook.failed" ? "flag" : "")),
      el("td", {}, r.kind === "tool.completed" ? [p.tool, " ", el("b", {}, outcomeText(p.outcome))] : kv(p)));
  });
  return el("table", { "data-test": "timeline" },
    el("thead", {}, el("tr", {}, ["seq", "time", "kind", "what"].map((h) => el("th", {}, h)))),
    el("tbody", {}, body.length ? body : el("tr", {}, el("td", { colspan: 4, class: "muted" }, "no pipeline decisions: every call ran and succeeded"))));
}

function verifierSection(v) {
  const checks = (v.checks && v.checks.checks) || [];
  const counts = { pass: 0, fail: 0, skip: 0 };
  for (const c of checks) counts[c.status] = (counts[c.status] || 0) + 1;
  return el("div", { "data-test": "verifier" },
    v.checks && v.checks.error ? el("div", { class: "error-box" }, v.checks.error) : null,
    checks.length ? el("div", {},
      el("div", { class: "muted" }, `${counts.pass} passed, ${counts.fail} failed${counts.skip ? `, ${counts.skip} skipped` : ""} (${v.checks.source}, ${v.checks.format})`),
      el("table", { "data-test": "checks" }, el("tbody", {}, checks.map((c) => el("tr", {},
        el("td", { class: c.status === "pass" ? "passed" : c.status === "fail" ? "failed" : "muted" }, c.status.toUpperCase()),
        el("td", {}, c.name), el("td", { class: "muted" }, c.message || "")))))) : el("div", { class: "muted" }, "no checks recorded"),
    v.reward_file ? [el("h3", {}, v.reward_file.name), el("pre", { "data-test": "reward-file" }, v.reward_file.text)] : null,
    v.stdout ? [el("h3", {}, v.stdout.name, v.stdout.omitted_bytes ? ` (last part; ${v.stdout.omitted_bytes} bytes before it left out)` : ""),
      longText(v.stdout.text, 30, { "data-test": "stdout" })] : null);
}

export async function trialView(params) {
  const { run, trial } = params;
  const crumbs = [el("a", { href: "#/" }, "runs"), el("a", { href: href("run", { run }) }, run), el("span", {}, trial)];
  const d = await api("trial", { run, trial });
  const [traj, timeline] = await Promise.all([
    d.has_trajectory ? api("trajectory", { run, trial }).catch((e) => ({ error: e })) : null,
    d.has_timeline ? api("timeline", { run, trial }).catch(() => []) : [],
  ]);
  const row = d.row;
  const res = d.result || {};
  const rewards = row.rewards && Object.keys(row.rewards).length ? row.rewards : (res.verifier_result || {}).rewards;
  const infra = !["passed", "failed", "agent_timeout", "agent_error"].includes(row.outcome);
  const header = el("div", { class: "grid", "data-test": "trial-record" },
    el("div", {}, el("span", { class: "label" }, "outcome"), el("b", { class: outcomeClass(row.outcome, infra), "data-test": "outcome" }, row.outcome || row.status)),
    el("div", {}, el("span", { class: "label" }, "reward"), num(row.reward, 3)),
    el("div", {}, el("span", { class: "label" }, "task"), row.task_id, row.category ? ` (${row.category})` : ""),
    el("div", {}, el("span", { class: "label" }, "attempt / seed"), `${row.attempt} / ${row.seed}`),
    el("div", {}, el("span", { class: "label" }, "model"), row.model_route || "–"),
    el("div", {}, el("span", { class: "label" }, "tokens in / cached / out"), `${row.input_tokens ?? 0} / ${row.cached_tokens ?? 0} / ${row.output_tokens ?? 0}`),
    el("div", {}, el("span", { class: "label" }, "cost"), usd(row.cost_usd)),
    el("div", {}, el("span", { class: "label" }, "started"), row.started || "–"),
    row.exception_class ? el("div", {}, el("span", { class: "label" }, "exception"), el("b", { class: "failed" }, row.exception_class), " ", row.exception_message || "") : null);
  const phases = row.phases && typeof row.phases === "object" ? row.phases : {};
  const timings = el("table", { "data-test": "phases" }, el("tbody", {}, Object.entries(phases).map(([k, v]) =>
    el("tr", {}, el("td", {}, k), el("td", { class: "num" }, seconds(v)),
      el("td", { class: "muted" }, res[k] && res[k].started_at ? `${res[k].started_at} → ${res[k].finished_at}` : "")))));
  const signals = Object.entries(row.integrity || {}).filter(([, n]) => n > 0);
  const evidence = res.integrity || [];
  const integrity = el("div", { "data-test": "integrity" },
    signals.length || evidence.length ? [signals.map(([k, n]) => badge(`${k} ${n}`, "flag")),
      evidence.map((e) => el("pre", {}, typeof e === "string" ? e : JSON.stringify(e, null, 2)))]
      : el("span", { class: "muted" }, "no integrity signals"),
    (res.notes || []).length ? [el("h3", {}, "notes"), res.notes.map((n) => el("div", {}, n))] : null);
  let transcriptNode;
  if (!d.has_trajectory) transcriptNode = el("div", { class: "muted" }, "no agent/trajectory.json in this trial");
  else if (traj && traj.error) transcriptNode = errorBox(traj.error);
  else transcriptNode = el("div", { "data-test": "transcript" },
    el("div", { class: "muted" }, `${(traj.steps || []).length} steps · agent ${(traj.agent || {}).name || "?"} ${(traj.agent || {}).model_name || ""}`,
      traj.final_metrics ? ` · ${traj.final_metrics.total_prompt_tokens ?? "?"} prompt / ${traj.final_metrics.total_completion_tokens ?? "?"} completion tokens` : ""),
    transcript(traj, timeline, run, trial));
  let allRows = false;
  const timelineBox = el("div", {}, timelineTable(timeline, false));
  const toggle = el("button", { onclick: () => {
    allRows = !allRows;
    timelineBox.replaceChildren(timelineTable(timeline, allRows));
    toggle.textContent = allRows ? "decisions only" : "every row";
  } }, "every row");
  return {
    node: el("div", {},
      el("h1", {}, trial),
      header,
      el("h2", {}, "Rewards"), el("div", { "data-test": "rewards" }, kv(rewards || null)),
      el("h2", {}, "Integrity"), integrity,
      el("h2", {}, "Environment"), el("div", { "data-test": "image" }, kv(res.image || null)),
      el("h2", {}, "Phases"), timings,
      el("h2", {}, "Transcript"), transcriptNode,
      el("h2", {}, "Pipeline decisions ", d.has_timeline ? toggle : null),
      d.has_timeline ? timelineBox : el("div", { class: "muted" }, "no agent/timeline.db in this trial"),
      el("h2", {}, "Verifier"), verifierSection(d.verifier),
      d.steps.map((s) => [el("h2", {}, `Step ${s.name}`), kv(s.result), verifierSection(s.verifier)]),
      el("h2", {}, "result.json"),
      d.result_error ? errorBox(d.result_error) : el("details", {}, el("summary", {}, "every key"), kv(d.result))),
    crumbs,
  };
}
