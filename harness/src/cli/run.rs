//! `geode run`: a benchmark run of a task pack (tasks x attempts), resumable.

use super::exit::Exit;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, bail};
use clap::Args;
use geode_harness::agents::AgentChoice;
use geode_harness::env::BaseMode;
use geode_harness::env::kind::BackendKind;
use geode_harness::rollout::harbor;
use geode_harness::rollout::job::{CONFIG_SCHEMA, ResumeOptions, RunConfig, resume_run, start_run};
use geode_harness::rollout::slurm::SlurmSettings;
use geode_harness::rollout::slurm::settings::reserved_option;
use geode_runtime::model::catalog::Route;
use geode_runtime::scaffold::Scaffold;
use tokio_util::sync::CancellationToken;

use super::backends::make_with_base;
use super::terminal::progress::Progress;

/// Where a run's trials execute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ExecutorKind {
    Local,
    Slurm,
}

/// `--executor` and the Slurm options, shared by `geode run` and `geode crucible run`.
#[derive(Debug, Args)]
pub struct ExecutorArgs {
    /// Where trials run: `local` (this machine) or `slurm` (job arrays on a Slurm cluster whose
    /// nodes share the jobs folder; each array task runs `geode worker`).
    #[arg(long, value_enum, default_value_t = ExecutorKind::Local)]
    pub executor: ExecutorKind,
    /// With --executor slurm: `sbatch --partition`.
    #[arg(long)]
    partition: Option<String>,
    /// With --executor slurm: `sbatch --account`.
    #[arg(long)]
    account: Option<String>,
    /// With --executor slurm: `sbatch --time` of each array task (`30`, `1:00:00`). A trial
    /// Slurm stops at it ends as an agent timeout (class SlurmTimeLimit) and is not retried.
    #[arg(long)]
    time_limit: Option<String>,
    /// With --executor slurm: any other sbatch option, passed as given; repeatable
    /// (`--sbatch-arg=--qos=high --sbatch-arg=--constraint=avx2`). The array's own options
    /// (--array, --output, --job-name, --parsable, --wrap, --requeue) stay the executor's.
    /// Recorded with the run: a resume submits with the same options unless given new ones.
    #[arg(long = "sbatch-arg", value_name = "OPTION", allow_hyphen_values = true)]
    sbatch_args: Vec<String>,
    /// With --executor slurm: how long (seconds) a Slurm controller that does not answer is
    /// waited out, with backoff, before the run gives up [default: 600].
    #[arg(long, value_name = "SECS")]
    slurm_stall_timeout: Option<u64>,
    /// With --executor slurm: the `geode` the nodes run, on the shared filesystem (this
    /// binary by default).
    #[arg(long)]
    worker_bin: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The task pack (a folder of Harbor tasks, or one task).
    pack: Option<PathBuf>,
    /// Agent model route: oracle, nop, scripted:FILE, ...
    #[arg(long, env = "GEODE_MODEL")]
    model: Option<Route>,
    /// The agent under test: geode (this runtime, the default), claude-code[@VERSION],
    /// codex[@VERSION], mini-swe-agent[@VERSION], or command:PROGRAM (any program that reads
    /// the instruction from $GEODE_INSTRUCTION or its standard input). A third-party agent runs
    /// inside the task's sandbox; its every model call goes through the trial's gateway to
    /// --model.
    #[arg(long, value_name = "NAME[@VERSION]")]
    agent: Option<AgentChoice>,
    /// Attempts per task.
    #[arg(short = 'k', long, default_value_t = 1)]
    attempts: u32,
    /// Trials running at once.
    #[arg(short = 'n', long, default_value_t = 1)]
    concurrency: usize,
    /// Run seed; every trial's seed derives from it.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Only tasks whose id matches this glob (`geode/git-*`).
    #[arg(long)]
    tasks: Option<String>,
    /// Scale every task timeout (agent, verifier, build).
    #[arg(long, default_value_t = 1.0)]
    timeout_multiplier: f64,
    /// Where runs are kept (the run store `geode.db` and one folder per run).
    #[arg(long, default_value = "jobs")]
    jobs_dir: PathBuf,
    /// Environment backend: `sandbox` (default), `docker` (a docker engine on this machine),
    /// `kubernetes` (a Pod per trial in the cluster `[kubernetes]` of config.toml names) or
    /// `host` (no isolation; needs --allow-host).
    #[arg(long, value_enum, default_value_t = BackendKind::Sandbox)]
    env: BackendKind,
    /// Allow the `host` backend, which runs tasks on this machine without isolation.
    #[arg(long)]
    allow_host: bool,
    /// What trials are rooted in: `image` (the image each task names; default) or `host` (the
    /// host's own root with the Dockerfile's steps over it, labelled so in every result).
    #[arg(long, value_enum, default_value_t = BaseMode::Image)]
    base: BaseMode,
    /// Scaffold file (TOML).
    #[arg(long)]
    scaffold: Option<PathBuf>,
    /// Retries of a trial that ended in a retryable infrastructure outcome.
    #[arg(long, default_value_t = 2)]
    max_infra_retries: u32,
    /// Keep each trial's final workspace (`<trial>/workspace/`), so `geode grade` can run a
    /// rubric's command criteria again.
    #[arg(long)]
    keep_workspace: bool,
    #[command(flatten)]
    executor: ExecutorArgs,
    /// Resume this run: finished trials are kept, the rest run again.
    #[arg(long, value_name = "RUN")]
    resume: Option<String>,
    /// With --resume: also run again the finished trials that ended with this exception class
    /// (`result.json`'s `exception_info.exception_type`, e.g. SandboxError); repeatable.
    #[arg(long = "rerun", value_name = "CLASS", requires = "resume")]
    rerun_exceptions: Vec<String>,
    /// Print the summary as JSON on stdout.
    #[arg(long)]
    json: bool,
}

pub async fn run(mut args: RunArgs) -> anyhow::Result<Exit> {
    // One absolute folder from here on: the run's records name it, and engines and workers
    // started elsewhere (docker's volumes, Slurm's nodes) would read a relative one differently.
    args.jobs_dir = std::path::absolute(&args.jobs_dir)
        .with_context(|| format!("--jobs-dir {}", args.jobs_dir.display()))?;
    let cancel = CancellationToken::new();
    cancel_on_signals(cancel.clone());
    let progress = Arc::new(Progress::new());
    let outcome = match &args.resume {
        Some(run_id) => {
            let config_path = args.jobs_dir.join(run_id).join("config.json");
            let mut config: RunConfig = {
                let text = std::fs::read_to_string(&config_path)
                    .with_context(|| format!("reading {}", config_path.display()))?;
                serde_json::from_str(&text).with_context(|| format!("{}", config_path.display()))?
            };
            if let Some(slurm) = args.executor.resume_settings(config.slurm.as_ref())? {
                // Recorded before the resume reads the config: this resume and the later ones
                // submit with the new settings.
                config.slurm = Some(slurm);
                let value = harbor::job_config(&config, run_id, &args.jobs_dir);
                std::fs::write(&config_path, serde_json::to_string_pretty(&value)?)
                    .with_context(|| format!("writing {}", config_path.display()))?;
            }
            let backend = make_with_base(
                config.backend,
                args.allow_host || config.backend != BackendKind::Host,
                &args.jobs_dir,
                config.base,
            )?;
            let options = ResumeOptions {
                concurrency: (args.concurrency != 1).then_some(args.concurrency),
                rerun_exceptions: args.rerun_exceptions.clone(),
            };
            resume_run(
                run_id,
                &args.jobs_dir,
                options,
                backend,
                progress,
                cancel.clone(),
            )
            .await?
        }
        None => {
            let config = new_run_config(&args)?;
            let backend = make_with_base(args.env, args.allow_host, &args.jobs_dir, args.base)?;
            start_run(config, &args.jobs_dir, backend, progress, cancel.clone()).await?
        }
    };
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
            "run_id": outcome.run_id, "run_dir": outcome.run_dir, "cancelled": outcome.cancelled,
            "summary": outcome.summary}))
            .unwrap_or_default()
        );
    } else {
        let text = format!(
            "run {} ({})\n{}",
            outcome.run_id,
            outcome.run_dir.display(),
            outcome.summary.render()
        );
        print!("{}", super::printable(&text));
    }
    Ok(if outcome.cancelled {
        Exit::Cancelled
    } else if outcome.summary.measured_nothing() {
        say!(
            "geode: no trial reached a verdict: every one ended before its agent or in \
             infrastructure (each trial's result.json under {} says why)",
            outcome.run_dir.display()
        );
        Exit::NothingEvaluated
    } else {
        Exit::Success
    })
}

/// A new run's configuration from the command line, checked before anything starts.
fn new_run_config(args: &RunArgs) -> anyhow::Result<RunConfig> {
    let Some(pack) = args.pack.clone() else {
        bail!("name a task pack (geode run PACK --model ROUTE) or --resume RUN");
    };
    let Some(model) = args.model.clone() else {
        bail!("no model: pass --model (oracle, nop, scripted:FILE, ...)");
    };
    if args.attempts == 0 {
        bail!("-k must be at least 1");
    }
    if !(args.timeout_multiplier.is_finite() && args.timeout_multiplier > 0.0) {
        bail!("--timeout-multiplier must be a positive number");
    }
    let agent = args.agent.clone().unwrap_or_default();
    if matches!(agent, AgentChoice::Builtin { .. })
        && (args.env != BackendKind::Sandbox || args.base != BaseMode::Image)
    {
        let given = if args.base == BaseMode::Host {
            "--base host".to_string()
        } else {
            format!("--env {}", args.env)
        };
        bail!(
            "--agent {agent}: its layer is stacked over the task image's layers, which only the \
             sandbox backend on the task's image has, not {given}"
        );
    }
    let scaffold = match &args.scaffold {
        Some(p) => {
            let text =
                std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
            toml::from_str(&text).with_context(|| format!("scaffold {}", p.display()))?
        }
        None => Scaffold::default(),
    };
    Ok(RunConfig {
        schema: CONFIG_SCHEMA.into(),
        pack: std::fs::canonicalize(&pack)
            .with_context(|| format!("task pack {}", pack.display()))?,
        model,
        attempts: args.attempts,
        concurrency: args.concurrency.max(1),
        seed: args.seed,
        tasks_glob: args.tasks.clone(),
        timeout_multiplier: args.timeout_multiplier,
        backend: args.env,
        base: args.base,
        max_infra_retries: args.max_infra_retries,
        scaffold,
        agent,
        keep_workspace: args.keep_workspace,
        slurm: args.executor.slurm_settings()?,
    })
}

/// Ctrl-C or SIGTERM (`kill`, a service manager, the scheduler of a job the coordinator runs
/// in): no new trials, the running ones cancelled (a Slurm run's arrays with them), the run
/// recorded as cancelled so a resume runs what did not finish. The same signal again exits at
/// once.
pub(crate) fn cancel_on_signals(cancel: CancellationToken) {
    use tokio::signal::unix::{SignalKind, signal};
    tokio::spawn(async move {
        let mut term = match signal(SignalKind::terminate()) {
            Ok(term) => Some(term),
            Err(e) => {
                say!("geode: SIGTERM will not stop the run cleanly: {e}");
                None
            }
        };
        let terminated = async |term: &mut Option<tokio::signal::unix::Signal>| match term {
            Some(t) => t.recv().await,
            None => std::future::pending().await,
        };
        tokio::select! {
            r = tokio::signal::ctrl_c() => if r.is_err() { return },
            _ = terminated(&mut term) => {}
        }
        say!(
            "geode: stopping: no new trials, cancelling running ones (Ctrl-C again exits at once)"
        );
        cancel.cancel();
        tokio::select! {
            r = tokio::signal::ctrl_c() => if r.is_ok() { std::process::exit(130) },
            _ = terminated(&mut term) => std::process::exit(143),
        }
    });
}

/// Whether an executable file `program` is in one of `PATH`'s folders.
fn on_path(program: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|dir| {
            std::fs::metadata(dir.join(program))
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
    })
}

impl ExecutorArgs {
    /// The Slurm settings of `--executor slurm`, none for a local run.
    pub fn slurm_settings(&self) -> anyhow::Result<Option<SlurmSettings>> {
        match self.executor {
            ExecutorKind::Local => {
                if self.any_slurm_option() {
                    bail!(
                        "--partition, --account, --time-limit, --sbatch-arg, \
                         --slurm-stall-timeout and --worker-bin need --executor slurm"
                    );
                }
                Ok(None)
            }
            ExecutorKind::Slurm => {
                // Before anything is made: without Slurm's clients the run could only fail
                // later, with a half-made run folder and an OS error.
                let missing: Vec<&str> = ["sbatch", "squeue", "scancel"]
                    .into_iter()
                    .filter(|program| !on_path(program))
                    .collect();
                if !missing.is_empty() {
                    bail!(
                        "--executor slurm needs Slurm's sbatch, squeue and scancel on PATH, and {} \
                         is not there: run on a machine that submits to the cluster (a login \
                         node), or use --executor local",
                        missing.join(", ")
                    );
                }
                let worker_bin = match &self.worker_bin {
                    Some(p) => std::fs::canonicalize(p)
                        .with_context(|| format!("--worker-bin {}", p.display()))?,
                    None => std::env::current_exe().context("finding the geode binary")?,
                };
                if let Some(option) = reserved_option(&self.sbatch_args) {
                    bail!("--sbatch-arg {option}: the executor sets this option itself");
                }
                Ok(Some(SlurmSettings {
                    partition: self.partition.clone(),
                    account: self.account.clone(),
                    time_limit: self.time_limit.clone(),
                    sbatch_args: self.sbatch_args.clone(),
                    stall_secs: self.slurm_stall_timeout,
                    worker_bin,
                }))
            }
        }
    }

    fn any_slurm_option(&self) -> bool {
        self.partition.is_some()
            || self.account.is_some()
            || self.time_limit.is_some()
            || !self.sbatch_args.is_empty()
            || self.slurm_stall_timeout.is_some()
            || self.worker_bin.is_some()
    }

    /// The Slurm settings a resume runs with when the command line changes them: the recorded
    /// ones with each option given replacing its own (all of `--sbatch-arg` as one). None when
    /// nothing is given: the run goes on with what it recorded.
    pub fn resume_settings(
        &self,
        recorded: Option<&SlurmSettings>,
    ) -> anyhow::Result<Option<SlurmSettings>> {
        if self.executor == ExecutorKind::Local && !self.any_slurm_option() {
            return Ok(None);
        }
        let Some(recorded) = recorded else {
            // A local run moved to the cluster: the options as for a new run.
            return self.slurm_settings();
        };
        if let Some(option) = reserved_option(&self.sbatch_args) {
            bail!("--sbatch-arg {option}: the executor sets this option itself");
        }
        let worker_bin = match &self.worker_bin {
            Some(p) => {
                std::fs::canonicalize(p).with_context(|| format!("--worker-bin {}", p.display()))?
            }
            None => recorded.worker_bin.clone(),
        };
        Ok(Some(SlurmSettings {
            partition: self.partition.clone().or(recorded.partition.clone()),
            account: self.account.clone().or(recorded.account.clone()),
            time_limit: self.time_limit.clone().or(recorded.time_limit.clone()),
            sbatch_args: if self.sbatch_args.is_empty() {
                recorded.sbatch_args.clone()
            } else {
                self.sbatch_args.clone()
            },
            stall_secs: self.slurm_stall_timeout.or(recorded.stall_secs),
            worker_bin,
        }))
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        executor: ExecutorArgs,
    }

    fn given(args: &[&str]) -> ExecutorArgs {
        Cli::parse_from(std::iter::once("geode").chain(args.iter().copied())).executor
    }

    #[test]
    fn a_resume_keeps_the_recorded_slurm_settings_and_replaces_only_what_is_given() {
        let recorded = SlurmSettings {
            partition: Some("a".into()),
            account: Some("lab".into()),
            time_limit: Some("10".into()),
            sbatch_args: vec!["--qos=x".into(), "--nice=3".into()],
            stall_secs: Some(900),
            worker_bin: "/shared/geode".into(),
        };
        assert_eq!(given(&[]).resume_settings(Some(&recorded)).unwrap(), None);
        let moved = given(&["--partition", "b", "--sbatch-arg", "--qos=y"])
            .resume_settings(Some(&recorded))
            .unwrap()
            .unwrap();
        assert_eq!(
            moved,
            SlurmSettings {
                partition: Some("b".into()),
                sbatch_args: vec!["--qos=y".into()],
                ..recorded.clone()
            }
        );
        assert!(
            given(&["--sbatch-arg=--array=0-3"])
                .resume_settings(Some(&recorded))
                .is_err()
        );
    }
}
