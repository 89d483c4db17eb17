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
    /// Where pilot runs keep their jobs (sandbox scratch, run store).
    #[arg(long, default_value = "jobs/curate")]
    pub jobs_dir: PathBuf,
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
    let pilot = match super::backends::sandbox(&args.jobs_dir) {
        Ok(backend) => Some(RunPilot {
            backend,
            jobs_dir: args.jobs_dir.clone(),
            backend_kind: geode_harness::env::kind::BackendKind::Sandbox,
        }),
        Err(e) => {
            say!("geode: no sandbox backend ({e:#}); the pilot phase cannot run");
            None
        }
    };
    let pilot_ref = pilot.as_ref().map(|p| p as &dyn PilotRunner);
    let reports = curate(&args.config, until, pilot_ref, &RouteFactory { base }).await?;
    for r in &reports {
        let status = match r.status {
            PhaseStatus::Ran => "ran",
            PhaseStatus::Resumed => "resumed",
        };
        println!("{:<12} {:<8} {}", r.phase.name(), status, r.summary);
    }
    Ok(Exit::Success)
}
