//! The attestation of a sealed pack's one opening. The seal writes it and every evidence document
//! of the sealed stage carries it, so it stands below both rather than inside either.

use serde::{Deserialize, Serialize};

use crate::contract::EvaluatorIdentity;
use crate::ids::{Commitment, ContractHash, PackHash, ScaffoldHash};

/// Schema tag of an attestation.
pub const ATTESTATION_SCHEMA: &str = "geode.attestation.v1";

/// The record of the one opening of a sealed pack: who opened it, for which contract, when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Attestation {
    /// Always [`ATTESTATION_SCHEMA`].
    pub schema: String,
    /// The public commitment of the sealed pack that was opened.
    pub commitment: Commitment,
    /// Hash of the plaintext pack inside the seal.
    pub pack_hash: PackHash,
    /// The test-stage contract the pack was opened for.
    pub contract_hash: ContractHash,
    /// The contract's candidate scaffold: what the holdout was spent on.
    pub candidate_scaffold_hash: ScaffoldHash,
    /// The contract's evaluator.
    pub evaluator: EvaluatorIdentity,
    /// Caller-supplied timestamp (the crate has no clock).
    pub opened_at: String,
}
