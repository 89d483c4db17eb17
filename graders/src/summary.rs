//! The one score summary: how a set of trials becomes accuracy, its uncertainty and pass@k.
//! The harness's end-of-run summary, `geode report` and the graders all count through here, so
//! `geode run` and `geode report` cannot print different numbers for one store.
//!
//! - A task's point is the mean reward of its valid trials (an infrastructure outcome says
//!   nothing about the agent, so it is left out; a valid trial without a reward counts 0).
//! - Accuracy is the mean over tasks of those means (tasks weigh equally, whatever their trials).
//! - The Terminal-Bench standard error is sqrt(sum_t p_t (1 - p_t) / (n_t - 1)) / T: trial
//!   noise only, and undefined, as in Terminal-Bench, when any task has a single trial.
//! - The 95 % interval is the Student-t interval over per-task means (tasks are the clusters),
//!   the crucible's formula, so it is the promotion gate's too.
//! - pass@k is the crucible's unbiased estimator 1 - C(n - c, k) / C(n, k), averaged over tasks,
//!   for k up to the fewest trials any task has.

use geode_crucible::stats::interval::{clip_to_range, clustered_std_error, t_interval};
pub use geode_crucible::stats::means::mean;
use geode_crucible::stats::proportion::pass_at_k;

pub use crate::grade::passes;
use crate::outcome::TrialOutcome;

/// Two-sided coverage of every interval a summary shows.
pub const CONFIDENCE: f64 = 0.95;

/// What one task contributes to a score.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TaskPoint {
    /// Mean reward over the task's trials.
    pub mean: f64,
    /// Trials averaged.
    pub trials: usize,
    /// Trials whose reward [`passes`].
    pub passes: usize,
}

/// One task's trials counted both ways: without its infrastructure trials (the score) and with
/// them as reward 0 (the worst case), so a reader sees what validity costs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TaskTally {
    /// `None` when every trial of the task was an infrastructure failure.
    pub point: Option<TaskPoint>,
    /// Every trial, infrastructure ones as 0; `None` only for a task with no trials.
    pub infra_as_zero: Option<TaskPoint>,
}

/// Tallies one task's `(outcome, reward)` trials.
pub fn tally(trials: &[(TrialOutcome, Option<f64>)]) -> TaskTally {
    let reward = |r: &Option<f64>| r.filter(|r| r.is_finite()).unwrap_or(0.0);
    let valid: Vec<f64> = trials
        .iter()
        .filter(|(o, _)| !o.is_infrastructure())
        .map(|(_, r)| reward(r))
        .collect();
    let zeroed: Vec<f64> = trials
        .iter()
        .map(|(o, r)| {
            if o.is_infrastructure() {
                0.0
            } else {
                reward(r)
            }
        })
        .collect();
    let point = |rewards: &[f64]| {
        mean(rewards).map(|mean| TaskPoint {
            mean,
            trials: rewards.len(),
            passes: rewards.iter().filter(|r| passes(**r)).count(),
        })
    };
    TaskTally {
        point: point(&valid),
        infra_as_zero: point(&zeroed),
    }
}

/// Scores over a set of tasks. `None` where the value does not exist (no tasks; an interval of
/// one task; the Terminal-Bench error with a task of one trial).
#[derive(Debug, Clone, PartialEq)]
pub struct Scores {
    /// Tasks scored.
    pub tasks: usize,
    /// Mean over tasks of each task's mean reward.
    pub accuracy: Option<f64>,
    /// Terminal-Bench standard error (trial noise only); `None` when a task has one trial.
    pub tb_stderr: Option<f64>,
    /// 95 % Student-t interval over per-task means, clipped to [0, 1].
    pub ci95: Option<(f64, f64)>,
}

/// Accuracy, Terminal-Bench standard error and the task-clustered 95 % t-interval.
pub fn scores(points: &[TaskPoint]) -> Scores {
    let means: Vec<f64> = points.iter().map(|p| p.mean).collect();
    let accuracy = mean(&means);
    let t = points.len();
    let tb_stderr = (t > 0 && points.iter().all(|p| p.trials > 1)).then(|| {
        let var: f64 = points
            .iter()
            .map(|p| p.mean * (1.0 - p.mean) / (p.trials as f64 - 1.0))
            .sum();
        var.max(0.0).sqrt() / t as f64
    });
    let ci95 = accuracy.and_then(|acc| match clustered_std_error(&means) {
        // All tasks equal: the interval collapses to the point.
        Some(se) if se <= 0.0 => Some((acc, acc)),
        Some(_) => t_interval(&means, CONFIDENCE)
            .map(|t| clip_to_range((t.interval.lower, t.interval.upper), &means, 0.0, 1.0)),
        None => None,
    });
    Scores {
        tasks: t,
        accuracy,
        tb_stderr,
        ci95,
    }
}

/// pass@k averaged over tasks for k = 1..=min trials (empty when there are no tasks).
pub fn pass_at_k_curve(points: &[TaskPoint]) -> Vec<(usize, f64)> {
    let k_max = points.iter().map(|p| p.trials).min().unwrap_or(0);
    (1..=k_max)
        .filter_map(|k| {
            let v: Vec<f64> = points
                .iter()
                .map(|p| pass_at_k(p.trials, p.passes, k))
                .collect();
            mean(&v).map(|m| (k, m))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(mean: f64, trials: usize) -> TaskPoint {
        TaskPoint {
            mean,
            trials,
            passes: 0,
        }
    }

    #[test]
    fn scores_by_hand() {
        let s = scores(&[p(1.0, 5), p(0.5, 5), p(0.0, 1)]);
        assert_eq!(s.accuracy, Some(0.5));
        // A task of one trial: Terminal-Bench's stderr does not exist.
        assert_eq!(s.tb_stderr, None);
        assert!(s.ci95.is_some());
        // Only the 0.5 task has trial noise: sqrt(0.25 / 4) / 3.
        let s = scores(&[p(1.0, 5), p(0.5, 5), p(0.0, 2)]);
        assert!((s.tb_stderr.unwrap_or(0.0) - 0.25f64 / 3.0).abs() < 1e-12);
        assert_eq!(scores(&[p(0.3, 2), p(0.3, 2)]).ci95, Some((0.3, 0.3)));
        assert_eq!(scores(&[p(0.3, 2)]).ci95, None);
        // Two tasks: the t-interval reaches past [0, 1] and is clipped to it.
        assert_eq!(scores(&[p(0.0, 2), p(1.0, 2)]).ci95, Some((0.0, 1.0)));
        assert_eq!(scores(&[]).accuracy, None);
    }

    #[test]
    fn a_tally_leaves_infrastructure_out_or_counts_it_as_zero() {
        let t = tally(&[
            (TrialOutcome::Passed, Some(1.0)),
            (TrialOutcome::Failed, Some(0.0)),
            (TrialOutcome::AgentTimeout, None),
            (TrialOutcome::SandboxLost, None),
        ]);
        let point = t.point.unwrap();
        assert_eq!((point.trials, point.passes), (3, 1));
        assert!((point.mean - 1.0 / 3.0).abs() < 1e-12);
        let zero = t.infra_as_zero.unwrap();
        assert_eq!((zero.trials, zero.passes, zero.mean), (4, 1, 0.25));
        let lost = tally(&[(TrialOutcome::SandboxLost, Some(1.0))]);
        assert_eq!(lost.point, None);
        assert_eq!(lost.infra_as_zero.map(|p| p.mean), Some(0.0));
        assert_eq!(tally(&[]).infra_as_zero, None);
    }

    #[test]
    fn pass_at_k_stops_at_the_fewest_trials() {
        let pts = [
            TaskPoint {
                mean: 0.5,
                trials: 2,
                passes: 1,
            },
            TaskPoint {
                mean: 1.0,
                trials: 3,
                passes: 3,
            },
        ];
        let curve = pass_at_k_curve(&pts);
        assert_eq!(curve.len(), 2);
        assert_eq!(curve[0], (1, 0.75));
        assert_eq!(curve[1], (2, 1.0));
    }
}
