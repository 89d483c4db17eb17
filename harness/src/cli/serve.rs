//! `geode serve`: the daemon on `$GEODE_HOME/cli.sock` (or the `socket` config key). Each
//! connection is one IPC session built by `CliFactory`; SIGTERM or Ctrl-C drains it (running
//! turns finish, then the socket is removed).
//!
//! With `--channels FILE`, the daemon also serves the messaging channels bound in FILE on a
//! loopback webhook (`--webhook`, runtime/src/server/channel.rs): each message a DAEMON turn.

use super::exit::Exit;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use geode_runtime::agent::ModelSwitch;
use geode_runtime::agent::prompt::{DeclaredSources, load_declared_sections};
use geode_runtime::agent::restore::{LoadedCheckpoint, load_checkpoint};
use geode_runtime::config::Config;
use geode_runtime::ids::SessionId;
use geode_runtime::mcp::{McpManager, TrustStore};
use geode_runtime::model::catalog::Route;
use geode_runtime::model::credentials::Env;
use geode_runtime::model::effort::Effort;
use geode_runtime::model::errors::ErrorClass;
use geode_runtime::model::http::RouteOptions;
use geode_runtime::model::unavailable::Unavailable;
use geode_runtime::model::{Model, ModelError, model_for};
use geode_runtime::policy::{COMPUTER_TOOL, SessionMode, SessionPolicy};
use geode_runtime::scaffold::Scaffold;
use geode_runtime::server::channel::{Channels, Webhook};
use geode_runtime::server::ipc::DaemonSocket;
use geode_runtime::server::{ServerError, SessionFactory, Shared};
use geode_runtime::session::SessionConfig;
use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

use super::assembly::{
    checkpoint_root, checkpoint_settings, configured_hooks, geode_home, open_timeline,
    person_workspace, socket_path,
};

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Seconds running turns get to finish after SIGTERM.
    #[arg(long, default_value_t = 30)]
    drain_timeout: u64,
    /// Serve the messaging channels bound in this TOML file (mode 0600: it holds tokens).
    #[arg(long, value_name = "FILE")]
    channels: Option<PathBuf>,
    /// Loopback address of the channels' webhook; port 0 picks a free one. Needs --channels.
    #[arg(long, value_name = "ADDR")]
    webhook: Option<SocketAddr>,
}

/// Where the webhook listens when `--webhook` is not given.
const DEFAULT_WEBHOOK: &str = "127.0.0.1:8790";

/// The channels and their bound webhook, when `--channels` was given.
async fn bind_channels(args: &ServeArgs) -> anyhow::Result<Option<(Webhook, Channels)>> {
    let Some(file) = &args.channels else {
        if args.webhook.is_some() {
            anyhow::bail!("--webhook needs --channels FILE (the channels the webhook serves)");
        }
        return Ok(None);
    };
    let channels = Channels::load(file)?;
    if channels.is_empty() {
        anyhow::bail!("channels file {}: binds no channel", file.display());
    }
    let addr = match args.webhook {
        Some(a) => a,
        None => DEFAULT_WEBHOOK.parse()?,
    };
    let webhook = Webhook::bind(addr).await?;
    say!("geode: webhook on http://{}", webhook.local_addr());
    say!(
        "geode: channels: {}",
        channels.names().collect::<Vec<_>>().join(", ")
    );
    Ok(Some((webhook, channels)))
}

/// Builds sessions from the effective configuration, in one workspace.
pub struct CliFactory {
    pub cfg: Config,
    pub cwd: PathBuf,
    pub mode: SessionMode,
    /// The configured MCP servers, connecting in the background and shared by every session.
    pub mcp: Arc<McpManager>,
    /// The command hook files every session loads (checked once, at start).
    pub hooks: Vec<PathBuf>,
    /// The skills every session gets, read once at start (`geode skills list` shows them).
    pub skills: Arc<geode_runtime::skills::SkillSet>,
}

fn setup<E: std::fmt::Display>(e: E) -> ServerError {
    ServerError::Setup(e.to_string())
}

impl CliFactory {
    fn scaffold(&self) -> Result<Scaffold, ServerError> {
        let mut scaffold = Scaffold::default();
        let settings = self.cfg.settings();
        scaffold.guards.max_rounds = settings.max_rounds;
        let decl = DeclaredSources {
            geode_md_sections: settings.prompt.sections.clone(),
            rules_dir: Some(settings.prompt.rules_dir.clone()),
            memory_file: Some(settings.prompt.memory.clone()),
        };
        scaffold
            .system_prompt
            .extend(load_declared_sections(&self.cwd, &decl).map_err(setup)?);
        Ok(scaffold)
    }

    /// The route and effort of a session: a resumed one goes on with the model it last used
    /// (`/model` may have switched it), a new one (or one that never had a model) starts from
    /// the configuration. `None`: none is configured. A saved route is text (it may name a
    /// model this geode no longer has), parsed here, once.
    fn route(
        &self,
        saved: Option<&LoadedCheckpoint>,
    ) -> Result<(Option<Route>, Option<Effort>), ServerError> {
        if let Some(saved) = saved
            && !saved.state.model_route.is_empty()
        {
            let route = saved.state.model_route.parse().map_err(setup)?;
            return Ok((Some(route), saved.state.effort));
        }
        let settings = self.cfg.settings();
        Ok((settings.model.clone(), settings.effort))
    }

    /// The session's model, and the route its checkpoint records. A person's session starts
    /// even when its model cannot answer yet (no model configured, a key missing): the model
    /// then answers every prompt with why and what to do, and `/model` switches. A route that
    /// does not parse, or that cannot be built for any other reason, stops the start.
    fn model(
        &self,
        route: Option<Route>,
        effort: Option<Effort>,
    ) -> Result<(Arc<dyn Model>, Option<Route>), ServerError> {
        let Some(route) = route else {
            let setup = super::providers::setup_hint(&Env::from_process());
            let model = Unavailable::new("none", super::providers::NO_MODEL).with_notice(setup);
            return Ok((Arc::new(model), None));
        };
        let mut options = RouteOptions::from_env();
        options.effort = effort;
        match model_for(&route, &options) {
            Ok(model) => Ok((model, Some(route))),
            Err(ModelError::Provider {
                class: ErrorClass::Auth,
                message,
                ..
            }) => {
                let reason = super::providers::unusable(&route.to_string(), &message);
                Ok((
                    Arc::new(Unavailable::new(route.to_string(), reason)),
                    Some(route),
                ))
            }
            Err(e) => Err(setup(e)),
        }
    }

    fn build(&self, id: Option<&SessionId>) -> Result<SessionConfig, ServerError> {
        let saved = id.and_then(|id| load_checkpoint(&checkpoint_root(None), id).ok());
        let (route, effort) = self.route(saved.as_ref())?;
        let (model, route) = self.model(route, effort)?;
        // A resumed session goes on in its own folder, wherever `/resume` was typed: its files
        // and its conversation are about that project.
        let cwd = saved
            .as_ref()
            .map(|s| PathBuf::from(&s.state.cwd))
            .filter(|dir| dir.is_dir())
            .unwrap_or_else(|| self.cwd.clone());
        let workspace = Arc::new(person_workspace(&cwd, &self.cfg).map_err(setup)?);
        let mut policy = SessionPolicy::for_mode(self.mode);
        policy.hitl = self.cfg.settings().hitl;
        // The person's computer tool acts on their display: without one it could only fail.
        if std::env::var_os("DISPLAY").is_none_or(|d| d.is_empty()) {
            policy.deny_list.insert(COMPUTER_TOOL.to_string());
        }
        let mut cfg = SessionConfig::new(policy, workspace, model);
        cfg.environment = geode_runtime::session::environment::describe_environment(&cwd);
        if let Some(id) = id {
            cfg.session_id = id.clone();
        }
        cfg.scaffold = self.scaffold()?;
        for file in &self.hooks {
            geode_runtime::hooks::command::load_command_hooks(&mut cfg.hooks, file, &self.cwd)
                .map_err(setup)?;
        }
        cfg.extra_tools
            .push(geode_runtime::tools::builtin::WebFetchTool::bound());
        cfg.extra_tools.extend(self.mcp.tools());
        // Sub-agents run inside a turn, so they take servers that connect later themselves.
        let mcp = self.mcp.clone();
        cfg.late_tools = Some(Arc::new(move || mcp.tools()));
        cfg.skills = self.skills.clone();
        cfg.timeline = open_timeline(false, None).map_err(setup)?;
        cfg.checkpoint = Some(
            checkpoint_settings(checkpoint_root(None), route.as_ref(), effort).map_err(setup)?,
        );
        Ok(cfg)
    }
}

impl SessionFactory for CliFactory {
    fn new_session(&self) -> Result<SessionConfig, ServerError> {
        self.build(None)
    }

    fn resume(&self, id: &SessionId) -> Result<SessionConfig, ServerError> {
        self.build(Some(id))
    }

    fn describe_mcp(&self) -> String {
        self.mcp.describe()
    }

    fn describe_skills(&self) -> String {
        super::skills::describe(&self.skills)
    }

    fn mcp_tools(&self) -> Vec<geode_runtime::tools::plan::BoundTool> {
        self.mcp.tools()
    }

    fn recent_sessions(
        &self,
        limit: usize,
    ) -> Option<Vec<geode_runtime::server::protocol::SessionEntry>> {
        Some(super::sessions::recent(
            &checkpoint_root(None),
            limit,
            Some(&self.cwd),
        ))
    }

    fn describe_hooks(&self) -> String {
        let mut registry = geode_runtime::hooks::registry::HookRegistry::new();
        let mut lines = Vec::new();
        for file in &self.hooks {
            lines.push(format!("from {}", file.display()));
            match geode_runtime::hooks::command::load_command_hooks(&mut registry, file, &self.cwd)
            {
                Ok(loaded) => lines.extend(loaded.skipped.iter().map(|s| format!("  {s}"))),
                Err(e) => lines.push(format!("  cannot load: {e}")),
            }
        }
        lines.extend(registry.describe().into_iter().map(|l| format!("  {l}")));
        if lines.is_empty() {
            "no hooks configured (the configuration's `hooks` names hook files; Claude Code's \
             settings.json hooks are read too)"
                .into()
        } else {
            lines.join("\n")
        }
    }

    fn switch_model(
        &self,
        route: &str,
        effort: Option<Effort>,
    ) -> Result<ModelSwitch, ServerError> {
        typed_switch(&route.parse().map_err(setup)?, effort)
    }
}

/// The model a session switches to (or starts with), with what its checkpoint records.
fn typed_switch(route: &Route, effort: Option<Effort>) -> Result<ModelSwitch, ServerError> {
    let mut options = RouteOptions::from_env();
    options.effort = effort;
    Ok(ModelSwitch {
        model: model_for(route, &options).map_err(setup)?,
        route: route.to_string(),
        provider: route.provider_label().to_string(),
        effort,
    })
}

pub async fn shared(cfg: Config, cwd: &Path, mode: SessionMode) -> anyhow::Result<Arc<Shared>> {
    let lanes = cfg.settings().global_lanes;
    let timeout = cfg.settings().approval_timeout;
    // The MCP servers connect in the background (they live as long as the factory): the first
    // prompt never waits for them; a session takes their tools as they arrive.
    let hooks = configured_hooks(&cfg, cwd)?;
    let mcp = McpManager::spawn(cfg.mcp(), &TrustStore::new(&geode_home()), cwd);
    let factory = Arc::new(CliFactory {
        cfg,
        cwd: cwd.to_path_buf(),
        mode,
        mcp: Arc::new(mcp),
        hooks,
        skills: Arc::new(super::skills::local_skills(cwd).await?),
    });
    Ok(Arc::new(Shared::new(factory, lanes, timeout, mode)))
}

pub async fn run(args: ServeArgs, cfg: Config) -> anyhow::Result<Exit> {
    let path = socket_path(&cfg);
    let cwd = std::env::current_dir()?;
    let shared = shared(cfg, &cwd, SessionMode::Ipc).await?;
    // Before the socket: a bad channels file or a taken port leaves no socket file behind.
    let channels = bind_channels(&args).await?;
    let socket = DaemonSocket::bind(&path).await?;
    say!("geode: serving on {}", socket.path().display());
    let shutdown = CancellationToken::new();
    let on_signal = shutdown.clone();
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        say!("geode: draining (running turns finish, no new ones)");
        on_signal.cancel();
    });
    let drain = Duration::from_secs(args.drain_timeout);
    let webhook = async {
        match channels {
            Some((webhook, channels)) => {
                webhook
                    .serve(channels, shared.clone(), shutdown.clone(), drain)
                    .await
            }
            None => 0,
        }
    };
    let (left, turns_left) = tokio::join!(
        socket.serve(shared.clone(), shutdown.clone(), drain),
        webhook
    );
    if turns_left > 0 {
        say!("geode: {turns_left} channel turns still running at the drain deadline");
    }
    if left > 0 {
        say!("geode: {left} connections still open at the drain deadline");
    }
    if left > 0 || turns_left > 0 {
        return Ok(Exit::Failed);
    }
    say!("geode: stopped");
    Ok(Exit::Success)
}
