//! One connection to an MCP server: the handshake (stdio child or streamable HTTP), the tools
//! it lists bound as `mcp__<server>__<tool>` under the server's resource policy, and each call
//! forwarded with its cancellation. The manager (client.rs) and each server's supervisor
//! (supervisor.rs) both open connections through it.

use std::process::Stdio;
use std::sync::{Arc, Weak};
use std::time::Duration;

use async_trait::async_trait;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, CancelledNotificationParam,
    ClientRequest, ProtocolVersion, ServerResult,
};
use rmcp::service::{ClientInitializeError, ClientLifecycleMode, ClientServiceExt};
use rmcp::service::{PeerRequestOptions, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{Peer, RoleClient};
use serde_json::Value;
use tokio::io::AsyncBufReadExt;

use super::settings::{McpPolicy, McpServerConfig, McpTransport};
use crate::policy::PersonalDataClass;
use crate::tools::plan::{
    BoundTool, ResourceKeyRule, ToolContext, ToolHandler, ToolOutput, ToolSpec,
};
use crate::tools::workspace::GroupGuard;

/// How long a server gets to start and answer its handshake and `tools/list`.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// One tool a server offered.
#[derive(Debug, Clone)]
pub struct ListedTool {
    /// The name the model sees (`mcp__<server>__<tool>`).
    pub bound_name: String,
    /// The name on the server.
    pub name: String,
    /// `None`: callable; otherwise why not.
    pub not_callable: Option<String>,
}

/// `[A-Za-z0-9_-]` kept, anything else becomes `_` (provider tool-name rules).
fn sanitize(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The plan name of a server's tool.
pub fn bound_name(server: &str, tool: &str) -> String {
    format!("mcp__{}__{}", sanitize(server), sanitize(tool))
}

/// Resource keys of the declared policy, each locked by every call of the server's tools;
/// none declared: calls of one server run one at a time (`mcp:<server>`).
fn resource_rule(server: &str, policy: &McpPolicy) -> ResourceKeyRule {
    let mut keys = policy.resources.clone();
    keys.sort();
    keys.dedup();
    match keys.len() {
        0 => ResourceKeyRule::Fixed(format!("mcp:{server}")),
        1 => ResourceKeyRule::Fixed(keys.remove(0)),
        _ => ResourceKeyRule::Keys(keys),
    }
}

pub(super) type Connected = (
    RunningService<RoleClient, ()>,
    Vec<rmcp::model::Tool>,
    Option<GroupGuard>,
);

/// How a connection opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handshake {
    /// `server/discover` first, as the official SDKs' default clients do since the 2026-07-28
    /// revision: a modern server answers it and every request then carries its own protocol
    /// envelope; a legacy one answers with an error and gets the `initialize` handshake on the
    /// same connection.
    Discover,
    /// Only the `initialize` handshake, for a server that breaks on the probe: older SDK
    /// servers close the connection (or exit) on any first request but `initialize`.
    Initialize,
}

/// Connect to `config`'s server, list its tools. `handshake` is how the last good connection
/// opened; when the discover probe breaks the connection, one fresh connection is made with
/// `initialize` alone and, if it works, `handshake` remembers that for the next restart.
pub(super) async fn connect(
    config: &McpServerConfig,
    handshake: &mut Handshake,
) -> Result<Connected, String> {
    match open(config, *handshake).await {
        Err(Failure::ProbeBroke(probe)) => {
            tracing::debug!(
                "MCP server {}: the discover probe failed ({probe}); trying initialize alone",
                config.name
            );
            let connected = open(config, Handshake::Initialize)
                .await
                .map_err(|e| format!("{e} (and server/discover before it: {probe})"))?;
            *handshake = Handshake::Initialize;
            Ok(connected)
        }
        other => other.map_err(|e| e.to_string()),
    }
}

/// Why one connection attempt failed.
#[derive(Debug, thiserror::Error)]
enum Failure {
    /// The connection ended or failed at the transport while the server was sent
    /// `server/discover`: the server may be one that only understands `initialize` first.
    #[error("{0}")]
    ProbeBroke(String),
    #[error("{0}")]
    Other(String),
}

async fn open(config: &McpServerConfig, handshake: Handshake) -> Result<Connected, Failure> {
    let lifecycle = match handshake {
        Handshake::Discover => ClientLifecycleMode::Auto {
            preferred_versions: vec![ProtocolVersion::LATEST],
            legacy_version: Some(ProtocolVersion::LATEST_WITH_INITIALIZE),
        },
        Handshake::Initialize => ClientLifecycleMode::Initialize,
    };
    let failed = |what: String, e: ClientInitializeError| match (handshake, &e) {
        (
            Handshake::Discover,
            ClientInitializeError::ConnectionClosed(_)
            | ClientInitializeError::TransportError { .. },
        ) => Failure::ProbeBroke(format!("{what}: {e}")),
        _ => Failure::Other(format!("{what}: {e}")),
    };
    let mut group = None;
    let service = match &config.transport {
        McpTransport::Stdio { command, args, env } => {
            let mut cmd = tokio::process::Command::new(command);
            // A group of its own, so what the server starts dies with it.
            cmd.args(args).envs(env).kill_on_drop(true).process_group(0);
            let (transport, stderr) = TokioChildProcess::builder(cmd)
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|e| Failure::Other(format!("cannot start {command}: {e}")))?;
            // Dropped with this future on a failed or timed-out start: the group dies then.
            group = transport
                .id()
                .and_then(|pid| i32::try_from(pid).ok())
                .map(|pid| GroupGuard::new(Some(nix::unistd::Pid::from_raw(pid))));
            if let Some(stderr) = stderr {
                forward_stderr(config.name.clone(), stderr);
            }
            ().serve_with_lifecycle(transport, lifecycle)
                .await
                .map_err(|e| failed("initialize failed".into(), e))?
        }
        McpTransport::Http { url, token_env } => {
            install_tls_provider();
            let mut http = StreamableHttpClientTransportConfig::with_uri(url.as_str());
            if let Some(var) = token_env {
                let token = std::env::var(var).map_err(|_| {
                    Failure::Other(format!("token_env {var} is not set in the environment"))
                })?;
                http = http.auth_header(token);
            }
            let transport = StreamableHttpClientTransport::from_config(http);
            ().serve_with_lifecycle(transport, lifecycle)
                .await
                .map_err(|e| failed(format!("initialize failed at {url}"), e))?
        }
    };
    let tools = service
        .peer()
        .list_all_tools()
        .await
        .map_err(|e| Failure::Other(format!("tools/list failed: {e}")))?;
    Ok((service, tools, group))
}

/// rmcp's HTTP client (reqwest 0.13, built without a rustls crypto provider of its own) takes
/// the process default and panics building a client when there is none, so call this before
/// building one (`open` does; so must any other user of rmcp's HTTP client in a GEODE process).
/// An error only means a provider is already installed, which is all that is needed.
pub fn install_tls_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// A server's stderr goes to our log (at debug), never to our stdout.
fn forward_stderr(server: String, stderr: tokio::process::ChildStderr) {
    tokio::spawn(async move {
        let mut lines = tokio::io::BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            tracing::debug!(target: "geode::mcp", "[{server}] {line}");
        }
    });
}

/// Where a bound tool finds its server's live connection at call time (the server's slot,
/// which its supervisor reconnects): a trait, so the connection does not depend on the
/// supervisor that uses it.
pub(super) trait LivePeer: Send + Sync {
    /// The connection, or why the server cannot be reached now.
    fn peer(&self) -> Result<Peer<RoleClient>, String>;
}

/// The listing and, when callable, the bound tool of one tool the server of `config`
/// offered. The handler holds `live` weakly: the slot behind it owns its bound tools.
pub(super) fn bind_tool(
    config: &McpServerConfig,
    live: Weak<dyn LivePeer>,
    tool: rmcp::model::Tool,
) -> (ListedTool, Option<BoundTool>) {
    let name = tool.name.to_string();
    let listed = |why: Option<String>| ListedTool {
        bound_name: bound_name(&config.name, &name),
        name: name.clone(),
        not_callable: why,
    };
    let Some(policy) = &config.policy else {
        return (
            listed(Some("server declares no resource policy".into())),
            None,
        );
    };
    if let Some(allowed) = &policy.tools
        && !allowed.iter().any(|t| t == &name)
    {
        return (
            listed(Some("not in the server policy's tools list".into())),
            None,
        );
    }
    let schema = Value::Object((*tool.input_schema).clone());
    if let Err(e) = jsonschema::validator_for(&schema) {
        return (
            listed(Some(format!(
                "its input schema is not valid JSON Schema: {e}"
            ))),
            None,
        );
    }
    let description = format!(
        "[MCP server {}] {}",
        config.name,
        tool.description.as_deref().unwrap_or("")
    );
    let spec = ToolSpec {
        name: bound_name(&config.name, &name),
        description,
        safety: policy.safety,
        personal_data: PersonalDataClass::None,
        resource_keys: resource_rule(&config.name, policy),
        path_args: Vec::new(),
        effectful: policy.effectful,
        command_arg: declared_arg(&schema, COMMAND_ARG),
        deadline_arg: declared_arg(&schema, DEADLINE_ARG),
        input_schema: schema,
    };
    let bound = BoundTool {
        spec,
        binding: format!("mcp:{}/{}", config.name, name),
        handler: Arc::new(McpToolHandler {
            server: config.name.clone(),
            tool: name.clone(),
            live,
        }),
    };
    (listed(None), Some(bound))
}

/// The argument names an MCP tool is taken to mean as a command line and a deadline, the names
/// the built-in `bash` uses; a server tool is held to them only when its schema declares them.
const COMMAND_ARG: &str = "command";
const DEADLINE_ARG: &str = "timeout_sec";

/// `name` when the tool's input schema lists it among its properties.
fn declared_arg(schema: &Value, name: &str) -> Option<String> {
    schema
        .get("properties")
        .and_then(|p| p.get(name))
        .map(|_| name.to_string())
}

/// Calls one tool of one server. Runs only after the pipeline approved the call.
struct McpToolHandler {
    server: String,
    tool: String,
    live: Weak<dyn LivePeer>,
}

impl McpToolHandler {
    /// The server's live connection, or the tool error that tells the model it is down.
    fn peer(&self) -> Result<Peer<RoleClient>, ToolOutput> {
        match self.live.upgrade() {
            Some(live) => live.peer().map_err(ToolOutput::error),
            None => Err(ToolOutput::error(format!(
                "MCP server {} is gone (its manager closed)",
                self.server
            ))),
        }
    }
}

#[async_trait]
impl ToolHandler for McpToolHandler {
    async fn call(&self, input: &Value, ctx: &ToolContext) -> ToolOutput {
        let peer = match self.peer() {
            Ok(p) => p,
            Err(down) => return down,
        };
        let arguments = match input {
            Value::Object(m) => Some(m.clone()),
            _ => None,
        };
        let mut params = CallToolRequestParams::new(self.tool.clone());
        params.arguments = arguments;
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let options = PeerRequestOptions::with_timeout(ctx.deadline);
        let handle = match peer.send_cancellable_request(request, options).await {
            Ok(h) => h,
            Err(e) => {
                return ToolOutput::error(format!(
                    "MCP server {}: the call could not be sent: {e}",
                    self.server
                ));
            }
        };
        let id = handle.id.clone();
        let waited = tokio::select! {
            r = handle.await_response() => Some(r),
            _ = ctx.cancel.cancelled() => None,
        };
        let Some(response) = waited else {
            // Tell the server; its work may still be running.
            let _ = peer
                .notify_cancelled(CancelledNotificationParam::new(
                    Some(id),
                    Some("cancelled by GEODE".into()),
                ))
                .await;
            return ToolOutput::error(format!(
                "MCP call {} on {} cancelled; the server may still be working on it",
                self.tool, self.server
            ));
        };
        match response {
            Ok(ServerResult::CallToolResult(result)) => output_of(result),
            Ok(other) => ToolOutput::error(format!(
                "MCP server {} answered tools/call with an unexpected result: {other:?}",
                self.server
            )),
            // The connection ended before the answer: the server exited (it is restarted).
            Err(rmcp::ServiceError::TransportClosed) => ToolOutput::error(format!(
                "MCP call {} on {} failed: the server's connection closed before it answered \
                 (it may have crashed; it is being restarted, so a later call may work)",
                self.tool, self.server
            )),
            Err(e) => ToolOutput::error(format!(
                "MCP call {} on {} failed: {e} (the server may still be working on it)",
                self.tool, self.server
            )),
        }
    }
}

/// Text contents joined by newlines; other contents as their JSON; structured content when
/// nothing else was sent. `is_error` as the server said.
fn output_of(result: CallToolResult) -> ToolOutput {
    let mut parts: Vec<String> = result
        .content
        .iter()
        .map(|c| match c.as_text() {
            Some(t) => t.text.clone(),
            None => serde_json::to_string(c).unwrap_or_default(),
        })
        .collect();
    if parts.is_empty()
        && let Some(structured) = &result.structured_content
    {
        parts.push(structured.to_string());
    }
    ToolOutput {
        content: parts.join("\n"),
        is_error: result.is_error.unwrap_or(false),
        images: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_and_deadline_are_declared_only_by_the_schema() {
        let shell = serde_json::json!({"type": "object", "properties": {
            "command": {"type": "string"}, "timeout_sec": {"type": "integer"}}});
        assert_eq!(
            declared_arg(&shell, COMMAND_ARG).as_deref(),
            Some("command")
        );
        assert_eq!(
            declared_arg(&shell, DEADLINE_ARG).as_deref(),
            Some("timeout_sec")
        );
        let open = serde_json::json!({"type": "object"});
        assert_eq!(declared_arg(&open, COMMAND_ARG), None);
        assert_eq!(declared_arg(&open, DEADLINE_ARG), None);
    }

    #[test]
    fn names_and_resource_keys() {
        assert_eq!(bound_name("files", "read.all"), "mcp__files__read_all");
        let mut p = McpPolicy {
            safety: crate::policy::SafetyLevel::Write,
            resources: vec![],
            effectful: false,
            tools: None,
        };
        assert_eq!(
            resource_rule("s", &p),
            ResourceKeyRule::Fixed("mcp:s".into())
        );
        p.resources = vec!["db:b".into(), "db:a".into()];
        assert_eq!(
            resource_rule("s", &p),
            ResourceKeyRule::Keys(vec!["db:a".into(), "db:b".into()])
        );
    }
}
