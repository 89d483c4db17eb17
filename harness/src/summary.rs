//! The end-of-run summary: accuracy with the Terminal-Bench standard error and a task-clustered
//! 95% interval, per-task means, unbiased pass@k, outcome counts, tokens, cost and time.
//!
//! Infrastructure outcomes are excluded from the scores ("infra excluded") and, separately,
//! counted as zero ("infra as zero"), so a run hit by infrastructure failures cannot look better
//! or worse than it is without saying so.

use std::collections::BTreeMap;

use geode_crucible::stats::interval::clip_to_range;
use geode_crucible::stats::proportion::pass_at_k;
use serde::Serialize;
use statrs::distribution::{ContinuousCDF, StudentsT};

use crate::store::TrialRow;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskScore {
    pub task_id: String,
    pub trials: usize,
    pub passes: usize,
    pub mean_reward: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunSummary {
    pub tasks: usize,
    pub trials: usize,
    /// Mean over tasks of the per-task mean reward, infrastructure trials excluded.
    pub accuracy: f64,
    /// sqrt(sum_t p_t (1 - p_t) / (n_t - 1)) / T: trial noise only (Terminal-Bench); NaN when
    /// any task has a single trial.
    pub tb_stderr: f64,
    /// 95% t-interval over the per-task means (tasks are the clusters).
    pub ci95: Option<(f64, f64)>,
    /// Accuracy when infrastructure trials count as reward 0.
    pub accuracy_infra_as_zero: f64,
    /// Unbiased pass@k for k = 1..=min trials per task.
    pub pass_at_k: Vec<(usize, f64)>,
    pub outcomes: BTreeMap<String, usize>,
    pub per_task: Vec<TaskScore>,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cost_usd: f64,
}

fn mean(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    xs.iter().sum::<f64>() / xs.len() as f64
}

pub fn summarize(trials: &[TrialRow]) -> RunSummary {
    let mut by_task: BTreeMap<&str, Vec<&TrialRow>> = BTreeMap::new();
    let mut outcomes: BTreeMap<String, usize> = BTreeMap::new();
    for t in trials {
        by_task.entry(t.task_id.as_str()).or_default().push(t);
        *outcomes.entry(t.outcome.as_str().to_string()).or_default() += 1;
    }
    let mut per_task = Vec::new();
    let mut infra_zero_means = Vec::new();
    for (task, rows) in &by_task {
        let valid: Vec<f64> = rows
            .iter()
            .filter(|r| !r.outcome.is_infrastructure())
            .map(|r| r.reward.unwrap_or(0.0))
            .collect();
        let zeroed: Vec<f64> = rows
            .iter()
            .map(|r| {
                if r.outcome.is_infrastructure() {
                    0.0
                } else {
                    r.reward.unwrap_or(0.0)
                }
            })
            .collect();
        infra_zero_means.push(mean(&zeroed));
        if valid.is_empty() {
            continue;
        }
        per_task.push(TaskScore {
            task_id: task.to_string(),
            trials: valid.len(),
            passes: valid.iter().filter(|r| **r >= 1.0).count(),
            mean_reward: mean(&valid),
        });
    }
    let means: Vec<f64> = per_task.iter().map(|t| t.mean_reward).collect();
    let t_count = per_task.len();
    let accuracy = mean(&means);
    // Terminal-Bench's stderr needs n_t - 1 > 0 in every task: one task of a single trial makes
    // it undefined (NaN, shown as n/a), rather than counted in T and dropped from the sum.
    let tb_stderr = if !per_task.is_empty() && per_task.iter().all(|t| t.trials > 1) {
        let var: f64 = per_task
            .iter()
            .map(|t| t.mean_reward * (1.0 - t.mean_reward) / (t.trials as f64 - 1.0))
            .sum();
        var.max(0.0).sqrt() / t_count as f64
    } else {
        f64::NAN
    };
    let ci95 = (t_count >= 2).then(|| {
        let sd = (means.iter().map(|m| (m - accuracy).powi(2)).sum::<f64>()
            / (t_count as f64 - 1.0))
            .sqrt();
        let se = sd / (t_count as f64).sqrt();
        let q = StudentsT::new(0.0, 1.0, t_count as f64 - 1.0)
            .map(|d| d.inverse_cdf(0.975))
            .unwrap_or(1.96);
        clip_to_range((accuracy - q * se, accuracy + q * se), &means, 0.0, 1.0)
    });
    let k_max = per_task.iter().map(|t| t.trials).min().unwrap_or(0);
    let pass_at_k = (1..=k_max)
        .map(|k| {
            let v: Vec<f64> = per_task
                .iter()
                .map(|t| pass_at_k(t.trials, t.passes, k))
                .collect();
            (k, mean(&v))
        })
        .collect();
    RunSummary {
        tasks: by_task.len(),
        trials: trials.len(),
        accuracy,
        tb_stderr,
        ci95,
        accuracy_infra_as_zero: mean(&infra_zero_means),
        pass_at_k,
        outcomes,
        per_task,
        input_tokens: trials.iter().map(|t| t.usage.input_tokens).sum(),
        output_tokens: trials.iter().map(|t| t.usage.output_tokens).sum(),
        cost_usd: trials.iter().map(|t| t.usage.cost_usd).sum(),
    }
}

impl RunSummary {
    /// Lines for the terminal.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let ci = self
            .ci95
            .map(|(lo, hi)| format!(", 95% CI [{lo:.3}, {hi:.3}] (task-clustered t)"))
            .unwrap_or_default();
        let stderr = if self.tb_stderr.is_finite() {
            format!(" ± {:.3} (1.96 × TB stderr)", 1.96 * self.tb_stderr)
        } else {
            " (TB stderr n/a: one trial per task)".to_string()
        };
        out.push_str(&format!("accuracy {:.3}{stderr}{ci}\n", self.accuracy));
        out.push_str(&format!(
            "accuracy with infrastructure failures as zero: {:.3}\n",
            self.accuracy_infra_as_zero
        ));
        let pk: Vec<String> = self
            .pass_at_k
            .iter()
            .map(|(k, v)| format!("pass@{k} {v:.3}"))
            .collect();
        if !pk.is_empty() {
            out.push_str(&format!("{}\n", pk.join(", ")));
        }
        let oc: Vec<String> = self
            .outcomes
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        out.push_str(&format!(
            "{} tasks, {} trials: {}\n",
            self.tasks,
            self.trials,
            oc.join(", ")
        ));
        out.push_str(&format!(
            "tokens in {} out {}, cost ${:.4}\n",
            self.input_tokens, self.output_tokens, self.cost_usd
        ));
        for t in &self.per_task {
            out.push_str(&format!(
                "  {:<40} {:.2} ({}/{})\n",
                t.task_id, t.mean_reward, t.passes, t.trials
            ));
        }
        out
    }
}
