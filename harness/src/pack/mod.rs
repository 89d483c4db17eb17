//! Task packs in Harbor format, loaded exactly as users write them, and their content hashes.
//!
//! A task is a folder with `task.toml`, `instruction.md`, `environment/`, `tests/test.sh` and
//! optionally `solution/solve.sh`. Any `task.toml` loads whatever its format version says (as in
//! Harbor): unknown keys are ignored (`geode tasks check` lists them), known keys with a wrong
//! type are an error naming the file and the field. A broken task is
//! reported next to the pack; it never stops the others from loading.
//!
//! Identity: the task hash is SHA-256 over every file of the folder (relative path, mode and
//! bytes, each length-prefixed, in path order), so renaming a folder or a pack changes
//! nothing; the pack hash covers the ordered task hashes plus the trials per task.

use std::path::Path;

mod config;
mod hash;
mod load;
pub mod preflight;
mod validate;

pub use config::{
    AgentSection, ArtifactEntry, CollectHook, DisplaySize, EnvironmentSection, Healthcheck,
    MinReward, SolutionSection, StepRewards, StepSection, TaskConfig, TaskSection, VerifierMode,
    VerifierSection,
};
pub use hash::{PackHash, TaskHash, hash_task_dir, pack_hash};
pub use load::{Step, Task, TaskPack, glob_match};

/// Why a task pack, or one task of it, cannot be loaded; each names the file or folder.
#[derive(Debug, thiserror::Error)]
pub enum PackError {
    /// A file is malformed or a required one is missing.
    #[error("{path}: {message}")]
    Invalid {
        /// The file or folder at fault.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// A file or folder cannot be read.
    #[error("{path}: {source}")]
    Io {
        /// The file or folder concerned.
        path: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

fn invalid(path: &Path, message: impl Into<String>) -> PackError {
    PackError::Invalid {
        path: path.display().to_string(),
        message: message.into(),
    }
}

fn io_err(path: &Path, source: std::io::Error) -> PackError {
    PackError::Io {
        path: path.display().to_string(),
        source,
    }
}
