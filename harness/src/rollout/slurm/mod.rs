//! The Slurm executor: the coordinator's side of trials that run on a cluster. The plan, seeds,
//! retry rule and store rows are the local executor's (`job.rs` for a run, the crucible's
//! campaign for a campaign, each an [`Owner`]); only dispatch differs. Trials go out as
//! `sbatch` job arrays whose tasks run `geode worker` on their node (`worker.rs`); each trial
//! comes back as a result file in the shared run folder, which this coordinator alone ingests
//! (into the run store, or the campaign's journal), once per trial and try. An array task that
//! ends without a result (its node died, Slurm's time limit, a failure of the worker) becomes
//! an infrastructure outcome under the same bounded retry budget as a local trial.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::time::Duration;

use geode_graders::TrialOutcome;
use tokio_util::sync::CancellationToken;

use super::job::{RunError, Shared};
use super::trial::{TrialPlan, lost_trial};
use crate::store::TrialRow;
use files::{ArraySpec, TrialTry};
use queue::JobState;

pub mod files;
pub mod queue;
pub mod settings;
pub mod worker;

pub use settings::SlurmSettings;

#[derive(Debug, thiserror::Error)]
pub enum SlurmError {
    #[error("{command}: {message}")]
    Command { command: String, message: String },
    #[error("{path}: {message}")]
    Files { path: String, message: String },
    #[error("array spec {path}: no task {index}")]
    NoSuchTask { path: String, index: usize },
}

/// How often the coordinator looks at the result files and the queue.
const POLL: Duration = Duration::from_millis(300);

/// What owns the trials the coordinator dispatches (a run or a crucible campaign): where its
/// trials start and end, and what the worker needs to rebuild their plans.
pub(crate) trait Owner: Sync {
    /// The name of the run folder (`<jobs_dir>/<id>`), as the array spec records it.
    fn id(&self) -> &str;
    /// Array tasks running at once (`-n`).
    fn at_once(&self) -> usize;
    fn cancel(&self) -> &CancellationToken;
    /// The campaign plan file the worker rebuilds its plans from; none for a run (the worker
    /// reads the run's `config.json`).
    fn campaign_plan(&self) -> Option<std::path::PathBuf> {
        None
    }
    /// Trials of the same group, out at the same time, share one array task (one node).
    fn group(&self, plan: &TrialPlan) -> String {
        plan.trial_name.clone()
    }
    fn begin(&self, plan: &TrialPlan) -> Result<(), RunError>;
    fn retry_again(&self, row: &TrialRow, try_no: u32) -> bool;
    /// The final row of a trial (cancelled ones too).
    fn end(&self, row: &TrialRow) -> Result<(), RunError>;
    fn queue(&self, _pending: usize, _running: usize) {}
}

impl Owner for Shared {
    fn id(&self) -> &str {
        &self.run_id
    }
    fn at_once(&self) -> usize {
        self.config.concurrency
    }
    fn cancel(&self) -> &CancellationToken {
        &self.cancel
    }
    fn begin(&self, plan: &TrialPlan) -> Result<(), RunError> {
        super::job::begin_trial(self, plan)
    }
    fn retry_again(&self, row: &TrialRow, try_no: u32) -> bool {
        super::job::retry_again(self, row, try_no)
    }
    fn end(&self, row: &TrialRow) -> Result<(), RunError> {
        super::job::end_trial(self, row)
    }
    fn queue(&self, pending: usize, running: usize) {
        self.observer.queue(pending, running);
    }
}

/// A trial the coordinator waits for: its plan, its place in the plan and its group, the try
/// now out, and where that try runs.
struct Waiting {
    plan: TrialPlan,
    order: usize,
    group: String,
    try_no: u32,
    at: Option<(u64, usize)>,
}

/// Runs `plans` on the cluster: adopts the array tasks an earlier coordinator of this run
/// submitted (from the ledger), submits the rest, and ingests until every trial has a final
/// row or the run is cancelled (then `scancel`).
pub(crate) async fn dispatch(
    owner: &dyn Owner,
    settings: &SlurmSettings,
    plans: Vec<TrialPlan>,
    run_dir: &Path,
) -> Result<(), RunError> {
    let mut latest: HashMap<String, files::Submission> = HashMap::new();
    for s in files::submissions(run_dir)? {
        for t in &s.trials {
            let newer = latest
                .get(&t.trial_name)
                .is_none_or(|old| old_try(old, &t.trial_name) <= t.try_no);
            if newer {
                latest.insert(t.trial_name.clone(), s.clone());
            }
        }
    }
    let mut waiting = BTreeMap::new();
    let mut jobs = BTreeSet::new();
    let mut shown = (usize::MAX, usize::MAX);
    for (order, plan) in plans.into_iter().enumerate() {
        owner.begin(&plan)?;
        let (try_no, at) = match latest.get(&plan.trial_name) {
            Some(s) => {
                jobs.insert(s.job);
                (old_try(s, &plan.trial_name), Some((s.job, s.index)))
            }
            None => (0, None),
        };
        let group = owner.group(&plan);
        let w = Waiting {
            plan,
            order,
            group,
            try_no,
            at,
        };
        waiting.insert(w.plan.trial_name.clone(), w);
    }
    submit_unplaced(owner, settings, run_dir, &mut waiting, &mut jobs)?;
    while !waiting.is_empty() {
        tokio::select! {
            _ = tokio::time::sleep(POLL) => {}
            _ = owner.cancel().cancelled() => {}
        }
        if owner.cancel().is_cancelled() {
            return cancel_all(owner, run_dir, &jobs, waiting);
        }
        let states = poll_states(&jobs)?;
        let queue = queue_counts(&states, &waiting);
        if queue != shown {
            owner.queue(queue.0, queue.1);
            shown = queue;
        }
        ingest(owner, run_dir, &states, &mut waiting)?;
        submit_unplaced(owner, settings, run_dir, &mut waiting, &mut jobs)?;
    }
    Ok(())
}

fn old_try(s: &files::Submission, trial: &str) -> u32 {
    s.trials
        .iter()
        .find(|t| t.trial_name == trial)
        .map_or(0, |t| t.try_no)
}

type States = HashMap<u64, HashMap<usize, JobState>>;

fn poll_states(jobs: &BTreeSet<u64>) -> Result<States, RunError> {
    let mut states = HashMap::new();
    for &job in jobs {
        states.insert(job, queue::array_states(job)?);
    }
    Ok(states)
}

/// (pending, running) array tasks of the trials still waited for.
fn queue_counts(states: &States, waiting: &BTreeMap<String, Waiting>) -> (usize, usize) {
    let mut counts = (0, 0);
    for (job, index) in waiting.values().filter_map(|w| w.at) {
        match states.get(&job).and_then(|s| s.get(&index)) {
            Some(JobState::Pending) => counts.0 += 1,
            Some(JobState::Running | JobState::Configuring | JobState::Completing) => counts.1 += 1,
            _ => {}
        }
    }
    counts
}

/// Takes in every result that arrived and every array task that ended without one.
fn ingest(
    owner: &dyn Owner,
    run_dir: &Path,
    states: &States,
    waiting: &mut BTreeMap<String, Waiting>,
) -> Result<(), RunError> {
    let names: Vec<String> = waiting.keys().cloned().collect();
    for name in names {
        let Some(w) = waiting.get(&name) else {
            continue;
        };
        let Some((job, index)) = w.at else { continue };
        let this_try = TrialTry {
            trial_name: name.clone(),
            try_no: w.try_no,
        };
        let state = states.get(&job).and_then(|s| s.get(&index)).copied();
        // The result is looked for after the state: a worker writes it before its task ends,
        // so an ended task with no file has none to come.
        let row = match files::read_result(run_dir, &this_try)? {
            Some(result) => result.row,
            None => match state {
                Some(s) if s.is_live() => continue,
                ended => lost_row(&w.plan, ended),
            },
        };
        settle(owner, waiting, &name, row)?;
    }
    Ok(())
}

/// The row of a try whose array task ended without a result.
fn lost_row(plan: &TrialPlan, state: Option<JobState>) -> TrialRow {
    let class = match state {
        Some(JobState::Timeout) => "SlurmTimeLimit".to_string(),
        Some(s) => format!("Slurm{}", <&str>::from(s)),
        None => "SlurmJobVanished".to_string(),
    };
    lost_trial(
        plan,
        TrialOutcome::SandboxLost,
        &class,
        "the array task ended without writing the trial's result",
    )
}

/// One ended try: again (a new try, submitted on the next round) when the local rule says so,
/// else its final row.
fn settle(
    owner: &dyn Owner,
    waiting: &mut BTreeMap<String, Waiting>,
    name: &str,
    mut row: TrialRow,
) -> Result<(), RunError> {
    let Some(w) = waiting.get_mut(name) else {
        return Ok(());
    };
    row.infra_retries = w.try_no;
    if owner.retry_again(&row, w.try_no) {
        tracing::warn!("trial {name} ended in {}; retrying", row.outcome);
        w.try_no += 1;
        w.at = None;
        return Ok(());
    }
    waiting.remove(name);
    owner.end(&row)
}

/// Submits one array per resource shape for the trials that have no array task out; trials of
/// one group share an array task, in plan order.
fn submit_unplaced(
    owner: &dyn Owner,
    settings: &SlurmSettings,
    run_dir: &Path,
    waiting: &mut BTreeMap<String, Waiting>,
    jobs: &mut BTreeSet<u64>,
) -> Result<(), RunError> {
    let mut unplaced: Vec<&Waiting> = waiting.values().filter(|w| w.at.is_none()).collect();
    unplaced.sort_by_key(|w| w.order);
    let mut shapes: BTreeMap<(u32, u64), Vec<Vec<TrialTry>>> = BTreeMap::new();
    let mut slot: HashMap<(u32, u64, &str), usize> = HashMap::new();
    for w in unplaced {
        let env = &w.plan.task.config.environment;
        let cpus = env.cpus.unwrap_or(1.0).ceil().max(1.0) as u32;
        let shape = (cpus, env.memory_mb.unwrap_or(1024));
        let groups = shapes.entry(shape).or_default();
        let at = *slot
            .entry((shape.0, shape.1, w.group.as_str()))
            .or_insert_with(|| {
                groups.push(Vec::new());
                groups.len() - 1
            });
        groups[at].push(TrialTry {
            trial_name: w.plan.trial_name.clone(),
            try_no: w.try_no,
        });
    }
    for (shape, groups) in shapes {
        let job = submit_array(owner, settings, run_dir, &groups, shape)?;
        jobs.insert(job);
        for (index, group) in groups.iter().enumerate() {
            for t in group {
                if let Some(w) = waiting.get_mut(&t.trial_name) {
                    w.at = Some((job, index));
                }
            }
        }
    }
    Ok(())
}

/// Writes the array's spec and script, submits it, and records each task in the ledger.
fn submit_array(
    owner: &dyn Owner,
    settings: &SlurmSettings,
    run_dir: &Path,
    groups: &[Vec<TrialTry>],
    (cpus, memory_mb): (u32, u64),
) -> Result<u64, RunError> {
    let dir = files::slurm_dir(run_dir);
    let seq = files::submissions(run_dir)?.len();
    let spec_path = dir.join(format!("array-{seq}-{}.json", groups.len()));
    files::write_atomic(
        &spec_path,
        &ArraySpec {
            schema: files::ARRAY_SCHEMA.into(),
            run_id: owner.id().to_string(),
            // Absolute: the worker starts in whatever folder its node gives it.
            jobs_dir: std::path::absolute(run_dir.parent().unwrap_or(run_dir)).map_err(|e| {
                SlurmError::Files {
                    path: run_dir.display().to_string(),
                    message: e.to_string(),
                }
            })?,
            groups: groups.to_vec(),
            campaign: owner.campaign_plan(),
        },
    )?;
    let script = spec_path.with_extension("sh");
    let text = format!(
        "#!/bin/sh\nexec '{}' worker --spec '{}'\n",
        settings.worker_bin.display(),
        spec_path.display()
    );
    std::fs::write(&script, text).map_err(|e| SlurmError::Files {
        path: script.display().to_string(),
        message: e.to_string(),
    })?;
    let log_dir = dir.join("logs");
    std::fs::create_dir_all(&log_dir).map_err(|e| SlurmError::Files {
        path: log_dir.display().to_string(),
        message: e.to_string(),
    })?;
    let submitted = chrono::Utc::now().to_rfc3339();
    let job = queue::submit(
        settings,
        &queue::Submission {
            script: &script,
            tasks: groups.len(),
            at_once: owner.at_once(),
            cpus,
            memory_mb,
            log_dir: &log_dir,
        },
    )?;
    for (index, trials) in groups.iter().enumerate() {
        files::append_submission(
            run_dir,
            &files::Submission {
                schema: files::SUBMISSION_SCHEMA.into(),
                job,
                index,
                submitted: submitted.clone(),
                trials: trials.clone(),
            },
        )?;
    }
    Ok(job)
}

/// Ctrl-C: every array of the run cancelled; the results already written are taken in, the
/// other trials reported `cancelled` and left unfinished in the store, so a resume runs them
/// again (as a local run leaves them).
fn cancel_all(
    owner: &dyn Owner,
    run_dir: &Path,
    jobs: &BTreeSet<u64>,
    mut waiting: BTreeMap<String, Waiting>,
) -> Result<(), RunError> {
    let jobs: Vec<u64> = jobs.iter().copied().collect();
    queue::cancel(&jobs)?;
    let names: Vec<String> = waiting.keys().cloned().collect();
    for name in names {
        let Some(w) = waiting.get(&name) else {
            continue;
        };
        let this_try = TrialTry {
            trial_name: name.clone(),
            try_no: w.try_no,
        };
        let row = match files::read_result(run_dir, &this_try)? {
            Some(result) => result.row,
            None => lost_trial(
                &w.plan,
                TrialOutcome::Cancelled,
                "Cancelled",
                "the run was cancelled; its Slurm array was cancelled with it",
            ),
        };
        settle(owner, &mut waiting, &name, row)?;
    }
    Ok(())
}
