//! A report of one or more runs as plain Rust values: the aggregated polars frames turned into
//! typed rows, plus the scores of harness/src/summary.rs per run, per category and per
//! difficulty. Renderers (term, Markdown, HTML) only format these values.

use std::collections::{BTreeMap, HashMap};

use polars::prelude::DataFrame;

use crate::compare::{Comparison, compare};
use crate::error::ReportError;
use crate::frames::{Cols, error_frame, outcome_frame, task_frame, usage_frame};
use crate::load::Loaded;
use geode_graders::summary::{Scores, TaskPoint, mean, pass_at_k_curve, scores};

/// A run as the `runs` table describes it.
#[derive(Debug, Clone, PartialEq)]
pub struct RunInfo {
    /// The run's id in its store.
    pub run_id: String,
    /// When the run was created, as the store writes it (RFC 3339).
    pub created: String,
    /// Model route (`provider/model[@revision]`) the run used.
    pub model_route: String,
    /// The agent under test (`geode`, `claude-code@2.1.332`, `command:...`).
    pub agent: String,
    /// Hash of the scaffold the run used.
    pub scaffold_hash: String,
    /// Hash of the task pack the run ran.
    pub pack_hash: String,
    /// Attempts (trials) per task the run was started with.
    pub attempts: i64,
    /// The run's status in the store (`running`, `finished`, `cancelled`).
    pub status: String,
}

/// One task of one run.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskStats {
    /// The run.
    pub run_id: String,
    /// The task's id in the pack.
    pub task_id: String,
    /// The task's category, as the store records it.
    pub category: String,
    /// The task's difficulty, as the store records it.
    pub difficulty: String,
    /// Trials that count (infrastructure excluded).
    pub trials: usize,
    /// Trials counted as infrastructure failures (left out of the scores).
    pub infra_trials: usize,
    /// Counted trials with reward >= 1.
    pub passes: usize,
    /// `None` when every trial was an infrastructure failure.
    pub mean_reward: Option<f64>,
    /// Standard error of the task mean (sample sd / sqrt(n)); `None` below two trials.
    pub stderr: Option<f64>,
    /// Mean reward with infrastructure trials as 0.
    pub mean_reward_infra_zero: f64,
    /// Input tokens over every trial of the task.
    pub input_tokens: i64,
    /// Cached input tokens over every trial of the task.
    pub cached_tokens: i64,
    /// Output tokens over every trial of the task.
    pub output_tokens: i64,
    /// Model calls over every trial of the task.
    pub model_calls: i64,
    /// Cost in US dollars over every trial of the task.
    pub cost_usd: f64,
    /// Mean trial duration in seconds; `None` when no trial has one.
    pub mean_duration_sec: Option<f64>,
    /// Summed trial durations in seconds.
    pub total_duration_sec: f64,
}

impl TaskStats {
    fn point(&self) -> Option<TaskPoint> {
        self.mean_reward.map(|mean| TaskPoint {
            mean,
            trials: self.trials,
            passes: self.passes,
        })
    }

    /// The task with infrastructure trials counted as failures with reward 0.
    fn point_infra_zero(&self) -> TaskPoint {
        TaskPoint {
            mean: self.mean_reward_infra_zero,
            trials: self.all_trials(),
            passes: self.passes,
        }
    }

    /// Every trial of the task, infrastructure failures included.
    pub fn all_trials(&self) -> usize {
        self.trials + self.infra_trials
    }
}

impl RunUsage {
    /// Cost per trial in dollars (0 for a run without trials).
    pub fn cost_per_trial(&self) -> f64 {
        if self.trials > 0 {
            self.cost_usd / self.trials as f64
        } else {
            0.0
        }
    }
}

/// Scores of one run.
#[derive(Debug, Clone, PartialEq)]
pub struct RunScores {
    /// The run.
    pub run_id: String,
    /// Every task with a trial, scored or not.
    pub tasks: usize,
    /// Every trial of the run, infrastructure failures included.
    pub trials: usize,
    /// Trials counted as infrastructure failures (left out of the scores).
    pub infra_trials: usize,
    /// Infrastructure excluded (tasks with no counted trial drop out).
    pub scores: Scores,
    /// Infrastructure trials as reward 0 (every task counts).
    pub accuracy_infra_zero: Option<f64>,
    /// pass@k, k = 1..=K, infrastructure excluded.
    pub pass_at_k: Vec<(usize, f64)>,
    /// pass@k with infrastructure trials as failures.
    pub pass_at_k_infra_zero: Vec<(usize, f64)>,
}

/// Scores of the tasks of one run that share a category or a difficulty.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupScores {
    /// The run.
    pub run_id: String,
    /// The category or difficulty shared by the tasks.
    pub group: String,
    /// Counted trials of those tasks (infrastructure excluded).
    pub trials: usize,
    /// Scores over those tasks, infrastructure excluded.
    pub scores: Scores,
}

/// Tokens, cost and time of one run.
#[derive(Debug, Clone, PartialEq)]
pub struct RunUsage {
    /// The run.
    pub run_id: String,
    /// Every finished trial of the run, infrastructure failures included.
    pub trials: i64,
    /// Input tokens over the run.
    pub input_tokens: i64,
    /// Cached input tokens over the run.
    pub cached_tokens: i64,
    /// Output tokens over the run.
    pub output_tokens: i64,
    /// Model calls over the run.
    pub model_calls: i64,
    /// Cost in US dollars over the run.
    pub cost_usd: f64,
    /// Summed trial durations in seconds.
    pub trial_seconds: f64,
    /// Mean trial duration in seconds.
    pub mean_trial_sec: Option<f64>,
    /// Median trial duration in seconds.
    pub p50_trial_sec: Option<f64>,
    /// 95th percentile of trial durations in seconds.
    pub p95_trial_sec: Option<f64>,
    /// First trial start to last trial finish.
    pub wall_sec: Option<f64>,
}

/// One class of error in one run.
#[derive(Debug, Clone, PartialEq)]
pub struct ErrorClass {
    /// The run.
    pub run_id: String,
    /// The trials' outcome: one other than `passed` and `failed`, or any with an exception.
    pub outcome: String,
    /// Whether the outcome is an infrastructure failure (left out of scores).
    pub infrastructure: bool,
    /// The exception class the trials raised; `None` when they raised none.
    pub exception_class: Option<String>,
    /// Trials in the class.
    pub trials: i64,
    /// Distinct tasks those trials ran.
    pub tasks: i64,
    /// One of their exception messages; `None` when none had one.
    pub example: Option<String>,
}

/// Trial durations binned on edges shared by every run.
#[derive(Debug, Clone, PartialEq)]
pub struct Histogram {
    /// `bins + 1` edges in seconds.
    pub edges: Vec<f64>,
    /// Per run (report order): counts per bin.
    pub counts: Vec<(String, Vec<u64>)>,
}

/// Bins of the duration histogram.
pub const HISTOGRAM_BINS: usize = 24;

/// Everything one report shows.
#[derive(Debug, Clone)]
pub struct Report {
    /// The runs, from the `runs` table.
    pub runs: Vec<RunInfo>,
    /// Scores per run, in the order the runs were named.
    pub run_scores: Vec<RunScores>,
    /// Per-task statistics, sorted by run (as named) then task id.
    pub tasks: Vec<TaskStats>,
    /// Scores per run and category.
    pub by_category: Vec<GroupScores>,
    /// Scores per run and difficulty.
    pub by_difficulty: Vec<GroupScores>,
    /// Tokens, cost and time per run, in the order the runs were named.
    pub usage: Vec<RunUsage>,
    /// (run, outcome, trials), outcomes sorted by name.
    pub outcomes: Vec<(String, String, i64)>,
    /// Error classes, per run, infrastructure ones first.
    pub errors: Vec<ErrorClass>,
    /// Histogram of trial durations.
    pub durations: Histogram,
    /// The paired comparison, when exactly two runs are reported.
    pub comparison: Option<Comparison>,
    /// Re-grades found in the stores (`geode grade`), per run and grader.
    pub regrades: Vec<crate::load::Regrade>,
    /// Decisions of the crucible campaigns these runs are the arms of.
    pub campaigns: Vec<crate::load::CampaignDecision>,
    /// The `reward.json` key every score reads, when not each trial's headline reward.
    pub reward_key: Option<String>,
}

/// Builds the report of `loaded` (runs in the order named).
pub fn build(loaded: &Loaded) -> Result<Report, ReportError> {
    let ctx = loaded
        .stores
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let pe = || ReportError::polars(ctx.clone());
    let order: HashMap<&str, usize> = loaded
        .run_ids
        .iter()
        .enumerate()
        .map(|(i, r)| (r.as_str(), i))
        .collect();
    let rank = |r: &str| order.get(r).copied().unwrap_or(usize::MAX);

    let runs = run_infos(&loaded.runs).map_err(pe())?;
    let mut tasks = task_stats(&task_frame(&loaded.trials).map_err(pe())?).map_err(pe())?;
    tasks.sort_by(|a, b| (rank(&a.run_id), &a.task_id).cmp(&(rank(&b.run_id), &b.task_id)));

    let run_scores = loaded
        .run_ids
        .iter()
        .map(|r| run_scores(r, &tasks))
        .collect();
    let by_category = group_scores(&loaded.run_ids, &tasks, |t| &t.category);
    let by_difficulty = group_scores(&loaded.run_ids, &tasks, |t| &t.difficulty);

    let mut usage = run_usage(&usage_frame(&loaded.trials).map_err(pe())?).map_err(pe())?;
    usage.sort_by_key(|u| rank(&u.run_id));

    let of = outcome_frame(&loaded.trials).map_err(pe())?;
    let c = Cols::new(&of);
    let mut outcomes: Vec<(String, String, i64)> = c
        .text("run_id")
        .and_then(|r| Ok((r, c.text("outcome")?, c.i64("trials")?)))
        .map(|(r, o, n)| {
            r.into_iter()
                .zip(o)
                .zip(n)
                .map(|((r, o), n)| (r, o, n))
                .collect()
        })
        .map_err(pe())?;
    outcomes.sort_by(|a, b| (rank(&a.0), &a.1).cmp(&(rank(&b.0), &b.1)));

    let mut errors = error_classes(&error_frame(&loaded.trials).map_err(pe())?).map_err(pe())?;
    errors.sort_by(|a, b| {
        (
            rank(&a.run_id),
            !a.infrastructure,
            &a.outcome,
            &a.exception_class,
        )
            .cmp(&(
                rank(&b.run_id),
                !b.infrastructure,
                &b.outcome,
                &b.exception_class,
            ))
    });

    let durations = histogram(&loaded.trials, &loaded.run_ids).map_err(pe())?;
    let comparison = match loaded.run_ids.as_slice() {
        [a, b] => Some(compare(&loaded.trials, a, b).map_err(pe())?),
        _ => None,
    };
    Ok(Report {
        runs,
        run_scores,
        tasks,
        by_category,
        by_difficulty,
        usage,
        outcomes,
        errors,
        durations,
        comparison,
        regrades: loaded.regrades.clone(),
        campaigns: loaded.campaigns.clone(),
        reward_key: loaded.reward_key.as_ref().map(|k| k.as_str().to_owned()),
    })
}

fn run_infos(df: &DataFrame) -> polars::error::PolarsResult<Vec<RunInfo>> {
    let c = Cols::new(df);
    let ids = c.text("run_id")?;
    let created = c.text("created")?;
    let model = c.text("model_route")?;
    let agent = c.text("agent")?;
    let scaffold = c.text("scaffold_hash")?;
    let pack = c.text("pack_hash")?;
    let attempts = c.i64("attempts")?;
    let status = c.text("status")?;
    Ok((0..df.height())
        .map(|i| RunInfo {
            run_id: ids[i].clone(),
            created: created[i].clone(),
            model_route: model[i].clone(),
            agent: agent[i].clone(),
            scaffold_hash: scaffold[i].clone(),
            pack_hash: pack[i].clone(),
            attempts: attempts[i],
            status: status[i].clone(),
        })
        .collect())
}

fn task_stats(df: &DataFrame) -> polars::error::PolarsResult<Vec<TaskStats>> {
    let c = Cols::new(df);
    let (run, task, cat, diff) = (
        c.text("run_id")?,
        c.text("task_id")?,
        c.text("category")?,
        c.text("difficulty")?,
    );
    let (trials, infra, passes) = (c.i64("trials")?, c.i64("infra_trials")?, c.i64("passes")?);
    let (m, sd, mz) = (
        c.f64("mean_reward")?,
        c.f64("reward_sd")?,
        c.f64("mean_reward_infra_zero")?,
    );
    let (inp, cached, out, calls, cost) = (
        c.i64("input_tokens")?,
        c.i64("cached_tokens")?,
        c.i64("output_tokens")?,
        c.i64("model_calls")?,
        c.f64("cost_usd")?,
    );
    let (md, td) = (c.f64("mean_duration_sec")?, c.f64("total_duration_sec")?);
    Ok((0..df.height())
        .map(|i| {
            let n = usize::try_from(trials[i]).unwrap_or(0);
            TaskStats {
                run_id: run[i].clone(),
                task_id: task[i].clone(),
                category: cat[i].clone(),
                difficulty: diff[i].clone(),
                trials: n,
                infra_trials: usize::try_from(infra[i]).unwrap_or(0),
                passes: usize::try_from(passes[i]).unwrap_or(0),
                mean_reward: if n > 0 { m[i] } else { None },
                stderr: if n > 1 {
                    sd[i].map(|sd| sd / (n as f64).sqrt())
                } else {
                    None
                },
                mean_reward_infra_zero: mz[i].unwrap_or(0.0),
                input_tokens: inp[i],
                cached_tokens: cached[i],
                output_tokens: out[i],
                model_calls: calls[i],
                cost_usd: cost[i].unwrap_or(0.0),
                mean_duration_sec: md[i],
                total_duration_sec: td[i].unwrap_or(0.0),
            }
        })
        .collect())
}

fn run_scores(run_id: &str, tasks: &[TaskStats]) -> RunScores {
    let mine: Vec<&TaskStats> = tasks.iter().filter(|t| t.run_id == run_id).collect();
    let points: Vec<TaskPoint> = mine.iter().filter_map(|t| t.point()).collect();
    let zero: Vec<TaskPoint> = mine.iter().map(|t| t.point_infra_zero()).collect();
    let zero_means: Vec<f64> = zero.iter().map(|p| p.mean).collect();
    RunScores {
        run_id: run_id.to_owned(),
        tasks: mine.len(),
        trials: mine.iter().map(|t| t.all_trials()).sum(),
        infra_trials: mine.iter().map(|t| t.infra_trials).sum(),
        scores: scores(&points),
        accuracy_infra_zero: mean(&zero_means),
        pass_at_k: pass_at_k_curve(&points),
        pass_at_k_infra_zero: pass_at_k_curve(&zero),
    }
}

fn group_scores(
    run_ids: &[String],
    tasks: &[TaskStats],
    key: impl Fn(&TaskStats) -> &String,
) -> Vec<GroupScores> {
    let mut out = Vec::new();
    for run in run_ids {
        let mut groups: BTreeMap<&str, Vec<&TaskStats>> = BTreeMap::new();
        for t in tasks.iter().filter(|t| &t.run_id == run) {
            groups.entry(key(t)).or_default().push(t);
        }
        for (g, ts) in groups {
            let points: Vec<TaskPoint> = ts.iter().filter_map(|t| t.point()).collect();
            out.push(GroupScores {
                run_id: run.clone(),
                group: g.to_owned(),
                trials: ts.iter().map(|t| t.trials).sum(),
                scores: scores(&points),
            });
        }
    }
    out
}

fn run_usage(df: &DataFrame) -> polars::error::PolarsResult<Vec<RunUsage>> {
    let c = Cols::new(df);
    let run = c.text("run_id")?;
    let trials = c.i64("trials")?;
    let (inp, cached, out, calls) = (
        c.i64("input_tokens")?,
        c.i64("cached_tokens")?,
        c.i64("output_tokens")?,
        c.i64("model_calls")?,
    );
    let (cost, secs, mean, p50, p95, wall) = (
        c.f64("cost_usd")?,
        c.f64("trial_seconds")?,
        c.f64("mean_trial_sec")?,
        c.f64("p50_trial_sec")?,
        c.f64("p95_trial_sec")?,
        c.f64("wall_sec")?,
    );
    Ok((0..df.height())
        .map(|i| RunUsage {
            run_id: run[i].clone(),
            trials: trials[i],
            input_tokens: inp[i],
            cached_tokens: cached[i],
            output_tokens: out[i],
            model_calls: calls[i],
            cost_usd: cost[i].unwrap_or(0.0),
            trial_seconds: secs[i].unwrap_or(0.0),
            mean_trial_sec: mean[i],
            p50_trial_sec: p50[i],
            p95_trial_sec: p95[i],
            wall_sec: wall[i],
        })
        .collect())
}

fn error_classes(df: &DataFrame) -> polars::error::PolarsResult<Vec<ErrorClass>> {
    let c = Cols::new(df);
    let (run, outcome, class, example) = (
        c.text("run_id")?,
        c.text("outcome")?,
        c.str("exception_class")?,
        c.str("example")?,
    );
    let (trials, tasks, infra) = (c.i64("trials")?, c.i64("tasks")?, c.bool("infra")?);
    Ok((0..df.height())
        .map(|i| ErrorClass {
            run_id: run[i].clone(),
            outcome: outcome[i].clone(),
            infrastructure: infra[i],
            exception_class: class[i].map(str::to_owned),
            trials: trials[i],
            tasks: tasks[i],
            example: example[i].map(str::to_owned),
        })
        .collect())
}

/// Bins every trial's duration (seconds) on [0, longest], one count vector per run.
fn histogram(trials: &DataFrame, run_ids: &[String]) -> polars::error::PolarsResult<Histogram> {
    let c = Cols::new(trials);
    let runs = c.str("run_id")?;
    let secs = c.f64("duration_sec")?;
    let max = secs
        .iter()
        .flatten()
        .fold(0.0f64, |m, &s| if s.is_finite() { m.max(s) } else { m });
    let width = if max > 0.0 {
        max / HISTOGRAM_BINS as f64
    } else {
        1.0
    };
    let edges = (0..=HISTOGRAM_BINS).map(|i| i as f64 * width).collect();
    let index: HashMap<&str, usize> = run_ids
        .iter()
        .enumerate()
        .map(|(i, r)| (r.as_str(), i))
        .collect();
    let mut counts = vec![vec![0u64; HISTOGRAM_BINS]; run_ids.len()];
    for (r, s) in runs.iter().zip(&secs) {
        let (Some(r), Some(s)) = (r, s) else { continue };
        let Some(&ri) = index.get(r) else { continue };
        if !s.is_finite() {
            continue;
        }
        let bin = ((s.max(0.0) / width) as usize).min(HISTOGRAM_BINS - 1);
        counts[ri][bin] += 1;
    }
    Ok(Histogram {
        edges,
        counts: run_ids.iter().cloned().zip(counts).collect(),
    })
}
