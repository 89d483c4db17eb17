//! Pairing: turns the trial rows into (baseline, candidate) pairs per task, and finds every way
//! the rows fail to be an exact paired design.
//!
//! A design is exact when every (task, trial) of the pack has both arms exactly once, with the
//! seed derived for that (task, trial). A pair with an infrastructure-invalid arm is dropped
//! whole (keeping one arm would unpair the comparison) and counted against the allowance.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use crate::arm::Arm;
use crate::evidence::{IntegritySignals, TaskRef, TrialOutcome};
use crate::ids::{FamilyId, TaskId};
use crate::seed::TrialSeed;
use crate::verdict::ReasonCode;

/// One valid pair of rewards.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pair {
    /// The baseline trial's reward, in [0, 1].
    pub baseline: f64,
    /// The candidate trial's reward for the same (task, trial), in [0, 1].
    pub candidate: f64,
}

/// Integrity-signal tally of one arm on one task, over all its trials (infra-invalid included:
/// an attempt to tamper is a signal even if the sandbox died afterwards).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignalTally {
    /// Trials of this arm on this task.
    pub trials: u32,
    /// Trials that raised at least one integrity signal.
    pub flagged: u32,
    /// Signals by kind.
    pub signals: IntegritySignals,
}

impl SignalTally {
    /// Adds one trial's signals.
    pub fn record(&mut self, s: &IntegritySignals) {
        self.trials += 1;
        if s.total() > 0 {
            self.flagged += 1;
        }
        self.signals.add(s);
    }
}

/// The pairs of one task.
#[derive(Debug, Clone, PartialEq)]
pub struct PairedTask {
    /// The task, as the pack lists it.
    pub task: TaskId,
    /// The task's family.
    pub family: FamilyId,
    /// Valid pairs, in trial order.
    pub pairs: Vec<Pair>,
    /// Pairs dropped because an arm was infrastructure-invalid.
    pub dropped: u32,
    /// The baseline arm's integrity signals on this task.
    pub baseline_signals: SignalTally,
    /// The candidate arm's integrity signals on this task.
    pub candidate_signals: SignalTally,
}

/// All tasks of the pack, in pack order (a task whose pairs were all dropped stays, with no
/// pairs, so the coverage veto can name it).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PairedTable {
    /// One entry per pack task, in pack order.
    pub tasks: Vec<PairedTask>,
}

/// A problem that makes the design inexact, with a human-readable detail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The INVALID reason the problem gives.
    pub code: ReasonCode,
    /// What is wrong, naming the task and trial where there is one.
    pub detail: String,
}

/// What pairing found.
#[derive(Debug, Clone, Default)]
pub struct Pairing {
    /// The pairs per task, built even when the design is inexact.
    pub table: PairedTable,
    /// Empty when the design is exact.
    pub problems: Vec<Problem>,
    /// Trials flagged infrastructure-invalid (both arms counted).
    pub infra_invalid_trials: u32,
}

fn problem(problems: &mut Vec<Problem>, code: ReasonCode, detail: String) {
    problems.push(Problem { code, detail });
}

/// Pairs `trials` over the pack `tasks` with `trials_per_task` trials per arm, checking each
/// trial's seed against [`TrialSeed::derive`]`(run_seed, task, trial)`.
pub fn pair_trials(
    tasks: &[TaskRef],
    trials: &[TrialOutcome],
    trials_per_task: u32,
    run_seed: u64,
) -> Pairing {
    let mut problems = Vec::new();
    let index = index_tasks(tasks, &mut problems);

    // (task index, trial) -> [baseline, candidate]
    let mut slots: Slots = BTreeMap::new();
    let mut infra_invalid_trials = 0u32;
    let mut tallies = vec![[SignalTally::default(); 2]; tasks.len()];
    let design = Design {
        tasks,
        index: &index,
        trials_per_task,
        run_seed,
    };
    for row in trials {
        if row.infra_invalid {
            infra_invalid_trials += 1;
        }
        let Some(ti) = design.task_of(row, &mut problems) else {
            continue;
        };
        let arm = match row.arm {
            Arm::Baseline => 0,
            Arm::Candidate => 1,
        };
        tallies[ti][arm].record(&row.integrity);
        let slot = slots.entry((ti, row.trial)).or_insert([None, None]);
        if slot[arm].is_some() {
            problem(
                &mut problems,
                ReasonCode::CoverageNotExact,
                format!(
                    "task {} trial {} {:?}: recorded twice",
                    row.task, row.trial, row.arm
                ),
            );
        } else {
            slot[arm] = Some(row);
        }
    }

    let mut table = PairedTable::default();
    for (ti, t) in tasks.iter().enumerate() {
        let (pairs, dropped) = pairs_of(ti, t, &slots, trials_per_task, &mut problems);
        let [baseline_signals, candidate_signals] = tallies[ti];
        table.tasks.push(PairedTask {
            task: t.id.clone(),
            family: t.family.clone(),
            pairs,
            dropped,
            baseline_signals,
            candidate_signals,
        });
    }
    Pairing {
        table,
        problems,
        infra_invalid_trials,
    }
}

/// The trial rows by (task index, trial): [baseline, candidate].
type Slots<'a> = BTreeMap<(usize, u32), [Option<&'a TrialOutcome>; 2]>;

/// Each pack task's position; a task listed twice is a problem (the later position wins).
fn index_tasks<'a>(
    tasks: &'a [TaskRef],
    problems: &mut Vec<Problem>,
) -> HashMap<&'a TaskId, usize> {
    let mut index = HashMap::new();
    for (i, t) in tasks.iter().enumerate() {
        if index.insert(&t.id, i).is_some() {
            problem(
                problems,
                ReasonCode::CoverageNotExact,
                format!("task {} listed twice in the pack", t.id),
            );
        }
    }
    index
}

/// What a trial row is checked against: the pack, its trial count and the run seed.
struct Design<'a> {
    tasks: &'a [TaskRef],
    index: &'a HashMap<&'a TaskId, usize>,
    trials_per_task: u32,
    run_seed: u64,
}

impl Design<'_> {
    /// The pack index of `row`'s task when the row has a slot in the design, after recording
    /// every problem of the row (reward, task, family, trial index, seed).
    fn task_of(&self, row: &TrialOutcome, problems: &mut Vec<Problem>) -> Option<usize> {
        if !(row.reward.is_finite() && (0.0..=1.0).contains(&row.reward)) {
            problem(
                problems,
                ReasonCode::MalformedEvidence,
                format!(
                    "task {} trial {} {:?}: reward {} outside [0, 1]",
                    row.task, row.trial, row.arm, row.reward
                ),
            );
        }
        let Some(&ti) = self.index.get(&row.task) else {
            problem(
                problems,
                ReasonCode::CoverageNotExact,
                format!("trial names task {} which the pack does not list", row.task),
            );
            return None;
        };
        if row.family != self.tasks[ti].family {
            problem(
                problems,
                ReasonCode::CoverageNotExact,
                format!(
                    "task {} trial {}: family {} but the pack says {}",
                    row.task, row.trial, row.family, self.tasks[ti].family
                ),
            );
        }
        if row.trial >= self.trials_per_task {
            problem(
                problems,
                ReasonCode::CoverageNotExact,
                format!(
                    "task {} trial index {} >= trials_per_task {}",
                    row.task, row.trial, self.trials_per_task
                ),
            );
            return None;
        }
        let expected = TrialSeed::derive(self.run_seed, &row.task, row.trial);
        if row.seed != expected {
            problem(
                problems,
                ReasonCode::SeedMismatch,
                format!(
                    "task {} trial {} {:?}: seed {} but the run seed derives {}",
                    row.task, row.trial, row.arm, row.seed.0, expected.0
                ),
            );
        }
        Some(ti)
    }
}

/// The valid pairs of task `ti` in trial order, and how many were dropped for an
/// infrastructure-invalid arm; a trial missing an arm is a problem.
fn pairs_of(
    ti: usize,
    t: &TaskRef,
    slots: &Slots<'_>,
    trials_per_task: u32,
    problems: &mut Vec<Problem>,
) -> (Vec<Pair>, u32) {
    let mut pairs = Vec::new();
    let mut dropped = 0u32;
    for trial in 0..trials_per_task {
        match slots.get(&(ti, trial)) {
            Some([Some(b), Some(c)]) => {
                if b.infra_invalid || c.infra_invalid {
                    dropped += 1;
                } else {
                    pairs.push(Pair {
                        baseline: b.reward,
                        candidate: c.reward,
                    });
                }
            }
            Some([Some(_), None]) => problem(
                problems,
                ReasonCode::CoverageNotExact,
                format!("task {} trial {trial}: no candidate trial", t.id),
            ),
            Some([None, Some(_)]) => problem(
                problems,
                ReasonCode::CoverageNotExact,
                format!("task {} trial {trial}: no baseline trial", t.id),
            ),
            _ => problem(
                problems,
                ReasonCode::CoverageNotExact,
                format!("task {} trial {trial}: neither arm ran", t.id),
            ),
        }
    }
    (pairs, dropped)
}
