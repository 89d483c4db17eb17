//! `geode exec`: one headless turn.
//!
//! The turn's end becomes the exit code through `exit_code` (the codes: `exit.rs`).
//!
//! The session is checkpointed under `$GEODE_HOME/sessions/<id>/` unless `--no-checkpoint`:
//! `geode resume` continues it after a crash, and effects get receipts (`geode receipts`).
//! Crash tests stop it at an exact point with `GEODE_FAULT_PAUSE` / `GEODE_FAULT_MARKER`
//! (runtime `agent::durable::FaultInjection`).

use super::exit::Exit;
use std::io::{IsTerminal, Read, Write};
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, bail};
use clap::Args;
use geode_runtime::agent::prompt::{DeclaredSources, load_declared_sections};
use geode_runtime::agent::{AgenticLoop, LoopEvent, TerminationReason, TurnOutcome, Verdict};
use geode_runtime::config::{Config, Layers};
use geode_runtime::hooks::HookRegistry;
use geode_runtime::hooks::command::load_command_hooks;
use geode_runtime::ids::SessionId;
use geode_runtime::model::catalog::Route;
use geode_runtime::model::effort::Effort;
use geode_runtime::model::http::RouteOptions;
use geode_runtime::model::model_for;
use geode_runtime::policy::{SafetyLevel, SessionMode, SessionPolicy};
use geode_runtime::session::{SessionConfig, create_session};
use geode_runtime::tools::workspace::{LocalWorkspace, Workspace};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::assembly::{
    checkpoint_root, checkpoint_settings, geode_home, load_scaffold, open_timeline,
    person_workspace,
};
use super::terminal::markdown::Markdown;

/// The flags `geode exec` and `geode resume` share: how the headless turn is run and recorded.
#[derive(Debug, Args)]
pub(super) struct TurnFlags {
    /// Print JSONL events on stdout instead of the final text.
    #[arg(long)]
    pub(super) json: bool,
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
    /// Command hooks: GEODE's TOML (`[[hooks.PreToolUse]]`) or Claude Code's settings JSON
    /// (`.claude/settings.json`, read as it is).
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
}

impl TurnFlags {
    /// A headless session config (`command` names the grant in the timeline) and its events.
    pub(super) fn session_config(
        &self,
        command: &str,
        workspace: Arc<LocalWorkspace>,
        model: Arc<dyn geode_runtime::model::Model>,
    ) -> anyhow::Result<(SessionConfig, UnboundedReceiver<LoopEvent>)> {
        let mut policy = SessionPolicy::for_mode(SessionMode::Headless);
        policy.shell_grant_hint = Some(format!(
            "`geode {command} --allow dangerous` allows the shell; no human is asked in headless mode"
        ));
        if self.allow > SafetyLevel::Safe {
            let reason = format!("geode {command} --allow {}", self.allow);
            policy = policy.grant_unattended(self.allow, reason);
        }
        let mut hooks = HookRegistry::new();
        for path in &self.hooks {
            let loaded = load_command_hooks(&mut hooks, path, workspace.root())?;
            super::assembly::say_notices(&geode_harness::assembly::skipped_notices(
                &loaded.skipped,
            ));
        }
        super::assembly::say_notices(&geode_harness::assembly::unmatched_notices(
            &hooks, "--hooks",
        ));
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<LoopEvent>();
        let environment =
            geode_runtime::session::environment::describe_environment(workspace.root());
        let mut cfg = SessionConfig::new(policy, workspace, model);
        cfg.environment = environment;
        cfg.scaffold = load_scaffold(self.scaffold.as_ref(), self.max_rounds, self.time_budget)?;
        cfg.hooks = hooks;
        cfg.timeline = open_timeline(self.no_timeline, self.timeline.as_ref())?;
        cfg.events = Some(tx);
        Ok((cfg, rx))
    }
}

#[derive(Debug, Args)]
pub struct ExecArgs {
    /// Model route: nop, scripted:FILE, oracle:SOLVE_SH, replay:TIMELINE_DB[#SESSION], or a
    /// provider route; else `model` of the configuration (`geode config explain`). A route that
    /// does not parse is a usage error (exit 2), as for every flag.
    #[arg(long, env = "GEODE_MODEL")]
    model: Option<Route>,
    /// Workspace root (default: the current directory).
    #[arg(long)]
    cwd: Option<PathBuf>,
    #[command(flatten)]
    turn: TurnFlags,
    /// Session id to record under (default: a fresh one).
    #[arg(long)]
    session_id: Option<String>,
    /// Save every provider request/response pair in DIR (keys stripped); replay them offline
    /// with `--model cassette:DIR`.
    #[arg(long, value_name = "DIR")]
    record: Option<PathBuf>,
    /// Reasoning effort: none, minimal, low, medium, high, xhigh, max (clamped per model).
    #[arg(long, value_parser = super::effort_parser())]
    effort: Option<Effort>,
    /// Directory of session checkpoints (default: $GEODE_HOME/sessions).
    #[arg(long, value_name = "DIR")]
    checkpoint_dir: Option<PathBuf>,
    /// Run without a checkpoint: the session cannot be resumed and the batch is not saved
    /// before it runs.
    #[arg(long, conflicts_with = "checkpoint_dir")]
    no_checkpoint: bool,
    /// The prompt; `-` reads it from stdin.
    prompt: String,
}

pub(super) fn parse_level(s: &str) -> Result<SafetyLevel, String> {
    SafetyLevel::parse(s).ok_or_else(|| {
        format!("unknown safety level {s:?} (safe, write, expensive, sensitive, dangerous)")
    })
}

pub(super) fn read_prompt(prompt: &str) -> anyhow::Result<String> {
    let text = if prompt == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .context("reading the prompt from stdin")?;
        s
    } else {
        prompt.to_string()
    };
    if text.trim().is_empty() {
        bail!("the prompt is empty");
    }
    Ok(text)
}

pub async fn run(args: ExecArgs, sandbox: Option<&str>) -> anyhow::Result<Exit> {
    let prompt = read_prompt(&args.prompt)?;
    let cwd = match &args.cwd {
        Some(c) => c.clone(),
        None => std::env::current_dir()?,
    };
    // One resolved configuration, as the REPL reads it: flags > env > project > user > defaults.
    let mut flags = Vec::new();
    if let Some(mode) = sandbox {
        flags.push(("sandbox".to_string(), mode.to_string()));
    }
    if let Some(route) = &args.model {
        flags.push(("model".to_string(), route.to_string()));
    }
    if let Some(n) = args.turn.max_rounds {
        flags.push(("max_rounds".to_string(), n.to_string()));
    }
    let resolved = Config::resolve(&Layers::discover(flags, &cwd, &geode_home()))?;
    let workspace = Arc::new(person_workspace(&cwd, &resolved)?);
    // The configuration's layers are text; the route is parsed here, once, whichever won.
    let settings = resolved.settings();
    let route = super::providers::required_route(settings.model.as_ref())?;
    let effort = args.effort.or(settings.effort);
    let mut route_options = RouteOptions::from_env();
    route_options.record_dir = args.record.clone();
    route_options.effort = effort;
    let model = model_for(&route, &route_options)?;
    let root = workspace.root().to_path_buf();
    let (mut cfg, rx) = args.turn.session_config("exec", workspace, model)?;
    cfg.skills = Arc::new(super::skills::local_skills(&cwd).await?);
    // A scaffold file is a research artifact: it keeps its own prompt and guards.
    if args.turn.scaffold.is_none() {
        cfg.scaffold.guards.max_rounds = settings.max_rounds;
        let decl = DeclaredSources {
            geode_md_sections: settings.prompt.sections.clone(),
            rules_dir: Some(settings.prompt.rules_dir.clone()),
            memory_file: Some(settings.prompt.memory.clone()),
        };
        cfg.scaffold
            .system_prompt
            .extend(load_declared_sections(&root, &decl)?);
    }
    // A file named by --hooks too (a trusted project's `.claude/settings.json`) runs once.
    let flagged: Vec<PathBuf> = args.turn.hooks.iter().map(|f| same_file(f)).collect();
    for file in super::assembly::configured_hooks(&resolved, &cwd)? {
        if !flagged.contains(&same_file(&file)) {
            load_command_hooks(&mut cfg.hooks, &file, &root)?;
        }
    }
    if let Some(id) = &args.session_id {
        cfg.session_id = SessionId::new(id.clone());
    }
    if !args.no_checkpoint {
        let root = checkpoint_root(args.checkpoint_dir.as_ref());
        cfg.checkpoint = Some(checkpoint_settings(root, Some(&route), effort)?);
    }
    // The configured MCP servers (project ones only when trusted); they live until we return.
    let mcp = super::mcp::client_manager(&cwd).await?;
    cfg.extra_tools
        .push(geode_runtime::tools::builtin::WebFetchTool::bound());
    cfg.extra_tools.extend(mcp.tools());
    let mut session = create_session(cfg)?;
    say!("geode: session {}", session.session_id());
    let driver = Driver::start(args.turn.json, rx);
    let outcome = session.run_turn(&prompt, &driver.cancel).await;
    driver.finish(session, outcome).await
}

/// `path` as it compares with another name of the same file.
fn same_file(path: &std::path::Path) -> PathBuf {
    path.canonicalize().unwrap_or_else(|_| path.to_path_buf())
}

/// Prints a session's events while a turn runs and turns Ctrl-C into cancellation; then
/// closes the session and prints the result.
pub(super) struct Driver {
    json: bool,
    /// Ends with whether the reply was shown as it streamed (a terminal on stdout).
    printer: JoinHandle<bool>,
    pub(super) cancel: CancellationToken,
}

impl Driver {
    pub(super) fn start(json: bool, mut rx: UnboundedReceiver<LoopEvent>) -> Self {
        let printer = tokio::spawn(async move {
            let mut live = (!json && std::io::stdout().is_terminal()).then(|| Markdown::new(true));
            let mut streamed = false;
            while let Some(event) = rx.recv().await {
                if let Some(md) = &mut live {
                    streamed |= show_live(md, &event);
                }
                if json {
                    // Each line says when it happened.
                    if let Ok(serde_json::Value::Object(mut line)) = serde_json::to_value(&event) {
                        let at =
                            chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
                        line.insert("at".into(), at.into());
                        println!("{}", serde_json::Value::Object(line));
                    }
                } else {
                    log_event(&event);
                }
            }
            streamed
        });
        let cancel = CancellationToken::new();
        let on_signal = cancel.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                say!("geode: cancelling the turn (Ctrl-C)");
                on_signal.cancel();
            }
        });
        Driver {
            json,
            printer,
            cancel,
        }
    }

    pub(super) async fn finish(
        self,
        mut session: AgenticLoop,
        outcome: TurnOutcome,
    ) -> anyhow::Result<Exit> {
        session.close(outcome.termination.as_str()).await;
        drop(session);
        // The sender lives in the session; once it is dropped the printer drains and ends.
        let streamed = self.printer.await.unwrap_or(false);
        if !self.json && !streamed {
            let mut out = std::io::stdout().lock();
            writeln!(out, "{}", outcome.text)?;
        }
        if let Some(error) = &outcome.error {
            say!("geode: error: {error}");
        }
        say!(
            "geode: {} (verification {}), {} rounds, {} tool calls, {} tokens",
            outcome.termination,
            outcome.verdict.name(),
            outcome.rounds,
            outcome.tool_calls,
            outcome.usage.total_tokens()
        );
        Ok(exit_code(&outcome))
    }
}

/// On a terminal, the reply's text as it streams, rendered as Markdown; `true` once shown.
fn show_live(md: &mut Markdown, event: &LoopEvent) -> bool {
    let shown = match event {
        LoopEvent::TextDelta { text } => md.push(text),
        LoopEvent::AssistantMessage { .. } => md.finish(),
        _ => return false,
    };
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(shown.as_bytes());
    let _ = out.flush();
    matches!(event, LoopEvent::TextDelta { .. })
}

fn log_event(event: &LoopEvent) {
    match event {
        // A person at a terminal watches a long command; a log gets the result only.
        LoopEvent::ToolOutputDelta { text, .. } if std::io::stderr().is_terminal() => {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\x1b[2m{text}\x1b[0m");
            let _ = err.flush();
        }
        LoopEvent::ToolStarted { tool, input, .. } => say!("geode: tool {tool} {input}"),
        LoopEvent::ToolEnded { tool, outcome, .. } => {
            say!("geode: tool {tool} -> {outcome:?}")
        }
        LoopEvent::HookDecision {
            event,
            hook,
            decision,
            reason,
            ..
        } => match reason {
            Some(why) => say!("geode: {event} hook {hook}: {decision}: {why}"),
            None => say!("geode: {event} hook {hook}: {decision}"),
        },
        LoopEvent::Verification {
            verdict, misses, ..
        } if !misses.is_empty() => {
            say!("geode: verification {verdict}: {}", misses.join("; "))
        }
        _ => {}
    }
}

fn exit_code(o: &TurnOutcome) -> Exit {
    use TerminationReason as T;
    match o.termination {
        T::Natural | T::ForcedText => match o.verdict {
            Verdict::Failed { .. } | Verdict::Escalated { .. } => Exit::Unverified,
            _ => Exit::Success,
        },
        T::ExternalVerificationRequired => Exit::Unverified,
        T::InputBlocked => Exit::HookBlocked,
        T::UserCancelled => Exit::Cancelled,
        T::LlmError | T::BillingError | T::CheckpointFailed => Exit::Failed,
        _ => Exit::TurnStopped,
    }
}
