//! A job: every task of a pack times K attempts, run N at a time, recorded in the run store and
//! in Harbor's folder layout (`<jobs>/<run>/config.json, lock.json, result.json`, one folder
//! per trial). Resumable: finished trials are kept, interrupted ones run again, and a changed
//! pack or configuration (the lock hash) is refused.

use geode_runtime::model::catalog::Route;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use geode_crucible::{TaskId, TrialSeed};
use geode_runtime::scaffold::Scaffold;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

use super::harbor;
use super::images::ImageCache;
use super::schedule;
use super::slurm::{self, SlurmSettings};
use super::trial::{PhaseObserver, TrialPlan, run_trial};
use crate::env::kind::BackendKind;
use crate::env::{Backend, BaseMode};
use crate::pack::{PackError, Task, TaskPack};
use crate::store::{RunRow, RunStore, StoreError, TrialRow};
use crate::summary::{RunSummary, summarize};

pub const CONFIG_SCHEMA: &str = "geode.run-config.v1";

/// What a run was asked to do (`config.json`). Concurrency and the jobs folder may change on
/// resume; everything else is locked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunConfig {
    pub schema: String,
    pub pack: PathBuf,
    pub model: String,
    pub attempts: u32,
    pub concurrency: usize,
    pub seed: u64,
    pub tasks_glob: Option<String>,
    pub timeout_multiplier: f64,
    pub backend: BackendKind,
    /// `image` (trials rooted in the image each task names) or `host` (`--base host`); runs
    /// from before the key existed were all `image`.
    #[serde(default)]
    pub base: BaseMode,
    pub max_infra_retries: u32,
    pub scaffold: Scaffold,
    /// Keep each trial's final workspace in `<trial>/workspace/` (so `geode grade` can run a
    /// rubric's command criteria against it). Left out of the config when false, so older runs
    /// keep their lock hash.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub keep_workspace: bool,
    /// Where the trials run: on this machine (absent) or on a Slurm cluster. Left out of the
    /// lock: the same trials give the same results on either.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm: Option<SlurmSettings>,
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Pack(#[from] PackError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{path}: {message}")]
    Files { path: String, message: String },
    #[error("run {run}: {message}")]
    Resume { run: String, message: String },
    /// The run's model route does not parse (a config written by hand or by an older geode).
    #[error(transparent)]
    Route(#[from] geode_runtime::model::ModelError),
    #[error(transparent)]
    Slurm(#[from] super::slurm::SlurmError),
    #[error("the pack has no task to run{0}")]
    Empty(String),
}

fn files_err(path: &Path, e: impl std::fmt::Display) -> RunError {
    RunError::Files {
        path: path.display().to_string(),
        message: e.to_string(),
    }
}

/// The identity a resume must match (`lock.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunLock {
    pub schema: String,
    pub pack_hash: String,
    pub tasks: Vec<(String, String)>,
    pub model: String,
    pub attempts: u32,
    pub seed: u64,
    pub tasks_glob: Option<String>,
    pub timeout_multiplier: f64,
    pub scaffold_hash: String,
    pub backend: BackendKind,
}

impl RunLock {
    pub fn hash(&self) -> String {
        let v = serde_json::to_value(self).unwrap_or_default();
        hex::encode(Sha256::digest(v.to_string().as_bytes()))
    }
}

/// Trial folder name: the task id made path-safe, then the attempt.
pub fn trial_name(task_id: &str, attempt: u32) -> String {
    let slug: String = task_id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect();
    format!("{slug}__{attempt}")
}

/// Reports what a run is doing (progress bars, plain log lines).
pub trait RunObserver: PhaseObserver {
    fn started(&self, run_id: &str, total: usize, skipped: usize);
    fn trial_finished(&self, row: &TrialRow);
    fn finished(&self, summary: &RunSummary);
    /// A remote executor's queue changed: array tasks waiting for a node, and running.
    fn queue(&self, _pending: usize, _running: usize) {}
}

pub struct RunOutcome {
    pub run_id: String,
    pub run_dir: PathBuf,
    pub summary: RunSummary,
    pub cancelled: bool,
}

pub(super) fn load_pack(config: &RunConfig) -> Result<TaskPack, RunError> {
    let mut pack = TaskPack::load(&config.pack)?;
    for broken in &pack.broken {
        tracing::warn!("skipping a broken task: {broken}");
    }
    if let Some(glob) = &config.tasks_glob {
        pack.filter(glob);
    }
    if pack.tasks.is_empty() {
        let why = config
            .tasks_glob
            .as_ref()
            .map(|g| format!(" (no task matches {g:?})"))
            .unwrap_or_default();
        return Err(RunError::Empty(why));
    }
    Ok(pack)
}

fn lock_for(config: &RunConfig, pack: &TaskPack) -> RunLock {
    RunLock {
        schema: "geode.lock.v1".into(),
        pack_hash: pack.hash(config.attempts).0,
        tasks: pack
            .tasks
            .iter()
            .map(|t| (t.id.clone(), t.hash.0.clone()))
            .collect(),
        model: config.model.clone(),
        attempts: config.attempts,
        seed: config.seed,
        tasks_glob: config.tasks_glob.clone(),
        timeout_multiplier: config.timeout_multiplier,
        scaffold_hash: config.scaffold.hash(),
        backend: config.backend,
    }
}

fn write_json(path: &Path, value: &impl Serialize) -> Result<(), RunError> {
    let text = serde_json::to_string_pretty(value).map_err(|e| files_err(path, e))?;
    std::fs::write(path, text).map_err(|e| files_err(path, e))
}

pub(super) fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<T, RunError> {
    let text = std::fs::read_to_string(path).map_err(|e| files_err(path, e))?;
    serde_json::from_str(&text).map_err(|e| files_err(path, e))
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
    let route: Route = config.model.parse()?;
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
            pack_hash: lock.pack_hash.clone(),
            model_route: config.model.clone(),
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
        route,
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
    let route: Route = config.model.parse()?;
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
        route,
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

/// What every trial of a run shares, whichever executor runs it.
pub(super) struct Shared {
    pub(super) config: RunConfig,
    store: RunStore,
    pub(super) run_id: String,
    backend: Arc<dyn Backend>,
    images: ImageCache,
    pub(super) observer: Arc<dyn RunObserver>,
    pub(super) cancel: CancellationToken,
}

#[allow(clippy::too_many_arguments)]
async fn execute(
    config: RunConfig,
    route: Route,
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
    let plans = plan_trials(&config, &route, pack.tasks, &run_id, &run_dir, &kept);
    observer.started(&run_id, plans.len() + kept.len(), kept.len());
    let shared = Shared {
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

/// One plan for every task and attempt that is not kept.
pub(super) fn plan_trials(
    config: &RunConfig,
    route: &Route,
    tasks: Vec<Task>,
    run_id: &str,
    run_dir: &Path,
    kept: &HashSet<String>,
) -> Vec<TrialPlan> {
    let scaffold = Arc::new(config.scaffold.clone());
    let mut plans = Vec::new();
    for task in tasks.into_iter().map(Arc::new) {
        for attempt in 0..config.attempts {
            let name = trial_name(&task.id, attempt);
            if kept.contains(&name) {
                continue;
            }
            // The crucible's derivation: one run seed gives a task's trials the same seeds under
            // `geode run` and `geode crucible run`, and a resumed trial gets its seed again.
            let seed = TrialSeed::derive(config.seed, &TaskId::new(task.id.clone()), attempt).0;
            plans.push(TrialPlan {
                run_id: run_id.to_string(),
                trial_dir: run_dir.join(&name),
                trial_name: name,
                seed,
                model_seed: seed,
                task: task.clone(),
                attempt,
                route: route.clone(),
                scaffold: scaffold.clone(),
                timeout_multiplier: config.timeout_multiplier,
                sealed_paths: Vec::new(),
                keep_workspace: config.keep_workspace,
            });
        }
    }
    plans
}

/// Runs the plans, `concurrency` at a time, and hands the run back once no trial holds it.
async fn run_trials(
    shared: Shared,
    plans: Vec<TrialPlan>,
    run_dir: &Path,
) -> Result<Shared, RunError> {
    let shared = Arc::new(shared);
    let cancel = shared.cancel.clone();
    let concurrency = shared.config.concurrency;
    let ended = match shared.config.slurm.clone() {
        Some(settings) => vec![slurm::dispatch(&*shared, &settings, plans, run_dir).await],
        None => {
            schedule::run_bounded(plans, concurrency, &cancel, |plan| {
                let shared = shared.clone();
                async move { run_with_retries(&shared, &plan).await }
            })
            .await
        }
    };
    if let Some(e) = ended.into_iter().find_map(Result::err) {
        return Err(e);
    }
    Arc::try_unwrap(shared).map_err(|_| RunError::Files {
        path: run_dir.display().to_string(),
        message: "trials still hold the run".into(),
    })
}

/// The end of the run: its status in the store and the job's `result.json`. Returns the
/// summary and whether the run was cancelled.
fn write_run_end(
    shared: &Shared,
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
            model_route: &shared.config.model,
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

/// The trial's row in the store, `running` until it ends.
pub(super) fn begin_trial(shared: &Shared, plan: &TrialPlan) -> Result<(), RunError> {
    let task = &plan.task;
    shared.store.start_trial(
        &shared.run_id,
        &plan.trial_name,
        &task.id,
        &task.hash.0,
        task.config.category(),
        task.config.difficulty(),
        plan.attempt,
        plan.seed,
        &chrono::Utc::now().to_rfc3339(),
    )?;
    Ok(())
}

/// The one retry rule of both executors: a retryable infrastructure outcome runs again while
/// the budget lasts and the run is not cancelled. Agent outcomes are never retried.
pub(super) fn retry_again(shared: &Shared, row: &TrialRow, retries: u32) -> bool {
    row.outcome.retryable()
        && retries < shared.config.max_infra_retries
        && !shared.cancel.is_cancelled()
}

/// A trial's last try: into the store (a cancelled trial stays unfinished there, so a resume
/// runs it again) and to the observer.
pub(super) fn end_trial(shared: &Shared, row: &TrialRow) -> Result<(), RunError> {
    if row.outcome != geode_graders::TrialOutcome::Cancelled {
        shared.store.finish_trial(row)?;
    }
    shared.observer.trial_finished(row);
    Ok(())
}

/// Run one trial on this machine, again (bounded) when it ends in a retryable infrastructure
/// outcome.
async fn run_with_retries(shared: &Shared, plan: &TrialPlan) -> Result<(), RunError> {
    begin_trial(shared, plan)?;
    let mut retries = 0;
    loop {
        let mut row = run_trial(
            plan,
            shared.backend.as_ref(),
            &shared.images,
            shared.observer.as_ref(),
            &shared.cancel,
        )
        .await;
        row.infra_retries = retries;
        if retry_again(shared, &row, retries) {
            retries += 1;
            tracing::warn!(
                "trial {} ended in {}; retrying",
                plan.trial_name,
                row.outcome
            );
            continue;
        }
        return end_trial(shared, &row);
    }
}

#[cfg(test)]
mod tests {
    use clap::ValueEnum;

    use super::*;

    fn config(base: BaseMode) -> RunConfig {
        RunConfig {
            schema: CONFIG_SCHEMA.into(),
            pack: PathBuf::from("pack"),
            model: "oracle".into(),
            attempts: 1,
            concurrency: 1,
            seed: 0,
            tasks_glob: None,
            timeout_multiplier: 1.0,
            backend: BackendKind::Sandbox,
            base,
            max_infra_retries: 0,
            scaffold: Scaffold::default(),
            keep_workspace: false,
            slurm: None,
        }
    }

    #[test]
    fn the_base_keeps_its_names_on_disk_and_on_the_command_line() {
        for (base, name) in [(BaseMode::Image, "image"), (BaseMode::Host, "host")] {
            let json = serde_json::to_value(config(base)).unwrap();
            assert_eq!(json["base"], name);
            let back: RunConfig = serde_json::from_value(json).unwrap();
            assert_eq!(back.base, base);
            assert_eq!(BaseMode::from_str(name, false).unwrap(), base);
        }
    }

    #[test]
    fn a_config_from_before_the_base_existed_is_an_image_run() {
        let mut json = serde_json::to_value(config(BaseMode::Host)).unwrap();
        json.as_object_mut().unwrap().remove("base");
        let old: RunConfig = serde_json::from_value(json).unwrap();
        assert_eq!(old.base, BaseMode::Image);
    }
}
