//! `geode worker`: what one array task runs on its node. It reads the array's spec and the
//! run's `config.json` (or a campaign's plan file, `crucible::remote`) from the shared jobs
//! folder, plans its trials with the coordinator's own planning (so seeds, pairs and folders
//! are the same by construction), runs them one after the other in the node's sandbox with the
//! node's image cache, and leaves each result as a file. It never opens the run store. In a
//! chained array it then claims and runs the array's groups no task has started yet (`files`),
//! so at `-n N` the array's N running tasks run its trials back to back.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::files::{self, ArraySpec, CLAIM_SCHEMA, Claim, RESULT_SCHEMA, WorkerResult};
use super::{SlurmError, queue};
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

/// The Slurm ids of a worker's array task: its array's job id (`SLURM_ARRAY_JOB_ID`, the one
/// the coordinator submitted) and the task's own (`SLURM_JOB_ID`). Chaining needs both.
#[derive(Debug, Clone, Copy)]
pub struct TaskIds {
    /// The array's job id, which names its claims.
    pub array_job: u64,
    /// The array task's own job id, whose time left bounds what it may still start.
    pub job: u64,
}

/// The longest a group's trials may take: every phase at its timeout (build, then each
/// stage's agent and verifier), scaled, plus a minute each for set-up and teardown.
fn longest(plans: &[&TrialPlan]) -> Duration {
    plans
        .iter()
        .map(|p| {
            let c = &p.task.config;
            let stages = if p.task.steps.is_empty() {
                c.agent_timeout() + c.verifier_timeout()
            } else {
                p.task
                    .steps
                    .iter()
                    .map(|s| s.agent_timeout(c) + s.verifier_timeout(c))
                    .sum()
            };
            (c.build_timeout() + stages).mul_f64(p.timeout_multiplier.max(0.0))
                + Duration::from_secs(60)
        })
        .sum()
}

/// How long this array task may still run: Slurm's time left on it (`squeue %L`), asked once.
/// `None` when it cannot be told: the task then chains nothing, as a trial cut by the task's
/// time limit would end as a time-out that is not the trial's own.
async fn allocation(ids: TaskIds) -> Option<queue::TimeLeft> {
    match queue::time_left(ids.job).await {
        Ok(left) => Some(left),
        Err(e) => {
            tracing::warn!("no chaining: the array task's time left is unknown: {e}");
            None
        }
    }
}

/// What a worker of a chained array knows: its array, whether it may go on past its own group
/// (its time left is known), and until when it may start one (`None`: no limit).
struct Chain {
    job: u64,
    me: usize,
    node: String,
    more: bool,
    ends: Option<Instant>,
}

impl Chain {
    fn claim(&self, run_dir: &Path, index: usize) -> Result<bool, SlurmError> {
        files::try_claim(
            run_dir,
            &Claim {
                schema: CLAIM_SCHEMA.into(),
                job: self.job,
                index,
                by: Some(self.me),
                node: self.node.clone(),
                at: chrono::Utc::now().to_rfc3339(),
            },
        )
    }

    /// The next group nobody has claimed that fits in the time left, claimed.
    fn next(
        &self,
        run_dir: &Path,
        spec: &ArraySpec,
        plans: &HashMap<String, TrialPlan>,
    ) -> Result<Option<usize>, SlurmError> {
        if !self.more {
            return Ok(None);
        }
        let taken = files::claims(run_dir)?;
        for (index, group) in spec.groups.iter().enumerate() {
            if taken.contains_key(&(self.job, index)) {
                continue;
            }
            if let Some(ends) = self.ends {
                let group: Vec<&TrialPlan> = group
                    .iter()
                    .filter_map(|t| plans.get(&t.trial_name))
                    .collect();
                if Instant::now() + longest(&group) > ends {
                    continue;
                }
            }
            if self.claim(run_dir, index)? {
                return Ok(Some(index));
            }
        }
        Ok(None)
    }
}

/// Runs the trials of array task `index` from `plans`, writing one result file per trial. In a
/// chained array (`ArraySpec::chain`, with `ids` known) it first claims its own group, then
/// goes on with the array's unclaimed groups while any fits in the task's time left.
pub async fn run_array_task(
    spec_path: &Path,
    index: usize,
    ids: Option<TaskIds>,
    mut plans: HashMap<String, TrialPlan>,
    backend: Arc<dyn Backend>,
    observer: &dyn PhaseObserver,
    cancel: &CancellationToken,
) -> Result<(), RunError> {
    let worker_started = chrono::Utc::now().to_rfc3339();
    let spec = read_spec(spec_path)?;
    if spec.groups.get(index).is_none() {
        return Err(SlurmError::NoSuchTask {
            path: spec_path.display().to_string(),
            index,
        }
        .into());
    }
    let run_dir = spec.jobs_dir.join(&spec.run_id);
    let node = nix::unistd::gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_default();
    // In a chained array every group is claimed before it runs, the task's own too: another
    // task may have taken it, or the coordinator given its try up.
    let chain = match ids {
        Some(ids) if spec.chain => {
            let left = allocation(ids).await;
            Some(Chain {
                job: ids.array_job,
                me: index,
                node: node.clone(),
                more: left.is_some(),
                ends: match left {
                    Some(queue::TimeLeft::Ends(d)) => Some(Instant::now() + d),
                    _ => None,
                },
            })
        }
        _ => None,
    };
    // Its own group first, unless another task of the array took it (or the coordinator gave
    // its try up): then the next free one, or nothing.
    let mut next = match &chain {
        None => Some(index),
        Some(c) if c.claim(&run_dir, index)? => Some(index),
        Some(c) => c.next(&run_dir, &spec, &plans)?,
    };
    let images = ImageCache::new();
    while let Some(at) = next {
        for t in &spec.groups[at] {
            let plan = plans
                .remove(&t.trial_name)
                .ok_or_else(|| SlurmError::Files {
                    path: spec_path.display().to_string(),
                    message: format!("trial {} is not in the run's plan", t.trial_name),
                })?;
            let mut row = run_trial(&plan, backend.as_ref(), &images, observer, cancel).await;
            // Slurm signals every process of the task at once, so the sandbox's server can die
            // of the same `scancel` before this worker's handler has run: the trial then ends as
            // a lost sandbox, which a resume would have taken as the try's outcome. A lost
            // sandbox waits a moment for that signal before it counts.
            if row.outcome == geode_graders::TrialOutcome::SandboxLost {
                let _ = tokio::time::timeout(Duration::from_secs(2), cancel.cancelled()).await;
            }
            // Slurm stopped this task (its time limit, `scancel`): no result, so the
            // coordinator records the trial by the task's end state (`SlurmTimeLimit`, ...), not
            // as a cancellation of the run.
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
                    array_task: Some(index),
                    row,
                },
            )?;
        }
        next = match &chain {
            Some(c) if !cancel.is_cancelled() => c.next(&run_dir, &spec, &plans)?,
            _ => None,
        };
    }
    Ok(())
}
