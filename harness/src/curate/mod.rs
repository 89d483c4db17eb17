//! Data curation: task synthesis, deduplication, pilot runs, a judge tournament, meta-review,
//! survivor selection and a frozen pool (`geode curate CONFIG`).
//!
//! Each phase writes a checkpoint under `OUT/state/`; a phase whose inputs (its config section,
//! the seed and the previous phase's output hash) are unchanged is not run again, so an
//! interrupted curation resumes where it stopped.

mod phases;
pub mod pilot;
pub mod pipeline;
pub mod review;
pub mod synth;
pub mod tournament;

use crate::datasets::DatasetError;
use crate::pack::PackError;

/// What stopped a curation, named by the file, route or phase at fault.
#[derive(Debug, thiserror::Error)]
pub enum CurateError {
    /// A file or folder could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file or folder at fault.
        path: String,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// The config file does not parse or breaks a rule.
    #[error("{path}: {message}")]
    Config {
        /// The config file.
        path: String,
        /// What is wrong with it.
        message: String,
    },
    /// A dataset helper (`crate::datasets`) failed.
    #[error(transparent)]
    Dataset(#[from] DatasetError),
    /// A task pack could not be loaded.
    #[error(transparent)]
    Pack(#[from] PackError),
    /// A generator reply that is not a usable task (also: a value that would not serialize).
    #[error("generator: {0}")]
    Generator(String),
    /// A generator or judge route could not be built or did not answer.
    #[error("{route}: {message}")]
    Model {
        /// The route at fault.
        route: String,
        /// What went wrong.
        message: String,
    },
    /// The pilot phase could not run a task.
    #[error("pilot: {0}")]
    Pilot(String),
    /// The frozen pool's folder already exists; pools are never overwritten.
    #[error(
        "{path}: the frozen pool exists and was built from other inputs; pools are never overwritten"
    )]
    Frozen {
        /// The existing pool folder.
        path: String,
    },
}
