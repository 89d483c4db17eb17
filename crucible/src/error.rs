//! Error types of the crucible, one enum per concern, with messages that name the field or the
//! piece of input at fault so the harness can print them as they are.
//!
//! Verdicts are not errors: a comparison that cannot be made is `Verdict::Invalid` with reason
//! codes. Errors are reserved for inputs the crucible refuses to look at (a contract that fails
//! validation, a sealed blob that does not authenticate, a malformed archive).

use thiserror::Error;

/// Canonical JSON could not be produced.
#[derive(Debug, Error)]
pub enum CanonicalError {
    /// JSON has no NaN or infinity; a hashed document holding one would not round-trip, so the
    /// hash would name a document nobody can reproduce.
    #[error("non-finite number {value} at `{path}`: canonical JSON has no NaN or infinity")]
    NonFinite {
        /// Where the number sits, as `field.sub[3]` (`<root>` for the value itself).
        path: String,
        /// The NaN or infinity found.
        value: f64,
    },
    /// The value could not be serialized at all (e.g. a map with non-string keys).
    #[error("cannot serialize to JSON: {0}")]
    Serialize(String),
}

/// A contract was refused: invalid field, bad JSON, or a hash that does not match.
#[derive(Debug, Error)]
pub enum ContractError {
    /// A field holds a value outside its documented range.
    #[error("contract field `{field}`: {message}")]
    Field {
        /// Dotted path of the field, as `decision_rule.confidence`.
        field: &'static str,
        /// What the field must be, and what it holds.
        message: String,
    },
    /// The text is not a contract (wrong shape, wrong types, unknown fields, bad digests).
    #[error("contract JSON does not parse: {0}")]
    Parse(#[source] serde_json::Error),
    /// The contract could not be canonicalized (cannot happen for a validated contract).
    #[error(transparent)]
    Canonical(#[from] CanonicalError),
    /// The stored hash names a different contract: the file was edited after the freeze.
    #[error("contract hash mismatch: expected {expected}, the contract hashes to {actual}")]
    HashMismatch {
        /// The hash recorded at freeze time.
        expected: String,
        /// The hash of the contract as it is now.
        actual: String,
    },
}

impl ContractError {
    pub(crate) fn field(field: &'static str, message: impl Into<String>) -> Self {
        ContractError::Field {
            field,
            message: message.into(),
        }
    }
}

/// A malformed or unsafe pack archive.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum ArchiveError {
    /// The bytes do not start with the archive magic (not an archive, or another version).
    #[error("not a geode pack archive (bad magic)")]
    BadMagic,
    /// The bytes end in the middle of an entry.
    #[error("archive truncated while reading {what}")]
    Truncated {
        /// The part being read (`path`, `data`, a length field ...).
        what: &'static str,
    },
    /// Bytes remain after the last entry: the length fields were tampered with.
    #[error("archive has {0} trailing bytes after its last entry")]
    TrailingBytes(usize),
    /// A path that could escape the extraction folder or is not portable.
    #[error("unsafe archive path {path:?}: {why}")]
    UnsafePath {
        /// The refused path.
        path: String,
        /// What makes it unsafe (`absolute`, `empty component` ...).
        why: &'static str,
    },
    /// Paths must be unique and sorted so that one pack has exactly one encoding.
    #[error("archive paths not strictly sorted at {path:?} (duplicate or out of order)")]
    Unsorted {
        /// The first path not greater than the one before it.
        path: String,
    },
    /// A path is not UTF-8.
    #[error("archive path is not UTF-8")]
    PathNotUtf8,
}

/// Sealing, opening or burn-once bookkeeping failed.
#[derive(Debug, Error)]
pub enum SealError {
    /// The blob does not hash to the published commitment: the blob or the commitment changed.
    #[error("commitment mismatch: published {expected}, blob hashes to {actual}")]
    CommitmentMismatch {
        /// The published commitment.
        expected: String,
        /// The commitment the blob hashes to.
        actual: String,
    },
    /// Wrong key, or the ciphertext (or its header) was modified.
    #[error("sealed pack failed authentication (wrong key or tampered ciphertext)")]
    AuthenticationFailed,
    /// The blob is not a sealed pack of this version.
    #[error("malformed sealed blob: {0}")]
    Malformed(&'static str),
    /// Encryption failed (cannot happen with a valid key and a plaintext under 256 GiB).
    #[error("encryption failed")]
    EncryptionFailed,
    /// The decrypted bytes are not a valid archive.
    #[error(transparent)]
    Archive(#[from] ArchiveError),
    /// Burn-once: this pack was opened before; the first result stands.
    #[error(
        "sealed pack {commitment} was already opened at {opened_at} for contract {contract_hash}; \
         the first result stands"
    )]
    AlreadyOpened {
        /// The sealed pack's commitment.
        commitment: String,
        /// When the first opening happened, as its attestation records it.
        opened_at: String,
        /// The contract the first opening was for.
        contract_hash: String,
    },
    /// The attestation or decision does not belong to this sealed pack.
    #[error("{0}")]
    Mismatch(String),
    /// A decision was already recorded for this opening.
    #[error("a decision is already recorded for sealed pack {0}; the first result stands")]
    DecisionAlreadyRecorded(String),
    /// A key that is not 32 bytes of hex.
    #[error("seal key must be 64 hex characters (32 bytes)")]
    BadKey,
}

/// Two decision records that cannot be compared as original and replication.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum ReplicationError {
    /// A replication re-runs the same frozen contract; other contracts are other experiments.
    #[error("replication must use the same contract: original {original}, replica {replica}")]
    ContractMismatch {
        /// The original decision's contract hash.
        original: String,
        /// The replica decision's contract hash.
        replica: String,
    },
    /// Same run seed and same evidence: a re-decision, not a replication.
    #[error("replica used the same trial seeds as the original (run seed {0}); not a replication")]
    SameSeeds(u64),
}

/// A power analysis that cannot be run as specified.
#[derive(Debug, Error, PartialEq)]
pub enum PowerError {
    /// A parameter is outside its range; the message names it.
    #[error("power parameter `{field}`: {message}")]
    Field {
        /// The parameter's name in [`crate::PowerSpec`] (`rule` for the decision rule).
        field: &'static str,
        /// What the parameter must be, and what it holds.
        message: String,
    },
}
