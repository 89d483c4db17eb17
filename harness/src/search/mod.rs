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

/// Why a search could not be configured, run, resumed or promoted.
#[derive(Debug, thiserror::Error)]
pub enum SearchError {
    /// A file or folder that could not be read or written.
    #[error("{path}: {message}")]
    Io {
        /// The file or folder, as displayed.
        path: String,
        /// Why, from the error that stopped it.
        message: String,
    },
    /// A file that did not parse as what it should hold.
    #[error("{path}: {message}")]
    Format {
        /// The file, as displayed.
        path: String,
        /// Why it did not parse.
        message: String,
    },
    /// A validation error naming the file and the field at fault.
    #[error("{path}: {field}: {message}")]
    Field {
        /// The file, as displayed.
        path: String,
        /// The field at fault (`trials`, `knob[2].int`, `line 3: schema`).
        field: String,
        /// What is wrong with it.
        message: String,
    },
    /// A campaign or a sealed pack failed in the crucible.
    #[error(transparent)]
    Crucible(#[from] CrucibleRunError),
    /// A contract could not be frozen (the crucible says why).
    #[error("contract: {0}")]
    Contract(#[source] geode_crucible::ContractError),
    /// The decision record could not be written as canonical JSON.
    #[error("decision record: {0}")]
    Record(#[source] geode_crucible::CanonicalError),
    /// A pack could not be loaded.
    #[error("pack: {0}")]
    Pack(#[source] crate::pack::PackError),
    /// The proposer's route could not be used.
    #[error("proposer: {0}")]
    Proposer(String),
    /// A step refused, with why (no test pack configured, nothing to compare, ...).
    #[error("{0}")]
    Refused(String),
}

impl SearchError {
    /// A file that could not be read or written: `Io` naming the path.
    pub fn file(path: &Path, e: impl std::fmt::Display) -> SearchError {
        SearchError::Io {
            path: path.display().to_string(),
            message: e.to_string(),
        }
    }
}
