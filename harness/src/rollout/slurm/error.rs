//! What can go wrong talking to Slurm or reading the run's shared files. Below the executor and
//! the run's own error, which wraps it.

#[derive(Debug, thiserror::Error)]
pub enum SlurmError {
    #[error("{command}: {message}")]
    Command { command: String, message: String },
    #[error("{command}: no answer")]
    Unanswered { command: String },
    #[error("{command}")]
    Spawn {
        command: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the Slurm controller did not answer for {secs}s (the run's stall deadline)")]
    Stalled {
        secs: u64,
        #[source]
        last: Box<SlurmError>,
    },
    #[error("{path}: {message}")]
    Files { path: String, message: String },
    #[error("array spec {path}: no task {index}")]
    NoSuchTask { path: String, index: usize },
}
