//! A run as data: what was asked (`config.json`, [`RunConfig`]), what a resume must match
//! (`lock.json`, [`RunLock`]), how its trials are named and planned, and the error every part
//! of a run reports. Below the job, its executors and the Slurm worker, which all read them.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use geode_crucible::{TaskId, TrialSeed};
use geode_runtime::model::catalog::Route;
use geode_runtime::scaffold::Scaffold;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::slurm::error::SlurmError;
use super::slurm::settings::SlurmSettings;
use super::trial::plan::TrialPlan;
use crate::agents::{AgentChoice, TrialAgent};
use crate::env::BaseMode;
use crate::env::kind::BackendKind;
use crate::pack::{PackError, PackHash, Task, TaskPack};
use crate::store::StoreError;

/// Schema tag of a run's `config.json`.
pub const CONFIG_SCHEMA: &str = "geode.run-config.v1";

/// What a run was asked to do (`config.json`). Concurrency and the jobs folder may change on
/// resume; everything else is locked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunConfig {
    /// Always [`CONFIG_SCHEMA`].
    pub schema: String,
    /// The task pack's folder.
    pub pack: PathBuf,
    /// Parsed where it enters (the flag, or `config.json` on resume) and written back through
    /// its `Display`, so the file holds the text the person gave.
    pub model: Route,
    /// Trials per task; attempt numbers run from 0.
    pub attempts: u32,
    /// How many trials run at once; may change on resume.
    pub concurrency: usize,
    /// The run seed every trial's seed derives from (with its task and attempt).
    pub seed: u64,
    /// Run only the tasks whose id matches this shell-style glob; `None` runs them all.
    pub tasks_glob: Option<String>,
    /// Scales every trial's timeouts (1.0 keeps the tasks' own).
    pub timeout_multiplier: f64,
    /// The sandbox backend the trials run in.
    pub backend: BackendKind,
    /// `image` (trials rooted in the image each task names) or `host` (`--base host`); runs
    /// from before the key existed were all `image`.
    #[serde(default)]
    pub base: BaseMode,
    /// How many times a trial ending in a retryable infrastructure outcome runs again.
    pub max_infra_retries: u32,
    /// The agent's scaffold, the same for every trial.
    pub scaffold: Scaffold,
    /// The agent under test (`--agent`). Left out of the config when it is GEODE's own, so
    /// older runs keep their lock hash.
    #[serde(default, skip_serializing_if = "AgentChoice::is_geode")]
    pub agent: AgentChoice,
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

/// Why a run could not start, resume or finish.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The pack could not be loaded.
    #[error(transparent)]
    Pack(#[from] PackError),
    /// The run store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A run file or folder could not be read, written or parsed.
    #[error("{path}: {message}")]
    Files {
        /// The file or folder, as displayed.
        path: String,
        /// Why, from the error that stopped it.
        message: String,
    },
    /// A run that cannot be resumed: its lock differs, or the run store does not know it.
    #[error("run {run}: {message}")]
    Resume {
        /// The run's id.
        run: String,
        /// Why not.
        message: String,
    },
    /// Slurm, or the files shared with its workers, failed.
    #[error(transparent)]
    Slurm(#[from] SlurmError),
    /// No task left to run; the text says why (the glob matched none) or is empty.
    #[error("the pack has no task to run{0}")]
    Empty(String),
    /// The agent under test could not be installed.
    #[error("--agent {agent}: {source}")]
    Agent {
        /// The agent as given.
        agent: String,
        /// Why not.
        #[source]
        source: crate::agents::InstallError,
    },
}

/// The run's agent made ready on this machine (a third-party agent's layer installed once per
/// agent and version, then found in `$GEODE_HOME/agents`).
pub(crate) async fn resolve_agent(config: &RunConfig) -> Result<Arc<TrialAgent>, RunError> {
    let choice = config.agent.clone();
    tokio::task::spawn_blocking(move || {
        TrialAgent::resolve(&choice, &crate::agents::install::agents_dir())
            .map(Arc::new)
            .map_err(|source| RunError::Agent {
                agent: choice.to_string(),
                source,
            })
    })
    .await
    .map_err(|e| RunError::Resume {
        run: String::new(),
        message: format!("the agent's install task: {e}"),
    })?
}

pub(super) fn files_err(path: &Path, e: impl std::fmt::Display) -> RunError {
    RunError::Files {
        path: path.display().to_string(),
        message: e.to_string(),
    }
}

/// The identity a resume must match (`lock.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunLock {
    /// Always `geode.lock.v1`.
    pub schema: String,
    /// The pack's hash at the run's attempts per task.
    pub pack_hash: PackHash,
    /// Each task's id and content hash, in pack order.
    pub tasks: Vec<(String, String)>,
    /// The agent's model route.
    pub model: Route,
    /// Trials per task.
    pub attempts: u32,
    /// The run seed.
    pub seed: u64,
    /// The task filter, as in the config.
    pub tasks_glob: Option<String>,
    /// The timeout scale, as in the config.
    pub timeout_multiplier: f64,
    /// The hash of the run's scaffold.
    pub scaffold_hash: String,
    /// The sandbox backend.
    pub backend: BackendKind,
}

impl RunLock {
    /// SHA-256 (hex) of the lock's JSON: a resume must give the same.
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

pub(crate) fn load_pack(config: &RunConfig) -> Result<TaskPack, RunError> {
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

pub(super) fn lock_for(config: &RunConfig, pack: &TaskPack) -> RunLock {
    RunLock {
        schema: "geode.lock.v1".into(),
        pack_hash: pack.hash(config.attempts),
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

pub(super) fn write_json(path: &Path, value: &impl Serialize) -> Result<(), RunError> {
    let text = serde_json::to_string_pretty(value).map_err(|e| files_err(path, e))?;
    std::fs::write(path, text).map_err(|e| files_err(path, e))
}

pub(crate) fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<T, RunError> {
    let text = std::fs::read_to_string(path).map_err(|e| files_err(path, e))?;
    serde_json::from_str(&text).map_err(|e| files_err(path, e))
}

/// One plan for every task and attempt that is not kept.
pub(crate) fn plan_trials(
    config: &RunConfig,
    tasks: Vec<Task>,
    run_id: &str,
    run_dir: &Path,
    kept: &HashSet<String>,
    agent: &Arc<TrialAgent>,
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
                agent: agent.clone(),
                route: config.model.clone(),
                scaffold: scaffold.clone(),
                timeout_multiplier: config.timeout_multiplier,
                sealed_paths: Vec::new(),
                keep_workspace: config.keep_workspace,
            });
        }
    }
    plans
}

#[cfg(test)]
mod tests {
    use clap::ValueEnum;

    use super::*;

    fn config(base: BaseMode) -> RunConfig {
        RunConfig {
            schema: CONFIG_SCHEMA.into(),
            pack: PathBuf::from("pack"),
            model: "oracle".parse().unwrap(),
            attempts: 1,
            concurrency: 1,
            seed: 0,
            tasks_glob: None,
            timeout_multiplier: 1.0,
            backend: BackendKind::Sandbox,
            base,
            max_infra_retries: 0,
            scaffold: Scaffold::default(),
            agent: Default::default(),
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

    #[test]
    fn the_route_is_parsed_once_and_written_back_as_given() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.json");
        let mut json = serde_json::to_value(config(BaseMode::Image)).unwrap();
        json["model"] = "flaky-oracle:0.25:tamper".into();
        std::fs::write(&path, json.to_string()).unwrap();
        let read: RunConfig = read_json(&path).unwrap();
        assert_eq!(
            read.model,
            Route::Embedded(geode_runtime::model::catalog::EmbeddedRoute::FlakyOracle {
                p: 0.25,
                tamper: true
            })
        );
        assert_eq!(
            serde_json::to_value(&read).unwrap()["model"],
            "flaky-oracle:0.25:tamper"
        );

        // A route no geode knows is refused where the file is read, naming the file.
        json["model"] = "no-such-provider:x".into();
        std::fs::write(&path, json.to_string()).unwrap();
        let err = read_json::<RunConfig>(&path).unwrap_err().to_string();
        assert!(
            err.contains("config.json") && err.contains("no-such-provider"),
            "{err}"
        );
    }
}
