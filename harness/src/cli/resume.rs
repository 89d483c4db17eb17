//! `geode resume [SESSION_ID | --last] [--prompt TEXT]`: continue a checkpointed session.
//!
//! Without a prompt it finishes the turn a crash interrupted: the batch pending at the crash is
//! settled first (uncertain effects are reported here and told to the model, never re-run;
//! calls that never started run now), then the loop goes on. With a prompt it starts a new
//! turn (reopening a completed session). The model route, effort and workspace default to the
//! ones the session was checkpointed with. Exit codes are those of `geode exec`.

use super::exit::Exit;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, bail};
use clap::Args;
use geode_runtime::agent::restore::{Disposition, RestoreReport, latest_session, load_checkpoint};
use geode_runtime::ids::SessionId;
use geode_runtime::model::effort::Effort;
use geode_runtime::model::http::RouteOptions;
use geode_runtime::model::model_for;
use geode_runtime::session::resume_session;

use super::assembly::{checkpoint_root, checkpoint_settings};
use super::exec::{Driver, TurnFlags, read_prompt};

#[derive(Debug, Args)]
pub struct ResumeArgs {
    /// The session to resume.
    #[arg(required_unless_present = "last", conflicts_with = "last")]
    session_id: Option<String>,
    /// Resume the session updated last.
    #[arg(long)]
    last: bool,
    /// A new prompt (`-` reads stdin). Without one, the interrupted turn is finished.
    #[arg(short, long)]
    prompt: Option<String>,
    /// Model route (default: the route the session was checkpointed with).
    /// Text, parsed below: as exec, a bad route exits 1 rather than with clap's usage error.
    #[arg(long)]
    model: Option<String>,
    /// Reasoning effort (default: the session's).
    #[arg(long, value_parser = super::effort_parser())]
    effort: Option<Effort>,
    /// Workspace root (default: the session's).
    #[arg(long)]
    cwd: Option<PathBuf>,
    #[command(flatten)]
    turn: TurnFlags,
    /// Directory of session checkpoints (default: $GEODE_HOME/sessions).
    #[arg(long, value_name = "DIR")]
    checkpoint_dir: Option<PathBuf>,
}

pub async fn run(args: ResumeArgs, sandbox: Option<&str>) -> anyhow::Result<Exit> {
    let root = checkpoint_root(args.checkpoint_dir.as_ref());
    let id = match &args.session_id {
        Some(id) => SessionId::new(id.clone()),
        None => latest_session(&root)
            .with_context(|| format!("no resumable session under {}", root.display()))?,
    };
    let prompt = args.prompt.as_deref().map(read_prompt).transpose()?;
    let saved =
        load_checkpoint(&root, &id).with_context(|| format!("cannot resume session {id}"))?;
    let in_progress = saved.state.turn.is_some() || saved.state.pending_batch.is_some();
    if prompt.is_none() && !in_progress {
        bail!(
            "session {id} is {} with no interrupted turn to finish; give --prompt to continue it",
            saved.row.status
        );
    }
    let text = args.model.as_deref().unwrap_or(&saved.state.model_route);
    let route = match text.trim() {
        "" => super::providers::required_route(None)?,
        text => text.parse()?,
    };
    let effort = args.effort.or(saved.state.effort);
    let cwd = args
        .cwd
        .clone()
        .unwrap_or_else(|| PathBuf::from(&saved.state.cwd));
    let flags = sandbox
        .map(|mode| vec![("sandbox".to_string(), mode.to_string())])
        .unwrap_or_default();
    let resolved = geode_runtime::config::Config::resolve(
        &geode_runtime::config::Layers::discover(flags, &cwd, &super::assembly::geode_home()),
    )?;
    let workspace = Arc::new(super::assembly::person_workspace(&cwd, &resolved)?);
    let mut route_options = RouteOptions::from_env();
    route_options.effort = effort;
    let model = model_for(&route, &route_options)?;
    let (mut cfg, rx) = args.turn.session_config("resume", workspace, model)?;
    cfg.session_id = id.clone();
    cfg.skills = Arc::new(super::skills::local_skills(&cwd).await?);
    // The session's MCP tools again, so its pending calls find the same plan.
    let mcp = super::mcp::client_manager(&cwd).await?;
    cfg.extra_tools
        .push(geode_runtime::tools::builtin::WebFetchTool::bound());
    cfg.extra_tools.extend(mcp.tools());
    cfg.checkpoint = Some(checkpoint_settings(root, Some(&route), effort)?);
    let (mut session, report) =
        resume_session(cfg).with_context(|| format!("cannot resume session {id}"))?;
    print_report(&report);
    let driver = Driver::start(args.turn.json, rx);
    let outcome = session
        .resume_turn(prompt.as_deref(), &driver.cancel)
        .await?;
    driver.finish(session, outcome).await
}

/// What the resume found, on stderr: above all, every effect whose outcome is unknown.
fn print_report(r: &RestoreReport) {
    say!(
        "geode: resuming session {} (was {}; {} messages{})",
        r.session_id,
        r.from_status,
        r.messages,
        if r.turn_in_progress {
            "; finishing the interrupted turn"
        } else {
            ""
        }
    );
    for call in &r.pending {
        let what = match call.disposition {
            Disposition::Uncertain => "outcome UNCERTAIN: it had started when the process \
                                       stopped; not run again"
                .to_string(),
            Disposition::Committed => {
                "finished before the stop; its result comes from its receipt".to_string()
            }
            Disposition::Reconciled => "reconciled by hand; not run again".to_string(),
            Disposition::Rerun => "never started (or has no effect); running it now".to_string(),
        };
        say!(
            "geode: pending call {} ({}): {what}",
            call.call_id,
            call.tool
        );
    }
    for receipt in &r.unresolved {
        say!(
            "geode: uncertain effect {} ({} {}): check it, then `geode receipts reconcile {} \
             --session {} --outcome done|not-done`",
            receipt.call_id,
            receipt.tool,
            receipt.input,
            receipt.call_id,
            r.session_id
        );
    }
}
