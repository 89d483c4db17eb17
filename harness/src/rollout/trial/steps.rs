//! A multi-step task (Harbor's `[[steps]]`): each step's agent then verifier in one sandbox,
//! its outputs archived under `steps/<name>/`, and the trial's ending combined from the steps'.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use geode_graders::{AgentEnd, TrialOutcome, Validity, trial_outcome};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::attempt::agent_then_verify;
use super::phase::{PhaseEvent, TrialPhase};
use super::plan::{Fresh, PhaseObserver, Stage, TrialPlan};
use super::record::{BROKEN_CLASS, Ending, Record, now};
use crate::env::Sandbox;
use crate::pack::{Step, StepRewards, Task, VerifierMode};
use crate::rollout::task_command::{scaled, task_command, wait_healthy};

/// A multi-step task (Harbor's `[[steps]]`): each step's agent then verifier in the same
/// sandbox, in order; a step's `agent/`, `verifier/` and grade move to `steps/<name>/`. The
/// steps stop at one that ends without a reward, or whose rewards fall below its
/// `min_reward`; the trial's rewards come from the steps' by the task's strategy.
pub(super) async fn run_steps(
    plan: &TrialPlan,
    sandbox: &dyn Sandbox,
    fresh: &Fresh<'_>,
    observer: &dyn PhaseObserver,
    cancel: &CancellationToken,
    rec: &mut Record,
) -> Ending {
    let task = &plan.task;
    if task.config.verifier_mode() == VerifierMode::Separate {
        return Ending::infra(
            TrialOutcome::EnvironmentUnsupported,
            "EnvironmentUnsupportedError",
            "a multi-step task with a separate verifier: GEODE runs a step's verifier only in \
             the agent's sandbox",
        );
    }
    let mut endings: Vec<Ending> = Vec::new();
    for (i, step) in task.steps.iter().enumerate() {
        let name = step.name().to_string();
        observer.phase(&plan.trial_name, PhaseEvent::Step(&name));
        let tests = match merged_tests(task, step, &plan.trial_dir) {
            Ok(dir) => dir,
            Err(e) => {
                return Ending::infra(
                    TrialOutcome::VerifierCrashed,
                    "VerifierError",
                    format!("step {name}: cannot stage its tests: {e}"),
                );
            }
        };
        let stage = Stage::step(task, step, tests.clone(), i + 1 == task.steps.len());
        rec.last_times.clear();
        if !step.config.artifacts.is_empty() {
            rec.notes.push(format!(
                "step {name}: its own artifacts are not collected (the task's are, after the last step)"
            ));
        }
        let setup_failed = |class: &str, why: String| {
            Ending::infra(
                TrialOutcome::EnvironmentSetupFailed,
                class,
                format!("step {name}: {why}"),
            )
        };
        let ending = match prepare_step(step, sandbox, plan.timeout_multiplier).await {
            Err(why) => setup_failed("StepSetupError", why),
            Ok(()) => {
                let healthy = match &step.config.healthcheck {
                    Some(check) => {
                        wait_healthy(sandbox, check, plan.timeout_multiplier, cancel).await
                    }
                    None => Ok(()),
                };
                match healthy {
                    Err(why) => setup_failed("HealthcheckError", why),
                    Ok(()) => {
                        agent_then_verify(plan, &stage, sandbox, fresh, observer, cancel, rec).await
                    }
                }
            }
        };
        let _ = std::fs::remove_dir_all(&tests);
        if let Err(e) = archive_step(&plan.trial_dir, &name) {
            rec.notes
                .push(format!("step {name}: its outputs were not all moved: {e}"));
        }
        let shortfall = step
            .config
            .min_reward
            .as_ref()
            .filter(|_| ending.reward.is_some())
            .and_then(|m| m.shortfall(&ending.rewards));
        rec.steps.push(step_result(&name, &ending, &rec.last_times));
        let unrewarded = ending.reward.is_none()
            || ending
                .exception
                .as_ref()
                .is_some_and(|(class, _)| class == BROKEN_CLASS);
        endings.push(ending);
        if unrewarded {
            rec.notes.push(format!(
                "step {name} ended without a reward: the remaining steps did not run"
            ));
            break;
        }
        if let Some((key, got)) = shortfall {
            rec.notes.push(format!(
                "step {name}: {key} = {} is below its min_reward: the remaining steps did not run",
                got.map_or("missing".to_string(), |v| v.to_string())
            ));
            break;
        }
    }
    combine_steps(task, endings)
}

/// Before a step's agent, as Harbor does: the files of `steps/<name>/workdir/` are copied into
/// the sandbox's work directory (each replacing what has its name), then its `setup.sh`, if
/// any, runs there. `Err` says why the step cannot start.
async fn prepare_step(
    step: &Step,
    sandbox: &dyn Sandbox,
    timeout_multiplier: f64,
) -> Result<(), String> {
    let staged = step.dir.join("workdir");
    if !staged.is_dir() {
        return Ok(());
    }
    let root = sandbox.workspace().root().to_string_lossy().into_owned();
    let entries = std::fs::read_dir(&staged).map_err(|e| format!("{}: {e}", staged.display()))?;
    for entry in entries {
        let entry = entry.map_err(|e| format!("{}: {e}", staged.display()))?;
        let inside = format!(
            "{}/{}",
            root.trim_end_matches('/'),
            entry.file_name().to_string_lossy()
        );
        sandbox
            .copy_in(&entry.path(), &inside)
            .await
            .map_err(|e| format!("copying {} in: {e}", entry.path().display()))?;
    }
    if !staged.join("setup.sh").is_file() {
        return Ok(());
    }
    let req = task_command(
        "bash ./setup.sh",
        scaled(Duration::from_secs(600), timeout_multiplier),
    );
    match sandbox.exec(req, CancellationToken::new()).await {
        Ok(out) if out.exit_code == Some(0) => Ok(()),
        Ok(out) => Err(format!(
            "setup.sh exited {:?}: {}",
            out.exit_code,
            out.stderr.trim().chars().take(300).collect::<String>()
        )),
        Err(e) => Err(format!("setup.sh: {e}")),
    }
}

/// Where a step's tests are staged: in the trial folder, which the sandbox does not mount
/// (only its `agent/`, `verifier/` and `artifacts/`), and removed after the step.
const STEP_TESTS_DIR: &str = ".step-tests";

/// The tests a step's verifier sees: the task's `tests/`, with the step's own `tests/` over
/// it (its `test.sh` wins).
fn merged_tests(task: &Task, step: &Step, trial_dir: &Path) -> std::io::Result<PathBuf> {
    let dir = trial_dir.join(STEP_TESTS_DIR);
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }
    std::fs::create_dir_all(&dir)?;
    for source in [task.tests_dir(), step.tests_dir()] {
        if source.is_dir() {
            crate::env::fsops::copy_tree(&source, &dir)?;
        }
    }
    Ok(dir)
}

/// Moves what a step left in the trial folder (`agent/`, `verifier/`, its grade) to
/// `steps/<name>/`; the folders themselves stay, as the sandbox has them mounted.
fn archive_step(trial_dir: &Path, name: &str) -> std::io::Result<()> {
    let to = trial_dir.join("steps").join(name);
    for sub in ["agent", "verifier"] {
        let dest = to.join(sub);
        std::fs::create_dir_all(&dest)?;
        for entry in std::fs::read_dir(trial_dir.join(sub))? {
            let entry = entry?;
            std::fs::rename(entry.path(), dest.join(entry.file_name()))?;
        }
    }
    // The grade names its evidence by path: where the files now are.
    let grade = trial_dir.join(geode_graders::GRADE_FILE);
    if grade.is_file() {
        let mut doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&grade)?)
            .map_err(std::io::Error::other)?;
        let from = trial_dir.join("verifier").display().to_string();
        let into = to.join("verifier").display().to_string();
        rebase_paths(&mut doc, &from, &into);
        std::fs::write(
            to.join(geode_graders::GRADE_FILE),
            serde_json::to_string_pretty(&doc).map_err(std::io::Error::other)?,
        )?;
        std::fs::remove_file(&grade)?;
    }
    Ok(())
}

/// Every string of `doc` that starts with the path `from` starts with `into` instead.
fn rebase_paths(doc: &mut serde_json::Value, from: &str, into: &str) {
    match doc {
        serde_json::Value::String(s) => {
            if let Some(rest) = s.strip_prefix(from)
                && (rest.is_empty() || rest.starts_with('/'))
            {
                *s = format!("{into}{rest}");
            }
        }
        serde_json::Value::Array(items) => {
            items.iter_mut().for_each(|v| rebase_paths(v, from, into))
        }
        serde_json::Value::Object(map) => {
            map.values_mut().for_each(|v| rebase_paths(v, from, into))
        }
        _ => {}
    }
}

/// A step as Harbor's `StepResult`, with GEODE's `outcome` beside it.
fn step_result(
    name: &str,
    ending: &Ending,
    times: &BTreeMap<TrialPhase, [String; 2]>,
) -> serde_json::Value {
    let timing = |phase: TrialPhase| {
        times
            .get(&phase)
            .map(|[a, b]| json!({"started_at": a, "finished_at": b}))
    };
    json!({
        "step_name": name,
        "outcome": ending.outcome,
        "verifier_result": ending.reward.map(|_| json!({"rewards": ending.rewards})),
        "exception_info": ending.exception.as_ref().map(|(class, message)| {
            crate::rollout::harbor::exception_info(class, message, &now())
        }),
        "agent_execution": timing(TrialPhase::AgentExecution),
        "verifier": timing(TrialPhase::Verifier),
    })
}

/// The trial's ending from its steps'. A step that ended without a reward (infrastructure, a
/// cancelled run) is the trial's ending: averaging the steps that were verified, as Harbor
/// does, would score a task whose later steps never ran.
fn combine_steps(task: &Task, mut endings: Vec<Ending>) -> Ending {
    if endings.last().is_none_or(|e| e.reward.is_none()) {
        return endings.pop().unwrap_or_else(|| {
            Ending::infra(
                TrialOutcome::VerifierCrashed,
                "VerifierError",
                "no step ran",
            )
        });
    }
    let rewards: BTreeMap<String, f64> = match task.config.step_rewards() {
        StepRewards::Final => endings
            .last()
            .map(|e| e.rewards.clone())
            .unwrap_or_default(),
        StepRewards::Mean => {
            let keys: std::collections::BTreeSet<&String> =
                endings.iter().flat_map(|e| e.rewards.keys()).collect();
            keys.into_iter()
                .map(|k| {
                    let sum: f64 = endings
                        .iter()
                        .map(|e| e.rewards.get(k).copied().unwrap_or(0.0))
                        .sum();
                    (k.clone(), sum / endings.len() as f64)
                })
                .collect()
        }
    };
    let first_exception = endings.iter().find_map(|e| e.exception.clone());
    let declared = task
        .config
        .metadata
        .get("reward_key")
        .and_then(toml::Value::as_str);
    let reward = match geode_graders::reward::headline(&rewards, declared) {
        Ok((primary, _)) => primary,
        Err(why) => {
            return Ending::infra(
                TrialOutcome::RewardMalformed,
                "VerifierOutputParseError",
                format!("the steps' rewards: {why}"),
            );
        }
    };
    let agent_end = endings.iter().find(|e| {
        matches!(
            e.outcome,
            TrialOutcome::AgentTimeout | TrialOutcome::AgentError
        )
    });
    let agent = agent_end.map_or(AgentEnd::Finished, |e| AgentEnd::of_outcome(e.outcome));
    Ending {
        outcome: trial_outcome(&Validity::Valid, Some(reward), agent),
        reward: Some(reward),
        rewards,
        exception: first_exception,
    }
}
