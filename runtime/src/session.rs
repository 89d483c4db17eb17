//! `create_session`: builds the executor and the loop of one session as a pair sharing hooks,
//! timeline, cognitive state and plan. Every driver (`geode exec`, the harness, later the REPL
//! and the daemon) starts a session here, so they all get the same pipeline.

use std::sync::{Arc, Mutex};

use tokio::sync::mpsc::UnboundedSender;

use crate::agent::{AgenticLoop, LoopEvent, LoopParts};
use crate::cognition::CognitiveState;
use crate::hooks::HookRegistry;
use crate::ids::SessionId;
use crate::model::Model;
use crate::policy::SessionPolicy;
use crate::scaffold::Scaffold;
use crate::store::timeline::SessionTimeline;
use crate::tools::approval::{Approver, NoHuman};
use crate::tools::builtin::builtin_tools;
use crate::tools::cognitive::cognitive_tools;
use crate::tools::executor::{
    ExecutorConfig, ExecutorError, ExecutorParts, ToolExecutor, ToolRequestMiddleware,
};
use crate::tools::plan::{BoundTool, BoundToolPlan};
use crate::tools::workspace::Workspace;

/// What a session is made of. `SessionConfig::new` fills the defaults of a headless session.
pub struct SessionConfig {
    pub session_id: SessionId,
    pub policy: SessionPolicy,
    pub workspace: Arc<dyn Workspace>,
    pub model: Arc<dyn Model>,
    pub scaffold: Scaffold,
    pub timeline: Option<Arc<SessionTimeline>>,
    pub hooks: HookRegistry,
    pub approver: Arc<dyn Approver>,
    /// Tools beyond the built-in and cognitive ones (MCP tools, test tools).
    pub extra_tools: Vec<BoundTool>,
    pub middleware: Vec<Arc<dyn ToolRequestMiddleware>>,
    pub events: Option<UnboundedSender<LoopEvent>>,
    /// `YYYY-MM-DD` for the prompt; today (UTC) when `None`.
    pub date: Option<String>,
}

impl SessionConfig {
    pub fn new(
        policy: SessionPolicy,
        workspace: Arc<dyn Workspace>,
        model: Arc<dyn Model>,
    ) -> Self {
        SessionConfig {
            session_id: SessionId::random(),
            policy,
            workspace,
            model,
            scaffold: Scaffold::default(),
            timeline: None,
            hooks: HookRegistry::new(),
            approver: Arc::new(NoHuman),
            extra_tools: Vec::new(),
            middleware: Vec::new(),
            events: None,
            date: None,
        }
    }
}

/// Build the executor + loop pair. Fails only on a tool whose schema does not compile.
pub fn create_session(cfg: SessionConfig) -> Result<AgenticLoop, ExecutorError> {
    let mut tools = builtin_tools();
    tools.extend(cognitive_tools());
    tools.extend(cfg.extra_tools);
    let cognition = Arc::new(Mutex::new(CognitiveState::default()));
    let hooks = Arc::new(cfg.hooks);
    let executor = ToolExecutor::new(ExecutorParts {
        session_id: cfg.session_id.clone(),
        plan: BoundToolPlan::new(1, tools),
        policy: cfg.policy,
        workspace: cfg.workspace,
        hooks: hooks.clone(),
        approver: cfg.approver,
        middleware: cfg.middleware,
        timeline: cfg.timeline.clone(),
        cognition: cognition.clone(),
        config: ExecutorConfig {
            result_cap: cfg.scaffold.tool_result_cap,
            ..ExecutorConfig::default()
        },
    })?;
    Ok(AgenticLoop::new(LoopParts {
        session_id: cfg.session_id,
        model: cfg.model,
        executor: Arc::new(executor),
        hooks,
        timeline: cfg.timeline,
        scaffold: cfg.scaffold,
        cognition,
        date: cfg
            .date
            .unwrap_or_else(|| chrono::Utc::now().format("%Y-%m-%d").to_string()),
        events: cfg.events,
    }))
}
