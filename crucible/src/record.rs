//! The decision record (`geode.decision.v1`): the verdict with everything needed to audit and
//! recompute it: contract and evidence hashes, reasons, every statistic, every seed.

use serde::{Deserialize, Serialize};

use crate::canonical::to_canonical_json;
use crate::contract::{DecisionRule, EvaluatorIdentity, Stage};
use crate::error::CanonicalError;
use crate::ids::{ContractHash, EvidenceHash};
use crate::stats::Statistics;
use crate::verdict::{ReasonCode, Verdict};
use crate::veto::{BudgetReport, CoverageReport, SafetyReport};

/// Schema tag of a decision record.
pub const DECISION_SCHEMA: &str = "geode.decision.v1";

/// Every seed that went into the decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DecisionSeeds {
    /// Run seed the trial seeds were derived from.
    pub run_seed: u64,
    /// Replication number, `None` for the original campaign.
    pub replication: Option<u32>,
    /// Cluster-bootstrap seed (derived from the contract hash).
    pub bootstrap: u64,
    /// Monte Carlo sign-flip seed (derived from the contract hash).
    pub permutation: u64,
}

/// Counts of the evidence, known even when the verdict is INVALID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    /// Tasks the evidence lists for the pack.
    pub tasks_in_pack: u32,
    /// Trials per task per arm, from the contract.
    pub trials_per_task: u32,
    /// Trial rows in the evidence, both arms.
    pub trials: u32,
    /// Trial rows flagged infrastructure-invalid, both arms.
    pub infra_invalid_trials: u32,
    /// Largest number of infra-invalid trials the contract allows for this pack.
    pub infra_allowance_trials: u32,
    /// (baseline, candidate) pairs compared, over all tasks.
    pub valid_pairs: u32,
    /// Pairs left out because an arm was infrastructure-invalid.
    pub dropped_pairs: u32,
}

/// The record `geode crucible decide` writes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DecisionRecord {
    /// Always [`DECISION_SCHEMA`].
    pub schema: String,
    /// Version of this crate: the code that applied the rule.
    pub crucible_version: String,
    /// The contract decided under.
    pub contract_hash: ContractHash,
    /// Hash of the trial table; `None` only if the table holds a non-finite number (then the
    /// verdict is INVALID with `malformed_evidence`).
    pub evidence_hash: Option<EvidenceHash>,
    /// The contract's stage.
    pub stage: Stage,
    /// The gate's answer.
    pub verdict: Verdict,
    /// Why the verdict is not KEEP; empty for KEEP.
    pub reasons: Vec<ReasonCode>,
    /// Human-readable specifics of INVALID reasons (first ones only).
    pub details: Vec<String>,
    /// The contract's evaluator.
    pub evaluator: EvaluatorIdentity,
    /// The contract's decision rule, as applied.
    pub rule: DecisionRule,
    /// Every seed the decision used.
    pub seeds: DecisionSeeds,
    /// Counts of the evidence.
    pub counts: Counts,
    /// `None` when INVALID: no comparison was made.
    pub statistics: Option<Statistics>,
    /// The safety veto's reading; `None` when INVALID.
    pub safety: Option<SafetyReport>,
    /// The budget veto's reading; `None` when INVALID.
    pub budget: Option<BudgetReport>,
    /// The coverage veto's reading; `None` when INVALID.
    pub coverage: Option<CoverageReport>,
    /// For a decision on a sealed pack: the hash of the openings-ledger entry of the opening it
    /// was made under (absent otherwise, so older records keep their form).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ledger_entry: Option<String>,
    /// For a decision on a sealed pack: where its opening left the machine's holdout ledger.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holdout: Option<HoldoutReceipt>,
    /// The decision in words (`explain`): the rule, each check, the power, the next step.
    /// Absent from records older than it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub explanation: Option<Explanation>,
}

/// Where a sealed pack's opening left the machine's holdout ledger: the content opened and
/// the hash of its ledger entry with the opening added. Two decisions that each claim the
/// first opening of one content are found side by side by their receipts, even once the
/// ledger itself is gone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HoldoutReceipt {
    /// The content key, or the sealed pack's hash when the ledger had no record of its
    /// sealing.
    pub content: String,
    /// The sealed file's pack hash (its content and trials per task).
    pub sealed_pack_hash: String,
    /// SHA-256 (hex) of the content's ledger entry with this opening added.
    pub head: String,
}

impl DecisionRecord {
    /// Pretty JSON for the run folder; refuses non-finite numbers instead of writing `null`.
    pub fn to_json(&self) -> Result<String, CanonicalError> {
        // Canonicalizing first runs the non-finite check with a field path.
        to_canonical_json(self)?;
        serde_json::to_string_pretty(self).map_err(|e| CanonicalError::Serialize(e.to_string()))
    }

    /// Parses a record written by [`Self::to_json`].
    pub fn from_json(text: &str) -> Result<DecisionRecord, serde_json::Error> {
        serde_json::from_str(text)
    }
}

/// One condition of the rule, as it came out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Check {
    /// What is checked (`lower bound`, `materiality`, `safety veto`, ...).
    pub name: String,
    /// Whether the condition held.
    pub passed: bool,
    /// What was observed, rounded for reading.
    pub observed: String,
    /// What the rule needs.
    pub needed: String,
}

/// The reading of a decision record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Explanation {
    /// The record's verdict.
    pub verdict: Verdict,
    /// The rule, its thresholds and the bound's method.
    pub rule: String,
    /// Empty for an INVALID decision: no comparison was made.
    pub checks: Vec<Check>,
    /// A REJECT of a positive observed gain smaller than the design's minimum detectable
    /// effect: the campaign could not have told that gain from noise.
    pub underpowered: bool,
    /// What to do next, given the verdict and the stage.
    pub next_step: String,
}
