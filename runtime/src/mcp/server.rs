//! `run_agent`: GEODE as one tool of an external MCP host.
//!
//! Each call is a separately built headless one-shot session: its own executor and loop, the
//! `Headless` policy as is (bash, delegate_task and computer removed, nothing above `safe`
//! approved, no grant), no MCP client tools, no daemon services. The result is JSON
//! `{text, rounds, termination_reason, error}`, `error` null when the turn ended with an answer.

use std::path::PathBuf;
use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorData,
    Implementation, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig,
    Tool,
};
use rmcp::service::RequestContext;
use rmcp::{RoleServer, ServerHandler, ServiceExt};
use serde::Serialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::hooks::HookRegistry;
use crate::model::http::RouteOptions;
use crate::model::model_from_route;
use crate::policy::{SessionMode, SessionPolicy};
use crate::scaffold::Scaffold;
use crate::session::{SessionConfig, create_session};
use crate::store::timeline::SessionTimeline;
use crate::tools::workspace::LocalWorkspace;

use super::McpError;

pub(crate) const RUN_AGENT: &str = "run_agent";

/// What every `run_agent` call is built from.
#[derive(Debug, Clone)]
pub struct RunAgentSettings {
    /// Model route (`provider:model`, `scripted:FILE`, `nop`).
    pub model_route: String,
    /// Keys, base URL and HTTP settings for building the model.
    pub route_options: RouteOptions,
    /// The workspace of every call.
    pub workspace: PathBuf,
    /// Rounds per turn.
    pub max_rounds: u32,
    /// Record calls here, when set.
    pub timeline: Option<PathBuf>,
    /// The configured hooks, run in every call's session as in the REPL's.
    pub hooks: HookRegistry,
}

/// The answer of one `run_agent` call.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunAgentResult {
    /// The agent's final text; empty when the call failed before the turn.
    pub text: String,
    /// Model rounds the turn took; 0 when it never started.
    pub rounds: u32,
    /// Why the turn ended (its termination's name); `None` when it never started.
    pub termination_reason: Option<String>,
    /// Why the call failed or the turn did not end verifiably; `None` on success.
    pub error: Option<String>,
}

/// The MCP server handler: lists `run_agent`, runs it.
#[derive(Debug, Clone)]
pub struct RunAgentServer {
    settings: Arc<RunAgentSettings>,
}

impl RunAgentServer {
    /// A handler that builds every call from `settings`.
    pub fn new(settings: RunAgentSettings) -> Self {
        RunAgentServer {
            settings: Arc::new(settings),
        }
    }

    fn tool() -> Tool {
        let mut schema = serde_json::Map::new();
        schema.insert("type".into(), json!("object"));
        schema.insert(
            "properties".into(),
            json!({
                "prompt": {"type": "string", "description": "the task for the agent"},
                "time_budget_s": {
                    "type": "number",
                    "exclusiveMinimum": 0,
                    "description": "wall-clock budget of the turn, in seconds"
                }
            }),
        );
        schema.insert("required".into(), json!(["prompt"]));
        schema.insert("additionalProperties".into(), json!(false));
        Tool::new(
            RUN_AGENT,
            "Run one headless GEODE agent turn on a prompt in the server's workspace. \
             Shell, delegation and computer use are not available; only read-only tools \
             run without approval. Returns JSON {text, rounds, termination_reason, error}.",
            Arc::new(schema),
        )
        .with_title("Run a GEODE agent")
    }

    /// One headless turn.
    pub async fn run_agent(
        &self,
        prompt: &str,
        time_budget_s: Option<f64>,
        cancel: &CancellationToken,
    ) -> RunAgentResult {
        let failed = |error: String| RunAgentResult {
            text: String::new(),
            rounds: 0,
            termination_reason: None,
            error: Some(error),
        };
        let s = &self.settings;
        let model = match model_from_route(&s.model_route, &s.route_options) {
            Ok(m) => m,
            Err(e) => return failed(format!("model {}: {e}", s.model_route)),
        };
        let workspace = match LocalWorkspace::new(&s.workspace) {
            Ok(w) => Arc::new(w),
            Err(e) => return failed(format!("workspace {}: {e}", s.workspace.display())),
        };
        let mut cfg = SessionConfig::new(
            SessionPolicy::for_mode(SessionMode::Headless),
            workspace,
            model,
        );
        let mut scaffold = Scaffold::default();
        scaffold.guards.max_rounds = s.max_rounds;
        scaffold.guards.turn_time_budget_secs = time_budget_s.map(|b| b.ceil().max(1.0) as u64);
        cfg.scaffold = scaffold;
        cfg.hooks = s.hooks.clone();
        if let Some(path) = &s.timeline {
            match SessionTimeline::open(path) {
                Ok(t) => cfg.timeline = Some(Arc::new(t)),
                Err(e) => tracing::warn!("run_agent: timeline {}: {e}", path.display()),
            }
        }
        let mut session = match create_session(cfg) {
            Ok(s) => s,
            Err(e) => return failed(format!("session: {e}")),
        };
        tracing::info!("run_agent: session {}", session.session_id());
        let outcome = session.run_turn(prompt, cancel).await;
        session.close(outcome.termination.as_str()).await;
        let error = (!outcome.termination.verifiable())
            .then(|| format!("the turn ended with {}", outcome.termination));
        RunAgentResult {
            text: outcome.text,
            rounds: outcome.rounds,
            termination_reason: Some(outcome.termination.as_str().to_string()),
            error,
        }
    }
}

impl ServerHandler for RunAgentServer {
    fn get_info(&self) -> ServerConfig {
        let implementation =
            Implementation::new("geode", env!("CARGO_PKG_VERSION")).with_title("GEODE");
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(implementation)
            .with_instructions(
                "GEODE agent runtime: call run_agent with a prompt to run one headless turn.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(vec![Self::tool()]))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        (name == RUN_AGENT).then(Self::tool)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if request.name != RUN_AGENT {
            return Err(ErrorData::invalid_params(
                format!(
                    "unknown tool {}; this server has only run_agent",
                    request.name
                ),
                None,
            ));
        }
        let args = request.arguments.unwrap_or_default();
        let Some(prompt) = args.get("prompt").and_then(Value::as_str) else {
            return Err(ErrorData::invalid_params(
                "run_agent needs a string argument prompt",
                None,
            ));
        };
        if prompt.trim().is_empty() {
            return Err(ErrorData::invalid_params("the prompt is empty", None));
        }
        let budget = match args.get("time_budget_s") {
            None | Some(Value::Null) => None,
            Some(v) => match v.as_f64() {
                Some(b) if b > 0.0 && b.is_finite() => Some(b),
                _ => {
                    return Err(ErrorData::invalid_params(
                        "time_budget_s must be a positive number of seconds",
                        None,
                    ));
                }
            },
        };
        let result = self.run_agent(prompt, budget, &context.ct).await;
        let value = serde_json::to_value(&result)
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        let text = value.to_string();
        let mut out = if result.error.is_some() {
            CallToolResult::error(vec![ContentBlock::text(text)])
        } else {
            CallToolResult::success(vec![ContentBlock::text(text)])
        };
        out.structured_content = Some(value);
        Ok(out.into())
    }
}

/// Serve `run_agent` on this process's stdin/stdout until the client leaves or `shutdown`.
pub async fn serve_stdio(
    settings: RunAgentSettings,
    shutdown: CancellationToken,
) -> Result<(), McpError> {
    let service = RunAgentServer::new(settings)
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| McpError::Serve(e.into()))?;
    let stop = service.cancellation_token();
    tokio::select! {
        quit = service.waiting() => {
            quit.map_err(|e| McpError::Serve(e.into()))?;
        }
        _ = shutdown.cancelled() => stop.cancel(),
    }
    Ok(())
}
