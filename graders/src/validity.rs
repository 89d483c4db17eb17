//! The task-pack validity report of `geode tasks validate PACK -k N` (schema
//! `geode.validity.v1`): the oracle (reference solution) and nop (does nothing) agents run N
//! times per task; a task is suspect when the oracle cannot pass it, when nop passes it, or
//! when the oracle's reward varies (flaky), and unmeasured when no trial of one side was valid.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::summary::passes;

pub(crate) const SCHEMA: &str = "geode.validity.v1";

/// One task's trial rewards: `None` is an infrastructure trial (no reward).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskTrials {
    /// The task's name.
    pub task: String,
    /// Rewards of the oracle agent's trials.
    pub oracle: Vec<Option<f64>>,
    /// Rewards of the nop agent's trials.
    pub nop: Vec<Option<f64>>,
}

/// What is wrong with a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[derive(strum::IntoStaticStr, strum::EnumString, strum::Display, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
pub enum TaskFlag {
    /// No valid oracle trial reached the pass threshold.
    OracleCannotPass,
    /// Some valid nop trial reached the pass threshold: the tests check nothing.
    NopPasses,
    /// The oracle's valid rewards differ between runs.
    Flaky,
    /// Every oracle trial (or every nop trial) was an infrastructure failure.
    Unmeasured,
}

impl TaskFlag {
    pub(crate) fn as_str(self) -> &'static str {
        self.into()
    }
}

/// One task's verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskValidity {
    /// The task's name.
    pub task: String,
    /// The oracle's rewards as given (`None`: an infrastructure trial).
    pub oracle_rewards: Vec<Option<f64>>,
    /// The nop agent's rewards as given (`None`: an infrastructure trial).
    pub nop_rewards: Vec<Option<f64>>,
    /// Share of the oracle's valid trials that pass; `None` without any.
    pub oracle_pass_rate: Option<f64>,
    /// Share of the nop agent's valid trials that pass; `None` without any.
    pub nop_pass_rate: Option<f64>,
    /// Infrastructure trials of both agents.
    pub infra_trials: usize,
    /// What is wrong with the task, sorted; empty for a sound task.
    pub flags: Vec<TaskFlag>,
}

impl TaskValidity {
    /// Whether the task carries no flag.
    pub fn is_ok(&self) -> bool {
        self.flags.is_empty()
    }
}

/// The validity report of one task pack.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ValidityReport {
    pub(crate) schema: String,
    pub(crate) pack: String,
    /// Trials per task and agent (`-k`).
    pub k: usize,
    /// One verdict per task, in the order given.
    pub tasks: Vec<TaskValidity>,
}

fn valid(rewards: &[Option<f64>]) -> Vec<f64> {
    rewards
        .iter()
        .flatten()
        .copied()
        .filter(|r| r.is_finite())
        .collect()
}

fn pass_rate(rewards: &[f64]) -> Option<f64> {
    (!rewards.is_empty())
        .then(|| rewards.iter().filter(|r| passes(**r)).count() as f64 / rewards.len() as f64)
}

fn assess(t: &TaskTrials) -> TaskValidity {
    let (oracle, nop) = (valid(&t.oracle), valid(&t.nop));
    let mut flags = Vec::new();
    if oracle.is_empty() || nop.is_empty() {
        flags.push(TaskFlag::Unmeasured);
    }
    if !oracle.is_empty() && !oracle.iter().copied().any(passes) {
        flags.push(TaskFlag::OracleCannotPass);
    }
    if nop.iter().copied().any(passes) {
        flags.push(TaskFlag::NopPasses);
    }
    let spread = oracle
        .iter()
        .copied()
        .fold(None, |acc: Option<(f64, f64)>, r| {
            Some(acc.map_or((r, r), |(lo, hi)| (lo.min(r), hi.max(r))))
        });
    if spread.is_some_and(|(lo, hi)| hi - lo > 1e-9) {
        flags.push(TaskFlag::Flaky);
    }
    flags.sort();
    TaskValidity {
        task: t.task.clone(),
        oracle_rewards: t.oracle.clone(),
        nop_rewards: t.nop.clone(),
        oracle_pass_rate: pass_rate(&oracle),
        nop_pass_rate: pass_rate(&nop),
        infra_trials: t
            .oracle
            .iter()
            .chain(&t.nop)
            .filter(|r| r.is_none())
            .count(),
        flags,
    }
}

impl ValidityReport {
    /// The report of pack `pack` from each task's trials, `k` per task and agent.
    pub fn build(pack: impl Into<String>, k: usize, tasks: &[TaskTrials]) -> Self {
        ValidityReport {
            schema: SCHEMA.into(),
            pack: pack.into(),
            k,
            tasks: tasks.iter().map(assess).collect(),
        }
    }

    /// Tasks carrying `flag`.
    pub fn flagged(&self, flag: TaskFlag) -> Vec<&str> {
        self.tasks
            .iter()
            .filter(|t| t.flags.contains(&flag))
            .map(|t| t.task.as_str())
            .collect()
    }

    /// Whether no task carries a flag.
    pub fn all_ok(&self) -> bool {
        self.tasks.iter().all(TaskValidity::is_ok)
    }

    /// The report as pretty JSON (`geode.validity.v1`).
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }

    /// One line per task, then the counts per flag.
    pub fn render_text(&self) -> String {
        let fmt = |r: Option<f64>| r.map_or("-".to_string(), |r| format!("{:.0}%", r * 100.0));
        let mut out = format!("validity of {} (k={})\n", self.pack, self.k);
        for t in &self.tasks {
            let flags = if t.flags.is_empty() {
                "ok".to_string()
            } else {
                t.flags
                    .iter()
                    .map(|f| f.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let _ = writeln!(
                out,
                "{:<40} oracle {:>4}  nop {:>4}  infra {}  {}",
                t.task,
                fmt(t.oracle_pass_rate),
                fmt(t.nop_pass_rate),
                t.infra_trials,
                flags
            );
        }
        let ok = self.tasks.iter().filter(|t| t.is_ok()).count();
        let _ = write!(out, "{ok}/{} tasks ok", self.tasks.len());
        for flag in [
            TaskFlag::OracleCannotPass,
            TaskFlag::NopPasses,
            TaskFlag::Flaky,
            TaskFlag::Unmeasured,
        ] {
            let n = self.flagged(flag).len();
            if n > 0 {
                let _ = write!(out, ", {n} {}", flag.as_str());
            }
        }
        out.push('\n');
        out
    }
}
