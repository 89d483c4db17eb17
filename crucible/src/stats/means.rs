//! Per-task and per-family means of a paired table.
//!
//! Weighting: trials are averaged within a task, so every task weighs the same whatever its
//! number of valid pairs; family means average the task means of the family. The gate's point
//! estimate is the mean over tasks (the cluster of the bootstrap); family means are reported so
//! a reader sees whether one family carries the gain, and counted for `min_families`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::ids::{FamilyId, TaskId};
use crate::pairing::PairedTable;

/// Means of one task over its valid pairs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskSummary {
    /// The task summarized.
    pub task: TaskId,
    /// The task's family.
    pub family: FamilyId,
    /// Valid pairs of the task (at least one).
    pub pairs: u32,
    /// Mean baseline reward over the valid pairs.
    pub baseline_mean: f64,
    /// Mean candidate reward over the valid pairs.
    pub candidate_mean: f64,
    /// candidate_mean - baseline_mean (= mean of the pair differences).
    pub delta: f64,
}

/// Means of one family over its tasks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FamilySummary {
    /// The family summarized.
    pub family: FamilyId,
    /// Tasks of the family with a valid pair.
    pub tasks: u32,
    /// Mean of the family's task baseline means.
    pub baseline_mean: f64,
    /// Mean of the family's task candidate means.
    pub candidate_mean: f64,
    /// Mean of the family's task deltas (candidate - baseline).
    pub delta: f64,
}

/// Arithmetic mean; `None` for an empty slice.
pub fn mean(xs: &[f64]) -> Option<f64> {
    if xs.is_empty() {
        None
    } else {
        Some(xs.iter().sum::<f64>() / xs.len() as f64)
    }
}

/// Sample variance (n - 1 denominator); `None` below two values.
pub fn sample_variance(xs: &[f64]) -> Option<f64> {
    if xs.len() < 2 {
        return None;
    }
    let m = mean(xs)?;
    Some(xs.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (xs.len() - 1) as f64)
}

/// Summaries of the tasks that have at least one valid pair, in table order.
pub fn summarize_tasks(table: &PairedTable) -> Vec<TaskSummary> {
    table
        .tasks
        .iter()
        .filter(|t| !t.pairs.is_empty())
        .map(|t| {
            let n = t.pairs.len() as f64;
            let b = t.pairs.iter().map(|p| p.baseline).sum::<f64>() / n;
            let c = t.pairs.iter().map(|p| p.candidate).sum::<f64>() / n;
            let d = t
                .pairs
                .iter()
                .map(|p| p.candidate - p.baseline)
                .sum::<f64>()
                / n;
            TaskSummary {
                task: t.task.clone(),
                family: t.family.clone(),
                pairs: t.pairs.len() as u32,
                baseline_mean: b,
                candidate_mean: c,
                delta: d,
            }
        })
        .collect()
}

/// Family means over task summaries, sorted by family id.
pub fn family_means(tasks: &[TaskSummary]) -> Vec<FamilySummary> {
    let mut groups: BTreeMap<&FamilyId, Vec<&TaskSummary>> = BTreeMap::new();
    for t in tasks {
        groups.entry(&t.family).or_default().push(t);
    }
    groups
        .into_iter()
        .map(|(family, ts)| {
            let n = ts.len() as f64;
            FamilySummary {
                family: family.clone(),
                tasks: ts.len() as u32,
                baseline_mean: ts.iter().map(|t| t.baseline_mean).sum::<f64>() / n,
                candidate_mean: ts.iter().map(|t| t.candidate_mean).sum::<f64>() / n,
                delta: ts.iter().map(|t| t.delta).sum::<f64>() / n,
            }
        })
        .collect()
}
