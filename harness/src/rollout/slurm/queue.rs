//! Slurm through its command-line clients: `sbatch` submits a job array, `squeue` (with all
//! states, which slurmctld keeps for `MinJobAge` after the end) says where each array task is,
//! `scancel` cancels. The CLI rather than `slurmrestd`: every cluster that runs batch jobs has
//! the clients and a munge key on the login node, while slurmrestd is an optional daemon that
//! needs its own authentication set-up; the clients' output formats (`--parsable`, `-o`) are
//! stable across releases.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

use super::SlurmError;
use super::settings::SlurmSettings;

/// A Slurm job state as `squeue -o %T` prints it. Every state is classified as live or ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::EnumString, strum::IntoStaticStr)]
#[strum(serialize_all = "SCREAMING_SNAKE_CASE")]
pub enum JobState {
    Pending,
    Configuring,
    Running,
    Completing,
    Suspended,
    Requeued,
    Resizing,
    Completed,
    Failed,
    Cancelled,
    Timeout,
    NodeFail,
    OutOfMemory,
    Preempted,
    BootFail,
    Deadline,
}

impl JobState {
    /// The array task may still write a result.
    pub fn is_live(self) -> bool {
        match self {
            JobState::Pending
            | JobState::Configuring
            | JobState::Running
            | JobState::Completing
            | JobState::Suspended
            | JobState::Requeued
            | JobState::Resizing => true,
            JobState::Completed
            | JobState::Failed
            | JobState::Cancelled
            | JobState::Timeout
            | JobState::NodeFail
            | JobState::OutOfMemory
            | JobState::Preempted
            | JobState::BootFail
            | JobState::Deadline => false,
        }
    }
}

/// One array submission: its script, how many tasks, how many at once, the resources of each.
pub struct Submission<'a> {
    pub script: &'a Path,
    pub tasks: usize,
    pub at_once: usize,
    pub cpus: u32,
    pub memory_mb: u64,
    pub log_dir: &'a Path,
}

fn run(cmd: &mut Command) -> Result<String, SlurmError> {
    let what = format!("{cmd:?}");
    let out = cmd.output().map_err(|e| SlurmError::Command {
        command: what.clone(),
        message: e.to_string(),
    })?;
    if !out.status.success() {
        return Err(SlurmError::Command {
            command: what,
            message: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `sbatch --array`; returns the array's job id. `--no-requeue`: a task lost with its node
/// comes back to the coordinator, which owns retries, instead of running again unseen.
pub fn submit(settings: &SlurmSettings, s: &Submission<'_>) -> Result<u64, SlurmError> {
    let mut cmd = Command::new("sbatch");
    cmd.arg("--parsable")
        .arg("--no-requeue")
        .arg(format!("--array=0-{}%{}", s.tasks - 1, s.at_once.max(1)))
        .arg(format!("--cpus-per-task={}", s.cpus.max(1)))
        .arg(format!("--mem={}M", s.memory_mb))
        .arg("--job-name=geode-trials")
        .arg(format!("--output={}/%A_%a.log", s.log_dir.display()));
    if let Some(p) = &settings.partition {
        cmd.arg(format!("--partition={p}"));
    }
    if let Some(a) = &settings.account {
        cmd.arg(format!("--account={a}"));
    }
    if let Some(t) = &settings.time_limit {
        cmd.arg(format!("--time={t}"));
    }
    let out = run(cmd.arg(s.script))?;
    // `--parsable` prints `JOBID` or `JOBID;CLUSTER`.
    let id = out.trim().split(';').next().unwrap_or_default();
    id.parse().map_err(|_| SlurmError::Command {
        command: "sbatch --parsable".into(),
        message: format!("unexpected output {out:?}"),
    })
}

/// The state of every array task of `job` slurmctld still knows, by array index; empty when
/// the job is unknown (purged after `MinJobAge`, or never accepted).
pub fn array_states(job: u64) -> Result<HashMap<usize, JobState>, SlurmError> {
    let mut cmd = Command::new("squeue");
    cmd.args(["-h", "-r", "-t", "all", "-o", "%K|%T", "-j"])
        .arg(job.to_string());
    let out = match run(&mut cmd) {
        Ok(out) => out,
        Err(SlurmError::Command { message, .. }) if message.contains("Invalid job id") => {
            return Ok(HashMap::new());
        }
        Err(e) => return Err(e),
    };
    let mut states = HashMap::new();
    for line in out.lines() {
        let Some((index, state)) = line.trim().split_once('|') else {
            continue;
        };
        // A state with a reason suffix (`CANCELLED by 0`) keeps its first word.
        let state = state.split_whitespace().next().unwrap_or_default();
        if let (Ok(i), Ok(s)) = (index.parse(), state.parse()) {
            states.insert(i, s);
        }
    }
    Ok(states)
}

/// `scancel` of whole arrays.
pub fn cancel(jobs: &[u64]) -> Result<(), SlurmError> {
    if jobs.is_empty() {
        return Ok(());
    }
    run(Command::new("scancel").args(jobs.iter().map(u64::to_string)))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn squeue_states_parse_and_are_classified() {
        for (text, live) in [
            ("PENDING", true),
            ("RUNNING", true),
            ("COMPLETING", true),
            ("COMPLETED", false),
            ("NODE_FAIL", false),
            ("TIMEOUT", false),
            ("OUT_OF_MEMORY", false),
        ] {
            let state: JobState = text.parse().unwrap();
            assert_eq!(<&str>::from(state), text);
            assert_eq!(state.is_live(), live, "{text}");
        }
        assert!("SLEEPING".parse::<JobState>().is_err());
    }
}
