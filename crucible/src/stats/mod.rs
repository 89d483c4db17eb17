//! Paired statistics of a campaign, computed from the paired table alone (no I/O, no clock;
//! randomness only from the seeds passed in).
//!
//! The estimand is the mean over tasks of the per-task difference candidate - baseline (trials
//! averaged within a task, tasks weighted equally). Tasks are the cluster for the bootstrap, the
//! standard error and the sign-flip test; family means are reported beside.

pub mod bootstrap;
pub mod interval;
pub mod means;
pub mod permutation;
pub mod proportion;
pub mod sample;

use serde::{Deserialize, Serialize};

use crate::contract::{Clustering, DecisionRule, LowerBoundMethod};
use crate::pairing::PairedTable;
use crate::verdict::Degeneracy;

use self::bootstrap::{BootstrapSummary, cluster_bootstrap};
use self::interval::{
    TInterval, clustered_std_error, family_t_lower_bound, minimum_detectable_effect, t_interval,
};
use self::means::{FamilySummary, TaskSummary, family_means, mean, summarize_tasks};
use self::permutation::{PermutationTest, sign_flip_test};

/// Seeds of the randomized statistics (derived from the contract hash in a real decision).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatSeeds {
    /// Seed of the cluster bootstrap's stream.
    pub bootstrap: u64,
    /// Seed of the Monte Carlo sign-flip test's stream (unused when it enumerates exactly).
    pub permutation: u64,
}

/// Every statistic of a paired comparison. Values that do not exist for the input (an interval
/// of one task) are `None`, and `degenerate` says why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Statistics {
    /// The decision rule's one-sided confidence, used by every bound and interval.
    pub confidence: f64,
    /// Tasks with at least one valid pair.
    pub tasks: u32,
    /// Families among those tasks.
    pub families: u32,
    /// Valid pairs over all tasks.
    pub pairs: u32,
    /// Mean over tasks of per-task baseline means.
    pub baseline_mean: Option<f64>,
    /// Mean over tasks of per-task candidate means (compared with the floor).
    pub candidate_mean: Option<f64>,
    /// Point estimate: mean of task deltas (compared with materiality).
    pub estimate: Option<f64>,
    /// Standard error of the estimate, clustered by task.
    pub std_error: Option<f64>,
    /// The Student-t bound and interval on task deltas; `None` when degenerate.
    pub t: Option<TInterval>,
    /// The cluster bootstrap's bounds and intervals; `None` when degenerate.
    pub bootstrap: Option<BootstrapSummary>,
    /// The sign-flip test of task deltas; `None` without tasks.
    pub permutation: Option<PermutationTest>,
    /// Minimum detectable effect at 80 % power for the one-sided test at 1 - confidence.
    pub minimum_detectable_effect: Option<f64>,
    /// The family-clustered t bound, when the contract declares families.
    pub family_lower_bound: Option<f64>,
    /// Which bound the gate uses, and its value.
    pub lower_bound_method: LowerBoundMethod,
    /// The bound the gate compares with zero; `None` when it does not exist.
    pub lower_bound: Option<f64>,
    /// Why there is no interval; `None` when there is one.
    pub degenerate: Option<Degeneracy>,
    /// Means of each task with a valid pair, in table order.
    pub per_task: Vec<TaskSummary>,
    /// Means of each family, sorted by family id.
    pub per_family: Vec<FamilySummary>,
}

/// Spread below which task deltas count as all equal (deltas are means in [-1, 1]; equal data
/// can differ in the last bits through summation order).
const ZERO_SPREAD: f64 = 1e-12;

/// Computes every statistic of `table` under `rule`.
pub fn compute(table: &PairedTable, rule: &DecisionRule, seeds: StatSeeds) -> Statistics {
    let per_task = summarize_tasks(table);
    let per_family = family_means(&per_task);
    let deltas: Vec<f64> = per_task.iter().map(|t| t.delta).collect();
    let baselines: Vec<f64> = per_task.iter().map(|t| t.baseline_mean).collect();
    let candidates: Vec<f64> = per_task.iter().map(|t| t.candidate_mean).collect();

    let spread = deltas.iter().fold(f64::NEG_INFINITY, |m, &d| m.max(d))
        - deltas.iter().fold(f64::INFINITY, |m, &d| m.min(d));
    let degenerate = match deltas.len() {
        0 => Some(Degeneracy::NoTasks),
        1 => Some(Degeneracy::SingleTask),
        _ if spread <= ZERO_SPREAD => Some(Degeneracy::ZeroVariance),
        _ => None,
    };

    let estimate = mean(&deltas);
    let std_error = match degenerate {
        None => clustered_std_error(&deltas),
        Some(Degeneracy::ZeroVariance) => Some(0.0),
        Some(_) => None,
    };
    let (t, bootstrap) = if degenerate.is_none() {
        (
            t_interval(&deltas, rule.confidence),
            cluster_bootstrap(
                &deltas,
                rule.bootstrap_resamples,
                seeds.bootstrap,
                rule.confidence,
            ),
        )
    } else {
        (None, None)
    };
    let lower_bound = match (rule.lower_bound, &t, &bootstrap) {
        (LowerBoundMethod::Percentile, _, Some(b)) => Some(b.percentile_lower),
        (LowerBoundMethod::Bca, _, Some(b)) => Some(b.bca_lower),
        (LowerBoundMethod::T, Some(t), _) => Some(t.lower_bound),
        (LowerBoundMethod::TAndBca, Some(t), Some(b)) => Some(t.lower_bound.min(b.bca_lower)),
        _ => None,
    };
    let family_lower_bound = match (rule.cluster, degenerate) {
        (Clustering::Family, None) => {
            let keyed: Vec<(f64, &str)> = per_task
                .iter()
                .map(|t| (t.delta, t.family.as_str()))
                .collect();
            family_t_lower_bound(&keyed, rule.confidence)
        }
        _ => None,
    };
    // With families declared, a bound exists only if the family bound does (two families or
    // more), and the gate uses the smaller.
    let lower_bound = match rule.cluster {
        Clustering::Task => lower_bound,
        Clustering::Family => lower_bound.zip(family_lower_bound).map(|(a, b)| a.min(b)),
    };
    let minimum_detectable_effect = match degenerate {
        None => std_error.map(|se| minimum_detectable_effect(se, rule.confidence)),
        Some(_) => None,
    };

    Statistics {
        confidence: rule.confidence,
        tasks: per_task.len() as u32,
        families: per_family.len() as u32,
        pairs: per_task.iter().map(|t| t.pairs).sum(),
        baseline_mean: mean(&baselines),
        candidate_mean: mean(&candidates),
        estimate,
        std_error,
        t,
        bootstrap,
        permutation: sign_flip_test(&deltas, rule.permutation_resamples, seeds.permutation),
        minimum_detectable_effect,
        family_lower_bound,
        lower_bound_method: rule.lower_bound,
        lower_bound,
        degenerate,
        per_task,
        per_family,
    }
}
