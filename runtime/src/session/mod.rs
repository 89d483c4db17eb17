//! `create_session`: builds the executor and the loop of one session as a pair sharing hooks,
//! timeline, cognitive state and plan. Every driver (`geode exec`, the harness, later the REPL
//! and the daemon) starts a session here, so they all get the same pipeline.
//!
//! With `SessionConfig::checkpoint` set, the session is durable: a checkpoint directory, effect
//! receipts and an evidence ledger (agent/durable_session.rs). `resume_session` is the one restore
//! path back into such a session.

pub mod delegate;
pub mod environment;
pub mod lanes;

use std::sync::{Arc, Mutex};

use tokio::sync::mpsc::UnboundedSender;

use crate::agent::durable::CheckpointSettings;
use crate::agent::durable_session::Durable;
use crate::agent::restore::{CRASH_REASON, RestoreReport, load_from};
use crate::agent::{AgenticLoop, LoopEvent, LoopParts};
use crate::cognition::CognitiveState;
use crate::hooks::HookRegistry;
use crate::ids::SessionId;
use crate::model::{Model, ModelSlot};
use crate::policy::SessionPolicy;
use crate::scaffold::Scaffold;
use crate::skills::{LOAD_SKILL_TOOL, SkillSet, SkillWorkspace, load_skill_tool};
use crate::store::StoreError;
use crate::store::checkpoint::CheckpointStore;
use crate::store::timeline::SessionTimeline;
use crate::tools::approval::{Approver, NoHuman};
use crate::tools::builtin::builtin_tools;
use crate::tools::cognitive::cognitive_tools;
use crate::tools::executor::{
    ExecutorConfig, ExecutorError, ExecutorParts, ToolExecutor, ToolRequestMiddleware, ToolSource,
};
use crate::tools::plan::{BoundTool, BoundToolPlan};
use crate::tools::workspace::Workspace;
use delegate::{ChildTemplate, DELEGATE_TOOL, DelegateTool};

/// What a session is made of. `SessionConfig::new` fills the defaults of a headless session.
pub struct SessionConfig {
    /// The session's id; `new` draws a random one.
    pub session_id: SessionId,
    /// What calls may run: mode, human in the loop, deny list, ceilings.
    pub policy: SessionPolicy,
    /// Where the session's tools act (files, commands).
    pub workspace: Arc<dyn Workspace>,
    /// The model the loop calls.
    pub model: Arc<dyn Model>,
    /// Loop settings: guards and budgets, verification, reflection, compaction, system prompt.
    pub scaffold: Scaffold,
    /// Where the session's rows are recorded; `None` records nothing.
    pub timeline: Option<Arc<SessionTimeline>>,
    /// The session's hook handlers, shared with its sub-agents.
    pub hooks: HookRegistry,
    /// Who answers approval requests; `new` sets `NoHuman`.
    pub approver: Arc<dyn Approver>,
    /// Tools beyond the built-in and cognitive ones (MCP tools, test tools).
    pub extra_tools: Vec<BoundTool>,
    /// Tools that connect later (MCP servers in the background). The session's own plan takes
    /// them from its driver between turns; its sub-agents, which run inside one of its turns,
    /// ask here before each of their rounds.
    pub late_tools: Option<ToolSource>,
    /// The session's skills, shared by the executor (`load_skill`, their folders readable) and
    /// the loop (the prompt's list, the scaffold hash). Empty: none of that is added.
    pub skills: Arc<SkillSet>,
    /// Trusted rewrites of tool requests, applied before policy.
    pub middleware: Vec<Arc<dyn ToolRequestMiddleware>>,
    /// Where the loop sends its events for the driver; `None` drops them.
    pub events: Option<UnboundedSender<LoopEvent>>,
    /// `YYYY-MM-DD` for the prompt; today (UTC) when `None`.
    pub date: Option<String>,
    /// Where a person's session runs (`environment::describe_environment`), for the prompt's
    /// dynamic context; empty for benchmark trials and `run_agent`.
    pub environment: Vec<String>,
    /// Make the session durable (checkpoint, receipts, ledger). `None`: no checkpoint, and no
    /// save-before-dispatch guarantee.
    pub checkpoint: Option<CheckpointSettings>,
}

/// Why a session could not be built or restored.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The tool executor could not be built (a tool's input schema does not compile).
    #[error(transparent)]
    Executor(#[from] ExecutorError),
    /// The checkpoint could not be opened, read or written.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A resume was asked of a session without checkpoint settings.
    #[error("session {0}: resuming needs checkpoint settings (SessionConfig::checkpoint)")]
    NotDurable(SessionId),
}

impl SessionConfig {
    /// A headless session on `workspace` calling `model` under `policy`: a random id, the
    /// default scaffold, no hooks, no timeline, no checkpoint, `NoHuman` approving.
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
            late_tools: None,
            skills: Arc::new(SkillSet::default()),
            middleware: Vec::new(),
            events: None,
            date: None,
            environment: Vec::new(),
            checkpoint: None,
        }
    }
}

/// Build the executor + loop pair. With checkpoint settings, the session's checkpoint
/// directory is created (an existing one is refused: resume it instead).
pub fn create_session(cfg: SessionConfig) -> Result<AgenticLoop, SessionError> {
    let settings = cfg.checkpoint.clone();
    let id = cfg.session_id.clone();
    let model_id = cfg.model.id().to_string();
    let root = cfg.workspace.root().to_path_buf();
    let (mut lp, durable) = build(cfg, || match &settings {
        Some(s) => Durable::create(s, &id, &model_id, &root).map(Some),
        None => Ok(None),
    })?;
    if let Some(d) = durable {
        lp.set_durable(d);
    }
    Ok(lp)
}

/// Bring back a checkpointed session (`cfg.session_id`, `cfg.checkpoint`): messages,
/// cognitive state with plan, guard counters, the interrupted turn. Receipts still `accepted`
/// become `uncertain`. Continue it with `AgenticLoop::resume_turn`. A damaged checkpoint is an
/// error naming the file, and the file is left as it is.
pub fn resume_session(cfg: SessionConfig) -> Result<(AgenticLoop, RestoreReport), SessionError> {
    let settings = cfg
        .checkpoint
        .clone()
        .ok_or_else(|| SessionError::NotDurable(cfg.session_id.clone()))?;
    let store = CheckpointStore::open(&settings.root, &cfg.session_id)?;
    let loaded = load_from(&store)?;
    let durable = Durable::resume(store, &settings, cfg.workspace.root())?;
    let newly_uncertain = durable.mark_accepted_uncertain(CRASH_REASON)?;
    let (mut lp, durable) = build(cfg, || Ok(Some(durable)))?;
    let Some(durable) = durable else {
        return Err(SessionError::NotDurable(lp.session_id().clone()));
    };
    let report = lp.restore(loaded, durable, newly_uncertain)?;
    Ok((lp, report))
}

/// The names of the tools every session has before MCP servers and policy are applied: the
/// built-in and cognitive tools and delegation (what a hook's matcher is checked against).
pub fn standard_tool_names() -> Vec<String> {
    builtin_tools()
        .into_iter()
        .chain(cognitive_tools())
        .map(|t| t.spec.name)
        .chain([DELEGATE_TOOL.to_string(), LOAD_SKILL_TOOL.to_string()])
        .collect()
}

/// The shared assembly. `durable` is called once the tools' schemas compiled, so a bad tool
/// never leaves a checkpoint directory behind; its stores are wired into the executor and
/// handed back for the caller to install.
fn build(
    cfg: SessionConfig,
    durable: impl FnOnce() -> Result<Option<Durable>, StoreError>,
) -> Result<(AgenticLoop, Option<Durable>), SessionError> {
    let hooks = Arc::new(cfg.hooks);
    let model_slot = ModelSlot::new(cfg.model.clone());
    let mut tools = builtin_tools();
    tools.extend(cognitive_tools());
    tools.extend(cfg.extra_tools.iter().cloned());
    let skills = cfg.skills.clone();
    let workspace: Arc<dyn Workspace> = if skills.is_empty() {
        cfg.workspace.clone()
    } else {
        tools.push(load_skill_tool(skills.clone()));
        Arc::new(SkillWorkspace::new(cfg.workspace.clone(), skills.clone()))
    };
    if !cfg.policy.deny_list.contains(DELEGATE_TOOL) && cfg.policy.allows_tool(DELEGATE_TOOL) {
        let names = tools.iter().map(|t| t.spec.name.clone()).collect();
        let template = ChildTemplate {
            policy: cfg.policy.clone(),
            workspace: cfg.workspace.clone(),
            model: model_slot.clone(),
            approver: cfg.approver.clone(),
            hooks: hooks.clone(),
            timeline: cfg.timeline.clone(),
            extra_tools: cfg.extra_tools,
            late_tools: cfg.late_tools,
            skills: cfg.skills,
            middleware: cfg.middleware.clone(),
            scaffold: cfg.scaffold.clone(),
            date: cfg.date.clone(),
            environment: cfg.environment.clone(),
        };
        tools.push(DelegateTool::bound(template, names));
    }
    let cognition = Arc::new(Mutex::new(CognitiveState::default()));
    let mut executor = ToolExecutor::new(ExecutorParts {
        session_id: cfg.session_id.clone(),
        plan: BoundToolPlan::new(1, tools),
        policy: cfg.policy,
        workspace,
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
    let durable = durable()?;
    if let Some(d) = &durable {
        executor = executor
            .with_effect_receipts(d.receipts())
            .with_file_history(d.file_history())
            .with_ledger(d.ledger());
    }
    let lp = AgenticLoop::new(LoopParts {
        session_id: cfg.session_id,
        model: cfg.model,
        model_slot,
        executor,
        hooks,
        timeline: cfg.timeline,
        scaffold: skills.apply_to(cfg.scaffold),
        cognition,
        date: cfg
            .date
            .unwrap_or_else(|| chrono::Utc::now().format("%Y-%m-%d").to_string()),
        environment: cfg.environment,
        events: cfg.events,
    });
    Ok((lp, durable))
}
