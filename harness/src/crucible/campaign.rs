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

use geode_runtime::model::catalog::Route;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use geode_crucible::{
    Arm, Attestation, EVIDENCE_SCHEMA, Evidence, FamilyId, FrozenContract, ObservedIdentity,
    TaskId, TaskRef, TrialOutcome, TrialSeed, Usage,
};
use geode_runtime::scaffold::Scaffold;
use tokio_util::sync::CancellationToken;

use super::CrucibleRunError;
use super::identity::{pack_hash, scaffold_hash, tests_grader_hash};
use super::preflight::{self, PlannedPack};
use crate::env::Backend;
use crate::pack::TaskPack;
use crate::rollout::images::ImageCache;
use crate::rollout::job::trial_name;
use crate::rollout::schedule::run_bounded;
use crate::rollout::trial::{PhaseObserver, TrialPlan, run_trial};
use crate::store::{RunRow, RunStore, TrialRow};

/// The reward a campaign scores for `row`: the contract's reward key when it has one (`None`
/// when the trial's `reward.json` lacks it: the verifier did not say what was asked, so the
/// trial is no evidence), else the headline reward.
fn scored_reward(row: &TrialRow, reward_key: Option<&str>) -> Option<f64> {
    match reward_key {
        None => Some(row.reward.unwrap_or(0.0)),
        Some(key) => {
            serde_json::from_str::<std::collections::BTreeMap<String, f64>>(&row.rewards_json)
                .ok()
                .and_then(|all| all.get(key).copied())
        }
    }
}

/// What one campaign runs.
pub struct Campaign<'a> {
    pub contract: &'a FrozenContract,
    pub pack: &'a TaskPack,
    pub baseline: Arc<Scaffold>,
    pub candidate: Arc<Scaffold>,
    /// Where trial folders go (`<dir>/<arm>/<task>__<trial>`).
    pub dir: PathBuf,
    pub concurrency: usize,
    pub timeout_multiplier: f64,
    /// `Some(k)`: replication k, with its own run seed.
    pub replication: Option<u32>,
    pub attestation: Option<Attestation>,
    /// Host paths of sealed data that no trial's tool call may name
    /// ([`super::OpenedPack::sealed_paths`]).
    pub sealed_paths: Vec<String>,
    /// `Some`: each pair runs as one Slurm array task (both arms on one node), through the
    /// run executor's coordinator (`crucible::remote`); `None`: on this machine.
    pub slurm: Option<crate::rollout::slurm::SlurmSettings>,
    /// Run even when the rule cannot KEEP on this design (see [`super::preflight`]).
    pub allow_infeasible: bool,
}

impl Campaign<'_> {
    /// An arm's frozen spec, scaffold and label (the name of its trial folder and store run).
    fn arm(&self, arm: Arm) -> (&geode_crucible::ArmSpec, &Arc<Scaffold>, &'static str) {
        let contract = self.contract.contract();
        match arm {
            Arm::Baseline => (&contract.baseline, &self.baseline, "baseline"),
            Arm::Candidate => (&contract.candidate, &self.candidate, "candidate"),
        }
    }
}

struct Meter {
    started: Instant,
    /// Wall seconds an earlier, interrupted run of the campaign spent.
    earlier: f64,
    usage: Mutex<Usage>,
}

impl Meter {
    fn elapsed(&self) -> f64 {
        self.earlier + self.started.elapsed().as_secs_f64()
    }
}

/// The file of a campaign's finished trials.
pub const TRIALS_JOURNAL: &str = "trials.jsonl";

/// One line of [`TRIALS_JOURNAL`].
#[derive(serde::Serialize, serde::Deserialize)]
struct Finished {
    contract_hash: String,
    replication: Option<u32>,
    arm: Arm,
    /// The campaign's wall seconds when the trial ended.
    elapsed: f64,
    row: TrialRow,
}

/// The trials an earlier run of this campaign finished, by (arm, trial name), with the wall
/// seconds it had spent. Lines of another contract or replication, or cut short, are ignored.
fn finished_before(c: &Campaign<'_>) -> (std::collections::HashMap<(Arm, String), TrialRow>, f64) {
    let text = std::fs::read_to_string(c.dir.join(TRIALS_JOURNAL)).unwrap_or_default();
    let contract = c.contract.hash().to_string();
    let mut done = std::collections::HashMap::new();
    let mut earlier: f64 = 0.0;
    for f in text
        .lines()
        .filter_map(|l| serde_json::from_str::<Finished>(l).ok())
        .filter(|f| f.contract_hash == contract && f.replication == c.replication)
    {
        earlier = earlier.max(f.elapsed);
        done.insert((f.arm, f.row.trial_name.clone()), f.row);
    }
    (done, earlier)
}

fn over_budget(u: &Usage, contract: &FrozenContract) -> Option<&'static str> {
    let b = &contract.contract().budgets;
    if u.wall_seconds > b.wall_seconds {
        Some("wall time")
    } else if u.model_calls > b.model_calls {
        Some("model calls")
    } else if u.tokens > b.tokens {
        Some("tokens")
    } else if u.cost_usd > b.cost_usd {
        Some("cost")
    } else {
        None
    }
}

fn add_usage(u: &mut Usage, row: &TrialRow) {
    u.model_calls += row.usage.model_calls;
    u.tokens += row.usage.input_tokens + row.usage.output_tokens;
    u.cost_usd += row.usage.cost_usd;
}

/// Appends one finished trial to the journal. A failed write only costs a re-run of that trial
/// on resume, so it is logged, not fatal.
fn record_finished(journal: &Mutex<std::fs::File>, line: &Finished) {
    use std::io::Write;
    let Ok(text) = serde_json::to_string(line) else {
        return;
    };
    let mut f = journal.lock().unwrap_or_else(|p| p.into_inner());
    if let Err(e) = writeln!(f, "{text}") {
        tracing::warn!("campaign journal: {e}");
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

/// Both arms of every (task, trial) on the same seed, the arm that goes first alternating from
/// one pair to the next so drift of the machine cancels.
pub(super) fn plan_pairs(
    c: &Campaign<'_>,
    run_seed: u64,
) -> Result<Vec<(Arm, TrialPlan)>, CrucibleRunError> {
    let route = |arm| -> Result<Route, CrucibleRunError> {
        let (spec, _, label) = c.arm(arm);
        spec.model_route
            .parse()
            .map_err(|e| CrucibleRunError::Invalid(format!("{label}.model_route: {e}")))
    };
    let routes = [route(Arm::Baseline)?, route(Arm::Candidate)?];
    let mut plans = Vec::new();
    for task in c.pack.tasks.iter().map(|t| Arc::new(t.clone())) {
        let id = TaskId::new(task.id.clone());
        for trial in 0..c.contract.contract().trials_per_task {
            let pair_seed = TrialSeed::derive(run_seed, &id, trial);
            let arms = if (plans.len() / 2) % 2 == 0 {
                [Arm::Baseline, Arm::Candidate]
            } else {
                [Arm::Candidate, Arm::Baseline]
            };
            for arm in arms {
                let (_, scaffold, label) = c.arm(arm);
                let name = trial_name(&task.id, trial);
                plans.push((
                    arm,
                    TrialPlan {
                        run_id: format!("{}:{label}", c.contract.hash()),
                        trial_dir: c.dir.join(label).join(&name),
                        trial_name: format!("{name}__{label}"),
                        task: task.clone(),
                        attempt: trial,
                        seed: pair_seed.0,
                        model_seed: pair_seed.arm_model_seed(arm),
                        route: routes[usize::from(arm == Arm::Candidate)].clone(),
                        scaffold: scaffold.clone(),
                        timeout_multiplier: c.timeout_multiplier,
                        sealed_paths: c.sealed_paths.clone(),
                        keep_workspace: false,
                    },
                ));
            }
        }
    }
    Ok(plans)
}

/// Takes out of `plans` the trials an earlier run finished, returning them with a meter that
/// already counts their usage and the wall time that run spent.
fn keep_resumed(
    c: &Campaign<'_>,
    plans: &mut Vec<(Arm, TrialPlan)>,
) -> (Vec<(Arm, TrialRow)>, Meter) {
    let (mut done, earlier) = finished_before(c);
    let mut usage = Usage::default();
    let mut kept = Vec::new();
    plans.retain(|(arm, plan)| {
        let Some(row) = done.remove(&(*arm, plan.trial_name.clone())) else {
            return true;
        };
        // Kept only if it is the trial this plan would run: same task content, same seed.
        if row.seed != plan.seed || row.task_hash != plan.task.hash.0 {
            return true;
        }
        add_usage(&mut usage, &row);
        kept.push((*arm, row));
        false
    });
    if !kept.is_empty() {
        tracing::info!(
            "campaign resumed: {} trials kept from an earlier run",
            kept.len()
        );
    }
    usage.wall_seconds = earlier;
    let meter = Meter {
        started: Instant::now(),
        earlier,
        usage: Mutex::new(usage),
    };
    (kept, meter)
}

/// What every finished trial of a campaign goes through, whichever executor ran it: the meter,
/// the journal, and the budget check that cancels the campaign.
pub(super) struct Tally {
    meter: Arc<Meter>,
    journal: Mutex<std::fs::File>,
    contract_hash: String,
    replication: Option<u32>,
    frozen: FrozenContract,
    pub(super) cancel: CancellationToken,
}

impl Tally {
    pub(super) fn finished(&self, arm: Arm, row: &TrialRow) {
        let mut u = self.meter.usage.lock().unwrap_or_else(|p| p.into_inner());
        add_usage(&mut u, row);
        u.wall_seconds = self.meter.elapsed();
        if row.outcome != geode_graders::TrialOutcome::Cancelled {
            let line = Finished {
                contract_hash: self.contract_hash.clone(),
                replication: self.replication,
                arm,
                elapsed: u.wall_seconds,
                row: row.clone(),
            };
            record_finished(&self.journal, &line);
        }
        if let Some(what) = over_budget(&u, &self.frozen) {
            tracing::warn!("the campaign crossed its {what} budget; cancelling");
            self.cancel.cancel();
        }
    }
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
            pack_hash: pack_hash(c.pack, contract.trials_per_task)?,
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
            pack_hash: pack_hash(c.pack, contract.trials_per_task)?.to_string(),
            model_route: spec.model_route.clone(),
            scaffold_hash: scaffold.hash(),
            seed: run_seed,
            attempts: contract.trials_per_task,
            lock_hash: c.contract.hash().to_string(),
            status: if cancelled { "cancelled" } else { "finished" }.into(),
        };
        let config = serde_json::json!({"contract_hash": c.contract.hash().to_string(),
                                        "arm": label, "replication": c.replication});
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
            rewards_json: rewards.into(),
            exception_class: None,
            exception_message: None,
            started: String::new(),
            finished: String::new(),
            phases_json: "{}".into(),
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
