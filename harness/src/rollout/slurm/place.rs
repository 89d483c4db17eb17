//! Where the coordinator's trials go: which arrays it submits, how big, and how many of their
//! tasks run at once. Two site limits shape it. `MaxArraySize` caps an array's indices, so a run
//! larger than it goes out in several arrays; and `-n` bounds the run's tasks running at once
//! across all of them, not per array, so the arrays share one budget of `-n`: an array's
//! throttle (`%N`) is its share, moved with `scontrol update` as earlier arrays drain, and a new
//! array goes out only when some of the budget is free.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::time::Instant;

use super::files::{self, ArraySpec, TrialTry};
use super::{Arrays, SlurmError, SlurmSettings, TrialLedger, Waiting, queue};
use crate::rollout::run_spec::RunError;

/// Memory an array task asks for beyond its trial's: the worker itself, which shares the job's
/// memory cgroup with the trial's sandbox (nested in it), so the trial meets its own limit
/// before Slurm's.
const WORKER_MEMORY_MB: u64 = 256;

/// Moves the throttles of the arrays out to their share of `-n` (oldest first), then submits
/// the trials with no array task out, in plan order, while some of it is free.
pub(super) async fn place(
    owner: &dyn TrialLedger,
    settings: &SlurmSettings,
    run_dir: &Path,
    waiting: &mut BTreeMap<String, Waiting>,
    arrays: &mut Arrays,
) -> Result<(), RunError> {
    let mut budget = owner.at_once().max(1);
    let mut live: BTreeMap<u64, BTreeSet<usize>> = BTreeMap::new();
    // By the task that runs each group: in a chained array, one task runs many in turn.
    for task in waiting.values().filter_map(|w| w.at) {
        let (job, index) = arrays.runner(task);
        let ended = arrays.state((job, index)).is_some_and(|s| !s.is_live());
        if !ended {
            live.entry(job).or_default().insert(index);
        }
    }
    for (job, tasks) in live {
        let share = tasks.len().min(budget);
        budget -= share;
        let throttle = arrays.throttle.get(&job).copied().unwrap_or(share);
        // Only a share that differs from what the array can run now is worth a call.
        if share > 0 && throttle.min(tasks.len()) != share {
            match queue::set_throttle(settings, job, share).await {
                Ok(()) => {
                    arrays.throttle.insert(job, share);
                }
                // The array ended since the last squeue (slurmctld refuses to update an ended
                // job): nothing of it is left to throttle.
                Err(e @ SlurmError::Command { .. }) => {
                    tracing::warn!("array {job}'s throttle stays: {e}");
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
    if budget == 0 {
        return Ok(());
    }
    for (shape, groups) in unplaced_groups(waiting) {
        for chunk in groups.chunks(arrays.max_size) {
            if budget == 0 {
                return Ok(());
            }
            let at_once = chunk.len().min(budget);
            budget -= at_once;
            let job = submit_array(owner, settings, run_dir, chunk, shape, at_once).await?;
            arrays.throttle.insert(job, at_once);
            arrays.submitted.insert(job, Instant::now());
            arrays.sizes.insert(job, chunk.len());
            for (index, group) in chunk.iter().enumerate() {
                for t in group {
                    if let Some(w) = waiting.get_mut(&t.trial_name) {
                        w.at = Some((job, index));
                    }
                }
            }
        }
    }
    Ok(())
}

/// The trials with no array task out, by resource shape (cpus, memory), as array tasks: the
/// trials of one group share one, in plan order.
fn unplaced_groups(
    waiting: &BTreeMap<String, Waiting>,
) -> BTreeMap<(u32, u64), Vec<Vec<TrialTry>>> {
    let mut unplaced: Vec<&Waiting> = waiting.values().filter(|w| w.at.is_none()).collect();
    unplaced.sort_by_key(|w| w.order);
    let mut shapes: BTreeMap<(u32, u64), Vec<Vec<TrialTry>>> = BTreeMap::new();
    let mut slot: HashMap<(u32, u64, &str), usize> = HashMap::new();
    for w in unplaced {
        let env = &w.plan.task.config.environment;
        let cpus = env.cpus.unwrap_or(1.0).ceil().max(1.0) as u32;
        let shape = (cpus, env.memory_mb.unwrap_or(1024) + WORKER_MEMORY_MB);
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
    shapes
}

/// Writes the array's spec and script, submits it, and records each task in the ledger.
async fn submit_array(
    owner: &dyn TrialLedger,
    settings: &SlurmSettings,
    run_dir: &Path,
    groups: &[Vec<TrialTry>],
    (cpus, memory_mb): (u32, u64),
    at_once: usize,
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
            // A time limit is each trial's: a task that chained trials would spend it on
            // several.
            chain: settings.time_limit.is_none(),
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
    let now = chrono::Utc::now();
    // Unique to this submission (an earlier coordinator of the run may have used `seq`): an
    // sbatch whose answer a stall swallowed is found again by it.
    let name = format!("geode-{}-{seq}-{}", owner.id(), now.timestamp_millis());
    let job = queue::submit(
        settings,
        &queue::Submission {
            script: &script,
            name: &name,
            tasks: groups.len(),
            at_once,
            cpus,
            memory_mb,
            log_dir: &log_dir,
        },
    )
    .await?;
    let submitted = now.to_rfc3339();
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
