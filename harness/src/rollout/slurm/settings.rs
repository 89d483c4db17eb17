//! What a run needs to know to place its trials on a Slurm cluster. Kept in the run's
//! `config.json` (absent for local runs, so their files and lock hashes stay as they were) and
//! outside the lock: a resume reuses them as recorded, or moves the run to another partition or
//! account when given new ones.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How long a scheduler that does not answer (slurmctld in a failover, a long state save, an
/// overloaded controller) is waited out before the run gives up, by default.
pub const DEFAULT_STALL_SECS: u64 = 600;

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
    /// Slurm kills for it ends as an agent timeout with the exception class `SlurmTimeLimit`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_limit: Option<String>,
    /// Any other sbatch options, passed as given (`--qos=high`, `--constraint=avx2`,
    /// `--gres=gpu:1`), before the ones the executor sets itself.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sbatch_args: Vec<String>,
    /// Seconds a scheduler that does not answer is waited out (with backoff) before the run
    /// ends; [`DEFAULT_STALL_SECS`] when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stall_secs: Option<u64>,
    /// The `geode` binary the nodes run as the worker: an absolute path on the shared
    /// filesystem (by default the coordinator's own binary).
    pub worker_bin: PathBuf,
}

impl SlurmSettings {
    /// How long a stalled scheduler is waited out.
    pub fn stall_deadline(&self) -> Duration {
        Duration::from_secs(self.stall_secs.unwrap_or(DEFAULT_STALL_SECS))
    }
}

/// sbatch options the executor sets itself: given again, they would break the array the
/// coordinator and its workers agree on (its indices, its log files, its one script).
pub const RESERVED_SBATCH_OPTIONS: [&str; 8] = [
    "--array",
    "-a",
    "--parsable",
    "--output",
    "-o",
    "--wrap",
    "--requeue",
    "--job-name",
];

/// The first of `args` that names a reserved option, if any.
pub fn reserved_option(args: &[String]) -> Option<&str> {
    args.iter().map(String::as_str).find(|a| {
        RESERVED_SBATCH_OPTIONS.iter().any(|r| {
            *a == *r
                || a.starts_with(&format!("{r}="))
                // A short option takes its value attached (`-a0-3`).
                || (r.len() == 2 && a.starts_with(r))
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_options_the_executor_owns_are_refused_and_others_are_not() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            reserved_option(&args(&["--qos=high", "--array=0-3"])),
            Some("--array=0-3")
        );
        assert_eq!(reserved_option(&args(&["-o/tmp/x"])), Some("-o/tmp/x"));
        assert_eq!(
            reserved_option(&args(&["--job-name", "x"])),
            Some("--job-name")
        );
        assert_eq!(
            reserved_option(&args(&["--qos=high", "--gres=gpu:1", "--output-format"])),
            None
        );
    }
}
