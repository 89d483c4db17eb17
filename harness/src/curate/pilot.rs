//! Pilot runs through the rollout engine: `start_run` on a one-task pack with the `oracle` or
//! `nop` agent, in whatever backend the caller built (the CLI uses the sandbox).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use geode_runtime::scaffold::Scaffold;
use tokio_util::sync::CancellationToken;

use super::pipeline::PilotRunner;
use crate::env::kind::BackendKind;
use crate::env::{Backend, BaseMode};
use crate::rollout::job::{CONFIG_SCHEMA, RunConfig, RunObserver, start_run};
use crate::rollout::trial::{PhaseEvent, PhaseObserver};
use crate::store::TrialRow;
use crate::summary::RunSummary;

/// Collects each trial's pass flag (reward 1; infrastructure outcomes count as not passed).
#[derive(Default)]
struct Collect(Mutex<Vec<bool>>);

impl PhaseObserver for Collect {
    fn phase(&self, _: &str, _: PhaseEvent<'_>) {}
}

impl RunObserver for Collect {
    fn started(&self, _: &str, _: usize, _: usize) {}
    fn trial_finished(&self, row: &TrialRow) {
        if let Ok(mut v) = self.0.lock() {
            v.push(row.reward.is_some_and(geode_graders::summary::passes));
        }
    }
    fn finished(&self, _: &RunSummary) {}
}

/// Pilot runs as real GEODE runs: one run of `trials` attempts per task and agent.
pub struct RunPilot {
    /// The environment backend the runs use.
    pub backend: Arc<dyn Backend>,
    /// Jobs folder the pilot runs are stored in.
    pub jobs_dir: PathBuf,
    /// The backend, as recorded in the run config.
    pub backend_kind: BackendKind,
}

#[async_trait]
impl PilotRunner for RunPilot {
    async fn run(
        &self,
        task_dir: &Path,
        agent: &str,
        trials: u32,
        seed: u64,
    ) -> Result<Vec<bool>, String> {
        let pack =
            std::fs::canonicalize(task_dir).map_err(|e| format!("{}: {e}", task_dir.display()))?;
        let config = RunConfig {
            schema: CONFIG_SCHEMA.into(),
            pack,
            model: agent
                .parse()
                .map_err(|e: geode_runtime::model::ModelError| format!("agent {agent}: {e}"))?,
            attempts: trials,
            concurrency: 1,
            seed,
            tasks_glob: None,
            timeout_multiplier: 1.0,
            backend: self.backend_kind,
            base: BaseMode::Image,
            max_infra_retries: 2,
            scaffold: Scaffold::default(),
            agent: Default::default(),
            keep_workspace: false,
            slurm: None,
        };
        let observer = Arc::new(Collect::default());
        start_run(
            config,
            &self.jobs_dir,
            self.backend.clone(),
            observer.clone(),
            CancellationToken::new(),
        )
        .await
        .map_err(|e| e.to_string())?;
        observer
            .0
            .lock()
            .map(|v| v.clone())
            .map_err(|e| e.to_string())
    }
}
