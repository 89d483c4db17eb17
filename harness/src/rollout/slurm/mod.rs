//! The Slurm executor: the coordinator's side of trials that run on a cluster. The plan, seeds,
//! retry rule and store rows are the local executor's (`job.rs` for a run, the crucible's
//! campaign for a campaign, each an [`TrialLedger`]); only dispatch differs. Trials go out as
//! `sbatch` job arrays whose tasks run `geode worker` on their node (`worker.rs`); each trial
//! comes back as a result file in the shared run folder, which this coordinator alone ingests
//! (into the run store, or the campaign's journal), once per trial and try. An array task that
//! ends without a result (its node died, Slurm's time limit, a failure of the worker) becomes
//! an infrastructure outcome under the same bounded retry budget as a local trial.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use geode_graders::TrialOutcome;

use super::ledger::{Executor, RunLedger, TrialLedger};
use super::run_spec::RunError;
use super::trial::{TrialPlan, lost_trial};
use crate::store::TrialRow;
use files::TrialTry;
use queue::JobState;

pub mod error;
pub mod files;
mod place;
pub mod queue;
pub mod settings;
pub mod worker;

pub use error::SlurmError;
pub use settings::SlurmSettings;

/// How often the coordinator looks at the result files (a directory listing on the shared
/// filesystem, no load on the scheduler).
const ROUND: Duration = Duration::from_secs(1);

/// How often it asks slurmctld about the run's arrays: one `squeue` for all of them. Sites ask
/// for seconds between polls, not milliseconds; an ended task is seen this much later at most.
const SQUEUE_EVERY: Duration = Duration::from_secs(5);

/// A trial the coordinator waits for: its plan, its place in the plan and its group, the try
/// now out, and where that try runs.
struct Waiting {
    plan: TrialPlan,
    order: usize,
    group: String,
    try_no: u32,
    at: Option<(u64, usize)>,
}

type States = HashMap<u64, HashMap<usize, JobState>>;

/// What the coordinator knows of the run's arrays.
struct Arrays {
    /// Every array of the run, adopted or submitted, with its throttle (`%N`) as last set.
    throttle: BTreeMap<u64, usize>,
    /// When this coordinator submitted an array: a queue snapshot older than that does not
    /// know it yet.
    submitted: HashMap<u64, Instant>,
    /// Arrays the run cancelled itself (an interrupted coordinator's), never adopted.
    cancelled: BTreeSet<u64>,
    /// The site's `MaxArraySize`: indices of an array stay below it.
    max_size: usize,
    /// The last `squeue` and when it was taken.
    states: States,
    polled: Option<Instant>,
    /// How many tasks each array has (its groups).
    sizes: HashMap<u64, usize>,
    /// The claims of chained arrays' groups (`files`), read each round: which task runs what.
    claims: HashMap<(u64, usize), Option<usize>>,
    /// Arrays whose every group is claimed and whose tasks with nothing to run were cancelled.
    trimmed: BTreeSet<u64>,
}

impl Arrays {
    /// The array task that runs the group of `task`: the task that claimed it, else its own.
    fn runner(&self, task: (u64, usize)) -> (u64, usize) {
        match self.claims.get(&task) {
            Some(Some(by)) => (task.0, *by),
            _ => task,
        }
    }

    fn state(&self, task: (u64, usize)) -> Option<JobState> {
        self.states
            .get(&task.0)
            .and_then(|s| s.get(&task.1))
            .copied()
    }
}

/// The Slurm executor of a run: its trials as job arrays on the cluster `settings` name.
pub(crate) struct SlurmExecutor(pub(crate) SlurmSettings);

#[async_trait::async_trait]
impl Executor for SlurmExecutor {
    async fn execute(
        &self,
        ledger: Arc<RunLedger>,
        plans: Vec<TrialPlan>,
        run_dir: &Path,
    ) -> Result<(), RunError> {
        dispatch(ledger.as_ref(), &self.0, plans, run_dir).await
    }
}

/// Runs `plans` on the cluster: adopts the array tasks an earlier coordinator of this run
/// submitted (from the ledger), submits the rest, and ingests until every trial has a final
/// row or the run is cancelled (then `scancel`).
pub(crate) async fn dispatch(
    owner: &dyn TrialLedger,
    settings: &SlurmSettings,
    plans: Vec<TrialPlan>,
    run_dir: &Path,
) -> Result<(), RunError> {
    let mut latest: HashMap<String, files::Submission> = HashMap::new();
    let mut sizes: HashMap<u64, usize> = HashMap::new();
    for s in files::submissions(run_dir)? {
        let size = sizes.entry(s.job).or_default();
        *size = (*size).max(s.index + 1);
        for t in &s.trials {
            let newer = latest
                .get(&t.trial_name)
                .is_none_or(|old| old_try(old, &t.trial_name) <= t.try_no);
            if newer {
                latest.insert(t.trial_name.clone(), s.clone());
            }
        }
    }
    let mut arrays = Arrays {
        throttle: BTreeMap::new(),
        submitted: HashMap::new(),
        cancelled: files::cancelled_jobs(run_dir)?,
        max_size: 1,
        states: HashMap::new(),
        polled: None,
        sizes,
        claims: HashMap::new(),
        trimmed: BTreeSet::new(),
    };
    let mut waiting = BTreeMap::new();
    for (order, plan) in plans.into_iter().enumerate() {
        owner.begin(&plan)?;
        let (try_no, at) = match latest.get(&plan.trial_name) {
            Some(s) => {
                arrays.throttle.insert(s.job, owner.at_once());
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
    // An interrupted coordinator wrote down its arrays before cancelling them; its scancel
    // may not have reached slurmctld.
    let again: Vec<u64> = arrays
        .cancelled
        .iter()
        .filter(|j| arrays.throttle.contains_key(j))
        .copied()
        .collect();
    queue::cancel(settings, &again).await?;
    arrays.max_size = queue::max_array_size(settings).await?.max(1);
    let mut shown = (usize::MAX, usize::MAX);
    while !waiting.is_empty() {
        if owner.cancel().is_cancelled() {
            return cancel_all(owner, settings, run_dir, &arrays, waiting).await;
        }
        if arrays.polled.is_none_or(|at| at.elapsed() >= SQUEUE_EVERY) {
            let live = live_jobs(&waiting);
            let taken = Instant::now();
            tokio::select! {
                states = queue::array_states(settings, &live) => arrays.states = states?,
                _ = owner.cancel().cancelled() => continue,
            }
            arrays.polled = Some(taken);
        }
        // After the squeue: a task claims before it ends, so an ended task's claims are seen.
        arrays.claims = files::claims(run_dir)?;
        let queue = queue_counts(&arrays, &waiting);
        if queue != shown {
            owner.queue(queue.0, queue.1);
            shown = queue;
        }
        ingest(owner, run_dir, &mut arrays, &mut waiting)?;
        trim(settings, &mut arrays).await?;
        place::place(owner, settings, run_dir, &mut waiting, &mut arrays).await?;
        tokio::select! {
            _ = tokio::time::sleep(ROUND) => {}
            _ = owner.cancel().cancelled() => {}
        }
    }
    Ok(())
}

fn old_try(s: &files::Submission, trial: &str) -> u32 {
    s.trials
        .iter()
        .find(|t| t.trial_name == trial)
        .map_or(0, |t| t.try_no)
}

/// The arrays that still hold a trial waited for: the only ones worth asking about.
fn live_jobs(waiting: &BTreeMap<String, Waiting>) -> Vec<u64> {
    let jobs: BTreeSet<u64> = waiting.values().filter_map(|w| w.at).map(|a| a.0).collect();
    jobs.into_iter().collect()
}

/// (pending, running) array tasks of the trials still waited for.
fn queue_counts(arrays: &Arrays, waiting: &BTreeMap<String, Waiting>) -> (usize, usize) {
    let mut counts = (0, 0);
    let tasks: BTreeSet<(u64, usize)> = waiting
        .values()
        .filter_map(|w| w.at)
        .map(|t| arrays.runner(t))
        .collect();
    for task in tasks {
        match arrays.state(task) {
            Some(JobState::Pending) => counts.0 += 1,
            Some(JobState::Running | JobState::Configuring | JobState::Completing) => counts.1 += 1,
            _ => {}
        }
    }
    counts
}

/// Takes in every result that arrived and every array task that ended without one.
fn ingest(
    owner: &dyn TrialLedger,
    run_dir: &Path,
    arrays: &mut Arrays,
    waiting: &mut BTreeMap<String, Waiting>,
) -> Result<(), RunError> {
    let names: Vec<String> = waiting.keys().cloned().collect();
    for name in names {
        let Some(w) = waiting.get_mut(&name) else {
            continue;
        };
        let Some((job, index)) = w.at else { continue };
        let this_try = TrialTry {
            trial_name: name.clone(),
            try_no: w.try_no,
        };
        let state = arrays.state(arrays.runner((job, index)));
        // The result is looked for after the state: a worker writes it before its task ends,
        // so an ended task with no file has none to come.
        let row = match files::read_result(run_dir, &this_try)? {
            Some(result) => result.row,
            // Cancelled by the run itself: this try never counted; it goes out again as it was.
            None if arrays.cancelled.contains(&job) => {
                w.at = None;
                continue;
            }
            None => match state {
                Some(s) if s.is_live() => continue,
                // Submitted after the last squeue: not known to it yet.
                None if arrays
                    .submitted
                    .get(&job)
                    .is_some_and(|at| arrays.polled.is_none_or(|p| p < *at)) =>
                {
                    continue;
                }
                // Nobody claimed the group: the coordinator does before giving the try up, so
                // no task of a chained array starts it afterwards. A task that claimed it first
                // runs it: waited for from the next round.
                ended if !arrays.claims.contains_key(&(job, index)) => {
                    if !files::try_claim(run_dir, &lost_claim(job, index))? {
                        continue;
                    }
                    arrays.claims.insert((job, index), None);
                    lost_row(&w.plan, ended)
                }
                ended => lost_row(&w.plan, ended),
            },
        };
        settle(owner, waiting, &name, row)?;
    }
    Ok(())
}

/// The coordinator's claim of a group whose try it takes as lost.
fn lost_claim(job: u64, index: usize) -> files::Claim {
    files::Claim {
        schema: files::CLAIM_SCHEMA.into(),
        job,
        index,
        by: None,
        node: String::new(),
        at: chrono::Utc::now().to_rfc3339(),
    }
}

/// Cancels the tasks of a chained array that can have nothing to run: once every group is
/// claimed, the tasks that claimed none (still pending behind the throttle, their groups run
/// by others) would only start and end. A task that runs nothing cannot start anything either
/// (nothing is left to claim), so this `scancel` never cuts a trial.
async fn trim(settings: &SlurmSettings, arrays: &mut Arrays) -> Result<(), RunError> {
    let mut done = Vec::new();
    for (&job, &size) in &arrays.sizes {
        if arrays.trimmed.contains(&job) || arrays.cancelled.contains(&job) {
            continue;
        }
        if !(0..size).all(|i| arrays.claims.contains_key(&(job, i))) {
            continue;
        }
        let claimers: BTreeSet<usize> = (0..size)
            .filter_map(|i| arrays.claims.get(&(job, i)).copied().flatten())
            .collect();
        let idle: Vec<usize> = (0..size).filter(|i| !claimers.contains(i)).collect();
        done.push((job, idle));
    }
    for (job, idle) in done {
        queue::cancel_tasks(settings, job, &idle).await?;
        arrays.trimmed.insert(job);
    }
    Ok(())
}

/// The row of a try whose array task ended without a result. Slurm's time limit is the
/// trial's own outcome (the same limit stops it again on a retry), not infrastructure.
fn lost_row(plan: &TrialPlan, state: Option<JobState>) -> TrialRow {
    let (outcome, class) = match state {
        Some(JobState::Timeout) => (TrialOutcome::AgentTimeout, "SlurmTimeLimit".to_string()),
        Some(s) => (
            TrialOutcome::SandboxLost,
            format!("Slurm{}", <&str>::from(s)),
        ),
        None => (TrialOutcome::SandboxLost, "SlurmJobVanished".to_string()),
    };
    let message = match state {
        Some(JobState::Timeout) => "Slurm stopped the array task at its time limit",
        _ => "the array task ended without writing the trial's result",
    };
    lost_trial(plan, outcome, &class, message)
}

/// One ended try: again (a new try, submitted on the next round) when the local rule says so,
/// else its final row.
fn settle(
    owner: &dyn TrialLedger,
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

/// Ctrl-C or SIGTERM: every array of the run written down as cancelled by the run (so a resume
/// knows its tasks' ends for no outcome), then cancelled; the results already written are
/// taken in, the other trials reported `cancelled` and left unfinished in the store, so a
/// resume runs them again (as a local run leaves them).
async fn cancel_all(
    owner: &dyn TrialLedger,
    settings: &SlurmSettings,
    run_dir: &Path,
    arrays: &Arrays,
    mut waiting: BTreeMap<String, Waiting>,
) -> Result<(), RunError> {
    let jobs: Vec<u64> = arrays.throttle.keys().copied().collect();
    files::append_cancelled(run_dir, &jobs)?;
    queue::cancel(settings, &jobs).await?;
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
