//! The trial ledger and the executors over it. A ledger owns trials (a run's, or a crucible
//! campaign's): where each begins and ends in the store, and the one retry rule of every
//! executor. An executor runs planned trials somewhere (this machine: `local.rs`; a Slurm
//! cluster: `slurm/`) and reports each through the ledger, so where trials run never changes
//! what is recorded.

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use super::images::ImageCache;
use super::run_spec::{RunConfig, RunError};
use super::trial::plan::{PhaseObserver, TrialPlan};
use crate::env::Backend;
use crate::store::{RunStore, TrialRow};
use crate::summary::RunSummary;

/// Reports what a run is doing (progress bars, plain log lines).
pub trait RunObserver: PhaseObserver {
    /// The run starts: `total` trials, of which `skipped` were kept from before (a resume).
    fn started(&self, run_id: &str, total: usize, skipped: usize);
    /// A trial ended (retries done) and its row was recorded.
    fn trial_finished(&self, row: &TrialRow);
    /// The run ended; `summary` covers all its trials.
    fn finished(&self, summary: &RunSummary);
    /// A remote executor's queue changed: array tasks waiting for a node, and running.
    fn queue(&self, _pending: usize, _running: usize) {}
}

/// What owns the trials an executor runs (a run or a crucible campaign): where its trials
/// start and end, the retry rule, and what the Slurm worker needs to rebuild their plans.
pub(crate) trait TrialLedger: Sync {
    /// The name of the run folder (`<jobs_dir>/<id>`), as the array spec records it.
    fn id(&self) -> &str;
    /// Array tasks running at once (`-n`).
    fn at_once(&self) -> usize;
    fn cancel(&self) -> &CancellationToken;
    /// The campaign plan file the worker rebuilds its plans from; none for a run (the worker
    /// reads the run's `config.json`).
    fn campaign_plan(&self) -> Option<std::path::PathBuf> {
        None
    }
    /// Trials of the same group, out at the same time, share one array task (one node).
    fn group(&self, plan: &TrialPlan) -> String {
        plan.trial_name.clone()
    }
    fn begin(&self, plan: &TrialPlan) -> Result<(), RunError>;
    fn retry_again(&self, row: &TrialRow, try_no: u32) -> bool;
    /// The final row of a trial (cancelled ones too).
    fn end(&self, row: &TrialRow) -> Result<(), RunError>;
    fn queue(&self, _pending: usize, _running: usize) {}
}

/// A run's ledger: what every trial of the run shares, whichever executor runs it.
pub(crate) struct RunLedger {
    pub(crate) config: RunConfig,
    pub(crate) store: RunStore,
    pub(crate) run_id: String,
    pub(crate) backend: Arc<dyn Backend>,
    pub(crate) images: ImageCache,
    pub(crate) observer: Arc<dyn RunObserver>,
    pub(crate) cancel: CancellationToken,
}

impl TrialLedger for RunLedger {
    fn id(&self) -> &str {
        &self.run_id
    }
    fn at_once(&self) -> usize {
        self.config.concurrency
    }
    fn cancel(&self) -> &CancellationToken {
        &self.cancel
    }
    fn begin(&self, plan: &TrialPlan) -> Result<(), RunError> {
        let task = &plan.task;
        self.store.start_trial(
            &self.run_id,
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
    fn retry_again(&self, row: &TrialRow, try_no: u32) -> bool {
        row.outcome.retryable()
            && try_no < self.config.max_infra_retries
            && !self.cancel.is_cancelled()
    }
    fn end(&self, row: &TrialRow) -> Result<(), RunError> {
        if row.outcome != geode_graders::TrialOutcome::Cancelled {
            self.store.finish_trial(row)?;
        }
        self.observer.trial_finished(row);
        Ok(())
    }
    fn queue(&self, pending: usize, running: usize) {
        self.observer.queue(pending, running);
    }
}

/// Where a run's trials execute.
#[async_trait]
pub(crate) trait Executor: Send + Sync {
    /// Run `plans` to their ends, each reported through `ledger`; `run_dir` is the run's folder.
    async fn execute(
        &self,
        ledger: Arc<RunLedger>,
        plans: Vec<TrialPlan>,
        run_dir: &Path,
    ) -> Result<(), RunError>;
}
