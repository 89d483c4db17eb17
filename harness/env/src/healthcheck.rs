//! A service's readiness check, as task.toml's `[environment.healthcheck]` and a compose
//! file's `healthcheck:` both state it: the pack reads it, the environment runs it.

use serde::{Deserialize, Serialize};

/// `[environment.healthcheck]`, with Docker's HEALTHCHECK meaning and Harbor's defaults: after
/// the environment starts, `command` runs until it exits 0; failures during `start_period_sec`
/// do not count, and `retries` consecutive failures after it fail the trial's setup.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct Healthcheck {
    pub command: String,
    #[serde(default = "five")]
    pub interval_sec: f64,
    #[serde(default = "thirty")]
    pub timeout_sec: f64,
    #[serde(default)]
    pub start_period_sec: f64,
    #[serde(default = "five")]
    pub start_interval_sec: f64,
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
