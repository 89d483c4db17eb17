//! The end-of-run summary: accuracy with the Terminal-Bench standard error and a task-clustered
//! 95% interval, per-task means, unbiased pass@k, outcome counts, tokens, cost and time.
//!
//! Infrastructure outcomes are excluded from the scores ("infra excluded") and, separately,
//! counted as zero ("infra as zero"), so a run hit by infrastructure failures cannot look better
//! or worse than it is without saying so.

use std::collections::BTreeMap;

use geode_graders::TrialOutcome;
use geode_graders::summary;
use serde::Serialize;

use crate::store::{TrialRow, TrialUsage};

/// One task's score, infrastructure trials excluded.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskScore {
    /// The task's id in its pack.
    pub task_id: String,
    /// Trials counted (infrastructure trials left out).
    pub trials: usize,
    /// Of those, trials whose reward is a pass (at least 1).
    pub passes: usize,
    /// Mean reward over the counted trials.
    pub mean_reward: f64,
}

/// The figures of a whole run, as `geode run` and `geode report` print them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunSummary {
    /// Distinct tasks among the trials.
    pub tasks: usize,
    /// All trials, infrastructure ones included.
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
    /// Trials per outcome name.
    pub outcomes: BTreeMap<String, usize>,
    /// Per-task scores, by task id; a task with only infrastructure trials has none.
    pub per_task: Vec<TaskScore>,
    /// Prompt tokens over all trials.
    pub input_tokens: u64,
    /// Generated tokens over all trials.
    pub output_tokens: u64,
    /// Cost of all trials, in US dollars.
    pub cost_usd: f64,
}

/// One trial as the summary counts it.
#[derive(Debug, Clone, Copy)]
pub struct Counted<'a> {
    /// The trial's task.
    pub task_id: &'a str,
    /// How the trial ended; infrastructure outcomes are left out of the scores.
    pub outcome: TrialOutcome,
    /// The primary reward; `None` when the verifier left none.
    pub reward: Option<f64>,
    /// What the trial's agent spent.
    pub usage: &'a TrialUsage,
}

/// The run's summary, counted by the graders' one score summary (`geode_graders::summary`), so
/// `geode report` on the same store prints the same figures.
pub fn summarize(trials: &[TrialRow]) -> RunSummary {
    summarize_counted(trials.iter().map(|t| Counted {
        task_id: &t.task_id,
        outcome: t.outcome,
        reward: t.reward,
        usage: &t.usage,
    }))
}

/// [`summarize`] over trials read some other way than as whole rows (`geode view` reads only
/// the columns it counts).
pub fn summarize_counted<'a>(trials: impl IntoIterator<Item = Counted<'a>>) -> RunSummary {
    let mut by_task: BTreeMap<&str, Vec<(TrialOutcome, Option<f64>)>> = BTreeMap::new();
    let mut outcomes: BTreeMap<String, usize> = BTreeMap::new();
    let (mut n, mut input_tokens, mut output_tokens, mut cost_usd) = (0usize, 0u64, 0u64, 0f64);
    for t in trials {
        n += 1;
        by_task
            .entry(t.task_id)
            .or_default()
            .push((t.outcome, t.reward));
        *outcomes.entry(t.outcome.as_str().to_string()).or_default() += 1;
        input_tokens += t.usage.input_tokens;
        output_tokens += t.usage.output_tokens;
        cost_usd += t.usage.cost_usd;
    }
    let mut points = Vec::new();
    let mut per_task = Vec::new();
    let mut infra_as_zero = Vec::new();
    for (task, rows) in &by_task {
        let tally = summary::tally(rows);
        infra_as_zero.extend(tally.infra_as_zero);
        if let Some(p) = tally.point {
            points.push(p);
            per_task.push(TaskScore {
                task_id: task.to_string(),
                trials: p.trials,
                passes: p.passes,
                mean_reward: p.mean,
            });
        }
    }
    let scores = summary::scores(&points);
    RunSummary {
        tasks: by_task.len(),
        trials: n,
        accuracy: scores.accuracy.unwrap_or(f64::NAN),
        tb_stderr: scores.tb_stderr.unwrap_or(f64::NAN),
        ci95: scores.ci95,
        accuracy_infra_as_zero: summary::scores(&infra_as_zero).accuracy.unwrap_or(f64::NAN),
        pass_at_k: summary::pass_at_k_curve(&points),
        outcomes,
        per_task,
        input_tokens,
        output_tokens,
        cost_usd,
    }
}

impl RunSummary {
    /// Trials ran but none reached a verdict (each ended before its agent or in
    /// infrastructure): the run measured nothing.
    pub fn measured_nothing(&self) -> bool {
        self.trials > 0 && self.per_task.is_empty()
    }

    /// Lines for the terminal.
    pub fn render(&self) -> String {
        let mut out = String::new();
        if self.measured_nothing() {
            out.push_str("accuracy n/a: no trial reached a verdict (see the outcomes below)\n");
            out.push_str(&self.outcome_line());
            return out;
        }
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
        out.push_str(&self.outcome_line());
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

    /// `N tasks, M trials: passed 3, failed 1, ...`.
    fn outcome_line(&self) -> String {
        let oc: Vec<String> = self
            .outcomes
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        format!(
            "{} tasks, {} trials: {}\n",
            self.tasks,
            self.trials,
            oc.join(", ")
        )
    }
}
