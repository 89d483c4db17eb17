//! `delegate_task`: a sub-agent. The parent's model proposes a self-contained task; a child
//! loop runs it to the end in its own session (own id, own timeline rows, own guards and
//! budget) with a narrower tool plan, and its final answer comes back as the tool result.
//!
//! Narrower means: the parent's tools minus `delegate_task` itself (no recursive delegation),
//! cut further to the `tools` the call names, under the parent's policy (same mode, same
//! approver: in a REPL the same human answers the child's prompts; without a human the same
//! default deny applies). Modes without a human put `delegate_task` on their deny list
//! (policy.rs), so this tool only exists in REPL and IPC sessions unless a policy lifts it.
//!
//! It lives on the session floor, not among the tools, because it builds a session
//! (`create_session`): a tool below the session layer must not reach up to it.
//!
//! MCP tools that connect after the parent started (servers come up in the background) reach a
//! child as they reach its parent: a child asks the parent's `late_tools` source before each of
//! its rounds, so a child started while a server was still connecting can call its tools once
//! it is up. A call that names no `tools` gives the child the parent's allow rules (late tools
//! included); one that names them gives it exactly those.
//!
//! The call is effectful: the child may have changed the workspace, so a parent that crashes
//! mid-delegation marks the call uncertain instead of running the child again.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use async_trait::async_trait;
use serde_json::{Value, json};

use crate::agent::TerminationReason;
use crate::hooks::{HookEnvelope, HookEvent, HookRegistry};
use crate::ids::SessionId;
use crate::model::ModelSlot;
use crate::policy::{PersonalDataClass, SafetyLevel, SessionPolicy};
use crate::scaffold::Scaffold;
use crate::session::{SessionConfig, create_session};
use crate::store::timeline::SessionTimeline;
use crate::tools::approval::Approver;
use crate::tools::executor::{ToolRequestMiddleware, ToolSource};
use crate::tools::plan::{
    BoundTool, ResourceKeyRule, ToolContext, ToolHandler, ToolOutput, ToolSpec,
};
use crate::tools::workspace::Workspace;

pub(crate) const DELEGATE_TOOL: &str = "delegate_task";

/// Rounds a child gets when the call does not say; the call may ask for at most `MAX_ROUNDS`.
const DEFAULT_ROUNDS: u32 = 10;
const MAX_ROUNDS: u32 = 30;
/// Seconds kept back from the dispatch deadline so the child ends its turn (and its session
/// rows) before the parent's pipeline gives up on the call.
const DEADLINE_MARGIN_SECS: u64 = 5;

/// What a child session is built from: the parent session's parts.
#[derive(Clone)]
pub(crate) struct ChildTemplate {
    pub policy: SessionPolicy,
    pub workspace: Arc<dyn Workspace>,
    /// The parent's current model (a `/model` switch moves its sub-agents too).
    pub model: ModelSlot,
    pub approver: Arc<dyn Approver>,
    pub hooks: Arc<HookRegistry>,
    pub timeline: Option<Arc<SessionTimeline>>,
    /// The parent's tools beyond the built-in and cognitive ones (MCP tools).
    pub extra_tools: Vec<BoundTool>,
    /// Where the parent's later tools come from; a child asks before each round.
    pub late_tools: Option<ToolSource>,
    pub middleware: Vec<Arc<dyn ToolRequestMiddleware>>,
    pub scaffold: Scaffold,
    pub skills: Arc<crate::skills::SkillSet>,
    pub date: Option<String>,
    pub environment: Vec<String>,
}

pub(crate) struct DelegateTool {
    template: ChildTemplate,
    /// The parent's tool names: a call may only narrow these.
    parent_tools: BTreeSet<String>,
    children: AtomicU32,
}

impl DelegateTool {
    /// `parent_tools`: the names of the tools the parent session has, before its deny list.
    pub fn bound(template: ChildTemplate, parent_tools: BTreeSet<String>) -> BoundTool {
        BoundTool {
            spec: Self::spec(),
            binding: format!("builtin:{DELEGATE_TOOL}"),
            handler: Arc::new(DelegateTool {
                template,
                parent_tools,
                children: AtomicU32::new(0),
            }),
        }
    }

    pub fn spec() -> ToolSpec {
        ToolSpec {
            name: DELEGATE_TOOL.into(),
            description: "Hand a self-contained sub-task to a sub-agent with its own context and \
                          budget; its final answer comes back as this tool's result. Name the \
                          tools it needs in `tools` (default: all of yours but this one)."
                .into(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "task": {"type": "string", "minLength": 1,
                             "description": "what the sub-agent must do, with all context it needs"},
                    "tools": {"type": "array", "items": {"type": "string"},
                              "description": "tool names the sub-agent may use"},
                    "max_rounds": {"type": "integer", "minimum": 1, "maximum": MAX_ROUNDS},
                    "time_budget_s": {"type": "integer", "minimum": 1},
                },
                "required": ["task"],
                "additionalProperties": false,
            }),
            // It spends model calls and may run every tool it is given; each of those calls
            // still passes the child's own pipeline and approvals.
            safety: SafetyLevel::Expensive,
            personal_data: PersonalDataClass::None,
            resource_keys: ResourceKeyRule::None,
            path_args: vec![],
            effectful: true,
            command_arg: None,
            deadline_arg: None,
        }
    }

    /// The child's tool allow-list: the requested tools that the parent has now (its late
    /// tools included), never this one. `None` when the call names none: the child keeps the
    /// parent's allow rules, so tools that connect later reach it too.
    fn child_tools(&self, input: &Value) -> Result<Option<BTreeSet<String>>, String> {
        let Some(requested) = input.get("tools").and_then(Value::as_array) else {
            return Ok(None);
        };
        let mut allowed: BTreeSet<String> = self.parent_tools.clone();
        if let Some(late) = &self.template.late_tools {
            allowed.extend(late().into_iter().map(|t| t.spec.name));
        }
        allowed.remove(DELEGATE_TOOL);
        let policy = &self.template.policy;
        allowed.retain(|t| policy.allows_tool(t) && !policy.deny_list.contains(t));
        let mut narrowed = BTreeSet::new();
        for name in requested.iter().filter_map(Value::as_str) {
            if !allowed.contains(name) {
                return Err(format!(
                    "delegate_task: tool {name:?} is not available to a sub-agent here \
                     (available: {})",
                    allowed.iter().cloned().collect::<Vec<_>>().join(", ")
                ));
            }
            narrowed.insert(name.to_string());
        }
        Ok(Some(narrowed))
    }

    fn child_config(
        &self,
        input: &Value,
        ctx: &ToolContext,
        id: SessionId,
    ) -> Result<SessionConfig, String> {
        let t = &self.template;
        let mut policy = match self.child_tools(input)? {
            Some(tools) => t.policy.clone().with_tool_allow_list(tools),
            None => t.policy.clone(),
        };
        policy.deny_list.insert(DELEGATE_TOOL.into());
        let mut scaffold = t.scaffold.clone();
        scaffold.guards.max_rounds = input
            .get("max_rounds")
            .and_then(Value::as_u64)
            .map_or(DEFAULT_ROUNDS, |r| r.clamp(1, u64::from(MAX_ROUNDS)) as u32);
        let ceiling = ctx
            .deadline
            .as_secs()
            .saturating_sub(DEADLINE_MARGIN_SECS)
            .max(1);
        let asked = input.get("time_budget_s").and_then(Value::as_u64);
        scaffold.guards.turn_time_budget_secs = Some(asked.map_or(ceiling, |s| s.min(ceiling)));
        let mut cfg = SessionConfig::new(policy, t.workspace.clone(), t.model.get());
        cfg.session_id = id;
        cfg.scaffold = scaffold;
        cfg.skills = t.skills.clone();
        cfg.timeline = t.timeline.clone();
        cfg.hooks = (*t.hooks).clone();
        cfg.approver = t.approver.clone();
        cfg.extra_tools = t.extra_tools.clone();
        cfg.middleware = t.middleware.clone();
        cfg.date = t.date.clone();
        cfg.environment = t.environment.clone();
        Ok(cfg)
    }

    async fn announce(&self, ctx: &ToolContext, event: HookEvent) {
        let outcome = self
            .template
            .hooks
            .dispatch(HookEnvelope {
                session_id: ctx.session_id.clone(),
                turn: 0,
                plan_generation: 0,
                verify_attempt: 0,
                correlation_id: Some(ctx.correlation_id.to_string()),
                cwd: ctx.workspace.root().display().to_string(),
                event,
            })
            .await;
        for f in &outcome.failures {
            tracing::warn!("hook {} failed on a sub-agent event: {}", f.hook, f.error);
        }
    }
}

#[async_trait]
impl ToolHandler for DelegateTool {
    async fn call(&self, input: &Value, ctx: &ToolContext) -> ToolOutput {
        let n = self.children.fetch_add(1, Ordering::Relaxed) + 1;
        let id = SessionId::new(format!("{}.sub{n}", ctx.session_id));
        let task = input
            .get("task")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let cfg = match self.child_config(input, ctx, id.clone()) {
            Ok(cfg) => cfg,
            Err(e) => return ToolOutput::error(e),
        };
        let mut child = match create_session(cfg) {
            Ok(child) => child,
            Err(e) => return ToolOutput::error(format!("delegate_task: {e}")),
        };
        if let Some(late) = &self.template.late_tools {
            child.take_late_tools_each_round(late.clone());
        }
        let subagent = || id.to_string();
        self.announce(
            ctx,
            HookEvent::SubagentStart {
                subagent_session_id: subagent(),
            },
        )
        .await;
        let outcome = child.run_turn(task, &ctx.cancel).await;
        child.close("subagent_done").await;
        self.announce(
            ctx,
            HookEvent::SubagentStop {
                subagent_session_id: subagent(),
            },
        )
        .await;
        let summary = format!(
            "[sub-agent {id}: {}, {} rounds, {} tool calls]",
            outcome.termination, outcome.rounds, outcome.tool_calls
        );
        let body = if outcome.text.is_empty() {
            summary
        } else {
            format!("{}\n\n{summary}", outcome.text)
        };
        match outcome.termination {
            TerminationReason::Natural | TerminationReason::ForcedText => ToolOutput::ok(body),
            _ => ToolOutput::error(body),
        }
    }
}
