//! `geode mcp`: GEODE as an MCP server with one tool, `run_agent`, on stdio (the default) or
//! streamable HTTP (`--http ADDR`, at `http://ADDR/mcp`). stdout is the protocol on stdio, so
//! everything else goes to stderr. `geode mcp list` shows the MCP servers GEODE itself would
//! use as a client, with their state and tools.

use super::exit::Exit;
use std::net::SocketAddr;
use std::path::Path;

use clap::{Args, Subcommand};
use geode_runtime::config::{Config, Layers, mcp_settings};
use geode_runtime::hooks::HookRegistry;
use geode_runtime::hooks::command::load_command_hooks;
use geode_runtime::mcp::McpManager;
use geode_runtime::mcp::http::{HttpEndpoint, MCP_PATH};
use geode_runtime::mcp::server::{RunAgentSettings, serve_stdio};
use geode_runtime::mcp::trust::TrustStore;
use geode_runtime::model::http::RouteOptions;
use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

use super::assembly::geode_home;

#[derive(Debug, Args)]
pub struct McpArgs {
    /// Serve streamable HTTP on this address instead of stdio (port 0: any free port; the
    /// bound address is printed on stderr). A non-loopback address needs --token.
    #[arg(long, value_name = "ADDR")]
    http: Option<SocketAddr>,
    /// Bearer token every HTTP request must carry (required off loopback).
    #[arg(long, env = "GEODE_MCP_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Model route of run_agent (config key `model`).
    #[arg(long)]
    pub model: Option<geode_runtime::model::catalog::Route>,
    #[command(subcommand)]
    command: Option<McpCommand>,
}

#[derive(Debug, Subcommand)]
enum McpCommand {
    /// Connect to the configured MCP servers and print their state and tools.
    List,
}

/// The MCP servers of `$GEODE_HOME/config.toml` and, when `project` is trusted, of its
/// `.geode/config.toml`, connected (for drivers that read no other config: `geode exec`).
pub(super) async fn client_manager(project: &Path) -> anyhow::Result<McpManager> {
    let home = geode_home();
    let layers = Layers::discover(Vec::new(), project, &home);
    let settings = mcp_settings(&layers)?;
    if settings.is_empty() {
        return Ok(McpManager::empty());
    }
    Ok(McpManager::start(&settings, &TrustStore::new(&home), project).await)
}

pub async fn run(args: McpArgs, cfg: Config) -> anyhow::Result<Exit> {
    let cwd = std::env::current_dir()?;
    if let Some(McpCommand::List) = args.command {
        let manager = McpManager::start(cfg.mcp(), &TrustStore::new(&geode_home()), &cwd).await;
        print!("{}", manager.describe());
        return Ok(Exit::Success);
    }
    let route = super::providers::required_route(cfg.settings().model.as_ref())?;
    let mut route_options = RouteOptions::from_env();
    route_options.effort = cfg.settings().effort;
    let home = geode_home();
    let mut hooks = HookRegistry::new();
    for file in super::assembly::configured_hooks(&cfg, &cwd)? {
        load_command_hooks(&mut hooks, &file, &cwd)?;
    }
    let settings = RunAgentSettings {
        model_route: route.to_string(),
        route_options,
        workspace: cwd,
        max_rounds: cfg.settings().max_rounds,
        timeline: std::fs::create_dir_all(&home)
            .ok()
            .map(|_| home.join("timeline.db")),
        hooks,
    };
    let shutdown = CancellationToken::new();
    let on_signal = shutdown.clone();
    let mut term = signal(SignalKind::terminate())?;
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        on_signal.cancel();
    });
    match args.http {
        Some(addr) => {
            let endpoint = match HttpEndpoint::bind(addr, args.token).await {
                Ok(e) => e,
                Err(e) => {
                    say!("geode: error: {e}");
                    return Ok(Exit::Usage);
                }
            };
            say!(
                "geode: MCP (streamable HTTP) on http://{}{MCP_PATH}, model {}",
                endpoint.local_addr()?,
                settings.model_route
            );
            endpoint.serve(settings, shutdown).await?;
        }
        None => {
            say!(
                "geode: MCP on stdio, model {}, workspace {}",
                settings.model_route,
                settings.workspace.display()
            );
            serve_stdio(settings, shutdown).await?;
        }
    }
    Ok(Exit::Success)
}
