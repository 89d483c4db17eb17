#![warn(missing_docs)]
//! GEODE crucible: frozen contracts, paired statistics, the promotion gate, vetoes, power
//! analysis, replication and sealed holdouts, as pure functions over in-memory data.
//!
//! The crate does no I/O, reads no clock and draws no unseeded randomness: the harness reads and
//! writes files, runs trials and parses the command line, and passes plain values in. That keeps
//! the part that decides testable to the last bit (golden vectors pin exact numbers).
//!
//! How the harness uses it, per command:
//! - `geode crucible freeze`: build a [`Contract`], [`Contract::freeze`], write
//!   [`FrozenContract::canonical_json`] and [`FrozenContract::hash`].
//! - `geode crucible run`: [`FrozenContract::verify_json`], then run each (task, trial) for both
//!   arms with [`TrialSeed::derive`] (interleaving the arms), collecting an [`Evidence`].
//! - `geode crucible decide`: [`decide()`] -> [`DecisionRecord`]; exit with
//!   [`DecisionRecord::exit_code`] (0 KEEP, 1 REJECT, 2 INVALID).
//! - `geode crucible power`: [`PowerSpec`] -> [`power()`] -> [`PowerReport`].
//! - `geode crucible replicate`: run again with [`replication_run_seed`], [`decide()`], then
//!   [`compare_decisions`].
//! - `geode dataset seal`: [`seal`] the pack's [`ArchiveEntry`]s with a [`SealKey`], publish the
//!   [`Commitment`], persist a [`SealState`]; opening goes through
//!   [`SealState::begin_opening`] and [`SealState::open`].

// Libraries do not print: they return values or emit events, and only the binaries decide
// what reaches stdout and stderr.
#![deny(clippy::print_stdout, clippy::print_stderr)]

pub mod archive;
pub mod arm;
pub mod attestation;
pub mod canonical;
pub mod contract;
pub mod decide;
#[cfg(test)]
mod enum_names;
pub mod error;
pub mod evidence;
pub mod explain;
pub mod feasibility;
pub mod gate;
pub mod ids;
pub mod pairing;
pub mod power;
pub mod record;
pub mod replicate;
pub mod sealed;
pub mod seed;
pub mod stats;
pub mod verdict;
pub mod veto;

pub use archive::{ArchiveEntry, decode_archive, encode_archive};
pub use arm::Arm;
pub use attestation::Attestation;
pub use canonical::{canonical_sha256, to_canonical_json};
pub use contract::{
    ArmSpec, Budgets, CONTRACT_SCHEMA, Clustering, Contract, DecisionRule, EvaluatorIdentity,
    FrozenContract, LowerBoundMethod, SafetyRule, Stage, StagePacks, Vetoes,
};
pub use decide::decide;
pub use error::{
    ArchiveError, CanonicalError, ContractError, PowerError, ReplicationError, SealError,
};
pub use evidence::{
    EVIDENCE_SCHEMA, Evidence, IntegritySignals, ObservedIdentity, TaskRef, TrialOutcome, Usage,
    evidence_hash,
};
pub use explain::explain;
pub use feasibility::{Design, Obstacle, obstacles};
pub use gate::{GateInput, Judgment, judge};
pub use ids::{
    Commitment, ContractHash, EvidenceHash, FamilyId, GraderHash, PackHash, ScaffoldHash, TaskId,
};
pub use pairing::{PairedTable, pair_trials};
pub use power::outlook::{Outlook, outlook};
pub use power::{PowerReport, PowerSpec, power};
pub use record::{Check, DECISION_SCHEMA, DecisionRecord, Explanation};
pub use replicate::{ReplicationReport, compare_decisions};
pub use sealed::{
    OpeningPermit, SealKey, SealState, SealedPack, commitment, seal, verify_commitment,
};
pub use seed::{TrialSeed, bootstrap_seed, permutation_seed, replication_run_seed};
pub use stats::{StatSeeds, Statistics};
pub use verdict::{Degeneracy, ReasonCode, Verdict};
