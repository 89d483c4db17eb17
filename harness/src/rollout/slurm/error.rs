//! What can go wrong talking to Slurm or reading the run's shared files. Below the executor and
//! the run's own error, which wraps it.

/// Why a Slurm client call, or the run's shared files, failed.
#[derive(Debug, thiserror::Error)]
pub enum SlurmError {
    /// The client ran and failed.
    #[error("{command}: {message}")]
    Command {
        /// The command line that ran.
        command: String,
        /// Its standard error, or what was wrong with its output.
        message: String,
    },
    /// The client gave no answer within its call timeout.
    #[error("{command}: no answer")]
    Unanswered {
        /// The command line that ran.
        command: String,
    },
    /// The client could not be started (not found, not executable).
    #[error("{command}")]
    Spawn {
        /// The command line that was to run.
        command: String,
        /// Why it could not start.
        #[source]
        source: std::io::Error,
    },
    /// The controller kept stalling past the run's stall deadline.
    #[error("the Slurm controller did not answer for {secs}s (the run's stall deadline)")]
    Stalled {
        /// Seconds spent trying since the first call.
        secs: u64,
        /// The last stalled call's error.
        #[source]
        last: Box<SlurmError>,
    },
    /// A shared file or folder could not be read, written or parsed.
    #[error("{path}: {message}")]
    Files {
        /// The file or folder, as displayed.
        path: String,
        /// Why, from the error that stopped it.
        message: String,
    },
    /// A worker's array index beyond its array spec's groups.
    #[error("array spec {path}: no task {index}")]
    NoSuchTask {
        /// The array spec file.
        path: String,
        /// The array task index asked for.
        index: usize,
    },
}
