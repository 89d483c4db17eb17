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

#[derive(Debug, thiserror::Error)]
pub enum CurateError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Config { path: String, message: String },
    #[error(transparent)]
    Dataset(#[from] DatasetError),
    #[error(transparent)]
    Pack(#[from] PackError),
    #[error("generator: {0}")]
    Generator(String),
    #[error("{route}: {message}")]
    Model { route: String, message: String },
    #[error("pilot: {0}")]
    Pilot(String),
    #[error(
        "{path}: the frozen pool exists and was built from other inputs; pools are never overwritten"
    )]
    Frozen { path: String },
}
