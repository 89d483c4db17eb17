//! A crucible campaign on Slurm (`geode crucible run --executor slurm`). The coordinator,
//! the array specs, the worker and the result files are the run executor's
//! (`rollout::slurm`); this file only says what a campaign adds: a plan file from which the
//! worker plans the campaign's pairs with the campaign's own `plan_pairs` (so seeds and
//! pairing are those of a local campaign by construction), one group per pair (both arms in
//! one array task, on one node, in the local order, so drift of the machine cancels), and
//! each ingested trial handed to the campaign's tally (meter, journal, budgets).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use geode_crucible::{Arm, FrozenContract};
use geode_runtime::scaffold::Scaffold;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use super::CrucibleRunError;
use super::pairs::{Campaign, Tally, plan_pairs};
use crate::pack::TaskPack;
use crate::rollout::ledger::TrialLedger;
use crate::rollout::run_spec::RunError;
use crate::rollout::slurm::{self, SlurmSettings, files};
use crate::rollout::trial::TrialPlan;
use crate::store::TrialRow;

pub(crate) const CAMPAIGN_PLAN_SCHEMA: &str = "geode.slurm-campaign.v1";

/// What a worker needs to plan a campaign's pairs (`<campaign>/slurm/campaign.json`).
#[derive(Debug, Serialize, Deserialize)]
pub struct CampaignPlan {
    /// Always `geode.slurm-campaign.v1`.
    pub schema: String,
    /// The frozen contract's canonical JSON.
    pub contract: String,
    /// The pack, absolute (a path on the shared filesystem).
    pub pack: PathBuf,
    /// The baseline arm's scaffold.
    pub baseline: Scaffold,
    /// The candidate arm's scaffold.
    pub candidate: Scaffold,
    /// The campaign's folder, where trial folders go (`<dir>/<arm>/<task>__<trial>`).
    pub dir: PathBuf,
    /// Scales every trial's timeouts (1.0 keeps the tasks' own).
    pub timeout_multiplier: f64,
    /// `Some(k)`: replication k, with its own run seed.
    pub replication: Option<u32>,
    /// The seed the pairs' trial seeds derive from: the contract's, or the replication's.
    pub run_seed: u64,
}

/// A campaign as the Slurm coordinator sees it.
struct CampaignOwner<'a> {
    id: String,
    plan_file: PathBuf,
    concurrency: usize,
    arms: HashMap<String, Arm>,
    tally: &'a Tally,
    rows: Mutex<Vec<(Arm, TrialRow)>>,
}

impl TrialLedger for CampaignOwner<'_> {
    fn id(&self) -> &str {
        &self.id
    }
    fn at_once(&self) -> usize {
        self.concurrency
    }
    fn cancel(&self) -> &CancellationToken {
        &self.tally.cancel
    }
    fn campaign_plan(&self) -> Option<PathBuf> {
        Some(self.plan_file.clone())
    }
    /// `<task>__<trial>`, the trial folder both arms of a pair share a name with.
    fn group(&self, plan: &TrialPlan) -> String {
        plan.trial_dir
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
    }
    fn begin(&self, _plan: &TrialPlan) -> Result<(), RunError> {
        Ok(())
    }
    /// As on this machine: a campaign runs each trial once, and an infrastructure outcome is
    /// evidence the gate counts as invalid.
    fn retry_again(&self, _row: &TrialRow, _try_no: u32) -> bool {
        false
    }
    fn end(&self, row: &TrialRow) -> Result<(), RunError> {
        let Some(&arm) = self.arms.get(&row.trial_name) else {
            return Ok(());
        };
        self.tally.finished(arm, row);
        self.rows
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((arm, row.clone()));
        Ok(())
    }
    fn queue(&self, pending: usize, running: usize) {
        tracing::info!("slurm: {pending} trials pending, {running} running");
    }
}

/// Runs `plans` (both arms of each pair, in `plan_pairs`' order) as Slurm array tasks, one per
/// pair, and returns every trial's final row.
pub(super) async fn run_pairs(
    c: &Campaign<'_>,
    settings: &SlurmSettings,
    plans: Vec<(Arm, TrialPlan)>,
    tally: &Arc<Tally>,
    run_seed: u64,
) -> Result<Vec<(Arm, TrialRow)>, CrucibleRunError> {
    if c.attestation.is_some() || !c.sealed_paths.is_empty() {
        return Err(CrucibleRunError::Invalid(
            "--executor slurm runs train-stage campaigns only: a sealed test pack is opened in \
             a vault on this machine, which the cluster's nodes cannot read"
                .into(),
        ));
    }
    let dir = std::path::absolute(&c.dir).map_err(|e| CrucibleRunError::files(&c.dir, e))?;
    let id = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| CrucibleRunError::files(&dir, "a campaign folder needs a name"))?;
    let pack =
        std::path::absolute(&c.pack.root).map_err(|e| CrucibleRunError::files(&c.pack.root, e))?;
    let plan_file = files::slurm_dir(&dir).join("campaign.json");
    let plan = CampaignPlan {
        schema: CAMPAIGN_PLAN_SCHEMA.into(),
        contract: c.contract.canonical_json().to_string(),
        pack,
        baseline: (*c.baseline).clone(),
        candidate: (*c.candidate).clone(),
        dir: dir.clone(),
        timeout_multiplier: c.timeout_multiplier,
        replication: c.replication,
        run_seed,
    };
    let slurm_err = |e: &dyn std::fmt::Display| CrucibleRunError::Invalid(format!("slurm: {e}"));
    files::write_atomic(&plan_file, &plan).map_err(|e| slurm_err(&e))?;
    let owner = CampaignOwner {
        id,
        plan_file,
        concurrency: c.concurrency.max(1),
        arms: plans
            .iter()
            .map(|(arm, p)| (p.trial_name.clone(), *arm))
            .collect(),
        tally,
        rows: Mutex::new(Vec::new()),
    };
    let plans = plans.into_iter().map(|(_, p)| p).collect();
    slurm::dispatch(&owner, settings, plans, &dir)
        .await
        .map_err(|e| slurm_err(&e))?;
    Ok(owner.rows.into_inner().unwrap_or_else(|p| p.into_inner()))
}

/// The worker's side: every trial of the campaign at `path`, planned as its coordinator
/// planned them, by trial name.
pub fn worker_plans(path: &Path) -> Result<HashMap<String, TrialPlan>, CrucibleRunError> {
    let plan: CampaignPlan =
        files::read_json(path).map_err(|e| CrucibleRunError::Invalid(e.to_string()))?;
    if plan.schema != CAMPAIGN_PLAN_SCHEMA {
        return Err(CrucibleRunError::files(
            path,
            format!("schema {:?}, expected {CAMPAIGN_PLAN_SCHEMA}", plan.schema),
        ));
    }
    let contract =
        FrozenContract::from_json(&plan.contract).map_err(|e| CrucibleRunError::files(path, e))?;
    let pack = TaskPack::load(&plan.pack).map_err(|e| CrucibleRunError::files(&plan.pack, e))?;
    let c = Campaign {
        contract: &contract,
        pack: &pack,
        baseline: Arc::new(plan.baseline),
        candidate: Arc::new(plan.candidate),
        dir: plan.dir,
        concurrency: 1,
        timeout_multiplier: plan.timeout_multiplier,
        replication: plan.replication,
        attestation: None,
        sealed_paths: Vec::new(),
        slurm: None,
        // Only its plan is read here; the coordinator checked the campaign before it began.
        allow_infeasible: true,
    };
    Ok(plan_pairs(&c, plan.run_seed)?
        .into_iter()
        .map(|(_, p)| (p.trial_name.clone(), p))
        .collect())
}
