//! What one campaign runs and the ledger of its trials: the campaign, its pairs (both arms of
//! every task and trial on one seed), the trials an earlier run finished, and the tally every
//! finished trial goes through (meter, journal, budget), whichever executor ran it. Below the
//! local run (`campaign.rs`) and the Slurm one (`remote.rs`).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use geode_crucible::{Arm, Attestation, FrozenContract, TaskId, TrialSeed, Usage};
use geode_runtime::model::catalog::Route;
use geode_runtime::scaffold::Scaffold;
use tokio_util::sync::CancellationToken;

use super::CrucibleRunError;
use crate::pack::TaskPack;
use crate::rollout::run_spec::trial_name;
use crate::rollout::trial::TrialPlan;
use crate::store::TrialRow;

/// What one campaign runs.
pub struct Campaign<'a> {
    /// The frozen contract the campaign runs and decides under.
    pub contract: &'a FrozenContract,
    /// The pack both arms run.
    pub pack: &'a TaskPack,
    /// The baseline arm's scaffold.
    pub baseline: Arc<Scaffold>,
    /// The candidate arm's scaffold.
    pub candidate: Arc<Scaffold>,
    /// Where trial folders go (`<dir>/<arm>/<task>__<trial>`).
    pub dir: PathBuf,
    /// How many trials run at once on this machine.
    pub concurrency: usize,
    /// Scales every trial's timeouts (1.0 keeps the tasks' own).
    pub timeout_multiplier: f64,
    /// `Some(k)`: replication k, with its own run seed.
    pub replication: Option<u32>,
    /// `Some` for a test-stage campaign on an opened sealed pack: its opening's attestation.
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
    pub(super) fn arm(&self, arm: Arm) -> (&geode_crucible::ArmSpec, &Arc<Scaffold>, &'static str) {
        let contract = self.contract.contract();
        match arm {
            Arm::Baseline => (&contract.baseline, &self.baseline, "baseline"),
            Arm::Candidate => (&contract.candidate, &self.candidate, "candidate"),
        }
    }
}

pub(super) struct Meter {
    pub(super) started: Instant,
    /// Wall seconds an earlier, interrupted run of the campaign spent.
    pub(super) earlier: f64,
    pub(super) usage: Mutex<Usage>,
}

impl Meter {
    pub(super) fn elapsed(&self) -> f64 {
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
    let agents = [arm_agent(c, Arm::Baseline)?, arm_agent(c, Arm::Candidate)?];
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
                        agent: agents[usize::from(arm == Arm::Candidate)].clone(),
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

/// An arm's agent made ready on this machine: GEODE's own when the contract names none, else
/// the built-in agent's layer installed (once per agent and version) or the command.
fn arm_agent(
    c: &Campaign<'_>,
    arm: Arm,
) -> Result<Arc<crate::agents::TrialAgent>, CrucibleRunError> {
    let (spec, _, label) = c.arm(arm);
    let Some(text) = &spec.agent else {
        return Ok(Arc::default());
    };
    let choice: crate::agents::AgentChoice = text
        .parse()
        .map_err(|e| CrucibleRunError::Invalid(format!("{label}.agent: {e}")))?;
    crate::agents::TrialAgent::resolve(&choice, &crate::agents::install::agents_dir())
        .map(Arc::new)
        .map_err(|e| CrucibleRunError::Invalid(format!("{label}.agent {text}: {e}")))
}

/// Takes out of `plans` the trials an earlier run finished, returning them with a meter that
/// already counts their usage and the wall time that run spent.
pub(super) fn keep_resumed(
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
    pub(super) meter: Arc<Meter>,
    pub(super) journal: Mutex<std::fs::File>,
    pub(super) contract_hash: String,
    pub(super) replication: Option<u32>,
    pub(super) frozen: FrozenContract,
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
