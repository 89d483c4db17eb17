//! The tables of a report and of a comparison, in the order a reader wants them: the headline
//! scores first, long per-task tables last.

use geode_crucible::stats::permutation::PermutationMethod;

use crate::compare::Comparison;
use crate::load::CampaignDecision;
use crate::render::table::{Align, NONE, Table, clip, int, interval, num, usd};
use crate::report::{GroupScores, Report};

use Align::{Left as L, Right as R};

/// pass@k rows shown per run: every k up to this, then only K (the full curve is in the data).
const PASS_AT_K_SHOWN: usize = 10;

/// Characters of an example exception message.
const EXAMPLE_CHARS: usize = 60;

fn short_hash(h: &str) -> String {
    h.chars().take(12).collect()
}

/// Every table of `report`.
pub fn report_tables(report: &Report) -> Vec<Table> {
    let single = report.runs.len() == 1;
    // Drop the leading run column when there is only one run (the Runs table names it).
    let fit = |t: Table| if single { t.without_column(0) } else { t };
    let mut out = vec![runs_table(report)];
    out.extend(report.campaigns.iter().map(campaign_table));
    out.push(fit(scores_table(report)));
    if let Some(c) = &report.comparison {
        out.push(comparison_summary(c));
    }
    if !report.regrades.is_empty() {
        out.push(fit(regrades_table(report)));
    }
    out.push(fit(pass_at_k_table(report)));
    out.push(fit(group_table(
        "By category",
        "category",
        &report.by_category,
    )));
    out.push(fit(group_table(
        "By difficulty",
        "difficulty",
        &report.by_difficulty,
    )));
    out.push(fit(usage_table(report)));
    out.push(fit(outcomes_table(report)));
    out.push(fit(errors_table(report)));
    if let Some(c) = &report.comparison {
        out.push(comparison_categories(c));
    }
    out.push(fit(tasks_table(report)));
    out.push(fit(task_usage_table(report)));
    if let Some(c) = &report.comparison {
        out.push(comparison_tasks(c));
    }
    out
}

/// How many of [`report_tables`] are the headline (runs, scores, paired comparison): the HTML
/// page puts its plots right after them.
pub fn headline_tables(report: &Report) -> usize {
    2 + report.campaigns.len() + usize::from(report.comparison.is_some())
}

/// Every table of a comparison.
pub fn comparison_tables(c: &Comparison) -> Vec<Table> {
    vec![
        comparison_summary(c),
        comparison_categories(c),
        comparison_tasks(c),
    ]
}

fn runs_table(report: &Report) -> Table {
    Table::new(
        "Runs",
        &[
            ("run", L),
            ("created", L),
            ("model", L),
            ("agent", L),
            ("scaffold", L),
            ("pack", L),
            ("attempts", R),
            ("status", L),
        ],
    )
    .rows(report.runs.iter().map(|r| {
        vec![
            r.run_id.clone(),
            r.created.clone(),
            r.model_route.clone(),
            r.agent.clone(),
            short_hash(&r.scaffold_hash),
            short_hash(&r.pack_hash),
            int(r.attempts),
            r.status.clone(),
        ]
    }))
}

fn scores_table(report: &Report) -> Table {
    Table::new(
        "Scores",
        &[
            ("run", L),
            ("tasks", R),
            ("trials", R),
            ("infra", R),
            ("accuracy", R),
            ("±1.96 TB se", R),
            ("TB stderr", R),
            ("95% CI (task t)", R),
            ("acc. infra=0", R),
        ],
    )
    .note(
        "accuracy: mean over tasks of the per-task mean reward, infrastructure trials excluded; \
         TB stderr: sqrt(sum p(1-p)/(n-1))/T (Terminal-Bench, trial noise only; n/a if a task \
         has one trial); 95% CI: Student-t over per-task means (tasks are the clusters), clipped \
         to [0, 1]; acc. infra=0: infrastructure failures counted as reward 0.",
    )
    .rows(report.run_scores.iter().map(|r| {
        let s = &r.scores;
        vec![
            r.run_id.clone(),
            r.tasks.to_string(),
            r.trials.to_string(),
            r.infra_trials.to_string(),
            num(s.accuracy, 3),
            num(s.tb_stderr.map(|e| 1.96 * e), 3),
            num(s.tb_stderr, 4),
            interval(s.ci95, 3),
            num(r.accuracy_infra_zero, 3),
        ]
    }))
}

fn pass_at_k_table(report: &Report) -> Table {
    Table::new(
        "pass@k",
        &[("run", L), ("k", R), ("pass@k", R), ("pass@k infra=0", R)],
    )
    .note(format!(
        "Unbiased estimator 1 - C(n-c,k)/C(n,k) averaged over tasks, k up to the fewest trials \
         of a task (K); rows for k <= {PASS_AT_K_SHOWN} and k = K."
    ))
    .rows(report.run_scores.iter().flat_map(|r| {
        let k_max = r.pass_at_k.len().max(r.pass_at_k_infra_zero.len());
        (1..=k_max)
            .filter(move |&k| k <= PASS_AT_K_SHOWN || k == k_max)
            .map(move |k| {
                let get = |v: &[(usize, f64)]| v.iter().find(|(kk, _)| *kk == k).map(|p| p.1);
                vec![
                    r.run_id.clone(),
                    k.to_string(),
                    num(get(&r.pass_at_k), 3),
                    num(get(&r.pass_at_k_infra_zero), 3),
                ]
            })
    }))
}

fn group_table(title: &str, key: &str, groups: &[GroupScores]) -> Table {
    Table::new(
        title,
        &[
            ("run", L),
            (key, L),
            ("tasks", R),
            ("trials", R),
            ("accuracy", R),
            ("TB stderr", R),
            ("95% CI (task t)", R),
        ],
    )
    .rows(groups.iter().map(|g| {
        vec![
            g.run_id.clone(),
            g.group.clone(),
            g.scores.tasks.to_string(),
            g.trials.to_string(),
            num(g.scores.accuracy, 3),
            num(g.scores.tb_stderr, 4),
            interval(g.scores.ci95, 3),
        ]
    }))
}

fn usage_table(report: &Report) -> Table {
    Table::new(
        "Tokens, cost and time per run",
        &[
            ("run", L),
            ("trials", R),
            ("input tok", R),
            ("cached tok", R),
            ("output tok", R),
            ("calls", R),
            ("cost", R),
            ("cost/trial", R),
            ("trial s", R),
            ("mean s", R),
            ("p50 s", R),
            ("p95 s", R),
            ("wall s", R),
        ],
    )
    .note(
        "calls: model calls of the agents; trial s: summed trial durations; wall s: first trial \
         start to last trial finish.",
    )
    .rows(report.usage.iter().map(|u| {
        vec![
            u.run_id.clone(),
            int(u.trials),
            int(u.input_tokens),
            int(u.cached_tokens),
            int(u.output_tokens),
            int(u.model_calls),
            usd(u.cost_usd),
            usd(u.cost_per_trial()),
            num(Some(u.trial_seconds), 1),
            num(u.mean_trial_sec, 1),
            num(u.p50_trial_sec, 1),
            num(u.p95_trial_sec, 1),
            num(u.wall_sec, 1),
        ]
    }))
}

fn class(infra: bool) -> String {
    if infra { "infrastructure" } else { "agent" }.to_owned()
}

fn outcomes_table(report: &Report) -> Table {
    Table::new(
        "Outcomes",
        &[("run", L), ("outcome", L), ("class", L), ("trials", R)],
    )
    .rows(report.outcomes.iter().map(|(run, outcome, n)| {
        let infra = geode_graders::TrialOutcome::parse(outcome)
            .map(|o| o.is_infrastructure())
            .unwrap_or(true);
        vec![run.clone(), outcome.clone(), class(infra), int(*n)]
    }))
}

/// A campaign's decision as the crucible explains it: verdict, contract, the bound with its
/// method, each check of the rule with what it needed, and the next step.
fn campaign_table(c: &CampaignDecision) -> Table {
    let r = &c.record;
    // A record older than explanations is explained now, as `crucible decide` would.
    let e = r
        .explanation
        .clone()
        .unwrap_or_else(|| geode_crucible::explain(r));
    let row = |a: &str, b: String, observed: String, needed: String| {
        vec![a.to_owned(), b, observed, needed]
    };
    let mut rows = vec![
        row(
            "verdict",
            r.verdict.to_string(),
            r.reasons
                .iter()
                .map(|x| x.to_string())
                .collect::<Vec<_>>()
                .join(", "),
            String::new(),
        ),
        row(
            "contract",
            short_hash(r.contract_hash.as_str()),
            format!(
                "{} stage, {} tasks x {} trials per arm",
                match r.stage {
                    geode_crucible::Stage::Train => "train",
                    geode_crucible::Stage::Test => "test",
                },
                r.counts.tasks_in_pack,
                r.counts.trials_per_task
            ),
            String::new(),
        ),
    ];
    rows.extend(e.checks.iter().map(|k| {
        row(
            &k.name,
            if k.passed { "pass" } else { "FAIL" }.to_owned(),
            k.observed.clone(),
            k.needed.clone(),
        )
    }));
    if e.underpowered {
        rows.push(row(
            "power",
            "underpowered".into(),
            "the gain observed is below what this design can detect".into(),
            String::new(),
        ));
    }
    rows.push(row(
        "next",
        String::new(),
        e.next_step.clone(),
        String::new(),
    ));
    Table::new(
        "Campaign decision",
        &[("item", L), ("result", L), ("observed", L), ("needed", L)],
    )
    .note(format!("{} ({})", e.rule, c.dir.display()))
    .rows(rows)
}

fn regrades_table(report: &Report) -> Table {
    Table::new(
        "Re-grades",
        &[
            ("run", L),
            ("grader", L),
            ("grader hash", L),
            ("trials", R),
            ("valid", R),
            ("mean reward", R),
        ],
    )
    .note(
        "`geode grade` results from the run store, one row per grader content (an edited \
         rubric is a new row); mean over the valid grades.",
    )
    .rows(report.regrades.iter().map(|g| {
        vec![
            g.run_id.clone(),
            g.grader.clone(),
            short_hash(&g.grader_hash),
            int(g.trials),
            int(g.valid),
            num(g.mean_reward, 3),
        ]
    }))
}

fn errors_table(report: &Report) -> Table {
    Table::new(
        "Errors by class",
        &[
            ("run", L),
            ("class", L),
            ("outcome", L),
            ("exception", L),
            ("trials", R),
            ("tasks", R),
            ("example", L),
        ],
    )
    .note("Trials that neither passed nor failed, or raised an exception; infrastructure first.")
    .rows(report.errors.iter().map(|e| {
        vec![
            e.run_id.clone(),
            class(e.infrastructure),
            e.outcome.clone(),
            e.exception_class.clone().unwrap_or_else(|| NONE.to_owned()),
            int(e.trials),
            int(e.tasks),
            e.example
                .as_deref()
                .map(|m| clip(m, EXAMPLE_CHARS))
                .unwrap_or_else(|| NONE.to_owned()),
        ]
    }))
}

fn tasks_table(report: &Report) -> Table {
    Table::new(
        "Per task",
        &[
            ("run", L),
            ("task", L),
            ("category", L),
            ("difficulty", L),
            ("trials", R),
            ("infra", R),
            ("passes", R),
            ("mean reward", R),
            ("stderr", R),
        ],
    )
    .note("stderr: sample standard deviation of the task's rewards / sqrt(trials).")
    .rows(report.tasks.iter().map(|s| {
        vec![
            s.run_id.clone(),
            s.task_id.clone(),
            s.category.clone(),
            s.difficulty.clone(),
            s.trials.to_string(),
            s.infra_trials.to_string(),
            s.passes.to_string(),
            num(s.mean_reward, 3),
            num(s.stderr, 3),
        ]
    }))
}

fn task_usage_table(report: &Report) -> Table {
    Table::new(
        "Tokens, cost and time per task",
        &[
            ("run", L),
            ("task", L),
            ("trials", R),
            ("input tok", R),
            ("cached tok", R),
            ("output tok", R),
            ("calls", R),
            ("cost", R),
            ("mean s", R),
            ("total s", R),
        ],
    )
    .note("Every trial counts here, infrastructure failures included.")
    .rows(report.tasks.iter().map(|s| {
        vec![
            s.run_id.clone(),
            s.task_id.clone(),
            s.all_trials().to_string(),
            int(s.input_tokens),
            int(s.cached_tokens),
            int(s.output_tokens),
            int(s.model_calls),
            usd(s.cost_usd),
            num(s.mean_duration_sec, 1),
            num(Some(s.total_duration_sec), 1),
        ]
    }))
}

fn p_value(c: &Comparison) -> String {
    match &c.statistics.permutation {
        Some(p) => {
            let how = match p.method {
                PermutationMethod::Exact { sign_vectors } => {
                    format!("exact, {sign_vectors} sign vectors")
                }
                PermutationMethod::MonteCarlo { resamples, .. } => {
                    format!("Monte Carlo, {resamples} resamples")
                }
            };
            format!("{:.4} ({how})", p.p_value)
        }
        None => NONE.to_owned(),
    }
}

fn comparison_summary(c: &Comparison) -> Table {
    let s = &c.statistics;
    let mut kv = vec![
        ("baseline run", c.baseline.clone()),
        ("candidate run", c.candidate.clone()),
        ("shared tasks with pairs", s.tasks.to_string()),
        ("categories", s.families.to_string()),
        ("pairs", s.pairs.to_string()),
        (
            "pairs dropped (infrastructure)",
            c.dropped_pairs.to_string(),
        ),
        ("attempts in one run only", c.unpaired_trials.to_string()),
        (
            "tasks in one run only (baseline / candidate)",
            format!("{} / {}", c.only_baseline, c.only_candidate),
        ),
        ("baseline mean", num(s.baseline_mean, 3)),
        ("candidate mean", num(s.candidate_mean, 3)),
        ("delta", num(s.estimate, 3)),
        ("std error (task-clustered)", num(s.std_error, 4)),
        (
            "95% t interval",
            interval(s.t.map(|t| (t.interval.lower, t.interval.upper)), 3),
        ),
        (
            "95% BCa bootstrap interval",
            interval(
                s.bootstrap
                    .as_ref()
                    .map(|b| (b.bca_interval.lower, b.bca_interval.upper)),
                3,
            ),
        ),
        ("sign-flip p, one-sided (candidate better)", p_value(c)),
        ("sign-flip p, two-sided", num(c.p_two_sided, 4)),
        (
            "MDE (80% power, one-sided 5%)",
            num(s.minimum_detectable_effect, 3),
        ),
        ("correlation of task means", num(c.correlation, 3)),
    ];
    if let Some(d) = s.degenerate {
        kv.push(("degenerate", d.as_str().to_owned()));
    }
    Table::new(
        &format!("Paired comparison: {} vs {}", c.candidate, c.baseline),
        &[("quantity", L), ("value", R)],
    )
    .note(
        "delta = candidate - baseline, averaged within a task then over shared tasks; pairs are \
         the same attempt of a task in both runs, dropped whole when either side is an \
         infrastructure failure; statistics from geode-crucible (the promotion gate's).",
    )
    .rows(kv.into_iter().map(|(k, v)| vec![k.to_owned(), v]))
}

fn comparison_categories(c: &Comparison) -> Table {
    Table::new(
        "Paired deltas by category",
        &[
            ("category", L),
            ("tasks", R),
            ("baseline", R),
            ("candidate", R),
            ("delta", R),
        ],
    )
    .rows(c.statistics.per_family.iter().map(|f| {
        vec![
            f.family.as_str().to_owned(),
            f.tasks.to_string(),
            num(Some(f.baseline_mean), 3),
            num(Some(f.candidate_mean), 3),
            num(Some(f.delta), 3),
        ]
    }))
}

fn comparison_tasks(c: &Comparison) -> Table {
    Table::new(
        "Paired deltas per task",
        &[
            ("task", L),
            ("category", L),
            ("pairs", R),
            ("dropped", R),
            ("baseline", R),
            ("candidate", R),
            ("delta", R),
            ("95% CI (pairs t)", R),
        ],
    )
    .rows(c.tasks.iter().map(|d| {
        vec![
            d.task_id.clone(),
            d.category.clone(),
            d.pairs.to_string(),
            d.dropped.to_string(),
            num(d.baseline_mean, 3),
            num(d.candidate_mean, 3),
            num(d.delta, 3),
            interval(d.interval, 3),
        ]
    }))
}
