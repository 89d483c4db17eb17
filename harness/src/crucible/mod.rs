//! The harness's side of the crucible, in one place: `geode-crucible` holds the pure
//! statistics and formats, and this folder drives them with real trials and real files.
//!
//! - [`campaign`]: paired campaigns through the trial runner, metered, resumable, reportable.
//! - [`identity`]: what a contract pins about GEODE itself (grader, scaffold, pack, evaluator).
//! - [`sealing`]: sealing a holdout pack on disk (key, blob, burn-once state, commitment).
//! - [`preflight`]: what is checked before a campaign's first trial or a holdout's opening.
//! - [`open`]: the burn-once opening of a sealed pack for one test-stage campaign.
//! - [`holdouts`]: the machine's holdout ledger, burn-once by the pack's content.
//! - [`openings`]: the hash-chained openings ledger beside each commitment, and its audit.
//! - [`remote`]: a campaign's pairs on Slurm, one array task per pair.
//!
//! The command line over all this is `cli/crucible/`; `geode search` uses it for its train and
//! promotion campaigns.

use std::path::Path;

pub mod campaign;
pub mod holdouts;
pub mod identity;
pub mod open;
pub mod openings;
mod pairs;
pub mod preflight;
pub mod remote;
pub mod sealing;

pub use campaign::run_campaign;
pub use identity::{TESTS_GRADER, evaluator, scaffold_hash, tests_grader_hash};
pub use open::{OpenedPack, open_sealed};
pub use pairs::{Campaign, TRIALS_JOURNAL};

/// Why a crucible step on real files or trials failed.
#[derive(Debug, thiserror::Error)]
pub enum CrucibleRunError {
    /// A refusal or an inconsistency, already worded for the user.
    #[error("{0}")]
    Invalid(String),
    /// A file or folder that could not be read, written or parsed.
    #[error("{path}: {message}")]
    Files {
        /// The file or folder, as displayed.
        path: String,
        /// Why, from the error that stopped it.
        message: String,
    },
}

impl CrucibleRunError {
    /// A file or folder that could not be read, written or parsed, with why.
    pub fn files(path: &Path, why: impl std::fmt::Display) -> CrucibleRunError {
        CrucibleRunError::Files {
            path: path.display().to_string(),
            message: why.to_string(),
        }
    }
}

/// Holds an exclusive `flock` on `path` (created if missing) until dropped: the ledgers
/// (`holdouts`, `openings`) read, check and write under it.
pub(crate) fn exclusive_lock(
    path: &Path,
) -> Result<nix::fcntl::Flock<std::fs::File>, CrucibleRunError> {
    let files = |e: &dyn std::fmt::Display| CrucibleRunError::files(path, e);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(|e| files(&e))?;
    nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive).map_err(|(_, e)| files(&e))
}

/// Write `text` to `path` through a temporary file and a rename, so a crash leaves either the
/// old file or the new one.
pub fn write_atomic(path: &Path, text: &str) -> Result<(), CrucibleRunError> {
    let err = |e: std::io::Error| CrucibleRunError::files(path, e);
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).map_err(err)?;
    std::fs::File::open(&tmp)
        .and_then(|f| f.sync_all())
        .map_err(err)?;
    std::fs::rename(&tmp, path).map_err(err)
}
