//! `geode worker`: what one array task runs on its node. It reads the array's spec and the
//! run's `config.json` (or a campaign's plan file, `crucible::remote`) from the shared jobs
//! folder, plans its trials with the coordinator's own planning (so seeds, pairs and folders
//! are the same by construction), runs them one after the other in the node's sandbox with the
//! node's image cache, and leaves each result as a file. It never opens the run store.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::SlurmError;
use super::files::{self, ArraySpec, RESULT_SCHEMA, WorkerResult};
use crate::env::Backend;
use crate::rollout::images::ImageCache;
use crate::rollout::run_spec::{self, RunConfig, RunError};
use crate::rollout::trial::{PhaseObserver, TrialPlan, run_trial};

/// The array spec at `spec_path`.
pub fn read_spec(spec_path: &Path) -> Result<ArraySpec, RunError> {
    let spec: ArraySpec = files::read_json(spec_path)?;
    if spec.schema != files::ARRAY_SCHEMA {
        return Err(SlurmError::Files {
            path: spec_path.display().to_string(),
            message: format!("schema {:?}, expected {}", spec.schema, files::ARRAY_SCHEMA),
        }
        .into());
    }
    Ok(spec)
}

/// The run configuration a run's array spec belongs to (the worker builds its backend from it).
pub fn run_config(spec: &ArraySpec) -> Result<RunConfig, RunError> {
    run_spec::read_json(&spec.jobs_dir.join(&spec.run_id).join("config.json"))
}

/// Every trial of the run, planned as the coordinator planned them, by trial name.
pub fn run_plans(
    spec: &ArraySpec,
    config: &RunConfig,
) -> Result<HashMap<String, TrialPlan>, RunError> {
    let pack = run_spec::load_pack(config)?;
    let run_dir = spec.jobs_dir.join(&spec.run_id);
    // A third-party agent's layer: installed on this node once, found by later tasks.
    let agent =
        crate::agents::TrialAgent::resolve(&config.agent, &crate::agents::install::agents_dir())
            .map_err(|source| RunError::Agent {
                agent: config.agent.to_string(),
                source,
            })?;
    Ok(run_spec::plan_trials(
        config,
        pack.tasks,
        &spec.run_id,
        &run_dir,
        &Default::default(),
        &std::sync::Arc::new(agent),
    )
    .into_iter()
    .map(|p| (p.trial_name.clone(), p))
    .collect())
}

/// Runs the trials of array task `index` from `plans`, writing one result file per trial.
pub async fn run_array_task(
    spec_path: &Path,
    index: usize,
    mut plans: HashMap<String, TrialPlan>,
    backend: Arc<dyn Backend>,
    observer: &dyn PhaseObserver,
    cancel: &CancellationToken,
) -> Result<(), RunError> {
    let worker_started = chrono::Utc::now().to_rfc3339();
    let spec = read_spec(spec_path)?;
    let group = spec
        .groups
        .get(index)
        .ok_or_else(|| SlurmError::NoSuchTask {
            path: spec_path.display().to_string(),
            index,
        })?;
    let run_dir = spec.jobs_dir.join(&spec.run_id);
    let node = nix::unistd::gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_default();
    let images = ImageCache::new();
    for t in group {
        let plan = plans
            .remove(&t.trial_name)
            .ok_or_else(|| SlurmError::Files {
                path: spec_path.display().to_string(),
                message: format!("trial {} is not in the run's plan", t.trial_name),
            })?;
        let mut row = run_trial(&plan, backend.as_ref(), &images, observer, cancel).await;
        // Slurm signals every process of the task at once, so the sandbox's server can die of
        // the same `scancel` before this worker's handler has run: the trial then ends as a
        // lost sandbox, which a resume would have taken as the try's outcome. A lost sandbox
        // waits a moment for that signal before it counts.
        if row.outcome == geode_graders::TrialOutcome::SandboxLost {
            let _ = tokio::time::timeout(Duration::from_secs(2), cancel.cancelled()).await;
        }
        // Slurm stopped this task (its time limit, `scancel`): no result, so the coordinator
        // records the trial by the task's end state (`SlurmTimeLimit`, ...), not as a
        // cancellation of the run.
        if row.outcome == geode_graders::TrialOutcome::Cancelled || cancel.is_cancelled() {
            return Ok(());
        }
        row.infra_retries = t.try_no;
        files::write_atomic(
            &files::result_path(&run_dir, t),
            &WorkerResult {
                schema: RESULT_SCHEMA.into(),
                node: node.clone(),
                worker_started: worker_started.clone(),
                row,
            },
        )?;
    }
    Ok(())
}
