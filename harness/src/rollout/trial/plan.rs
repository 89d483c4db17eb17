//! What every phase of a trial reads: the plan (task, route, scaffold, where its files go),
//! the stage being attempted (the whole task, or one of its steps), where a separate
//! verifier's sandbox comes from, and who watches the phases.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use geode_runtime::model::catalog::Route;
use geode_runtime::scaffold::Scaffold;

use super::phase::PhaseEvent;
use crate::env::Backend;
use crate::pack::{Step, Task};
use crate::rollout::images::ImageCache;

/// Everything one trial needs.
#[derive(Debug, Clone)]
pub struct TrialPlan {
    /// The run (or campaign) the trial belongs to.
    pub run_id: String,
    /// The trial's folder name, `<task>__<attempt>`; unique within the run.
    pub trial_name: String,
    /// The task to attempt.
    pub task: Arc<Task>,
    /// Which attempt of the task this is, from 0.
    pub attempt: u32,
    /// The trial's seed, derived from the run seed, the task and the attempt.
    pub seed: u64,
    /// Seed of an embedded simulation model (`flaky-oracle`): the trial seed in a plain run,
    /// the arm's own in a paired campaign (see `TrialSeed::arm_model_seed`).
    pub model_seed: u64,
    /// The agent under test: GEODE's runtime, or a third-party agent with its layer.
    pub agent: Arc<crate::agents::TrialAgent>,
    /// The agent's model, parsed once where the run or campaign starts.
    pub route: Route,
    /// The agent's scaffold.
    pub scaffold: Arc<Scaffold>,
    /// The trial's folder, where its files go.
    pub trial_dir: PathBuf,
    /// Scales the task's timeouts (1.0 keeps them).
    pub timeout_multiplier: f64,
    /// Host paths of sealed data (a crucible's opened holdout): a tool call naming one is a
    /// `sealed_data_access` signal.
    pub sealed_paths: Vec<String>,
    /// Copy the final workspace out to `<trial_dir>/workspace/` after the verifier.
    pub keep_workspace: bool,
}

/// Observer of a trial's phases (progress bars, log lines).
pub trait PhaseObserver: Send + Sync {
    /// `trial` (its name) reached `phase`.
    fn phase(&self, trial: &str, phase: PhaseEvent<'_>);
}

/// One agent-then-verifier pass: the whole of a single-step task, or one step of a multi-step
/// one (its instruction, solution, tests and timeouts).
pub(super) struct Stage<'a> {
    pub(super) instruction: &'a str,
    pub(super) solution: Option<PathBuf>,
    pub(super) agent_timeout: Duration,
    /// The host folder the verifier sees as `/tests`.
    pub(super) tests: PathBuf,
    pub(super) verifier_timeout: Duration,
    pub(super) verifier_env: Vec<(String, String)>,
    /// The last pass: collect hooks, artifacts and the kept workspace belong to it.
    pub(super) last: bool,
}

impl<'a> Stage<'a> {
    pub(super) fn whole(task: &'a Task) -> Self {
        Stage {
            instruction: &task.instruction,
            solution: task.solution(),
            agent_timeout: task.config.agent_timeout(),
            tests: task.tests_dir(),
            verifier_timeout: task.config.verifier_timeout(),
            verifier_env: task.config.verifier.env.clone().into_iter().collect(),
            last: true,
        }
    }

    /// A step: its own solution, else the task's; its timeouts, else the task's; the task's
    /// verifier environment with the step's on top; `tests` is the merged folder.
    pub(super) fn step(task: &'a Task, step: &'a Step, tests: PathBuf, last: bool) -> Self {
        let mut env = task.config.verifier.env.clone();
        env.extend(step.config.verifier.env.clone());
        Stage {
            instruction: &step.instruction,
            solution: step.solution().or_else(|| task.solution()),
            agent_timeout: step.agent_timeout(&task.config),
            tests,
            verifier_timeout: step.verifier_timeout(&task.config),
            verifier_env: env.into_iter().collect(),
            last,
        }
    }
}

/// Where a separate verifier's sandbox comes from.
pub(super) struct Fresh<'a> {
    pub(super) backend: &'a dyn Backend,
    pub(super) images: &'a ImageCache,
}
