//! The MCP client side: connect to the configured servers, list their tools, and bind the
//! callable ones as `mcp__<server>__<tool>`.
//!
//! Only tools whose server declares a resource policy (and which its `tools` allow-list names,
//! when it has one) enter the plan, so the model never sees a tool it cannot call; `/mcp`
//! lists the others with the reason. A project's servers start only when the project is
//! trusted (`trust`). The manager owns the connections: dropping it closes them and kills the
//! child processes.

use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, CancelledNotificationParam,
    ClientRequest, ServerResult,
};
use rmcp::service::{PeerRequestOptions, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{Peer, RoleClient, ServiceExt};
use serde_json::Value;
use tokio::io::AsyncBufReadExt;

use super::settings::{McpPolicy, McpServerConfig, McpSettings, McpTransport};
use super::trust::TrustStore;
use crate::policy::PersonalDataClass;
use crate::tools::plan::{
    BoundTool, ResourceKeyRule, ToolContext, ToolHandler, ToolOutput, ToolSpec,
};
use crate::tools::workspace::GroupGuard;

/// How long a server gets to start and answer `initialize` and `tools/list`.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// Where a configured server stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerState {
    Connected,
    Failed(String),
    /// A project server of an untrusted project: never started.
    Untrusted(String),
}

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

/// One configured server and what became of it.
pub struct ServerEntry {
    pub config: McpServerConfig,
    pub state: ServerState,
    pub tools: Vec<ListedTool>,
    bound: Vec<BoundTool>,
    /// Kept so the connection (and the child process) lives as long as the manager.
    _connection: Option<RunningService<RoleClient, ()>>,
    /// A stdio server's process group, killed after the connection closes (fields drop in
    /// order) and by the reaper if geode dies without closing it.
    _group: Option<GroupGuard>,
}

/// The connections to every configured server, shared by the sessions of one process.
#[derive(Default)]
pub struct McpManager {
    servers: Vec<ServerEntry>,
}

impl std::fmt::Debug for McpManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpManager")
            .field(
                "servers",
                &self
                    .servers
                    .iter()
                    .map(|s| (&s.config.name, &s.state))
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
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

impl McpManager {
    /// No servers.
    pub fn empty() -> Self {
        McpManager::default()
    }

    /// Start every server the settings allow: the user's always, the project's only when
    /// `project_root` is trusted in `trust`. Servers that fail are recorded, never fatal.
    pub async fn start(settings: &McpSettings, trust: &TrustStore, project_root: &Path) -> Self {
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
        let servers =
            futures::future::join_all(configs.into_iter().map(|(c, untrusted)| async move {
                match untrusted {
                    Some(reason) => ServerEntry {
                        config: c,
                        state: ServerState::Untrusted(reason),
                        tools: Vec::new(),
                        bound: Vec::new(),
                        _connection: None,
                        _group: None,
                    },
                    None => connect_entry(c).await,
                }
            }))
            .await;
        McpManager { servers }
    }

    /// The callable tools of every connected server, for `SessionConfig::extra_tools`.
    pub fn tools(&self) -> Vec<BoundTool> {
        self.servers
            .iter()
            .flat_map(|s| s.bound.iter().cloned())
            .collect()
    }

    pub fn servers(&self) -> &[ServerEntry] {
        &self.servers
    }

    /// Servers, their state and tools, for `/mcp` and `geode mcp list`.
    pub fn describe(&self) -> String {
        if self.servers.is_empty() {
            return "no MCP servers configured".into();
        }
        let mut out = format!("MCP servers ({}):\n", self.servers.len());
        for s in &self.servers {
            let state = match &s.state {
                ServerState::Connected => "connected".to_string(),
                ServerState::Failed(why) => format!("failed: {why}"),
                ServerState::Untrusted(why) => format!("untrusted: {why}"),
            };
            out.push_str(&format!(
                "  {}  {}  ({}, {})\n",
                s.config.name, state, s.config.transport, s.config.origin
            ));
            for t in &s.tools {
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

async fn connect_entry(config: McpServerConfig) -> ServerEntry {
    let name = config.name.clone();
    let result = tokio::time::timeout(CONNECT_TIMEOUT, connect(&config)).await;
    let (state, connection, listed, group) = match result {
        Err(_) => (
            ServerState::Failed(format!(
                "no answer to initialize/tools/list within {}s",
                CONNECT_TIMEOUT.as_secs()
            )),
            None,
            Vec::new(),
            None,
        ),
        Ok(Err(why)) => (ServerState::Failed(why), None, Vec::new(), None),
        Ok(Ok((service, tools, group))) => (ServerState::Connected, Some(service), tools, group),
    };
    if let ServerState::Failed(why) = &state {
        tracing::warn!("MCP server {name}: {why}");
    }
    let mut tools = Vec::new();
    let mut bound = Vec::new();
    if let Some(service) = &connection {
        for tool in listed {
            let (listed, b) = bind_tool(&config, service.peer().clone(), tool);
            tools.push(listed);
            bound.extend(b);
        }
    }
    ServerEntry {
        config,
        state,
        tools,
        bound,
        _connection: connection,
        _group: group,
    }
}

type Connected = (
    RunningService<RoleClient, ()>,
    Vec<rmcp::model::Tool>,
    Option<GroupGuard>,
);

async fn connect(config: &McpServerConfig) -> Result<Connected, String> {
    let mut group = None;
    let service = match &config.transport {
        McpTransport::Stdio { command, args, env } => {
            let mut cmd = tokio::process::Command::new(command);
            // A group of its own, so what the server starts dies with it.
            cmd.args(args).envs(env).kill_on_drop(true).process_group(0);
            let (transport, stderr) = TokioChildProcess::builder(cmd)
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|e| format!("cannot start {command}: {e}"))?;
            // Dropped with this future on a failed or timed-out start: the group dies then.
            group = transport
                .id()
                .and_then(|pid| i32::try_from(pid).ok())
                .map(|pid| GroupGuard::new(Some(nix::unistd::Pid::from_raw(pid))));
            if let Some(stderr) = stderr {
                forward_stderr(config.name.clone(), stderr);
            }
            ().serve(transport)
                .await
                .map_err(|e| format!("initialize failed: {e}"))?
        }
        McpTransport::Http { url, token_env } => {
            let mut http = StreamableHttpClientTransportConfig::with_uri(url.as_str());
            if let Some(var) = token_env {
                let token = std::env::var(var)
                    .map_err(|_| format!("token_env {var} is not set in the environment"))?;
                http = http.auth_header(token);
            }
            let transport = StreamableHttpClientTransport::from_config(http);
            ().serve(transport)
                .await
                .map_err(|e| format!("initialize failed at {url}: {e}"))?
        }
    };
    let tools = service
        .peer()
        .list_all_tools()
        .await
        .map_err(|e| format!("tools/list failed: {e}"))?;
    Ok((service, tools, group))
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

fn bind_tool(
    config: &McpServerConfig,
    peer: Peer<RoleClient>,
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
            peer,
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
    peer: Peer<RoleClient>,
}

#[async_trait]
impl ToolHandler for McpToolHandler {
    async fn call(&self, input: &Value, ctx: &ToolContext) -> ToolOutput {
        let arguments = match input {
            Value::Object(m) => Some(m.clone()),
            _ => None,
        };
        let params = CallToolRequestParams {
            meta: None,
            name: self.tool.clone().into(),
            arguments,
            task: None,
        };
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let options = PeerRequestOptions {
            timeout: Some(ctx.deadline),
            meta: None,
        };
        let handle = match self.peer.send_cancellable_request(request, options).await {
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
            let _ = self
                .peer
                .notify_cancelled(CancelledNotificationParam {
                    request_id: id,
                    reason: Some("cancelled by GEODE".into()),
                })
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
            None => serde_json::to_string(&c.raw).unwrap_or_default(),
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
