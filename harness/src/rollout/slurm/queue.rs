//! Slurm through its command-line clients: `sbatch` submits a job array, `squeue` (with all
//! states, which slurmctld keeps for `MinJobAge` after the end) says where each array task is,
//! `scancel` cancels, `scontrol` reads the site's limits and moves an array's throttle. The CLI
//! rather than `slurmrestd`: every cluster that runs batch jobs has the clients and a munge key
//! on the login node, while slurmrestd is an optional daemon that needs its own authentication
//! set-up; the clients' output formats (`--parsable`, `-o`) are stable across releases.
//!
//! A controller that does not answer for a while (a failover, a long state save, an overloaded
//! slurmctld) is a normal event on a shared cluster, not the end of a run: every call here is
//! bounded in time and tried again with backoff while its failure looks like a stall, up to the
//! run's stall deadline ([`SlurmSettings::stall_deadline`]).

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use super::SlurmError;
use super::settings::SlurmSettings;

/// A Slurm job state as `squeue -o %T` prints it. Every state is classified as live or ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::EnumString, strum::IntoStaticStr)]
#[strum(serialize_all = "SCREAMING_SNAKE_CASE")]
pub enum JobState {
    /// Waiting for resources or its turn.
    Pending,
    /// Allocated; its nodes are being readied.
    Configuring,
    /// Running on its node.
    Running,
    /// Ending; some of its processes may still run.
    Completing,
    /// Suspended; it may resume.
    Suspended,
    /// Put back in the queue to run again.
    Requeued,
    /// Changing size.
    Resizing,
    /// Ended with exit code 0.
    Completed,
    /// Ended with a non-zero exit code or another failure.
    Failed,
    /// Cancelled (`scancel`, by the run or anyone else).
    Cancelled,
    /// Killed at its time limit.
    Timeout,
    /// Ended by the failure of one of its nodes.
    NodeFail,
    /// Killed for running out of memory.
    OutOfMemory,
    /// Ended by preemption.
    Preempted,
    /// Ended because a node failed to boot.
    BootFail,
    /// Ended at its deadline.
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

/// One array submission: its script, its name, how many tasks, how many at once, the
/// resources of each.
pub struct Submission<'a> {
    /// The batch script each array task runs.
    pub script: &'a Path,
    /// Unique to the run and the array: how a submission whose answer was lost in a stall is
    /// found again, instead of submitted twice.
    pub name: &'a str,
    /// Array tasks to submit (indices `0..tasks`).
    pub tasks: usize,
    pub(crate) at_once: usize,
    /// CPUs per array task (at least 1).
    pub cpus: u32,
    /// Memory per array task, in MiB (`--mem=<n>M`).
    pub memory_mb: u64,
    pub(crate) log_dir: &'a Path,
}

/// How long one client call may take: slurmctld not answering makes a client wait out its
/// `MessageTimeout` (10 s by default), sometimes more than once, before it fails.
const CALL_TIMEOUT: Duration = Duration::from_secs(90);

/// The first pause after a stalled call; doubled after each, up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_secs(2);
const MAX_PAUSE: Duration = Duration::from_secs(30);

/// One call of a Slurm client; its stdout.
async fn run(program: &str, args: &[String]) -> Result<String, SlurmError> {
    let command = format!("{program} {}", args.join(" "));
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args).kill_on_drop(true);
    let out = match tokio::time::timeout(CALL_TIMEOUT, cmd.output()).await {
        Err(_) => return Err(SlurmError::Unanswered { command }),
        Ok(Err(source)) => return Err(SlurmError::Spawn { command, source }),
        Ok(Ok(out)) => out,
    };
    if !out.status.success() {
        return Err(SlurmError::Command {
            command,
            message: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Whether a failed call looks like the controller not answering (worth another try) rather
/// than a refusal (a bad partition, an unknown option) that no wait will change.
pub fn is_stall(e: &SlurmError) -> bool {
    const STALL: [&str; 12] = [
        "timed out",
        "timeout",
        "unable to contact",
        "connection refused",
        "connect failure",
        "communication connection failure",
        "temporarily unavailable",
        "try again",
        "not responding",
        "zero bytes were transmitted",
        "transport endpoint",
        "in standby mode",
    ];
    match e {
        SlurmError::Unanswered { .. } => true,
        SlurmError::Command { message, .. } => {
            let message = message.to_lowercase();
            STALL.iter().any(|s| message.contains(s))
        }
        _ => false,
    }
}

/// `call` until it answers, waiting out stalls with backoff until `deadline` has passed since
/// the first try.
async fn patiently<T, F, Fut>(deadline: Duration, mut call: F) -> Result<T, SlurmError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, SlurmError>>,
{
    let started = Instant::now();
    let mut pause = FIRST_PAUSE;
    loop {
        match call().await {
            Ok(v) => return Ok(v),
            Err(e) if is_stall(&e) => {
                if started.elapsed() + pause > deadline {
                    return Err(SlurmError::Stalled {
                        secs: started.elapsed().as_secs(),
                        last: Box::new(e),
                    });
                }
                tracing::warn!("{e}; the scheduler looks stalled, trying again in {pause:?}");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(MAX_PAUSE);
            }
            Err(e) => return Err(e),
        }
    }
}

/// `sbatch --array`; returns the array's job id. `--no-requeue`: a task lost with its node
/// comes back to the coordinator, which owns retries, instead of running again unseen. The
/// site's own options go first, so the array's shape (set after them) is the executor's.
pub async fn submit(settings: &SlurmSettings, s: &Submission<'_>) -> Result<u64, SlurmError> {
    let mut args: Vec<String> = vec!["--parsable".into(), "--no-requeue".into()];
    if let Some(p) = &settings.partition {
        args.push(format!("--partition={p}"));
    }
    if let Some(a) = &settings.account {
        args.push(format!("--account={a}"));
    }
    if let Some(t) = &settings.time_limit {
        args.push(format!("--time={t}"));
    }
    args.extend(settings.sbatch_args.iter().cloned());
    args.extend([
        format!("--array=0-{}%{}", s.tasks - 1, s.at_once.max(1)),
        format!("--cpus-per-task={}", s.cpus.max(1)),
        format!("--mem={}M", s.memory_mb),
        format!("--job-name={}", s.name),
        format!("--output={}/%A_%a.log", s.log_dir.display()),
        s.script.display().to_string(),
    ]);
    let mut stalled = false;
    patiently(settings.stall_deadline(), || {
        let args = &args;
        let was_stalled = stalled;
        stalled = true;
        async move {
            // An sbatch that timed out may have been accepted all the same: look for the
            // array by its name before submitting it again.
            if was_stalled && let Some(job) = job_named(s.name).await? {
                return Ok(job);
            }
            let out = run("sbatch", args).await?;
            // `--parsable` prints `JOBID` or `JOBID;CLUSTER`.
            let id = out.trim().split(';').next().unwrap_or_default();
            id.parse().map_err(|_| SlurmError::Command {
                command: "sbatch --parsable".into(),
                message: format!("unexpected output {out:?}"),
            })
        }
    })
    .await
}

/// The job called `name`, if slurmctld knows one.
async fn job_named(name: &str) -> Result<Option<u64>, SlurmError> {
    let args: Vec<String> = ["-h", "-t", "all", "-o", "%F", "--name", name]
        .map(String::from)
        .to_vec();
    let out = run("squeue", &args).await?;
    Ok(out.lines().find_map(|l| l.trim().parse().ok()))
}

/// The state of every array task of `jobs` slurmctld still knows, by job and array index, in
/// one `squeue` call; a job it no longer knows (purged after `MinJobAge`, never accepted) is
/// absent.
pub async fn array_states(
    settings: &SlurmSettings,
    jobs: &[u64],
) -> Result<HashMap<u64, HashMap<usize, JobState>>, SlurmError> {
    let mut states: HashMap<u64, HashMap<usize, JobState>> = HashMap::new();
    if jobs.is_empty() {
        return Ok(states);
    }
    let ids: Vec<String> = jobs.iter().map(u64::to_string).collect();
    let args: Vec<String> = ["-h", "-r", "-t", "all", "-o", "%F|%K|%T", "-j"]
        .map(String::from)
        .into_iter()
        .chain([ids.join(",")])
        .collect();
    let out = patiently(settings.stall_deadline(), || async {
        match run("squeue", &args).await {
            // squeue names one unknown job this way; of several, it lists the known ones.
            Err(SlurmError::Command { message, .. }) if message.contains("Invalid job id") => {
                Ok(String::new())
            }
            other => other,
        }
    })
    .await?;
    for line in out.lines() {
        let mut fields = line.trim().split('|');
        let (Some(job), Some(index), Some(state)) = (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        // A state with a reason suffix (`CANCELLED by 0`) keeps its first word.
        let state = state.split_whitespace().next().unwrap_or_default();
        if let (Ok(j), Ok(i), Ok(s)) = (job.parse(), index.parse(), state.parse()) {
            states.entry(j).or_default().insert(i, s);
        }
    }
    Ok(states)
}

/// `scancel` of whole arrays.
pub async fn cancel(settings: &SlurmSettings, jobs: &[u64]) -> Result<(), SlurmError> {
    if jobs.is_empty() {
        return Ok(());
    }
    let args: Vec<String> = jobs.iter().map(u64::to_string).collect();
    let args = &args;
    patiently(settings.stall_deadline(), move || async move {
        match run("scancel", args).await {
            // Arrays that ended, or that slurmctld forgot, have nothing left to cancel.
            Err(SlurmError::Command { message, .. })
                if message.contains("already completing or completed")
                    || message.contains("Invalid job id") =>
            {
                Ok(String::new())
            }
            other => other,
        }
    })
    .await?;
    Ok(())
}

/// `scancel` of some tasks of one array (`JOB_[1-3,7]`), which may have ended already.
pub async fn cancel_tasks(
    settings: &SlurmSettings,
    job: u64,
    indices: &[usize],
) -> Result<(), SlurmError> {
    if indices.is_empty() {
        return Ok(());
    }
    let args = vec![format!("{job}_[{}]", index_ranges(indices))];
    let args = &args;
    patiently(settings.stall_deadline(), move || async move {
        match run("scancel", args).await {
            Err(SlurmError::Command { message, .. })
                if message.contains("already completing or completed")
                    || message.contains("Invalid job id") =>
            {
                Ok(String::new())
            }
            other => other,
        }
    })
    .await?;
    Ok(())
}

/// Array indices as Slurm writes a set of them: `0-3,7,9-10`.
fn index_ranges(indices: &[usize]) -> String {
    let mut sorted = indices.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let start = sorted[i];
        while i + 1 < sorted.len() && sorted[i + 1] == sorted[i] + 1 {
            i += 1;
        }
        parts.push(if sorted[i] == start {
            start.to_string()
        } else {
            format!("{start}-{}", sorted[i])
        });
        i += 1;
    }
    parts.join(",")
}

/// How long a worker waits for its task's time left.
const TIME_LEFT_TIMEOUT: Duration = Duration::from_secs(15);

/// What Slurm says of a running job's time left (`squeue -o %L`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeLeft {
    /// No time limit.
    Unlimited,
    /// It is stopped this long from now.
    Ends(Duration),
}

/// The time left of job `job` (a running array task's own id), asked once, without waiting out
/// a stalled controller: a caller that cannot know goes without.
pub async fn time_left(job: u64) -> Result<TimeLeft, SlurmError> {
    let args: Vec<String> = ["-h", "-j", &job.to_string(), "-o", "%L"]
        .map(String::from)
        .to_vec();
    // Asked as a worker starts: a controller that does not answer costs the chaining, not
    // the call's whole timeout before the first trial.
    let out = match tokio::time::timeout(TIME_LEFT_TIMEOUT, run("squeue", &args)).await {
        Ok(out) => out?,
        Err(_) => {
            return Err(SlurmError::Unanswered {
                command: format!("squeue -h -j {job} -o %L"),
            });
        }
    };
    parse_time_left(out.trim()).ok_or_else(|| SlurmError::Command {
        command: format!("squeue -h -j {job} -o %L"),
        message: format!("unexpected output {out:?}"),
    })
}

/// `UNLIMITED`, or Slurm's `[D-]HH:MM:SS` / `MM:SS` / `SS`.
fn parse_time_left(text: &str) -> Option<TimeLeft> {
    if text == "UNLIMITED" {
        return Some(TimeLeft::Unlimited);
    }
    let (days, clock) = match text.split_once('-') {
        Some((d, rest)) => (d.parse::<u64>().ok()?, rest),
        None => (0, text),
    };
    let mut secs = 0u64;
    let fields: Vec<&str> = clock.split(':').collect();
    if fields.len() > 3 {
        return None;
    }
    for f in fields {
        secs = secs * 60 + f.parse::<u64>().ok()?;
    }
    Some(TimeLeft::Ends(Duration::from_secs(days * 86_400 + secs)))
}

/// The site's `MaxArraySize` (`scontrol show config`): array indices must stay below it.
pub async fn max_array_size(settings: &SlurmSettings) -> Result<usize, SlurmError> {
    let args = ["show".to_string(), "config".to_string()];
    let out = patiently(settings.stall_deadline(), || run("scontrol", &args)).await?;
    parse_max_array_size(&out).ok_or_else(|| SlurmError::Command {
        command: "scontrol show config".into(),
        message: "no MaxArraySize in its output".into(),
    })
}

fn parse_max_array_size(config: &str) -> Option<usize> {
    config.lines().find_map(|l| {
        let (key, value) = l.split_once('=')?;
        (key.trim() == "MaxArraySize").then(|| value.trim().parse().ok())?
    })
}

/// Sets how many tasks of array `job` run at once (`%N` at submission).
pub async fn set_throttle(
    settings: &SlurmSettings,
    job: u64,
    at_once: usize,
) -> Result<(), SlurmError> {
    let args = [
        "update".to_string(),
        format!("JobId={job}"),
        format!("ArrayTaskThrottle={}", at_once.max(1)),
    ];
    patiently(settings.stall_deadline(), || run("scontrol", &args)).await?;
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

    #[test]
    fn the_sites_max_array_size_is_read_from_its_config() {
        let config = "Configuration data as of 2026-01-01T00:00:00\n\
                      MaxArraySize            = 40\nMaxJobCount             = 10000\n";
        assert_eq!(parse_max_array_size(config), Some(40));
        assert_eq!(parse_max_array_size("MaxJobCount = 1\n"), None);
    }

    #[test]
    fn time_left_and_index_sets_are_read_and_written_as_slurm_does() {
        assert_eq!(parse_time_left("UNLIMITED"), Some(TimeLeft::Unlimited));
        let left = |s| Some(TimeLeft::Ends(Duration::from_secs(s)));
        assert_eq!(parse_time_left("1-02:03:04"), left(86_400 + 7_384));
        assert_eq!(parse_time_left("59:30"), left(3_570));
        assert_eq!(parse_time_left("45"), left(45));
        for bad in ["NOT_SET", "INVALID", "", "1:2:3:4"] {
            assert_eq!(parse_time_left(bad), None, "{bad}");
        }
        assert_eq!(index_ranges(&[9, 0, 1, 2, 7, 10, 2]), "0-2,7,9-10");
        assert_eq!(index_ranges(&[4]), "4");
    }

    #[test]
    fn a_stalled_controller_is_told_from_a_refusal() {
        let failed = |message: &str| SlurmError::Command {
            command: "sbatch".into(),
            message: message.into(),
        };
        for stall in [
            "squeue: error: slurm_load_jobs error: Socket timed out on send/recv operation",
            "sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)",
        ] {
            assert!(is_stall(&failed(stall)), "{stall}");
        }
        assert!(is_stall(&SlurmError::Unanswered {
            command: "squeue".into()
        }));
        assert!(!is_stall(&failed(
            "sbatch: error: Batch job submission failed: Invalid partition name specified"
        )));
    }
}
