//! `geode worker` (hidden): what a Slurm array task runs on its node. The coordinator writes
//! the spec; Slurm says which of its tasks this is (`SLURM_ARRAY_TASK_ID`).

use super::exit::Exit;
use std::path::PathBuf;

use clap::Args;
use geode_harness::env::kind::BackendKind;
use geode_harness::rollout::slurm::worker::{
    TaskIds, read_spec, run_array_task, run_config, run_plans,
};
use geode_harness::rollout::trial::{PhaseEvent, PhaseObserver};
use tokio_util::sync::CancellationToken;

use super::backends::make_with_base;

#[derive(Debug, Args)]
pub struct WorkerArgs {
    /// The array spec (`geode.slurm-array.v1`) in the run's `slurm/` folder.
    #[arg(long)]
    spec: PathBuf,
    /// Which task of the array this is.
    #[arg(long, env = "SLURM_ARRAY_TASK_ID")]
    index: usize,
    /// The array's job id (chaining names its claims by it).
    #[arg(long, env = "SLURM_ARRAY_JOB_ID")]
    array_job: Option<u64>,
    /// The array task's own job id (chaining asks Slurm its time left).
    #[arg(long, env = "SLURM_JOB_ID")]
    job: Option<u64>,
}

/// Phases go to the array task's log (stderr), one line each.
struct LogLines;

impl PhaseObserver for LogLines {
    fn phase(&self, trial: &str, phase: PhaseEvent<'_>) {
        say!("{trial}: {phase}");
    }
}

pub async fn run(args: WorkerArgs) -> anyhow::Result<Exit> {
    // The trials' sandboxes in this array task's own cgroups: Slurm's memory limit, its
    // process tracking (`scontrol listpids`, a cancel's kill) and its accounting see them.
    if let Ok(job) = std::env::var("SLURM_JOB_ID")
        && let Err(e) = geode_harness::env::cgroup::nest_in_own_groups(&format!("job_{job}"))
    {
        say!("geode worker: sandboxes' cgroups at the hierarchy's root, not the job's: {e}");
    }
    let spec = read_spec(&args.spec)?;
    let (plans, backend) = match &spec.campaign {
        // A campaign runs in the sandbox, as `geode crucible run` does locally.
        Some(plan) => (
            geode_harness::crucible::remote::worker_plans(plan)?,
            super::backends::sandbox(&spec.jobs_dir)?,
        ),
        None => {
            let config = run_config(&spec)?;
            // The host backend was allowed when the run was started; the worker runs what it
            // was given.
            let backend = make_with_base(
                config.backend,
                config.backend == BackendKind::Host,
                &spec.jobs_dir,
                config.base,
            )?;
            (run_plans(&spec, &config)?, backend)
        }
    };
    // Slurm ends a cancelled or timed-out task with SIGTERM: the trials see the cancellation
    // and tear their sandboxes down.
    let cancel = CancellationToken::new();
    let on_term = cancel.clone();
    tokio::spawn(async move {
        if let Ok(mut term) =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        {
            term.recv().await;
            on_term.cancel();
        }
    });
    let ids = match (args.array_job, args.job) {
        (Some(array_job), Some(job)) => Some(TaskIds { array_job, job }),
        _ => None,
    };
    run_array_task(
        &args.spec, args.index, ids, plans, backend, &LogLines, &cancel,
    )
    .await?;
    Ok(Exit::Success)
}
