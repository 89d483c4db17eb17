//! `geode curate CONFIG`: the checkpointed, resumable curation pipeline.

use super::exit::Exit;
use std::path::{Path, PathBuf};

use clap::Args;
use geode_harness::curate::pilot::RunPilot;
use geode_harness::curate::pipeline::{
    Phase, PhaseStatus, PilotRunner, RouteFactory, run as curate,
};

#[derive(Debug, Args)]
pub struct CurateArgs {
    /// Curation config (geode.curate.v1, TOML).
    pub config: PathBuf,
    /// Stop after this phase (synthesis, dedup, pilot, tournament, meta-review, selection,
    /// freeze); a later run resumes from the checkpoints.
    #[arg(long)]
    pub until: Option<String>,
    /// Where pilot runs keep their jobs (sandbox scratch, run store); default `jobs/curate`
    /// beside the config, as every path the config names is read from its folder.
    #[arg(long)]
    pub jobs_dir: Option<PathBuf>,
}

/// The pilot's sandbox, made when the pilot phase first runs: a curation that fails before it
/// (a bad config, an earlier phase) leaves no jobs folder behind.
struct LazyPilot {
    jobs_dir: PathBuf,
    pilot: tokio::sync::OnceCell<Result<RunPilot, String>>,
}

#[async_trait::async_trait]
impl PilotRunner for LazyPilot {
    async fn run(
        &self,
        task_dir: &Path,
        agent: &str,
        trials: u32,
        seed: u64,
    ) -> Result<Vec<bool>, String> {
        let pilot = self
            .pilot
            .get_or_init(|| async {
                super::backends::sandbox(&self.jobs_dir)
                    .map(|backend| RunPilot {
                        backend,
                        jobs_dir: self.jobs_dir.clone(),
                        backend_kind: geode_harness::env::kind::BackendKind::Sandbox,
                    })
                    .map_err(|e| format!("no sandbox backend for the pilot phase: {e:#}"))
            })
            .await;
        match pilot {
            Ok(p) => p.run(task_dir, agent, trials, seed).await,
            Err(e) => Err(e.clone()),
        }
    }
}

pub async fn run(args: CurateArgs) -> anyhow::Result<Exit> {
    let until = match &args.until {
        Some(name) => Some(
            Phase::parse(name)
                .ok_or_else(|| anyhow::anyhow!("--until {name:?}: not a phase of geode curate"))?,
        ),
        None => None,
    };
    let base = args
        .config
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    // Without a sandbox the pipeline still runs; only an enabled pilot phase then fails.
    let pilot = LazyPilot {
        jobs_dir: args
            .jobs_dir
            .clone()
            .unwrap_or_else(|| base.join("jobs").join("curate")),
        pilot: tokio::sync::OnceCell::new(),
    };
    let reports = curate(
        &args.config,
        until,
        Some(&pilot as &dyn PilotRunner),
        &RouteFactory { base },
    )
    .await?;
    for r in &reports {
        let status = match r.status {
            PhaseStatus::Ran => "ran",
            PhaseStatus::Resumed => "resumed",
        };
        println!("{:<12} {:<8} {}", r.phase.name(), status, r.summary);
    }
    Ok(Exit::Success)
}
