//! The MCP client side: connect to the configured servers, list their tools, and bind the
//! callable ones as `mcp__<server>__<tool>`.
//!
//! Only tools whose server declares a resource policy (and which its `tools` allow-list names,
//! when it has one) enter the plan, so the model never sees a tool it cannot call; `/mcp`
//! lists the others with the reason. A project's servers start only when the project is
//! trusted (`trust`). Each server is kept connected by a background task (supervisor.rs);
//! dropping the manager stops them, which closes the connections and kills the child processes.

use std::path::Path;
use std::sync::Arc;

pub use super::connection::install_tls_provider;
use super::settings::{McpServerConfig, McpSettings};
use super::supervisor::{ServerSlot, ServerState, supervise};
use super::trust::TrustStore;
use crate::tools::plan::BoundTool;
use tokio_util::sync::CancellationToken;

/// Every configured server, each kept connected by its own background task
/// (supervisor.rs), shared by the sessions of one process. Dropping the manager stops the
/// tasks, which closes the connections and kills the servers' process groups.
#[derive(Default)]
pub struct McpManager {
    servers: Vec<Arc<ServerSlot>>,
    stop: CancellationToken,
}

impl Drop for McpManager {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl std::fmt::Debug for McpManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpManager")
            .field(
                "servers",
                &self
                    .servers
                    .iter()
                    .map(|s| (s.config.name.clone(), s.state()))
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl McpManager {
    /// No servers.
    pub fn empty() -> Self {
        McpManager::default()
    }

    /// Start every server the settings allow in the background and return at once: the
    /// user's always, the project's only when `project_root` is trusted in `trust`. Their
    /// tools appear in `tools()` as they connect; failures are retried, never fatal. Call it
    /// inside a Tokio runtime: each server's task is spawned on it.
    pub fn spawn(settings: &McpSettings, trust: &TrustStore, project_root: &Path) -> Self {
        let untrusted_reason = if settings.project.is_empty() {
            None
        } else {
            match trust.check(project_root) {
                Ok(state) if state.is_trusted() => None,
                Ok(state) => Some(state.explain(project_root)),
                Err(e) => Some(format!("cannot check the project's trust: {e}")),
            }
        };
        // A trusted project's server replaces a user server of the same name.
        let mut configs: Vec<(McpServerConfig, Option<String>)> = Vec::new();
        for c in &settings.user {
            let shadowed =
                untrusted_reason.is_none() && settings.project.iter().any(|p| p.name == c.name);
            if !shadowed {
                configs.push((c.clone(), None));
            }
        }
        for c in &settings.project {
            configs.push((c.clone(), untrusted_reason.clone()));
        }
        if let Some(reason) = &untrusted_reason
            && !settings.project.is_empty()
        {
            tracing::warn!("{reason}");
        }
        let stop = CancellationToken::new();
        let servers = configs
            .into_iter()
            .map(|(c, untrusted)| match untrusted {
                Some(reason) => ServerSlot::new(c, ServerState::Untrusted(reason)),
                None => {
                    let slot = ServerSlot::new(c, ServerState::Connecting);
                    tokio::spawn(supervise(slot.clone(), stop.child_token()));
                    slot
                }
            })
            .collect();
        McpManager { servers, stop }
    }

    /// `spawn`, then wait until every server's first attempt ended (connected or failed), for
    /// one-shot drivers (`geode exec`, `geode mcp list`) whose only turn should see the tools.
    pub async fn start(settings: &McpSettings, trust: &TrustStore, project_root: &Path) -> Self {
        let manager = McpManager::spawn(settings, trust, project_root);
        futures::future::join_all(manager.servers.iter().map(|s| s.settled())).await;
        manager
    }

    /// The callable tools of every server that has connected, for `SessionConfig::extra_tools`
    /// and, between turns, for sessions that started before a server connected.
    pub fn tools(&self) -> Vec<BoundTool> {
        self.servers.iter().flat_map(|s| s.bound()).collect()
    }

    /// Every configured server's slot, whatever its state (untrusted ones included).
    pub fn servers(&self) -> &[Arc<ServerSlot>] {
        &self.servers
    }

    /// Servers, their state and tools, for `/mcp` and `geode mcp list`.
    pub fn describe(&self) -> String {
        if self.servers.is_empty() {
            return "no MCP servers configured".into();
        }
        let mut out = format!("MCP servers ({}):\n", self.servers.len());
        for s in &self.servers {
            out.push_str(&format!(
                "  {}  {}  ({}, {})\n",
                s.config.name,
                s.state(),
                s.config.transport,
                s.config.origin
            ));
            for t in s.tools() {
                match &t.not_callable {
                    None => out.push_str(&format!("    {}  callable\n", t.bound_name)),
                    Some(why) => {
                        out.push_str(&format!("    {}  not callable: {why}\n", t.bound_name))
                    }
                }
            }
        }
        out
    }
}
