//! Replication: compares the decision of a contract with the decision of a re-run of the same
//! contract on fresh trial seeds ([`crate::seed::replication_run_seed`]).
//!
//! A verdict replicates when both verdicts are equal. How far the estimate moved is reported in
//! reward units and in combined standard errors, |e2 - e1| / sqrt(se1^2 + se2^2): two honest
//! runs of one experiment differ by more than 2 of those about 5 % of the time, so a larger move
//! points at something that changed between the runs (flaky tasks, drifting infrastructure,
//! a provider update) rather than at noise.

use serde::{Deserialize, Serialize};

use crate::error::ReplicationError;
use crate::ids::{ContractHash, EvidenceHash};
use crate::record::DecisionRecord;
use crate::verdict::{ReasonCode, Verdict};

/// Schema tag of a replication report.
pub const REPLICATION_SCHEMA: &str = "geode.replication.v1";

/// What `geode crucible replicate` prints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplicationReport {
    /// Always [`REPLICATION_SCHEMA`].
    pub schema: String,
    /// The contract both decisions were made under.
    pub contract_hash: ContractHash,
    /// Evidence hash of the original decision (`None` if its trial table was malformed).
    pub original_evidence: Option<EvidenceHash>,
    /// Evidence hash of the replica decision (`None` if its trial table was malformed).
    pub replica_evidence: Option<EvidenceHash>,
    /// The original decision's verdict.
    pub original_verdict: Verdict,
    /// The replica decision's verdict.
    pub replica_verdict: Verdict,
    /// Whether the two verdicts are equal.
    pub verdict_replicated: bool,
    /// The original's estimate (mean task delta); `None` without statistics.
    pub original_estimate: Option<f64>,
    /// The replica's estimate (mean task delta); `None` without statistics.
    pub replica_estimate: Option<f64>,
    /// replica estimate - original estimate.
    pub estimate_moved: Option<f64>,
    /// |moved| / sqrt(se_original^2 + se_replica^2); `None` without both standard errors or
    /// when both are zero.
    pub moved_in_std_errors: Option<f64>,
    /// Whether the replica's estimate falls inside the original's two-sided t-interval.
    pub within_original_interval: Option<bool>,
    /// Reasons the replica has and the original had not.
    pub reasons_added: Vec<ReasonCode>,
    /// Reasons the original had and the replica has not.
    pub reasons_removed: Vec<ReasonCode>,
}

/// Compares an original decision with its replication.
pub fn compare_decisions(
    original: &DecisionRecord,
    replica: &DecisionRecord,
) -> Result<ReplicationReport, ReplicationError> {
    if original.contract_hash != replica.contract_hash {
        return Err(ReplicationError::ContractMismatch {
            original: original.contract_hash.to_string(),
            replica: replica.contract_hash.to_string(),
        });
    }
    if original.seeds.run_seed == replica.seeds.run_seed {
        return Err(ReplicationError::SameSeeds(replica.seeds.run_seed));
    }
    let s1 = original.statistics.as_ref();
    let s2 = replica.statistics.as_ref();
    let e1 = s1.and_then(|s| s.estimate);
    let e2 = s2.and_then(|s| s.estimate);
    let moved = e1.zip(e2).map(|(a, b)| b - a);
    let se = s1
        .and_then(|s| s.std_error)
        .zip(s2.and_then(|s| s.std_error))
        .map(|(a, b)| (a * a + b * b).sqrt());
    let moved_in_std_errors = match (moved, se) {
        (Some(m), Some(se)) if se > 0.0 => Some(m.abs() / se),
        _ => None,
    };
    let within_original_interval = s1
        .and_then(|s| s.t)
        .zip(e2)
        .map(|(t, e)| t.interval.contains(e));
    let reasons_added = replica
        .reasons
        .iter()
        .filter(|r| !original.reasons.contains(r))
        .copied()
        .collect();
    let reasons_removed = original
        .reasons
        .iter()
        .filter(|r| !replica.reasons.contains(r))
        .copied()
        .collect();
    Ok(ReplicationReport {
        schema: REPLICATION_SCHEMA.to_owned(),
        contract_hash: original.contract_hash.clone(),
        original_evidence: original.evidence_hash.clone(),
        replica_evidence: replica.evidence_hash.clone(),
        original_verdict: original.verdict,
        replica_verdict: replica.verdict,
        verdict_replicated: original.verdict == replica.verdict,
        original_estimate: e1,
        replica_estimate: e2,
        estimate_moved: moved,
        moved_in_std_errors,
        within_original_interval,
        reasons_added,
        reasons_removed,
    })
}
