//! A job: every task of a pack times K attempts, run N at a time, recorded in the run store and
//! in Harbor's folder layout (`<jobs>/<run>/config.json, lock.json, result.json`, one folder
//! per trial). Resumable: finished trials are kept, interrupted ones run again, and a changed
//! pack or configuration (the lock hash) is refused.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::harbor;
use super::images::ImageCache;
use super::ledger::{Executor, RunLedger};
use super::local::LocalExecutor;
use super::run_spec::{files_err, load_pack, lock_for, plan_trials, read_json, write_json};
use super::slurm::SlurmExecutor;
use super::trial::TrialPlan;
use crate::env::Backend;
use crate::pack::TaskPack;
use crate::store::{RunRow, RunStore};
use crate::summary::{RunSummary, summarize};

pub use super::ledger::RunObserver;
pub use super::run_spec::{CONFIG_SCHEMA, RunConfig, RunError, RunLock, trial_name};

/// What a finished (or cancelled) run left: where it is and what it scored.
pub struct RunOutcome {
    /// The run's id, also its folder's name under the jobs folder.
    pub run_id: String,
    /// The run's folder (`config.json`, `lock.json`, `result.json`, one folder per trial).
    pub run_dir: PathBuf,
    /// The summary of every trial the store holds for the run.
    pub summary: RunSummary,
    /// Whether the run was cancelled; the store marks it `cancelled` rather than `finished`.
    pub cancelled: bool,
}

/// A fresh run id: the UTC time (Harbor's style), made unique in the jobs folder.
fn new_run_id(jobs_dir: &Path) -> String {
    let base = chrono::Utc::now().format("%Y-%m-%d__%H-%M-%S").to_string();
    let mut id = base.clone();
    let mut n = 1;
    while jobs_dir.join(&id).exists() {
        n += 1;
        id = format!("{base}_{n}");
    }
    id
}

/// Start a new run.
pub async fn start_run(
    config: RunConfig,
    jobs_dir: &Path,
    backend: Arc<dyn Backend>,
    observer: Arc<dyn RunObserver>,
    cancel: CancellationToken,
) -> Result<RunOutcome, RunError> {
    let pack = load_pack(&config)?;
    std::fs::create_dir_all(jobs_dir).map_err(|e| files_err(jobs_dir, e))?;
    let store = RunStore::open(&jobs_dir.join(crate::store::STORE_FILE))?;
    let run_id = new_run_id(jobs_dir);
    let run_dir = jobs_dir.join(&run_id);
    std::fs::create_dir_all(&run_dir).map_err(|e| files_err(&run_dir, e))?;
    let lock = lock_for(&config, &pack);
    let created = chrono::Utc::now().to_rfc3339();
    write_json(
        &run_dir.join("config.json"),
        &harbor::job_config(&config, &run_id, jobs_dir),
    )?;
    write_json(
        &run_dir.join("lock.json"),
        &harbor::job_lock(&lock, &config, &pack, &created),
    )?;
    store.insert_run(
        &RunRow {
            run_id: run_id.clone(),
            created,
            pack_path: config.pack.display().to_string(),
            pack_hash: lock.pack_hash.to_string(),
            model_route: config.model.to_string(),
            scaffold_hash: lock.scaffold_hash.clone(),
            seed: config.seed,
            attempts: config.attempts,
            lock_hash: lock.hash(),
            status: "running".into(),
        },
        &serde_json::to_string(&config).unwrap_or_default(),
    )?;
    execute(
        config,
        pack,
        store,
        run_id,
        run_dir,
        &[],
        backend,
        observer,
        cancel,
    )
    .await
}

/// What a resume may change: how many trials run at once, and which finished trials run again.
#[derive(Debug, Clone, Default)]
pub struct ResumeOptions {
    /// How many trials run at once; `None` keeps the run's configured concurrency.
    pub concurrency: Option<usize>,
    /// Finished trials that ended with one of these exception classes run again (Harbor's
    /// `jobs resume --filter-error-type`), their earlier results replaced.
    pub rerun_exceptions: Vec<String>,
}

/// Resume a run: the same config (concurrency may differ), a pack with the same lock hash.
pub async fn resume_run(
    run_id: &str,
    jobs_dir: &Path,
    options: ResumeOptions,
    backend: Arc<dyn Backend>,
    observer: Arc<dyn RunObserver>,
    cancel: CancellationToken,
) -> Result<RunOutcome, RunError> {
    let run_dir = jobs_dir.join(run_id);
    let mut config: RunConfig = read_json(&run_dir.join("config.json"))?;
    if let Some(n) = options.concurrency {
        config.concurrency = n;
    }
    let stored: RunLock = read_json(&run_dir.join("lock.json"))?;
    let pack = load_pack(&config)?;
    let lock = lock_for(&config, &pack);
    if lock.hash() != stored.hash() {
        let mut what = Vec::new();
        if lock.pack_hash != stored.pack_hash {
            what.push("the task pack changed (pack hash)".to_string());
        }
        if lock.scaffold_hash != stored.scaffold_hash {
            what.push("the scaffold changed".to_string());
        }
        if what.is_empty() {
            what.push("the run configuration changed".to_string());
        }
        return Err(RunError::Resume {
            run: run_id.to_string(),
            message: format!(
                "refusing to resume: {} (lock.json differs)",
                what.join("; ")
            ),
        });
    }
    let store = RunStore::open(&jobs_dir.join(crate::store::STORE_FILE))?;
    if store.run(run_id)?.is_none() {
        return Err(RunError::Resume {
            run: run_id.to_string(),
            message: format!(
                "not in the run store {}",
                jobs_dir.join(crate::store::STORE_FILE).display()
            ),
        });
    }
    store.set_run_status(run_id, "running")?;
    execute(
        config,
        pack,
        store,
        run_id.to_string(),
        run_dir,
        &options.rerun_exceptions,
        backend,
        observer,
        cancel,
    )
    .await
}

#[allow(clippy::too_many_arguments)]
async fn execute(
    config: RunConfig,
    pack: TaskPack,
    store: RunStore,
    run_id: String,
    run_dir: PathBuf,
    rerun_exceptions: &[String],
    backend: Arc<dyn Backend>,
    observer: Arc<dyn RunObserver>,
    cancel: CancellationToken,
) -> Result<RunOutcome, RunError> {
    let kept = kept_trials(&store, &run_id, rerun_exceptions)?;
    let n_total_trials = pack.tasks.len() * config.attempts as usize;
    let agent = super::run_spec::resolve_agent(&config).await?;
    let plans = plan_trials(&config, pack.tasks, &run_id, &run_dir, &kept, &agent);
    observer.started(&run_id, plans.len() + kept.len(), kept.len());
    let shared = RunLedger {
        config,
        store,
        run_id,
        backend,
        images: ImageCache::new(),
        observer: observer.clone(),
        cancel,
    };
    let shared = run_trials(shared, plans, &run_dir).await?;
    let (summary, cancelled) = write_run_end(&shared, &run_dir, n_total_trials)?;
    observer.finished(&summary);
    Ok(RunOutcome {
        run_id: shared.run_id,
        run_dir,
        summary,
        cancelled,
    })
}

/// The finished trials a resume keeps: all of them but those that ended with an exception
/// class asked to run again.
fn kept_trials(
    store: &RunStore,
    run_id: &str,
    rerun_exceptions: &[String],
) -> Result<HashSet<String>, RunError> {
    Ok(store
        .trials(run_id)?
        .into_iter()
        .filter(|row| {
            row.exception_class
                .as_ref()
                .is_none_or(|class| !rerun_exceptions.contains(class))
        })
        .map(|row| row.trial_name)
        .collect())
}

/// Runs the plans on the run's executor, and hands the ledger back once no trial holds it.
async fn run_trials(
    ledger: RunLedger,
    plans: Vec<TrialPlan>,
    run_dir: &Path,
) -> Result<RunLedger, RunError> {
    let ledger = Arc::new(ledger);
    let executor: Box<dyn Executor> = match ledger.config.slurm.clone() {
        Some(settings) => Box::new(SlurmExecutor(settings)),
        None => Box::new(LocalExecutor),
    };
    executor.execute(ledger.clone(), plans, run_dir).await?;
    Arc::try_unwrap(ledger).map_err(|_| RunError::Files {
        path: run_dir.display().to_string(),
        message: "trials still hold the run".into(),
    })
}

/// The end of the run: its status in the store and the job's `result.json`. Returns the
/// summary and whether the run was cancelled.
fn write_run_end(
    shared: &RunLedger,
    run_dir: &Path,
    n_total_trials: usize,
) -> Result<(RunSummary, bool), RunError> {
    let run_id = &shared.run_id;
    let rows = shared.store.trials(run_id)?;
    let summary = summarize(&rows);
    let cancelled = shared.cancel.is_cancelled();
    shared
        .store
        .set_run_status(run_id, if cancelled { "cancelled" } else { "finished" })?;
    let started = shared.store.run(run_id)?.map(|r| r.created);
    let finished_at = chrono::Utc::now().to_rfc3339();
    write_json(
        &run_dir.join("result.json"),
        &harbor::job_result(&harbor::JobEnd {
            run_id,
            pack: &shared.config.pack,
            model_route: &shared.config.model.to_string(),
            agent: harbor::HarborAgent {
                name: shared.config.agent.name(),
                version: shared.config.agent.version(),
            },
            started: started.as_deref().unwrap_or(&finished_at),
            finished: &finished_at,
            n_total_trials,
            rows: &rows,
            summary: &summary,
            cancelled,
        }),
    )?;
    Ok((summary, cancelled))
}
