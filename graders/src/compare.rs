//! The one paired comparison of two runs on the tasks they share, with the crucible's
//! statistics, so `geode compare` (through the reports) and `geode view`'s paired page show the
//! numbers the promotion gate would compute, from one copy of the pairing.
//!
//! Pairing follows the crucible (crucible/src/pairing.rs): trial `attempt` of a task in the
//! baseline run meets the same attempt of the same task in the candidate run (the harness
//! derives a trial's seed from the run seed, the task and the attempt, so runs with one seed meet
//! the same environment randomness); a pair with an infrastructure failure on either side is
//! dropped whole; an attempt present on one side only is unpaired. Tasks are the clusters;
//! categories play the crucible's families.
//!
//! The input is columns (one run's trials sorted by task, then attempt) so a caller holding a
//! columnar frame (the reports' polars) or rows from SQLite (the viewer) hands them over
//! without copying strings, and a million trials pair in one sequential pass.

use std::cmp::Ordering;

use geode_crucible::pairing::{Pair, PairedTable, PairedTask, SignalTally};
use geode_crucible::stats::interval::{clip_to_range, t_interval};
use geode_crucible::stats::means::mean;
use geode_crucible::stats::permutation::sign_flip_test;
use geode_crucible::{
    ContractHash, DecisionRule, FamilyId, StatSeeds, Statistics, TaskId, bootstrap_seed,
    permutation_seed,
};
use serde::Serialize;

use crate::summary::CONFIDENCE;

/// One shared task.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskDelta {
    /// The task both runs share.
    pub task_id: String,
    /// The task's category (the baseline run's), the crucible's family.
    pub category: String,
    /// Pairs compared: attempts of both runs without an infrastructure failure.
    pub pairs: usize,
    /// Pairs dropped for an infrastructure failure on either side.
    pub dropped: usize,
    /// The baseline's mean reward over the pairs; `None` without pairs.
    pub baseline_mean: Option<f64>,
    /// The candidate's mean reward over the pairs; `None` without pairs.
    pub candidate_mean: Option<f64>,
    /// Mean of candidate minus baseline over the pairs; `None` without pairs.
    pub delta: Option<f64>,
    /// 95 % t-interval of the task's pair differences (`None` below two pairs or no spread).
    pub interval: Option<(f64, f64)>,
}

/// A paired comparison (candidate - baseline).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    /// The baseline run's id.
    pub baseline: String,
    /// The candidate run's id.
    pub candidate: String,
    /// Tasks with trials in only one of the runs (not compared).
    pub only_baseline: usize,
    /// Tasks with trials in the candidate run only (not compared).
    pub only_candidate: usize,
    /// Attempts present in one run only.
    pub unpaired_trials: usize,
    /// Pairs dropped for an infrastructure failure on either side, over all tasks.
    pub dropped_pairs: usize,
    /// The crucible's statistics at the report confidence (t, BCa bootstrap, sign-flip, MDE).
    pub statistics: Statistics,
    /// Two-sided sign-flip p-value: 2 min(p(candidate better), p(baseline better)), capped at 1.
    pub p_two_sided: Option<f64>,
    /// Pearson correlation of per-task baseline and candidate means (high: pairing pays).
    pub correlation: Option<f64>,
    /// One entry per shared task, in task order.
    pub tasks: Vec<TaskDelta>,
}

/// One run's trials as columns of equal length, sorted by (task, attempt). `reward` is the
/// headline reward with a missing one as 0; `infra` whether the outcome is an infrastructure
/// class.
#[derive(Debug, Clone, Copy)]
pub struct RunColumns<'a> {
    /// Each trial's task id.
    pub task: &'a [&'a str],
    /// Each trial's task category.
    pub category: &'a [&'a str],
    /// Each trial's attempt number within its task.
    pub attempt: &'a [i64],
    /// Whether each trial's outcome is an infrastructure class.
    pub infra: &'a [bool],
    /// Each trial's headline reward, 0 when missing.
    pub reward: &'a [f64],
}

impl RunColumns<'_> {
    fn len(&self) -> usize {
        self.task.len()
    }

    /// End of the run of rows of the task starting at `i`.
    fn task_end(&self, i: usize) -> usize {
        let t = self.task[i];
        i + self.task[i..].iter().take_while(|x| **x == t).count()
    }

    /// Columns of unequal length would pair rows of one trial with values of another.
    fn consistent(&self) -> bool {
        let n = self.len();
        [
            self.category.len(),
            self.attempt.len(),
            self.infra.len(),
            self.reward.len(),
        ]
        .iter()
        .all(|l| *l == n)
    }
}

/// Columns whose lengths differ: a caller's bug, refused instead of pairing the wrong rows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("run {run}: its trial columns have different lengths")]
pub struct RaggedColumns {
    /// The run whose columns differ in length.
    pub run: String,
}

/// The decision rule used for report statistics: the crucible's default (what `geode crucible
/// freeze` proposes), with the report's confidence.
pub fn report_rule() -> DecisionRule {
    DecisionRule {
        confidence: CONFIDENCE,
        ..DecisionRule::default()
    }
}

/// Seeds of the randomized statistics, fixed by the two run ids (a comparison of the same runs
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

/// Pearson correlation; `None` below two points or when either side has no spread.
pub fn correlation(xs: &[f64], ys: &[f64]) -> Option<f64> {
    let n = xs.len().min(ys.len());
    if n < 2 {
        return None;
    }
    let mx = mean(&xs[..n])?;
    let my = mean(&ys[..n])?;
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for (x, y) in xs.iter().zip(ys) {
        sxy += (x - mx) * (y - my);
        sxx += (x - mx) * (x - mx);
        syy += (y - my) * (y - my);
    }
    (sxx > 0.0 && syy > 0.0).then(|| sxy / (sxx * syy).sqrt())
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

/// Walks both sorted runs once: tasks first, then the attempts of a shared task (a merge).
fn pair_sorted<'a>(a: &RunColumns<'a>, b: &RunColumns<'a>) -> Pairing<'a> {
    let mut out = Pairing {
        shared: Vec::new(),
        only_a: 0,
        only_b: 0,
        unpaired: 0,
    };
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
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

/// Compares the `candidate` run with the `baseline` run; each side's columns sorted by
/// (task, attempt).
pub fn compare(
    baseline: (&str, RunColumns<'_>),
    candidate: (&str, RunColumns<'_>),
) -> Result<Comparison, RaggedColumns> {
    let (baseline, a) = baseline;
    let (candidate, b) = candidate;
    for (run, side) in [(baseline, &a), (candidate, &b)] {
        if !side.consistent() {
            return Err(RaggedColumns {
                run: run.to_owned(),
            });
        }
    }
    let pairing = pair_sorted(&a, &b);

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn correlation_by_hand() {
        let r = correlation(&[1.0, 2.0, 3.0], &[2.0, 4.0, 6.5]).unwrap_or(0.0);
        assert!(r > 0.99);
        assert_eq!(correlation(&[1.0, 1.0], &[0.0, 1.0]), None);
    }

    #[test]
    fn pairs_meet_by_task_and_attempt_and_infrastructure_drops_the_pair() {
        // Baseline: a (attempts 0, 1), b (0), c (0). Candidate: a (0, 1, 2), b (0, infra), d (0).
        let a = RunColumns {
            task: &["a", "a", "b", "c"],
            category: &["x", "x", "y", "y"],
            attempt: &[0, 1, 0, 0],
            infra: &[false, false, false, false],
            reward: &[0.0, 1.0, 1.0, 1.0],
        };
        let b = RunColumns {
            task: &["a", "a", "a", "b", "d"],
            category: &["x", "x", "x", "y", "y"],
            attempt: &[0, 1, 2, 0, 0],
            infra: &[false, false, false, true, false],
            reward: &[1.0, 1.0, 1.0, 0.0, 0.0],
        };
        let c = compare(("base", a), ("cand", b)).unwrap();
        assert_eq!((c.only_baseline, c.only_candidate), (1, 1));
        assert_eq!(c.unpaired_trials, 1);
        assert_eq!(c.dropped_pairs, 1);
        let task_a = &c.tasks[0];
        assert_eq!((task_a.task_id.as_str(), task_a.pairs), ("a", 2));
        assert_eq!(task_a.delta, Some(0.5));
        assert_eq!(c.tasks[1].pairs, 0);
        assert_eq!(c.tasks[1].delta, None);
    }

    #[test]
    fn ragged_columns_are_refused() {
        let a = RunColumns {
            task: &["a"],
            category: &[],
            attempt: &[0],
            infra: &[false],
            reward: &[1.0],
        };
        assert_eq!(
            compare(("base", a), ("cand", a)).unwrap_err().run,
            "base".to_string()
        );
    }
}
