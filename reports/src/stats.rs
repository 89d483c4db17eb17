//! The score statistics of a set of tasks, exactly as the harness's end-of-run summary
//! (harness/src/summary.rs) defines them, so `geode run` and `geode report` print the same
//! numbers: accuracy is the mean over tasks of per-task mean rewards; the Terminal-Bench standard
//! error is sqrt(sum_t p_t (1 - p_t) / (n_t - 1)) / T (trial noise only; undefined, as in
//! Terminal-Bench, when any task has a single trial); the 95 % interval is the Student-t interval over per-task means (tasks are
//! the clusters), taken from the crucible so it is the promotion gate's formula; pass@k is the
//! crucible's unbiased estimator 1 - C(n - c, k) / C(n, k) (the harness's too) averaged over
//! tasks, for k up to the fewest trials any task has.

use geode_crucible::stats::interval::{clip_to_range, clustered_std_error, t_interval};
pub use geode_crucible::stats::means::mean;
use geode_crucible::stats::proportion::pass_at_k;

/// Two-sided coverage of every interval in the reports.
pub const CONFIDENCE: f64 = 0.95;

/// What one task contributes to a score.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TaskPoint {
    /// Mean reward over the task's trials.
    pub mean: f64,
    /// Trials averaged.
    pub trials: usize,
    /// Trials with reward >= 1.
    pub passes: usize,
}

/// Scores over a set of tasks. `None` where the value does not exist (no tasks; an interval of
/// one task).
#[derive(Debug, Clone, PartialEq)]
pub struct Scores {
    pub tasks: usize,
    pub accuracy: Option<f64>,
    pub tb_stderr: Option<f64>,
    pub ci95: Option<(f64, f64)>,
}

/// Accuracy, Terminal-Bench standard error and the task-clustered 95 % t-interval.
pub fn scores(points: &[TaskPoint]) -> Scores {
    let means: Vec<f64> = points.iter().map(|p| p.mean).collect();
    let accuracy = mean(&means);
    let t = points.len();
    // Undefined (as in Terminal-Bench) unless every task has two or more trials.
    let tb_stderr = (t > 0 && points.iter().all(|p| p.trials > 1)).then(|| {
        let var: f64 = points
            .iter()
            .map(|p| p.mean * (1.0 - p.mean) / (p.trials as f64 - 1.0))
            .sum();
        var.sqrt() / t as f64
    });
    let ci95 = accuracy.and_then(|acc| match clustered_std_error(&means) {
        // All tasks equal: the interval collapses to the point (the harness prints it so).
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores_by_hand() {
        let p = |mean, trials| TaskPoint {
            mean,
            trials,
            passes: 0,
        };
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
    fn correlation_by_hand() {
        let r = correlation(&[1.0, 2.0, 3.0], &[2.0, 4.0, 6.5]).unwrap_or(0.0);
        assert!(r > 0.99);
        assert_eq!(correlation(&[1.0, 1.0], &[0.0, 1.0]), None);
    }
}
