//! `geode exec`: one headless turn.
//!
//! Exit codes: 0 the turn ended with an accepted answer; 1 model or setup error; 2 bad
//! arguments; 3 a guard or budget stopped the turn; 4 the prompt was blocked by a hook;
//! 5 verification failed or asked for an outside check; 130 cancelled (Ctrl-C).

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, bail};
use clap::Args;
use geode_runtime::agent::{LoopEvent, TerminationReason, TurnOutcome, Verdict};
use geode_runtime::hooks::HookRegistry;
use geode_runtime::hooks::command::load_command_hooks;
use geode_runtime::ids::SessionId;
use geode_runtime::model::embedded_from_route;
use geode_runtime::policy::{SafetyLevel, SessionMode, SessionPolicy};
use geode_runtime::scaffold::Scaffold;
use geode_runtime::session::{SessionConfig, create_session};
use geode_runtime::store::timeline::SessionTimeline;
use geode_runtime::tools::workspace::{LocalWorkspace, Workspace};
use tokio_util::sync::CancellationToken;

#[derive(Debug, Args)]
pub struct ExecArgs {
    /// Model route: nop, scripted:FILE, oracle:SOLVE_SH, replay:TIMELINE_DB[#SESSION].
    #[arg(long, env = "GEODE_MODEL")]
    model: String,
    /// Workspace root (default: the current directory).
    #[arg(long)]
    cwd: Option<PathBuf>,
    /// Print JSONL events on stdout instead of the final text.
    #[arg(long)]
    json: bool,
    /// Approve unattended calls up to this safety level: safe, write, expensive, sensitive,
    /// dangerous. `dangerous` also allows the shell. Nothing above `safe` is approved otherwise.
    #[arg(long, default_value = "safe", value_parser = parse_level)]
    allow: SafetyLevel,
    /// Timeline database (default: $GEODE_HOME/timeline.db, GEODE_HOME defaulting to ~/.geode).
    #[arg(long)]
    timeline: Option<PathBuf>,
    /// Do not write a timeline.
    #[arg(long, conflicts_with = "timeline")]
    no_timeline: bool,
    /// Command hooks in TOML (`[[hooks.PreToolUse]]`, the Claude Code shape).
    #[arg(long)]
    hooks: Vec<PathBuf>,
    /// Scaffold file (TOML) overriding prompt, verify, guards.
    #[arg(long)]
    scaffold: Option<PathBuf>,
    /// Maximum rounds of the turn.
    #[arg(long)]
    max_rounds: Option<u32>,
    /// Wall-clock budget of the turn, in seconds.
    #[arg(long)]
    time_budget: Option<u64>,
    /// Session id to record under (default: a fresh one).
    #[arg(long)]
    session_id: Option<String>,
    /// The prompt; `-` reads it from stdin.
    prompt: String,
}

fn parse_level(s: &str) -> Result<SafetyLevel, String> {
    SafetyLevel::parse(s).ok_or_else(|| {
        format!("unknown safety level {s:?} (safe, write, expensive, sensitive, dangerous)")
    })
}

fn geode_home() -> PathBuf {
    if let Some(h) = std::env::var_os("GEODE_HOME") {
        return PathBuf::from(h);
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from);
    home.join(".geode")
}

fn load_scaffold(args: &ExecArgs) -> anyhow::Result<Scaffold> {
    let mut scaffold = match &args.scaffold {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read scaffold {}", path.display()))?;
            toml::from_str(&text).with_context(|| format!("scaffold {}", path.display()))?
        }
        None => Scaffold::default(),
    };
    if let Some(n) = args.max_rounds {
        scaffold.guards.max_rounds = n;
    }
    if let Some(s) = args.time_budget {
        scaffold.guards.turn_time_budget_secs = Some(s);
    }
    Ok(scaffold)
}

pub async fn run(args: ExecArgs) -> anyhow::Result<ExitCode> {
    let prompt = if args.prompt == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .context("reading the prompt from stdin")?;
        s
    } else {
        args.prompt.clone()
    };
    if prompt.trim().is_empty() {
        bail!("the prompt is empty");
    }
    let cwd = match &args.cwd {
        Some(c) => c.clone(),
        None => std::env::current_dir()?,
    };
    let workspace = Arc::new(
        LocalWorkspace::new(&cwd).with_context(|| format!("workspace {}", cwd.display()))?,
    );
    let model = embedded_from_route(&args.model)?;
    let mut policy = SessionPolicy::for_mode(SessionMode::Headless);
    if args.allow > SafetyLevel::Safe {
        policy = policy.grant_unattended(args.allow, format!("geode exec --allow {}", args.allow));
    }
    let mut hooks = HookRegistry::new();
    for path in &args.hooks {
        load_command_hooks(&mut hooks, path, workspace.root())?;
    }
    let timeline = if args.no_timeline {
        None
    } else {
        let path = args
            .timeline
            .clone()
            .unwrap_or_else(|| geode_home().join("timeline.db"));
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        Some(Arc::new(SessionTimeline::open(&path)?))
    };
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<LoopEvent>();
    let mut cfg = SessionConfig::new(policy, workspace, model);
    cfg.scaffold = load_scaffold(&args)?;
    cfg.hooks = hooks;
    cfg.timeline = timeline;
    cfg.events = Some(tx);
    if let Some(id) = &args.session_id {
        cfg.session_id = SessionId::new(id.clone());
    }
    let mut session = create_session(cfg)?;
    eprintln!("geode: session {}", session.session_id());

    let json = args.json;
    let printer = tokio::spawn(async move {
        while let Some(event) = rx.recv().await {
            if json {
                if let Ok(line) = serde_json::to_string(&event) {
                    println!("{line}");
                }
            } else {
                log_event(&event);
            }
        }
    });

    let cancel = CancellationToken::new();
    let on_signal = cancel.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            eprintln!("geode: cancelling the turn (Ctrl-C)");
            on_signal.cancel();
        }
    });
    let outcome = session.run_turn(&prompt, &cancel).await;
    session.close(outcome.termination.as_str()).await;
    drop(session);
    // The sender lives in the session; once it is dropped the printer drains and ends.
    let _ = printer.await;
    if !json {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{}", outcome.text)?;
    }
    eprintln!(
        "geode: {} (verification {}), {} rounds, {} tool calls, {} tokens",
        outcome.termination,
        outcome.verdict.name(),
        outcome.rounds,
        outcome.tool_calls,
        outcome.usage.total_tokens()
    );
    Ok(ExitCode::from(exit_code(&outcome)))
}

fn log_event(event: &LoopEvent) {
    match event {
        LoopEvent::ToolStarted { tool, input, .. } => eprintln!("geode: tool {tool} {input}"),
        LoopEvent::ToolEnded { tool, outcome, .. } => {
            eprintln!("geode: tool {tool} -> {outcome:?}")
        }
        LoopEvent::Verification {
            verdict, misses, ..
        } if !misses.is_empty() => {
            eprintln!("geode: verification {verdict}: {}", misses.join("; "))
        }
        _ => {}
    }
}

fn exit_code(o: &TurnOutcome) -> u8 {
    use TerminationReason as T;
    match o.termination {
        T::Natural | T::ForcedText => match o.verdict {
            Verdict::Failed { .. } | Verdict::Escalated { .. } => 5,
            _ => 0,
        },
        T::ExternalVerificationRequired => 5,
        T::InputBlocked => 4,
        T::UserCancelled => 130,
        T::LlmError | T::BillingError | T::CheckpointFailed => 1,
        _ => 3,
    }
}
