//! The local executor: a run's trials on this machine, `concurrency` at a time, each run again
//! (bounded) when it ends in a retryable infrastructure outcome.

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;

use super::ledger::{Executor, RunLedger, TrialLedger};
use super::run_spec::RunError;
use super::schedule;
use super::trial::plan::TrialPlan;
use super::trial::run_trial;

/// Trials on this machine.
pub(crate) struct LocalExecutor;

#[async_trait]
impl Executor for LocalExecutor {
    async fn execute(
        &self,
        ledger: Arc<RunLedger>,
        plans: Vec<TrialPlan>,
        _run_dir: &Path,
    ) -> Result<(), RunError> {
        let cancel = ledger.cancel.clone();
        let concurrency = ledger.config.concurrency;
        let ended = schedule::run_bounded(plans, concurrency, &cancel, |plan| {
            let ledger = ledger.clone();
            async move { run_with_retries(&ledger, &plan).await }
        })
        .await;
        ended.into_iter().find_map(Result::err).map_or(Ok(()), Err)
    }
}

/// Run one trial on this machine, again (bounded) when it ends in a retryable infrastructure
/// outcome.
async fn run_with_retries(ledger: &RunLedger, plan: &TrialPlan) -> Result<(), RunError> {
    ledger.begin(plan)?;
    let mut retries = 0;
    loop {
        let mut row = run_trial(
            plan,
            ledger.backend.as_ref(),
            &ledger.images,
            ledger.observer.as_ref(),
            &ledger.cancel,
        )
        .await;
        row.infra_retries = retries;
        if ledger.retry_again(&row, retries) {
            retries += 1;
            tracing::warn!(
                "trial {} ended in {}; retrying",
                plan.trial_name,
                row.outcome
            );
            continue;
        }
        return ledger.end(&row);
    }
}
