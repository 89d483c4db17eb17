//! `geode bench`: the environment's own costs, measured the way the issue tracker asks for
//! them (medians of real sandboxes, not timed tests).
//!
//! - `geode bench env PACK`: per-trial environment set-up and teardown with every task's image
//!   already cached, `-r` times per task; medians per task and over the pack.
//! - `geode bench image REF`: the first pull and unpack of an image into an empty store, then
//!   sandbox start + `true` + teardown on it; with `--docker` (a reachable docker engine),
//!   `docker pull` and `docker run --rm IMAGE true` of the same reference, and the ratios.
//! - `geode bench pull REF`: first pulls of an image into empty stores, `-r` times, each
//!   beside a `docker pull` of the same reference with `--docker` (`bench_pull.rs`).
//! - `geode bench view`: the viewer's answers over a synthetic jobs folder (`bench_view.rs`).
//! - `geode bench slurm-overhead PACK`: the pack run here and on the Slurm cluster, alternated;
//!   the cluster's overhead per trial (`bench_slurm.rs`).
//! - `geode bench command`: a person's shell command (`true`) unconfined and in the command
//!   sandbox, alternated, with the medians and their difference (the sandbox's start cost).
//! - `geode bench gateway`: a streamed call's first text through the model gateway against
//!   the embedded model asked directly (`bench_gateway.rs`).

use super::exit::Exit;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::bail;
use clap::Subcommand;
use geode_harness::env::image::{ImageStore, PullOptions, Reference};
use geode_harness::env::{Backend, EnvironmentSpec, NetworkPolicy, Sandbox, SandboxBackend};
use geode_harness::pack::TaskPack;
use geode_harness::rollout::trial::environment_spec;
use geode_runtime::tools::workspace::ExecRequest;
use tokio_util::sync::CancellationToken;

use super::backends::ImageSettings;
use super::bench_support::{backend, median, tempfile_dir};

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Per-trial environment set-up + teardown over a pack, images cached.
    Env {
        /// The task pack whose images the sandboxes start from.
        pack: PathBuf,
        /// Sandboxes per task.
        #[arg(short = 'r', long, default_value_t = 10)]
        repeat: usize,
    },
    /// First pull + unpack of an image, then sandbox start/exec/teardown on it.
    Image {
        /// The image reference to pull into a fresh store.
        reference: String,
        /// Sandboxes started on the pulled image.
        #[arg(short = 'r', long, default_value_t = 10)]
        repeat: usize,
        /// Also time `docker pull` and `docker run --rm` of the same reference.
        #[arg(long)]
        docker: bool,
    },
    /// First pulls of an image into empty stores, beside `docker pull` of it with --docker.
    Pull(super::bench_pull::BenchPullArgs),
    /// `geode view` on a synthetic jobs folder: listing runs and trials, filters, transcript search.
    View(super::bench_view::BenchViewArgs),
    /// What a third-party agent's installed layer adds to a trial's set-up, and the agent
    /// phase's gateway before the agent starts.
    Agent {
        /// The agent (claude-code[@VERSION], codex[@VERSION], mini-swe-agent[@VERSION]).
        agent: geode_harness::agents::AgentChoice,
        /// The task pack whose images the sandboxes start from.
        pack: PathBuf,
        /// Pairs (without, with the layer) per task.
        #[arg(short = 'r', long, default_value_t = 10)]
        repeat: usize,
    },
    /// A pack run here and on the Slurm cluster (`SLURM_CONF`), alternated: the overhead per trial.
    SlurmOverhead(super::bench_slurm::BenchSlurmArgs),
    /// A shell command (`true`) of a person's session, unconfined and in the command sandbox.
    Command {
        /// Runs of each, alternated.
        #[arg(short = 'r', long, default_value_t = 50)]
        repeat: usize,
    },
    /// A streamed call through the model gateway against the embedded model asked directly.
    Gateway(super::bench_gateway::BenchGatewayArgs),
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

/// Start, optionally run `true`, tear down: the three times.
async fn cycle(
    backend: &SandboxBackend,
    spec: &EnvironmentSpec,
    image: &geode_harness::env::PreparedImage,
    trial: &std::path::Path,
    exec: bool,
) -> anyhow::Result<(Duration, Duration, Duration)> {
    let t = Instant::now();
    let sandbox = backend.start_sandbox(spec, image, trial).await?;
    let up = t.elapsed();
    let t = Instant::now();
    if exec {
        let req = ExecRequest {
            command: "true".into(),
            cwd: None,
            timeout: Duration::from_secs(30),
            output_cap: 4096,
            env: Vec::new(),
        };
        sandbox.exec(req, CancellationToken::new()).await?;
    }
    let ran = t.elapsed();
    let t = Instant::now();
    Box::new(sandbox).teardown().await?;
    Ok((up, ran, t.elapsed()))
}

pub async fn run(cmd: BenchCommand) -> anyhow::Result<Exit> {
    match cmd {
        BenchCommand::View(args) => return super::bench_view::run(args).await,
        BenchCommand::Pull(args) => return super::bench_pull::run(args).await,
        BenchCommand::SlurmOverhead(args) => return super::bench_slurm::run(args).await,
        BenchCommand::Gateway(args) => return super::bench_gateway::run(args).await,
        BenchCommand::Command { repeat } => {
            return bench_command(repeat).await.map(|()| Exit::Success);
        }
        BenchCommand::Agent {
            agent,
            pack,
            repeat,
        } => {
            return super::bench_agent::run(&agent, &pack, repeat)
                .await
                .map(|()| Exit::Success);
        }
        _ => {}
    }
    let settings = ImageSettings::load()?;
    let scratch = tempfile_dir(&settings.store)?;
    let result = match cmd {
        BenchCommand::Env { pack, repeat } => bench_env(&settings, &scratch, &pack, repeat).await,
        BenchCommand::Image {
            reference,
            repeat,
            docker,
        } => bench_image(&settings, &scratch, &reference, repeat, docker).await,
        // Answered above, before any image settings are read.
        BenchCommand::View(_)
        | BenchCommand::Pull(_)
        | BenchCommand::SlurmOverhead(_)
        | BenchCommand::Gateway(_)
        | BenchCommand::Command { .. }
        | BenchCommand::Agent { .. } => Ok(()),
    };
    let _ = std::fs::remove_dir_all(&scratch);
    result.map(|()| Exit::Success)
}

/// `true` in a scratch workspace, unconfined then confined, `repeat` times each.
async fn bench_command(repeat: usize) -> anyhow::Result<()> {
    use geode_runtime::tools::workspace::{
        CommandSandbox, LocalWorkspace, SandboxPolicy, Workspace,
    };
    if repeat == 0 {
        bail!("-r must be at least 1");
    }
    let dir = tempfile::tempdir()?;
    let open = LocalWorkspace::new(dir.path())?;
    let confined = open
        .clone()
        .with_sandbox(CommandSandbox::WorkspaceWrite(SandboxPolicy::default()));
    let once = |ws: LocalWorkspace| async move {
        let req = ExecRequest {
            command: "true".into(),
            cwd: None,
            timeout: Duration::from_secs(30),
            output_cap: 1024,
            env: Vec::new(),
        };
        let t = Instant::now();
        let out = ws.exec(req, CancellationToken::new()).await?;
        if out.exit_code != Some(0) {
            bail!("`true` failed: {out:?}");
        }
        Ok::<_, anyhow::Error>(t.elapsed())
    };
    let (mut plain, mut sandboxed) = (Vec::new(), Vec::new());
    for _ in 0..repeat {
        plain.push(once(open.clone()).await?);
        sandboxed.push(once(confined.clone()).await?);
    }
    let (p, c) = (median(plain), median(sandboxed));
    println!(
        "command start + `true` + exit, median of {repeat}: unconfined {}, sandboxed {}, \
         sandbox adds {}",
        ms(p),
        ms(c),
        ms(c.saturating_sub(p))
    );
    Ok(())
}

async fn bench_env(
    settings: &ImageSettings,
    scratch: &std::path::Path,
    pack: &std::path::Path,
    repeat: usize,
) -> anyhow::Result<()> {
    let pack = TaskPack::load(pack)?;
    let backend = backend(settings.store.clone(), &scratch.join("state"))?;
    let (mut ups, mut downs, mut totals) = (Vec::new(), Vec::new(), Vec::new());
    for task in &pack.tasks {
        let spec = environment_spec(task, 1.0, None);
        let image = backend.prepare(&spec).await?;
        let (mut up_t, mut down_t) = (Vec::new(), Vec::new());
        for i in 0..repeat.max(1) {
            let trial = scratch
                .join("trials")
                .join(format!("{}-{i}", task.id.replace('/', "-")));
            let (up, _, down) = cycle(&backend, &spec, &image, &trial, false).await?;
            up_t.push(up);
            down_t.push(down);
            totals.push(up + down);
        }
        println!(
            "{:<34} set-up {:>9}  teardown {:>9}",
            task.id,
            ms(median(up_t.clone())),
            ms(median(down_t.clone()))
        );
        ups.extend(up_t);
        downs.extend(down_t);
    }
    println!(
        "over {} tasks x {repeat}: set-up {}, teardown {}, set-up + teardown {} (medians)",
        pack.tasks.len(),
        ms(median(ups)),
        ms(median(downs)),
        ms(median(totals))
    );
    Ok(())
}

async fn bench_image(
    settings: &ImageSettings,
    scratch: &std::path::Path,
    raw: &str,
    repeat: usize,
    docker: bool,
) -> anyhow::Result<()> {
    let reference = Reference::parse(raw)?;
    let store_dir = scratch.join("store");
    let store = ImageStore::open(&store_dir)?;
    let opts = PullOptions {
        mirrors: settings.mirrors.clone(),
        docker_config: None,
        progress: None::<Arc<dyn Fn(&str) + Send + Sync>>,
    };
    let t = Instant::now();
    let image = store.pull(&reference, &opts).await?;
    let pulled = t.elapsed();
    println!(
        "geode: first pull + unpack of {reference} ({:.0} MB unpacked, {} layers): {:.2} s",
        image.size_bytes as f64 / 1e6,
        image.layers.len(),
        pulled.as_secs_f64()
    );
    let backend = backend(store_dir.clone(), &scratch.join("state"))?;
    let spec = EnvironmentSpec {
        task_name: "bench".into(),
        environment_dir: scratch.to_path_buf(),
        build: None,
        network: NetworkPolicy::Off,
        cpus: None,
        memory_mb: None,
        pids_max: Some(512),
        storage_mb: None,
        build_timeout: Duration::from_secs(600),
        time_limits: None,
        env: Vec::new(),
        docker_image: Some(raw.to_string()),
        build_args: Vec::new(),
        build_log: None,
        group: Default::default(),
    };
    let prepared = backend.prepare(&spec).await?;
    let mut runs = Vec::new();
    for i in 0..repeat.max(1) {
        let trial = scratch.join("trials").join(format!("b{i}"));
        let (up, ran, down) = cycle(&backend, &spec, &prepared, &trial, true).await?;
        runs.push(up + ran + down);
    }
    let ours = median(runs);
    println!(
        "geode: sandbox start + `true` + teardown: {} (median of {repeat})",
        ms(ours)
    );
    if !docker {
        return Ok(());
    }
    let docker_ok = std::process::Command::new("docker")
        .arg("info")
        .output()
        .is_ok_and(|o| o.status.success());
    if !docker_ok {
        bail!("--docker: no docker engine answers `docker info`");
    }
    let _ = std::process::Command::new("docker")
        .args(["rmi", "-f", raw])
        .output();
    let t = Instant::now();
    let pull = std::process::Command::new("docker")
        .args(["pull", "-q", raw])
        .output()?;
    let docker_pull = t.elapsed();
    if !pull.status.success() {
        bail!(
            "docker pull {raw}: {}",
            String::from_utf8_lossy(&pull.stderr)
        );
    }
    let mut runs = Vec::new();
    for _ in 0..repeat.max(1) {
        let t = Instant::now();
        let out = std::process::Command::new("docker")
            .args(["run", "--rm", "--network", "none", raw, "true"])
            .output()?;
        if !out.status.success() {
            bail!("docker run: {}", String::from_utf8_lossy(&out.stderr));
        }
        runs.push(t.elapsed());
    }
    let theirs = median(runs);
    println!(
        "docker: pull {:.2} s; run --rm `true` {} (median of {repeat})",
        docker_pull.as_secs_f64(),
        ms(theirs)
    );
    println!(
        "ratios (docker / geode): pull {:.2}x, per-trial environment {:.1}x",
        docker_pull.as_secs_f64() / pulled.as_secs_f64(),
        theirs.as_secs_f64() / ours.as_secs_f64()
    );
    Ok(())
}
