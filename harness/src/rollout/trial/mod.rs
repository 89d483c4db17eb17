//! One trial: environment -> agent -> verifier -> teardown, each phase timed and bounded.
//!
//! The agent is always the GEODE runtime (HEADLESS, tools auto-approved inside the sandbox)
//! with its tools bound to the sandbox's workspace. An agent timeout is recorded and the
//! verifier still runs. The agent's background services keep running through verification
//! (as in Harbor), but the verifier runs in a view of its own (`Sandbox::run_verifier`): the
//! tests arrive only then, and its `/logs/verifier` is one the agent's processes never saw.
//! With `environment_mode = "separate"` the verifier runs in a fresh sandbox instead, which
//! receives only the task's declared artifacts.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use geode_graders::{AgentEnd, TrialOutcome, Validity, trial_outcome};
use geode_runtime::model::catalog::Route;
use geode_runtime::scaffold::Scaffold;
use tokio_util::sync::CancellationToken;

use crate::env::{Backend, EnvError, Sandbox};
use crate::pack::{Step, Task};
use crate::rollout::images::ImageCache;
use crate::store::TrialRow;
use record::{BROKEN_CLASS, Ending, PhaseClock, Record, broke_its_sandbox, env_outcome, now};

mod agent;
mod artifacts;
mod environment;
mod phase;
mod record;
mod result;
mod skills;
mod steps;
mod verifier;

pub use agent::SOLUTION_DIR;
pub use artifacts::WORKSPACE_DIR;
pub use environment::environment_spec;
pub(crate) use environment::wait_healthy;
pub use phase::{PhaseEvent, TrialPhase};

/// Everything one trial needs.
#[derive(Debug, Clone)]
pub struct TrialPlan {
    pub run_id: String,
    pub trial_name: String,
    pub task: Arc<Task>,
    pub attempt: u32,
    pub seed: u64,
    /// Seed of an embedded simulation model (`flaky-oracle`): the trial seed in a plain run,
    /// the arm's own in a paired campaign (see `TrialSeed::arm_model_seed`).
    pub model_seed: u64,
    /// The agent's model, parsed once where the run or campaign starts.
    pub route: Route,
    pub scaffold: Arc<Scaffold>,
    pub trial_dir: PathBuf,
    pub timeout_multiplier: f64,
    /// Host paths of sealed data (a crucible's opened holdout): a tool call naming one is a
    /// `sealed_data_access` signal.
    pub sealed_paths: Vec<String>,
    /// Copy the final workspace out to `<trial_dir>/workspace/` after the verifier.
    pub keep_workspace: bool,
}

/// Observer of a trial's phases (progress bars, log lines).
pub trait PhaseObserver: Send + Sync {
    fn phase(&self, trial: &str, phase: PhaseEvent<'_>);
}

/// One agent-then-verifier pass: the whole of a single-step task, or one step of a multi-step
/// one (its instruction, solution, tests and timeouts).
struct Stage<'a> {
    instruction: &'a str,
    solution: Option<PathBuf>,
    agent_timeout: Duration,
    /// The host folder the verifier sees as `/tests`.
    tests: PathBuf,
    verifier_timeout: Duration,
    verifier_env: Vec<(String, String)>,
    /// The last pass: collect hooks, artifacts and the kept workspace belong to it.
    last: bool,
}

impl<'a> Stage<'a> {
    fn whole(task: &'a Task) -> Self {
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
    fn step(task: &'a Task, step: &'a Step, tests: PathBuf, last: bool) -> Self {
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

/// Run the trial to its end. Never fails: every failure becomes an outcome.
pub async fn run_trial(
    plan: &TrialPlan,
    backend: &dyn Backend,
    images: &ImageCache,
    observer: &dyn PhaseObserver,
    cancel: &CancellationToken,
) -> TrialRow {
    let started = now();
    let mut rec = Record::default();
    let ending = run_phases(plan, backend, images, observer, cancel, &mut rec).await;
    let row = result::trial_row(plan, ending, &rec, started, now());
    result::write_result_json(plan, &row, &rec);
    row
}

/// The row (and `result.json`) of a trial that never reported: its executor lost it (a Slurm
/// node died, the run was cancelled before its worker answered).
pub fn lost_trial(plan: &TrialPlan, outcome: TrialOutcome, class: &str, message: &str) -> TrialRow {
    let rec = Record::default();
    let at = now();
    let row = result::trial_row(
        plan,
        Ending::infra(outcome, class, message),
        &rec,
        at.clone(),
        at,
    );
    if plan.trial_dir.is_dir() {
        result::write_result_json(plan, &row, &rec);
    }
    row
}

/// Environment, then the agent and verifier (once, or per step), then teardown.
async fn run_phases(
    plan: &TrialPlan,
    backend: &dyn Backend,
    images: &ImageCache,
    observer: &dyn PhaseObserver,
    cancel: &CancellationToken,
    rec: &mut Record,
) -> Ending {
    let task = &plan.task;
    if let Err(e) = fresh_trial_dir(&plan.trial_dir) {
        return Ending::infra(TrialOutcome::SandboxLost, "TrialDirError", e.to_string());
    }
    let lock = crate::rollout::harbor::trial_lock(
        task,
        &plan.route.to_string(),
        plan.timeout_multiplier,
        backend.kind(),
    );
    let lock_path = plan.trial_dir.join("lock.json");
    let text = serde_json::to_string_pretty(&lock).unwrap_or_default();
    if let Err(e) = std::fs::write(&lock_path, text) {
        // Harbor's tools need it; the trial itself does not, so it runs on with the gap said.
        rec.notes
            .push(format!("could not write {}: {e}", lock_path.display()));
    }
    if let Err(unsupported) = environment::check_supported(task, rec) {
        return unsupported;
    }
    let (sandbox, healthy) =
        match environment::start(plan, backend, images, observer, cancel, rec).await {
            Ok(started) => started,
            Err(ending) => return ending,
        };

    let fresh = Fresh { backend, images };
    let ending = match healthy {
        Ok(()) if task.steps.is_empty() => {
            let stage = Stage::whole(task);
            agent_then_verify(
                plan,
                &stage,
                sandbox.as_ref(),
                &fresh,
                observer,
                cancel,
                rec,
            )
            .await
        }
        Ok(()) => steps::run_steps(plan, sandbox.as_ref(), &fresh, observer, cancel, rec).await,
        Err(why) => Ending::infra(
            TrialOutcome::EnvironmentSetupFailed,
            "HealthcheckError",
            why,
        ),
    };

    observer.phase(&plan.trial_name, PhaseEvent::Phase(TrialPhase::Teardown));
    let t = PhaseClock::start();
    rec.notes.extend(sandbox.sync_logs().await);
    let torn = sandbox.teardown().await;
    rec.close_phase(TrialPhase::Teardown, t);
    match (torn, ending) {
        (Err(e), end) if !end.outcome.is_infrastructure() => {
            rec.notes.push(format!("teardown failed: {e}"));
            end
        }
        (_, end) => end,
    }
}

/// Where a separate verifier's sandbox comes from.
struct Fresh<'a> {
    backend: &'a dyn Backend,
    images: &'a ImageCache,
}

async fn agent_then_verify(
    plan: &TrialPlan,
    stage: &Stage<'_>,
    sandbox: &dyn Sandbox,
    fresh: &Fresh<'_>,
    observer: &dyn PhaseObserver,
    cancel: &CancellationToken,
    rec: &mut Record,
) -> Ending {
    observer.phase(
        &plan.trial_name,
        PhaseEvent::Phase(TrialPhase::AgentExecution),
    );
    let t = PhaseClock::start();
    let agent = agent::run_agent(plan, stage, sandbox, cancel, rec).await;
    rec.close_phase(TrialPhase::AgentExecution, t);
    let agent = match agent {
        Ok(end) => end,
        Err(e @ EnvError::BrokenFromInside(_)) => return broke_its_sandbox(rec, &e.to_string()),
        Err(e) => return Ending::infra(env_outcome(&e), "AgentSetupError", e.to_string()),
    };
    rec.agent = Some(agent);
    if agent == AgentEnd::Cancelled {
        // The verifier never runs for a cancelled agent: there is nothing to grade.
        return Ending::infra(
            trial_outcome(&Validity::Valid, None, agent),
            "Cancelled",
            "the run was cancelled",
        );
    }

    observer.phase(&plan.trial_name, PhaseEvent::Phase(TrialPhase::Verifier));
    let t = PhaseClock::start();
    let verified = match verifier::verify(plan, stage, sandbox, fresh, rec).await {
        Err(ending)
            if ending
                .exception
                .as_ref()
                .is_some_and(|(c, _)| c == BROKEN_CLASS) =>
        {
            let why = ending.exception.map(|(_, m)| m).unwrap_or_default();
            return broke_its_sandbox(rec, &why);
        }
        other => other,
    };
    rec.close_phase(TrialPhase::Verifier, t);
    let (reward, rewards) = match verified {
        Ok(r) => r,
        Err(ending) => return ending,
    };
    Ending {
        outcome: trial_outcome(&Validity::Valid, Some(reward), agent),
        reward: Some(reward),
        rewards,
        exception: match agent {
            AgentEnd::TimedOut => Some(("AgentTimeoutError".into(), "agent timed out".into())),
            AgentEnd::Errored => Some(("AgentError".into(), "the model call failed".into())),
            _ => None,
        },
    }
}

fn fresh_trial_dir(dir: &Path) -> std::io::Result<()> {
    if dir.exists() {
        std::fs::remove_dir_all(dir)?;
    }
    for sub in ["agent", "verifier", "artifacts"] {
        std::fs::create_dir_all(dir.join(sub))?;
    }
    Ok(())
}
