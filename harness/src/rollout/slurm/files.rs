//! The shared jobs folder is the only channel between the coordinator and the workers: the
//! array spec a worker reads (`geode.slurm-array.v1`), one result file per trial and try
//! (`geode.slurm-result.v1`, written to a temporary name and renamed, so a reader sees all of it
//! or nothing), and the coordinator's ledger of submissions (`geode.slurm-submission.v1`, one
//! JSON line each), from which a resume finds the array tasks that may still write, and the
//! arrays the run cancelled itself (`geode.slurm-cancelled.v1`, written before their `scancel`),
//! whose tasks' ends are no outcome of their trials. Nothing here touches SQLite: the run store
//! stays with the coordinator.
//!
//! A chained array (`ArraySpec::chain`) adds claims (`geode.slurm-claim.v1`, one file per array
//! task's group): a worker that has run its own group goes on with groups whose tasks Slurm has
//! not started yet, so the next trial starts at once instead of after Slurm's hand-over to the
//! next array task and a new worker's start. Whoever links a group's claim file first runs it
//! (a hard link fails when the name exists, atomically, also on NFS, and the claim is whole
//! when it appears); the coordinator claims a group itself before taking its try as lost, so a
//! worker never starts a try the coordinator has given up on.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::SlurmError;
use crate::store::TrialRow;

pub(crate) const ARRAY_SCHEMA: &str = "geode.slurm-array.v1";
pub(crate) const RESULT_SCHEMA: &str = "geode.slurm-result.v1";
pub(crate) const SUBMISSION_SCHEMA: &str = "geode.slurm-submission.v1";
pub(crate) const CANCELLED_SCHEMA: &str = "geode.slurm-cancelled.v1";
pub(crate) const CLAIM_SCHEMA: &str = "geode.slurm-claim.v1";

/// One trial a worker runs: which, and which try (0 first, then one per infrastructure retry).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TrialTry {
    /// The trial's folder name (`<task>__<attempt>`).
    pub trial_name: String,
    pub(crate) try_no: u32,
}

/// What every task of one array runs: array index i runs the trials of `groups[i]`, in order,
/// on one node (the two arms of a pair share a group, so machine drift cancels).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ArraySpec {
    /// Always `geode.slurm-array.v1`.
    pub schema: String,
    /// The run (or campaign) the array's trials belong to.
    pub run_id: String,
    /// The jobs folder (shared), holding `<run_id>/config.json`.
    pub jobs_dir: PathBuf,
    /// The trials of each array task, by array index.
    pub groups: Vec<Vec<TrialTry>>,
    /// A crucible campaign's plan file (`crucible::remote`): the worker plans the campaign's
    /// pairs from it instead of from `config.json`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub campaign: Option<PathBuf>,
    /// A worker that has run its own group goes on with the array's unclaimed groups (claims,
    /// above). Off for a run with `--time-limit` (the limit is each trial's) and in specs of
    /// coordinators before chaining.
    #[serde(default)]
    pub chain: bool,
}

/// Who runs one array task's group: written once, by the first to link it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Claim {
    /// Always `geode.slurm-claim.v1`.
    pub schema: String,
    /// The array's Slurm job id.
    pub job: u64,
    /// The array index whose group is claimed.
    pub index: usize,
    /// The array task running it; `None` when the coordinator took the try as lost.
    pub by: Option<usize>,
    /// The node of the worker that claimed it (empty for the coordinator).
    pub node: String,
    /// When (RFC 3339, UTC).
    pub at: String,
}

fn claims_dir(run_dir: &Path) -> PathBuf {
    slurm_dir(run_dir).join("claims")
}

/// Links `claim` into place unless the group has a claim already; whether this one is it.
pub fn try_claim(run_dir: &Path, claim: &Claim) -> Result<bool, SlurmError> {
    let dir = claims_dir(run_dir);
    std::fs::create_dir_all(&dir).map_err(|e| io_err(&dir, e))?;
    let path = dir.join(format!("{}.{}.json", claim.job, claim.index));
    let text = serde_json::to_vec(claim).map_err(|e| io_err(&path, e))?;
    // A dot name: `claims` skips it while it is being written.
    let mut tmp = tempfile::Builder::new()
        .prefix(".claim")
        .tempfile_in(&dir)
        .map_err(|e| io_err(&dir, e))?;
    tmp.write_all(&text).map_err(|e| io_err(&path, e))?;
    tmp.as_file().sync_all().map_err(|e| io_err(&path, e))?;
    match std::fs::hard_link(tmp.path(), &path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(io_err(&path, e)),
    }
}

/// Every claim of the run, by (job, index). A file that does not parse is a claim all the
/// same (its group is not free), by nobody known.
pub fn claims(run_dir: &Path) -> Result<HashMap<(u64, usize), Option<usize>>, SlurmError> {
    let dir = claims_dir(run_dir);
    let mut out = HashMap::new();
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(io_err(&dir, e)),
    };
    for entry in entries {
        let entry = entry.map_err(|e| io_err(&dir, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some((job, index)) = name
            .strip_suffix(".json")
            .and_then(|n| n.split_once('.'))
            .and_then(|(j, i)| Some((j.parse().ok()?, i.parse().ok()?)))
        else {
            continue;
        };
        let by = read_json::<Claim>(&entry.path()).ok().and_then(|c| c.by);
        out.insert((job, index), by);
    }
    Ok(out)
}

/// One trial's result as its worker wrote it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WorkerResult {
    /// Always `geode.slurm-result.v1`.
    pub schema: String,
    /// The host name of the node that ran the trial.
    pub node: String,
    /// When the worker started this array task (RFC 3339): submission to here is the
    /// scheduling overhead.
    pub worker_started: String,
    /// The array index of the task that ran the trial: its own, or another's in a chained
    /// array. Absent from results of workers before chaining.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array_task: Option<usize>,
    /// The trial's row, for the coordinator to record in the store.
    pub row: TrialRow,
}

/// One array task the coordinator submitted.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Submission {
    /// Always `geode.slurm-submission.v1`.
    pub schema: String,
    /// The array's Slurm job id.
    pub job: u64,
    /// The array task's index.
    pub index: usize,
    /// When the array was submitted (RFC 3339, UTC).
    pub submitted: String,
    /// The trials the array task runs, in order.
    pub trials: Vec<TrialTry>,
}

fn io_err(path: &Path, e: impl std::fmt::Display) -> SlurmError {
    SlurmError::Files {
        path: path.display().to_string(),
        message: e.to_string(),
    }
}

/// The run's Slurm folder inside its run folder.
pub fn slurm_dir(run_dir: &Path) -> PathBuf {
    run_dir.join("slurm")
}

pub(crate) fn result_path(run_dir: &Path, t: &TrialTry) -> PathBuf {
    slurm_dir(run_dir)
        .join("results")
        .join(format!("{}.{}.json", t.trial_name, t.try_no))
}

/// Writes `value` as JSON to a temporary file beside `path`, then renames it into place.
pub fn write_atomic(path: &Path, value: &impl Serialize) -> Result<(), SlurmError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| io_err(dir, e))?;
    let text = serde_json::to_vec_pretty(value).map_err(|e| io_err(path, e))?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(|e| io_err(dir, e))?;
    tmp.write_all(&text).map_err(|e| io_err(path, e))?;
    // On NFS the rename is what other clients see; the data must be there before it.
    tmp.as_file().sync_all().map_err(|e| io_err(path, e))?;
    tmp.persist(path).map_err(|e| io_err(path, e.error))?;
    Ok(())
}

pub(crate) fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<T, SlurmError> {
    let text = std::fs::read_to_string(path).map_err(|e| io_err(path, e))?;
    serde_json::from_str(&text).map_err(|e| io_err(path, e))
}

/// The result of one trial try, if its worker has written it.
pub fn read_result(run_dir: &Path, t: &TrialTry) -> Result<Option<WorkerResult>, SlurmError> {
    let path = result_path(run_dir, t);
    if !path.is_file() {
        return Ok(None);
    }
    let result: WorkerResult = read_json(&path)?;
    if result.schema != RESULT_SCHEMA {
        return Err(io_err(&path, format!("schema {:?}", result.schema)));
    }
    Ok(Some(result))
}

pub(crate) fn append_submission(run_dir: &Path, s: &Submission) -> Result<(), SlurmError> {
    let path = slurm_dir(run_dir).join("submissions.jsonl");
    let line = serde_json::to_string(s).map_err(|e| io_err(&path, e))?;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(|e| io_err(&path, e))?;
    writeln!(f, "{line}").map_err(|e| io_err(&path, e))
}

/// Every submission of the run so far (none for a run that never used Slurm). A line cut short
/// by a coordinator that died while writing it is skipped: its array task is resubmitted.
pub fn submissions(run_dir: &Path) -> Result<Vec<Submission>, SlurmError> {
    let path = slurm_dir(run_dir).join("submissions.jsonl");
    if !path.is_file() {
        return Ok(Vec::new());
    }
    let text = std::fs::read_to_string(&path).map_err(|e| io_err(&path, e))?;
    Ok(text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect())
}

/// Arrays the run cancelled itself (Ctrl-C, SIGTERM), one JSON line per cancellation.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Cancelled {
    /// Always `geode.slurm-cancelled.v1`.
    pub schema: String,
    /// When the run cancelled them (RFC 3339, UTC), before its `scancel`.
    pub at: String,
    /// The job ids of the arrays cancelled.
    pub jobs: Vec<u64>,
}

fn cancelled_path(run_dir: &Path) -> PathBuf {
    slurm_dir(run_dir).join("cancelled.jsonl")
}

/// Writes down that the run is cancelling `jobs`, before it does (a coordinator that dies
/// between the two leaves the line, and a resume cancels them again).
pub fn append_cancelled(run_dir: &Path, jobs: &[u64]) -> Result<(), SlurmError> {
    if jobs.is_empty() {
        return Ok(());
    }
    let path = cancelled_path(run_dir);
    let line = serde_json::to_string(&Cancelled {
        schema: CANCELLED_SCHEMA.into(),
        at: chrono::Utc::now().to_rfc3339(),
        jobs: jobs.to_vec(),
    })
    .map_err(|e| io_err(&path, e))?;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(|e| io_err(&path, e))?;
    writeln!(f, "{line}").map_err(|e| io_err(&path, e))?;
    // A resume on another machine must see it: the line is the only record that these arrays'
    // ends are no outcome.
    f.sync_all().map_err(|e| io_err(&path, e))
}

/// Every array the run cancelled itself so far. A torn last line is skipped (its `scancel`
/// never ran: its tasks ran on, and wrote their results or ended on their own).
pub fn cancelled_jobs(run_dir: &Path) -> Result<std::collections::BTreeSet<u64>, SlurmError> {
    let path = cancelled_path(run_dir);
    if !path.is_file() {
        return Ok(Default::default());
    }
    let text = std::fs::read_to_string(&path).map_err(|e| io_err(&path, e))?;
    Ok(text
        .lines()
        .filter_map(|l| serde_json::from_str::<Cancelled>(l).ok())
        .flat_map(|c| c.jobs)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_result_is_there_whole_or_not_at_all_and_a_torn_ledger_line_is_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let t = TrialTry {
            trial_name: "geode-x__0".into(),
            try_no: 1,
        };
        assert!(read_result(dir.path(), &t).unwrap().is_none());
        let path = result_path(dir.path(), &t);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, "{\"schema\": \"other\"").unwrap();
        assert!(read_result(dir.path(), &t).is_err());

        std::fs::create_dir_all(slurm_dir(dir.path())).unwrap();
        let s = Submission {
            schema: SUBMISSION_SCHEMA.into(),
            job: 7,
            index: 2,
            submitted: "2026-01-01T00:00:00Z".into(),
            trials: vec![t.clone()],
        };
        append_submission(dir.path(), &s).unwrap();
        let ledger = slurm_dir(dir.path()).join("submissions.jsonl");
        let mut text = std::fs::read_to_string(&ledger).unwrap();
        text.push_str("{\"schema\": \"geode.slurm-sub");
        std::fs::write(&ledger, text).unwrap();
        let back = submissions(dir.path()).unwrap();
        assert_eq!(back.len(), 1);
        assert_eq!((back[0].job, back[0].index), (7, 2));
        assert_eq!(back[0].trials, vec![t]);
    }

    #[test]
    fn the_arrays_a_run_cancelled_are_read_back_and_a_torn_line_is_skipped() {
        let dir = tempfile::tempdir().unwrap();
        assert!(cancelled_jobs(dir.path()).unwrap().is_empty());
        std::fs::create_dir_all(slurm_dir(dir.path())).unwrap();
        append_cancelled(dir.path(), &[4, 9]).unwrap();
        append_cancelled(dir.path(), &[12]).unwrap();
        let path = cancelled_path(dir.path());
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str("{\"schema\": \"geode.slurm-canc");
        std::fs::write(&path, text).unwrap();
        assert_eq!(
            cancelled_jobs(dir.path())
                .unwrap()
                .into_iter()
                .collect::<Vec<_>>(),
            vec![4, 9, 12]
        );
    }

    #[test]
    fn a_group_is_claimed_once_and_read_back_with_its_claimer() {
        let dir = tempfile::tempdir().unwrap();
        assert!(claims(dir.path()).unwrap().is_empty());
        let claim = |index, by| Claim {
            schema: CLAIM_SCHEMA.into(),
            job: 41,
            index,
            by,
            node: "n1".into(),
            at: "2026-01-01T00:00:00Z".into(),
        };
        assert!(try_claim(dir.path(), &claim(3, Some(0))).unwrap());
        // Another task, or the coordinator, comes second: the first claim stands.
        assert!(!try_claim(dir.path(), &claim(3, Some(1))).unwrap());
        assert!(!try_claim(dir.path(), &claim(3, None)).unwrap());
        assert!(try_claim(dir.path(), &claim(4, None)).unwrap());
        let all = claims(dir.path()).unwrap();
        assert_eq!(all.len(), 2, "{all:?}");
        assert_eq!(all[&(41, 3)], Some(0));
        assert_eq!(all[&(41, 4)], None);
    }

    #[test]
    fn racing_claimers_get_one_winner_per_group() {
        let dir = tempfile::tempdir().unwrap();
        let won: Vec<usize> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|by| {
                    let run_dir = dir.path();
                    s.spawn(move || {
                        (0..20)
                            .filter(|&index| {
                                try_claim(
                                    run_dir,
                                    &Claim {
                                        schema: CLAIM_SCHEMA.into(),
                                        job: 7,
                                        index,
                                        by: Some(by),
                                        node: String::new(),
                                        at: String::new(),
                                    },
                                )
                                .unwrap()
                            })
                            .count()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(won.iter().sum::<usize>(), 20, "{won:?}");
        assert_eq!(claims(dir.path()).unwrap().len(), 20);
    }
}
