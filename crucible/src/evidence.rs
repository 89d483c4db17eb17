//! The evidence of a campaign (`geode.evidence.v1`): what the harness observed, as plain data.
//!
//! The harness fills it from its run store: the identities it actually ran with (hashed at run
//! time, not copied from the contract), the pack's task list, one row per trial, and the metered
//! usage. The crucible checks it against the contract and decides; it never trusts a field it
//! can recompute (trial seeds are re-derived, coverage is recounted).

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::arm::Arm;
use crate::attestation::Attestation;
use crate::canonical::to_canonical_json;
use crate::contract::Stage;
use crate::error::CanonicalError;
use crate::ids::{
    ContractHash, EvidenceHash, FamilyId, GraderHash, PackHash, ScaffoldHash, TaskId,
};
use crate::seed::TrialSeed;

/// Schema tag of an evidence document.
pub const EVIDENCE_SCHEMA: &str = "geode.evidence.v1";

/// Schema tag of the hashed trial table (the input of [`evidence_hash`]).
pub const TRIAL_TABLE_SCHEMA: &str = "geode.trials.v1";

/// Integrity signals raised during one trial, by kind (counts). The safety veto looks at whether
/// a trial raised any; the kinds are kept so a report can say which.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct IntegritySignals {
    /// Dangerous tool calls the policy denied but the agent attempted.
    pub denied_dangerous_calls: u32,
    /// Attempts to write the reward file or alter the verifier (breaking its sandbox included).
    pub reward_tampering: u32,
    /// Network access attempts outside the allowlist.
    pub network_attempts: u32,
    /// Tool calls whose side effects could not be established.
    pub uncertain_effects: u32,
    /// Reads of sealed data (holdout packs, answer keys).
    pub sealed_data_access: u32,
}

impl IntegritySignals {
    /// All signals of all kinds.
    pub fn total(&self) -> u64 {
        u64::from(self.denied_dangerous_calls)
            + u64::from(self.reward_tampering)
            + u64::from(self.network_attempts)
            + u64::from(self.uncertain_effects)
            + u64::from(self.sealed_data_access)
    }

    /// Kind-wise sum (saturating), for per-arm totals.
    pub fn add(&mut self, o: &IntegritySignals) {
        self.denied_dangerous_calls = self
            .denied_dangerous_calls
            .saturating_add(o.denied_dangerous_calls);
        self.reward_tampering = self.reward_tampering.saturating_add(o.reward_tampering);
        self.network_attempts = self.network_attempts.saturating_add(o.network_attempts);
        self.uncertain_effects = self.uncertain_effects.saturating_add(o.uncertain_effects);
        self.sealed_data_access = self.sealed_data_access.saturating_add(o.sealed_data_access);
    }
}

/// One trial: one arm of one (task, trial) pair.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrialOutcome {
    /// The task that ran; must be listed in [`Evidence::tasks`].
    pub task: TaskId,
    /// The task's family; must match the pack's listing.
    pub family: FamilyId,
    /// Which arm ran.
    pub arm: Arm,
    /// Trial index in `0..trials_per_task`.
    pub trial: u32,
    /// Must equal [`TrialSeed::derive`] of the run seed, task and trial (both arms alike).
    pub seed: TrialSeed,
    /// Verifier reward in [0, 1].
    pub reward: f64,
    /// The trial failed for infrastructure reasons (sandbox crash, provider outage); its pair is
    /// left out of the comparison and counts against the contract's allowance.
    pub infra_invalid: bool,
    /// Integrity signals the trial raised (none when absent).
    #[serde(default)]
    pub integrity: IntegritySignals,
}

/// A task of the pack as the pack lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskRef {
    /// The task's id in the pack.
    pub id: TaskId,
    /// The family the task belongs to.
    pub family: FamilyId,
}

/// Identities the harness measured while running (to be compared with the contract's).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ObservedIdentity {
    /// The pack that ran; must be the contract's pack for its stage.
    pub pack_hash: PackHash,
    /// The baseline scaffold that ran.
    pub baseline_scaffold_hash: ScaffoldHash,
    /// The candidate scaffold that ran.
    pub candidate_scaffold_hash: ScaffoldHash,
    /// The grader configuration that graded.
    pub grader_config_hash: GraderHash,
}

/// Metered usage of the whole campaign, both arms together.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Usage {
    /// Wall-clock seconds the campaign took; finite and >= 0.
    pub wall_seconds: f64,
    /// Model calls made.
    pub model_calls: u64,
    /// Tokens used.
    pub tokens: u64,
    /// Cost in US dollars; finite and >= 0.
    pub cost_usd: f64,
}

/// Everything the crucible needs to decide one campaign.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Evidence {
    /// Always [`EVIDENCE_SCHEMA`].
    pub schema: String,
    /// The contract the harness ran under.
    pub contract_hash: ContractHash,
    /// The stage that ran; must be the contract's.
    pub stage: Stage,
    /// The identities the harness measured while running.
    pub observed: ObservedIdentity,
    /// The run seed trial seeds were derived from: the contract's, or
    /// [`crate::seed::replication_run_seed`] for replication `replication`.
    pub run_seed: u64,
    /// `None` for the original campaign, `Some(k)` for replication k (k >= 1).
    #[serde(default)]
    pub replication: Option<u32>,
    /// The pack's tasks (ids and families), in pack order.
    pub tasks: Vec<TaskRef>,
    /// One row per trial, both arms, in any order.
    pub trials: Vec<TrialOutcome>,
    /// Metered usage of the campaign, checked against the contract's budgets.
    pub usage: Usage,
    /// Required on the test stage: the burn-once opening of the sealed pack for this contract.
    #[serde(default)]
    pub attestation: Option<Attestation>,
}

/// The trial table as hashed: trials sorted by (task, trial, arm), so the order in which the
/// harness finished them does not change the hash.
#[derive(Serialize)]
struct TrialTable<'a> {
    schema: &'static str,
    trials: Vec<&'a TrialOutcome>,
}

/// Evidence hash: SHA-256 of the canonical JSON of `{"schema":"geode.trials.v1","trials":[...]}`
/// with trials sorted by (task, trial, arm). Fails on a non-finite reward.
pub fn evidence_hash(trials: &[TrialOutcome]) -> Result<EvidenceHash, CanonicalError> {
    let mut sorted: Vec<&TrialOutcome> = trials.iter().collect();
    sorted.sort_by(|a, b| (&a.task, a.trial, a.arm).cmp(&(&b.task, b.trial, b.arm)));
    let text = to_canonical_json(&TrialTable {
        schema: TRIAL_TABLE_SCHEMA,
        trials: sorted,
    })?;
    Ok(EvidenceHash::from_digest(
        Sha256::digest(text.as_bytes()).into(),
    ))
}
