//! A trial from start to end: a fresh trial folder, Harbor's lock, the environment, the
//! attempt (once, or per step), teardown, and the row and `result.json` whatever happened.

use std::path::Path;

use geode_graders::TrialOutcome;
use tokio_util::sync::CancellationToken;

use super::attempt::agent_then_verify;
use super::phase::{PhaseEvent, TrialPhase};
use super::plan::{Fresh, PhaseObserver, Stage, TrialPlan};
use super::record::{Ending, PhaseClock, Record, now};
use super::{environment, result, steps};
use crate::env::Backend;
use crate::rollout::images::ImageCache;
use crate::store::TrialRow;

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
        plan.agent.harbor(),
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

fn fresh_trial_dir(dir: &Path) -> std::io::Result<()> {
    if dir.exists() {
        std::fs::remove_dir_all(dir)?;
    }
    for sub in ["agent", "verifier", "artifacts"] {
        std::fs::create_dir_all(dir.join(sub))?;
    }
    Ok(())
}
