//! What a run needs to know to place its trials on a Slurm cluster. Kept in the run's
//! `config.json` (absent for local runs, so their files and lock hashes stay as they were) and
//! outside the lock: a resume may move a run to another partition or account.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// `--executor slurm` and its options. The per-trial resources (`cpus`, `memory_mb`) come from
/// each task's `task.toml`, not from here.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SlurmSettings {
    /// `sbatch --partition`; the cluster's default partition when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<String>,
    /// `sbatch --account`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
    /// `sbatch --time` (Slurm's own syntax, `MM`, `HH:MM:SS`, `D-HH`); a trial whose array task
    /// Slurm kills for it is recorded with the exception class `SlurmTimeLimit`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_limit: Option<String>,
    /// The `geode` binary the nodes run as the worker: an absolute path on the shared
    /// filesystem (by default the coordinator's own binary).
    pub worker_bin: PathBuf,
}
