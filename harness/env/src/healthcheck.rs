//! A service's readiness check, as task.toml's `[environment.healthcheck]` and a compose
//! file's `healthcheck:` both state it: the pack reads it, the environment runs it.

use serde::{Deserialize, Serialize};

/// `[environment.healthcheck]`, with Docker's HEALTHCHECK meaning and Harbor's defaults: after
/// the environment starts, `command` runs until it exits 0; failures during `start_period_sec`
/// do not count, and `retries` consecutive failures after it fail the trial's setup.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct Healthcheck {
    /// The check, a shell command run inside the environment; exit 0 means ready.
    pub command: String,
    /// Seconds between checks after the start period (default 5).
    #[serde(default = "five")]
    pub interval_sec: f64,
    /// Seconds one check may run before it counts as failed (default 30).
    #[serde(default = "thirty")]
    pub timeout_sec: f64,
    /// Seconds after start during which failures do not count (default 0).
    #[serde(default)]
    pub start_period_sec: f64,
    /// Seconds between checks during the start period (default 5).
    #[serde(default = "five")]
    pub start_interval_sec: f64,
    /// Consecutive failures after the start period that fail the setup (default 3).
    #[serde(default = "three")]
    pub retries: u32,
}

fn five() -> f64 {
    5.0
}

fn thirty() -> f64 {
    30.0
}

fn three() -> u32 {
    3
}
