//! A command of the task in its sandbox (a healthcheck, a collect hook, a step's setup): its
//! request, its time scaled by the run's timeout multiplier, and the healthcheck that repeats
//! one until it passes. The trial's phases and the task's services both run them.

use std::time::{Duration, Instant};

use geode_runtime::tools::workspace::ExecRequest;
use tokio_util::sync::CancellationToken;

use crate::env::Sandbox;
use crate::pack::Healthcheck;

/// A time limit of the task, times the run's multiplier (never below 1%).
pub(crate) fn scaled(d: Duration, multiplier: f64) -> Duration {
    d.mul_f64(multiplier.max(0.01))
}

/// A command a task.toml names (a healthcheck, a collect hook, a step's setup), run in the
/// work directory; a little of its output is kept, for the message when it fails.
pub(crate) fn task_command(command: impl Into<String>, timeout: Duration) -> ExecRequest {
    ExecRequest {
        command: command.into(),
        cwd: None,
        timeout,
        output_cap: 4096,
        env: Vec::new(),
    }
}

/// Runs the task's healthcheck until it passes, as Docker's HEALTHCHECK counts: failures in
/// the start period do not count; `retries` failures in a row after it are the error.
pub(crate) async fn wait_healthy(
    sandbox: &dyn Sandbox,
    check: &Healthcheck,
    timeout_multiplier: f64,
    cancel: &CancellationToken,
) -> Result<(), String> {
    let began = Instant::now();
    let start_period = Duration::from_secs_f64(check.start_period_sec.max(0.0));
    let mut failures = 0u32;
    loop {
        let starting = began.elapsed() < start_period;
        let req = task_command(
            check.command.clone(),
            scaled(
                Duration::from_secs_f64(check.timeout_sec),
                timeout_multiplier,
            ),
        );
        let last = match sandbox.exec(req, cancel.clone()).await {
            Ok(out) if out.exit_code == Some(0) => return Ok(()),
            Ok(out) if out.timed_out => format!("timed out after {}s", check.timeout_sec),
            Ok(out) => format!(
                "exit {}: {}",
                out.exit_code.map_or("by signal".into(), |c| c.to_string()),
                out.stderr.trim().chars().take(300).collect::<String>()
            ),
            Err(e) => e.to_string(),
        };
        if cancel.is_cancelled() {
            return Err("cancelled during the healthcheck".into());
        }
        if !starting {
            failures += 1;
            if failures >= check.retries.max(1) {
                return Err(format!(
                    "environment.healthcheck {:?} failed {failures} time(s) in a row (last: {last})",
                    check.command
                ));
            }
        }
        let pause = if starting {
            check.start_interval_sec
        } else {
            check.interval_sec
        };
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs_f64(pause)) => {}
            _ = cancel.cancelled() => {}
        }
    }
}
