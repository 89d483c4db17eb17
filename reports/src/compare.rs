//! Paired comparison of two runs on the tasks they share, with the crucible's statistics so a
//! report shows the numbers the promotion gate would compute.
//!
//! Pairing follows the crucible (crucible/src/pairing.rs): trial `attempt` of a task in the
//! baseline run meets the same attempt of the same task in the candidate run (the harness
//! derives a trial's seed from the run seed, the task and the attempt, so runs with one seed meet
//! the same environment randomness); a pair with an infrastructure failure on either side is
//! dropped whole; an attempt present on one side only is unpaired. Tasks are the clusters;
//! categories play the crucible's families.

use std::cmp::Ordering;

use geode_crucible::pairing::{Pair, PairedTable, PairedTask, SignalTally};
use geode_crucible::stats::interval::{clip_to_range, t_interval};
use geode_crucible::stats::permutation::sign_flip_test;
use geode_crucible::{
    ContractHash, DecisionRule, FamilyId, StatSeeds, Statistics, TaskId, bootstrap_seed,
    permutation_seed,
};
use polars::prelude::*;

use crate::frames::Cols;
use crate::stats::correlation;
use geode_graders::summary::CONFIDENCE;

/// One shared task.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskDelta {
    pub task_id: String,
    pub category: String,
    pub pairs: usize,
    /// Pairs dropped for an infrastructure failure on either side.
    pub dropped: usize,
    pub baseline_mean: Option<f64>,
    pub candidate_mean: Option<f64>,
    pub delta: Option<f64>,
    /// 95 % t-interval of the task's pair differences (`None` below two pairs or no spread).
    pub interval: Option<(f64, f64)>,
}

/// A paired comparison (candidate - baseline).
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    pub baseline: String,
    pub candidate: String,
    /// Tasks with trials in only one of the runs (not compared).
    pub only_baseline: usize,
    pub only_candidate: usize,
    /// Attempts present in one run only.
    pub unpaired_trials: usize,
    pub dropped_pairs: usize,
    /// The crucible's statistics at the report confidence (t, BCa bootstrap, sign-flip, MDE).
    pub statistics: Statistics,
    /// Two-sided sign-flip p-value: 2 min(p(candidate better), p(baseline better)), capped at 1.
    pub p_two_sided: Option<f64>,
    /// Pearson correlation of per-task baseline and candidate means (high: pairing pays).
    pub correlation: Option<f64>,
    pub tasks: Vec<TaskDelta>,
}

/// The decision rule used for report statistics: the crucible's default (what `geode crucible
/// freeze` proposes), with the report's confidence.
pub fn report_rule() -> DecisionRule {
    DecisionRule {
        confidence: CONFIDENCE,
        ..DecisionRule::default()
    }
}

/// Seeds of the randomized statistics, fixed by the two run ids (a report of the same runs
/// always prints the same bootstrap and Monte Carlo numbers). A report has no contract, so the
/// crucible's contract-seed derivation is fed a hash of the run ids instead.
pub fn report_seeds(baseline: &str, candidate: &str) -> StatSeeds {
    let mut bytes = b"geode.report.compare.v1\0".to_vec();
    bytes.extend_from_slice(baseline.as_bytes());
    bytes.push(0);
    bytes.extend_from_slice(candidate.as_bytes());
    let h = ContractHash::of_bytes(&bytes);
    StatSeeds {
        bootstrap: bootstrap_seed(&h),
        permutation: permutation_seed(&h),
    }
}

/// One run's trials sorted by (task, attempt), as columns.
struct Side<'a> {
    task: Vec<&'a str>,
    category: Vec<&'a str>,
    attempt: Vec<i64>,
    infra: Vec<bool>,
    reward: Vec<f64>,
}

impl<'a> Side<'a> {
    fn new(df: &'a DataFrame) -> PolarsResult<Side<'a>> {
        let c = Cols::new(df);
        let text = |name| -> PolarsResult<Vec<&'a str>> {
            Ok(c.str(name)?.into_iter().map(|s| s.unwrap_or("")).collect())
        };
        Ok(Side {
            task: text("task_id")?,
            category: text("category")?,
            attempt: c.i64("attempt")?,
            infra: c.bool("infra")?,
            reward: c
                .f64("reward")?
                .into_iter()
                .map(|r| r.unwrap_or(0.0))
                .collect(),
        })
    }

    /// End of the run of rows of the task starting at `i`.
    fn task_end(&self, i: usize) -> usize {
        let t = self.task[i];
        i + self.task[i..].iter().take_while(|x| **x == t).count()
    }
}

/// The trials of `run`, sorted by (task, attempt), with a missing reward as 0.
fn sorted_side(trials: &DataFrame, run: &str) -> PolarsResult<DataFrame> {
    trials
        .clone()
        .lazy()
        .filter(col("run_id").eq(lit(run)))
        .select([
            col("task_id"),
            col("category"),
            col("attempt"),
            col("infra"),
            col("reward").fill_null(lit(0.0)),
        ])
        .sort(["task_id", "attempt"], SortMultipleOptions::default())
        .collect()
}

/// A shared task's attempts in order: a pair, or `None` when dropped for infrastructure.
struct SharedTask<'a> {
    task: &'a str,
    category: &'a str,
    slots: Vec<Option<Pair>>,
}

/// What pairing two sorted runs found.
struct Pairing<'a> {
    shared: Vec<SharedTask<'a>>,
    only_a: usize,
    only_b: usize,
    unpaired: usize,
}

/// Walks both sorted runs once: tasks first, then the attempts of a shared task (a merge, so a
/// million trials pair in one sequential pass).
fn pair_sorted<'a>(a: &Side<'a>, b: &Side<'a>) -> Pairing<'a> {
    let mut out = Pairing {
        shared: Vec::new(),
        only_a: 0,
        only_b: 0,
        unpaired: 0,
    };
    let (mut i, mut j) = (0, 0);
    while i < a.task.len() || j < b.task.len() {
        let order = match (a.task.get(i), b.task.get(j)) {
            (Some(x), Some(y)) => x.cmp(y),
            (Some(_), None) => Ordering::Less,
            _ => Ordering::Greater,
        };
        match order {
            Ordering::Less => {
                out.only_a += 1;
                i = a.task_end(i);
            }
            Ordering::Greater => {
                out.only_b += 1;
                j = b.task_end(j);
            }
            Ordering::Equal => {
                let (ie, je) = (a.task_end(i), b.task_end(j));
                let mut slots = Vec::with_capacity(ie - i);
                let category = a.category[i];
                let task = a.task[i];
                while i < ie || j < je {
                    let order = match (i < ie, j < je) {
                        (true, true) => a.attempt[i].cmp(&b.attempt[j]),
                        (true, false) => Ordering::Less,
                        _ => Ordering::Greater,
                    };
                    match order {
                        Ordering::Less => {
                            out.unpaired += 1;
                            i += 1;
                        }
                        Ordering::Greater => {
                            out.unpaired += 1;
                            j += 1;
                        }
                        Ordering::Equal => {
                            slots.push((!a.infra[i] && !b.infra[j]).then_some(Pair {
                                baseline: a.reward[i],
                                candidate: b.reward[j],
                            }));
                            i += 1;
                            j += 1;
                        }
                    }
                }
                out.shared.push(SharedTask {
                    task,
                    category,
                    slots,
                });
            }
        }
    }
    out
}

/// Compares `candidate` with `baseline` over the trials of both in `trials`.
pub fn compare(trials: &DataFrame, baseline: &str, candidate: &str) -> PolarsResult<Comparison> {
    let a = sorted_side(trials, baseline)?;
    let b = sorted_side(trials, candidate)?;
    let pairing = pair_sorted(&Side::new(&a)?, &Side::new(&b)?);

    let mut table = PairedTable::default();
    let mut deltas = Vec::new();
    let mut dropped_pairs = 0usize;
    for shared in &pairing.shared {
        let pairs: Vec<Pair> = shared.slots.iter().flatten().copied().collect();
        let dropped = shared.slots.len() - pairs.len();
        dropped_pairs += dropped;
        let diffs: Vec<f64> = pairs.iter().map(|p| p.candidate - p.baseline).collect();
        let n = pairs.len() as f64;
        let mean_of = |f: fn(&Pair) -> f64| (n > 0.0).then(|| pairs.iter().map(f).sum::<f64>() / n);
        deltas.push(TaskDelta {
            task_id: shared.task.to_owned(),
            category: shared.category.to_owned(),
            pairs: pairs.len(),
            dropped,
            baseline_mean: mean_of(|p| p.baseline),
            candidate_mean: mean_of(|p| p.candidate),
            delta: mean_of(|p| p.candidate - p.baseline),
            interval: t_interval(&diffs, CONFIDENCE)
                .map(|t| clip_to_range((t.interval.lower, t.interval.upper), &diffs, -1.0, 1.0)),
        });
        table.tasks.push(PairedTask {
            task: TaskId::new(shared.task),
            family: FamilyId::new(shared.category),
            pairs,
            dropped: u32::try_from(dropped).unwrap_or(u32::MAX),
            baseline_signals: SignalTally::default(),
            candidate_signals: SignalTally::default(),
        });
    }

    let rule = report_rule();
    let seeds = report_seeds(baseline, candidate);
    let statistics = geode_crucible::stats::compute(&table, &rule, seeds);
    let task_deltas: Vec<f64> = statistics.per_task.iter().map(|t| t.delta).collect();
    let negated: Vec<f64> = task_deltas.iter().map(|d| -d).collect();
    let p_two_sided = match (
        &statistics.permutation,
        sign_flip_test(&negated, rule.permutation_resamples, seeds.permutation),
    ) {
        (Some(up), Some(down)) => Some((2.0 * up.p_value.min(down.p_value)).min(1.0)),
        _ => None,
    };
    let base: Vec<f64> = statistics
        .per_task
        .iter()
        .map(|t| t.baseline_mean)
        .collect();
    let cand: Vec<f64> = statistics
        .per_task
        .iter()
        .map(|t| t.candidate_mean)
        .collect();
    Ok(Comparison {
        baseline: baseline.to_owned(),
        candidate: candidate.to_owned(),
        only_baseline: pairing.only_a,
        only_candidate: pairing.only_b,
        unpaired_trials: pairing.unpaired,
        dropped_pairs,
        correlation: correlation(&base, &cand),
        p_two_sided,
        statistics,
        tasks: deltas,
    })
}
