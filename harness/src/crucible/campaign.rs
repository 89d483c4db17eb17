//! A paired campaign through the trial runner, with metered budgets (the statistics that judge
//! it are pure functions in `geode-crucible`).
//!
//! A campaign runs baseline and candidate on the same (task, trial, seed) pairs, alternating
//! which arm goes first from one pair to the next so drift of the machine cancels. Usage is
//! metered from what the trials report (tokens, cost, model calls) and the wall clock; crossing
//! a budget cancels the campaign, and the gate's budget veto then says so.
//!
//! Resumable: each finished trial is appended to `<dir>/trials.jsonl` with the campaign's
//! elapsed time. A campaign started again on the same folder, contract and replication keeps
//! those trials (same task hash, same seed: a trial is a function of its seed) and their usage,
//! and its wall clock starts from the recorded elapsed time, so the budget counts the time the
//! interrupted run spent. Only unfinished and cancelled trials run again.
//!
//! Reportable: at its end a campaign writes `<dir>/geode.db`, a run store with one run per arm
//! (`baseline`, `candidate`) whose folders are `<dir>/<arm>`, Harbor's layout; so `geode report
//! <dir>/baseline <dir>/candidate` and `geode compare` read a campaign like any two runs. The
//! store is derived (rebuilt from the trials each time); the evidence stays the record.

use std::sync::{Arc, Mutex};

use geode_crucible::{
    Arm, EVIDENCE_SCHEMA, Evidence, FamilyId, ObservedIdentity, TaskId, TaskRef, TrialOutcome,
    TrialSeed, Usage,
};
use tokio_util::sync::CancellationToken;

use super::CrucibleRunError;
use super::identity::{scaffold_hash, tests_grader_hash};
use super::pairs::{Campaign, Meter, TRIALS_JOURNAL, Tally, keep_resumed, plan_pairs};
use super::preflight::{self, PlannedPack};
use crate::env::Backend;
use crate::rollout::images::ImageCache;
use crate::rollout::schedule::run_bounded;
use crate::rollout::trial::{PhaseObserver, TrialPlan, run_trial};
use crate::store::{RunRow, RunStore, TrialRow};

/// The reward a campaign scores for `row`: the contract's reward key when it has one (`None`
/// when the trial's `reward.json` lacks it: the verifier did not say what was asked, so the
/// trial is no evidence), else the headline reward.
fn scored_reward(row: &TrialRow, reward_key: Option<&str>) -> Option<f64> {
    match reward_key {
        None => Some(row.reward.unwrap_or(0.0)),
        Some(key) => row.rewards.get(key).copied(),
    }
}

/// Run every pair of the campaign and collect the evidence.
pub async fn run_campaign(
    c: &Campaign<'_>,
    backend: Arc<dyn Backend>,
    observer: Arc<dyn PhaseObserver>,
    cancel: CancellationToken,
) -> Result<Evidence, CrucibleRunError> {
    let contract = c.contract.contract();
    let planned = PlannedPack::Loaded(c.pack);
    preflight::check_identity(c.contract, &c.baseline, &c.candidate, &planned)?;
    // An opened holdout was checked before its opening, by its public size; what its
    // families add is reported, not refused: the opening is spent either way.
    let allow = c.allow_infeasible || c.attestation.is_some();
    for obstacle in preflight::check_design(c.contract, &planned, allow)? {
        tracing::warn!("this campaign cannot KEEP: {obstacle}");
    }
    begin_holdout(c)?;
    let run_seed = match c.replication {
        Some(k) => geode_crucible::replication_run_seed(c.contract.hash(), k),
        None => contract.run_seed,
    };
    let mut plans = plan_pairs(c, run_seed)?;
    let (kept, meter) = keep_resumed(c, &mut plans);
    let meter = Arc::new(meter);
    let ran = run_pairs(c, plans, &meter, backend, observer, &cancel, run_seed).await?;
    let mut usage = meter
        .usage
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    usage.wall_seconds = meter.elapsed();
    let mut rows = kept;
    rows.extend(ran);
    write_store(c, &rows, run_seed, cancel.is_cancelled())?;
    build_evidence(c, rows, run_seed, usage)
}

/// Recorded before the first trial: a test-stage campaign that never finishes still used the
/// holdout, and no other contract gets a first result from the same tasks.
fn begin_holdout(c: &Campaign<'_>) -> Result<(), CrucibleRunError> {
    let contract = c.contract.contract();
    if contract.stage != geode_crucible::Stage::Test {
        return Ok(());
    }
    super::holdouts::HoldoutLedger::for_this_machine().begin_campaign(
        c.pack,
        super::holdouts::UsedBy {
            contract_hash: c.contract.hash().to_string(),
            candidate_scaffold: contract.candidate.scaffold_hash.to_string(),
            started_at: chrono::Utc::now().to_rfc3339(),
        },
    )
}

/// Runs the remaining trials, journaling each finished one and cancelling the campaign when it
/// crosses a budget.
async fn run_pairs(
    c: &Campaign<'_>,
    plans: Vec<(Arm, TrialPlan)>,
    meter: &Arc<Meter>,
    backend: Arc<dyn Backend>,
    observer: Arc<dyn PhaseObserver>,
    cancel: &CancellationToken,
    run_seed: u64,
) -> Result<Vec<(Arm, TrialRow)>, CrucibleRunError> {
    std::fs::create_dir_all(&c.dir).map_err(|e| CrucibleRunError::files(&c.dir, e))?;
    let journal_path = c.dir.join(TRIALS_JOURNAL);
    let journal = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&journal_path)
        .map_err(|e| CrucibleRunError::files(&journal_path, e))?;
    let tally = Arc::new(Tally {
        meter: meter.clone(),
        journal: Mutex::new(journal),
        contract_hash: c.contract.hash().to_string(),
        replication: c.replication,
        frozen: c.contract.clone(),
        cancel: cancel.clone(),
    });
    if let Some(settings) = &c.slurm {
        return super::remote::run_pairs(c, settings, plans, &tally, run_seed).await;
    }
    let images = Arc::new(ImageCache::new());
    let ran = run_bounded(plans, c.concurrency, cancel, |(arm, plan)| {
        let (backend, observer, images, tally) = (
            backend.clone(),
            observer.clone(),
            images.clone(),
            tally.clone(),
        );
        async move {
            let row = run_trial(
                &plan,
                backend.as_ref(),
                &images,
                observer.as_ref(),
                &tally.cancel,
            )
            .await;
            tally.finished(arm, &row);
            (arm, row)
        }
    })
    .await;
    Ok(ran)
}

/// The evidence the gate decides on: every trial that ran to an end, scored by the contract's
/// reward, beside what was observed of the pack, the scaffolds and the grader.
fn build_evidence(
    c: &Campaign<'_>,
    rows: Vec<(Arm, TrialRow)>,
    run_seed: u64,
    usage: Usage,
) -> Result<Evidence, CrucibleRunError> {
    let contract = c.contract.contract();
    let family = |task: &str| -> FamilyId {
        let category = c
            .pack
            .tasks
            .iter()
            .find(|t| t.id == task)
            .map(|t| t.config.category().to_string())
            .unwrap_or_default();
        FamilyId::new(category)
    };
    let reward_key = contract.reward_key.as_deref();
    let trials = rows
        .into_iter()
        // A cancelled trial is no evidence: the pair is missing, and coverage says so.
        .filter(|(_, r)| r.outcome != geode_graders::TrialOutcome::Cancelled)
        .map(|(arm, r)| {
            let scored = scored_reward(&r, reward_key);
            TrialOutcome {
                task: TaskId::new(r.task_id.clone()),
                family: family(&r.task_id),
                arm,
                trial: r.attempt,
                seed: TrialSeed(r.seed),
                reward: scored.unwrap_or(0.0).clamp(0.0, 1.0),
                infra_invalid: r.outcome.is_infrastructure() || scored.is_none(),
                integrity: r.integrity,
            }
        })
        .collect();
    Ok(Evidence {
        schema: EVIDENCE_SCHEMA.into(),
        contract_hash: c.contract.hash().clone(),
        stage: contract.stage,
        observed: ObservedIdentity {
            pack_hash: c.pack.hash(contract.trials_per_task),
            baseline_scaffold_hash: scaffold_hash(&c.baseline)?,
            candidate_scaffold_hash: scaffold_hash(&c.candidate)?,
            grader_config_hash: tests_grader_hash(reward_key),
        },
        run_seed,
        replication: c.replication,
        tasks: c
            .pack
            .tasks
            .iter()
            .map(|t| TaskRef {
                id: TaskId::new(t.id.clone()),
                family: FamilyId::new(t.config.category().to_string()),
            })
            .collect(),
        trials,
        usage,
        attestation: c.attestation.clone(),
    })
}

/// The campaign's run store (see the module doc), rebuilt from `rows`.
fn write_store(
    c: &Campaign<'_>,
    rows: &[(Arm, TrialRow)],
    run_seed: u64,
    cancelled: bool,
) -> Result<(), CrucibleRunError> {
    let path = c.dir.join(crate::store::STORE_FILE);
    let files = |e: &dyn std::fmt::Display| CrucibleRunError::files(&path, e);
    for stale in [
        path.clone(),
        path.with_extension("db-wal"),
        path.with_extension("db-shm"),
    ] {
        if stale.exists() {
            std::fs::remove_file(&stale).map_err(|e| files(&e))?;
        }
    }
    let store = RunStore::open(&path).map_err(|e| files(&e))?;
    let contract = c.contract.contract();
    let created = chrono::Utc::now().to_rfc3339();
    for arm in [Arm::Baseline, Arm::Candidate] {
        let (spec, scaffold, label) = c.arm(arm);
        let run = RunRow {
            run_id: label.to_string(),
            created: created.clone(),
            pack_path: String::new(),
            pack_hash: c.pack.hash(contract.trials_per_task).to_string(),
            model_route: spec.model_route.clone(),
            scaffold_hash: scaffold.hash(),
            seed: run_seed,
            attempts: contract.trials_per_task,
            lock_hash: c.contract.hash().to_string(),
            status: if cancelled { "cancelled" } else { "finished" }.into(),
        };
        let mut config = serde_json::json!({"contract_hash": c.contract.hash().to_string(),
                                            "arm": label, "replication": c.replication});
        // Where the reports and the viewer read a run's agent (absent: GEODE's own).
        if let Some(agent) = &spec.agent {
            config["agent"] = serde_json::json!(agent);
        }
        store
            .insert_run(&run, &config.to_string())
            .map_err(|e| files(&e))?;
        for (_, row) in rows.iter().filter(|(a, _)| *a == arm) {
            let row = TrialRow {
                run_id: label.to_string(),
                ..row.clone()
            };
            store.finish_trial(&row).map_err(|e| files(&e))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(reward: Option<f64>, rewards: &str) -> TrialRow {
        TrialRow {
            run_id: "r".into(),
            trial_name: "t__0".into(),
            task_id: "t".into(),
            task_hash: "h".into(),
            category: "c".into(),
            difficulty: "d".into(),
            attempt: 0,
            seed: 1,
            outcome: geode_graders::TrialOutcome::Passed,
            reward,
            rewards: serde_json::from_str(rewards).unwrap(),
            exception_class: None,
            exception_message: None,
            started: String::new(),
            finished: String::new(),
            phases: Default::default(),
            usage: Default::default(),
            model_route: "oracle".into(),
            scaffold_hash: String::new(),
            infra_retries: 0,
            integrity: Default::default(),
        }
    }

    #[test]
    fn a_reward_key_picks_its_reward_and_a_missing_key_is_no_evidence() {
        let r = row(Some(0.0), r#"{"correctness": 1.0, "performance": 0.0}"#);
        assert_eq!(scored_reward(&r, None), Some(0.0));
        assert_eq!(scored_reward(&r, Some("correctness")), Some(1.0));
        assert_eq!(scored_reward(&r, Some("performance")), Some(0.0));
        assert_eq!(scored_reward(&r, Some("style")), None);
        assert_eq!(scored_reward(&row(None, "{}"), None), Some(0.0));
    }
}
