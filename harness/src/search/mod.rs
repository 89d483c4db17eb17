//! Scaffold search: which change to the agent's scaffold (not the model) makes it better, and
//! is the gain real?
//!
//! - [`space`]: the search space (`geode.search-space.v1`): knobs, domains, frozen parts.
//! - [`mutate`]: the mutation policies (random, grid, evolutionary) and fingerprint dedup.
//! - [`proposer`]: the model-proposed policy (a route returns one mutation and a hypothesis).
//! - [`lineage`]: the append-only lineage (`lineage.jsonl`) the loop resumes from.
//! - [`champion`]: the loop: each candidate against the champion on train, through the crucible.
//! - [`promote`]: the final champion against the baseline on the sealed holdout (burn-once).

use std::path::Path;

pub mod champion;
pub mod config;
pub mod contract;
pub mod lineage;
pub mod mutate;
pub mod promote;
pub mod proposer;
pub mod space;

use crate::crucible::CrucibleRunError;

#[derive(Debug, thiserror::Error)]
pub enum SearchError {
    #[error("{path}: {message}")]
    Io { path: String, message: String },
    #[error("{path}: {message}")]
    Format { path: String, message: String },
    /// A validation error naming the file and the field at fault.
    #[error("{path}: {field}: {message}")]
    Field {
        path: String,
        field: String,
        message: String,
    },
    #[error(transparent)]
    Crucible(#[from] CrucibleRunError),
    /// The campaign's contract or decision record could not be made (the crucible says why).
    #[error("contract: {0}")]
    Contract(#[source] geode_crucible::ContractError),
    #[error("decision record: {0}")]
    Record(#[source] geode_crucible::CanonicalError),
    #[error("pack: {0}")]
    Pack(#[source] crate::pack::PackError),
    /// A pack hash that is not 64 hex digits.
    #[error("pack hash: {0}")]
    PackHash(#[source] geode_crucible::ids::DigestParseError),
    #[error("proposer: {0}")]
    Proposer(String),
    #[error("{0}")]
    Refused(String),
}

impl SearchError {
    pub fn file(path: &Path, e: impl std::fmt::Display) -> SearchError {
        SearchError::Io {
            path: path.display().to_string(),
            message: e.to_string(),
        }
    }
}
