//! Hook events with typed payloads, and the decisions each event admits.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::ids::SessionId;
use crate::policy::SafetyLevel;

/// The public hook points. Names match Claude Code's where Claude Code has the same event.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    strum::IntoStaticStr,
    strum::EnumString,
    strum::Display,
    strum::EnumIter,
)]
pub enum HookEventKind {
    /// Before a tool call runs; may rewrite, block, ask or allow it.
    PreToolUse,
    /// After a tool call ran; may add context or withhold the result.
    PostToolUse,
    /// A user prompt, before the model sees it; may rewrite, block or add context.
    UserPromptSubmit,
    /// A call needs the person's approval; may allow or deny it, or leave it to the person.
    PermissionRequest,
    /// Before a compaction; may put it off or choose how many messages to keep.
    PreCompact,
    /// A compaction was committed (observe only).
    PostCompact,
    /// The session started or was resumed (observe only).
    SessionStart,
    /// The session was closed (observe only).
    SessionEnd,
    /// A sub-agent (`delegate_task`) is about to run (observe only).
    SubagentStart,
    /// A sub-agent finished (observe only).
    SubagentStop,
    /// Before verification of a text answer; may add misses.
    PreVerify,
    /// After verification; may accept, revise or escalate the answer.
    PostVerify,
    /// The turn is about to end; may let it or keep it working.
    Stop,
}

impl HookEventKind {
    /// Every event, in declaration order.
    pub const ALL: [HookEventKind; 13] = [
        HookEventKind::PreToolUse,
        HookEventKind::PostToolUse,
        HookEventKind::UserPromptSubmit,
        HookEventKind::PermissionRequest,
        HookEventKind::PreCompact,
        HookEventKind::PostCompact,
        HookEventKind::SessionStart,
        HookEventKind::SessionEnd,
        HookEventKind::SubagentStart,
        HookEventKind::SubagentStop,
        HookEventKind::PreVerify,
        HookEventKind::PostVerify,
        HookEventKind::Stop,
    ];

    /// The event's name, as hook files and Claude Code spell it (`PreToolUse`).
    pub fn name(self) -> &'static str {
        self.into()
    }

    /// The event named `name` (exact spelling); `None` for an unknown name.
    pub fn parse(name: &str) -> Option<HookEventKind> {
        name.parse().ok()
    }

    /// Events about one tool call, whose handlers a matcher selects by the tool's name.
    pub fn has_tool(self) -> bool {
        matches!(
            self,
            HookEventKind::PreToolUse
                | HookEventKind::PostToolUse
                | HookEventKind::PermissionRequest
        )
    }

    /// Events whose handlers only observe: any decision other than continue is ignored.
    pub fn observe_only(self) -> bool {
        matches!(
            self,
            HookEventKind::PostCompact
                | HookEventKind::SessionStart
                | HookEventKind::SessionEnd
                | HookEventKind::SubagentStart
                | HookEventKind::SubagentStop
        )
    }
}

/// The payload of each event. Serialized into the `hook_event_name`-tagged JSON that command
/// hooks read on stdin (field names follow Claude Code: `tool_name`, `tool_input`, ...).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "hook_event_name")]
pub enum HookEvent {
    /// See `HookEventKind::PreToolUse`.
    PreToolUse {
        /// The tool's GEODE name.
        tool_name: String,
        /// The call's input.
        tool_input: Value,
        /// The id the model gave the call.
        tool_use_id: String,
    },
    /// See `HookEventKind::PostToolUse`.
    PostToolUse {
        /// The tool's GEODE name.
        tool_name: String,
        /// The call's input.
        tool_input: Value,
        /// The id the model gave the call.
        tool_use_id: String,
        /// The result the tool returned.
        tool_response: ToolResponsePayload,
    },
    /// See `HookEventKind::UserPromptSubmit`.
    UserPromptSubmit {
        /// The prompt as the person wrote it.
        prompt: String,
    },
    /// See `HookEventKind::PermissionRequest`.
    PermissionRequest {
        /// The tool's GEODE name.
        tool_name: String,
        /// The call's input.
        tool_input: Value,
        /// How the call was classified.
        safety_level: SafetyLevel,
        /// Why approval is asked (a PreToolUse hook's request or an escalation), if said.
        reason: Option<String>,
    },
    /// See `HookEventKind::PreCompact`.
    PreCompact {
        /// Messages in the conversation before compaction.
        message_count: usize,
        /// Recent messages compaction would keep.
        keep_recent: usize,
    },
    /// See `HookEventKind::PostCompact`.
    PostCompact {
        /// SHA-256 of the compaction summary.
        summary_sha256: String,
    },
    /// See `HookEventKind::SessionStart`.
    SessionStart {
        /// `startup` for a new session, `resume` for a resumed one.
        source: String,
    },
    /// See `HookEventKind::SessionEnd`.
    SessionEnd {
        /// Why the driver closed the session (`subagent_done` for a sub-agent).
        reason: String,
    },
    /// See `HookEventKind::SubagentStart`.
    SubagentStart {
        /// The sub-agent's own session id.
        subagent_session_id: String,
    },
    /// See `HookEventKind::SubagentStop`.
    SubagentStop {
        /// The sub-agent's own session id.
        subagent_session_id: String,
    },
    /// See `HookEventKind::PreVerify`.
    PreVerify {
        /// The answer to verify.
        final_text: String,
        /// What the rule-based verifier found missing.
        misses: Vec<String>,
    },
    /// See `HookEventKind::PostVerify`.
    PostVerify {
        /// The answer verified.
        final_text: String,
        /// Misses of the verifier and the PreVerify hooks.
        misses: Vec<String>,
    },
    /// See `HookEventKind::Stop`.
    Stop {
        /// The answer the turn would end with.
        final_text: String,
        /// The termination reason's name (`natural`, ...).
        termination: String,
    },
}

/// A tool's result as PostToolUse hooks see it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolResponsePayload {
    /// The result text.
    pub content: String,
    /// The tool reported a failure.
    pub is_error: bool,
}

impl HookEvent {
    /// Which event this payload belongs to.
    pub fn kind(&self) -> HookEventKind {
        match self {
            HookEvent::PreToolUse { .. } => HookEventKind::PreToolUse,
            HookEvent::PostToolUse { .. } => HookEventKind::PostToolUse,
            HookEvent::UserPromptSubmit { .. } => HookEventKind::UserPromptSubmit,
            HookEvent::PermissionRequest { .. } => HookEventKind::PermissionRequest,
            HookEvent::PreCompact { .. } => HookEventKind::PreCompact,
            HookEvent::PostCompact { .. } => HookEventKind::PostCompact,
            HookEvent::SessionStart { .. } => HookEventKind::SessionStart,
            HookEvent::SessionEnd { .. } => HookEventKind::SessionEnd,
            HookEvent::SubagentStart { .. } => HookEventKind::SubagentStart,
            HookEvent::SubagentStop { .. } => HookEventKind::SubagentStop,
            HookEvent::PreVerify { .. } => HookEventKind::PreVerify,
            HookEvent::PostVerify { .. } => HookEventKind::PostVerify,
            HookEvent::Stop { .. } => HookEventKind::Stop,
        }
    }

    /// The tool name matchers are tested against (`None` for events without a tool).
    pub fn tool_name(&self) -> Option<&str> {
        match self {
            HookEvent::PreToolUse { tool_name, .. }
            | HookEvent::PostToolUse { tool_name, .. }
            | HookEvent::PermissionRequest { tool_name, .. } => Some(tool_name),
            _ => None,
        }
    }
}

/// An event plus the correlation ids that tie it to the session's records.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HookEnvelope {
    /// The session the event happened in.
    pub session_id: SessionId,
    /// The session turn (1-based; 0 before the first).
    pub turn: u32,
    /// Generation of the tool plan at the time (it grows when tools are added).
    pub plan_generation: u64,
    /// Repairs already spent on the answer (PreVerify, PostVerify, Stop); 0 elsewhere.
    pub(crate) verify_attempt: u32,
    /// The model call this event belongs to, when there is one.
    pub correlation_id: Option<String>,
    /// The workspace root, as a path string.
    pub cwd: String,
    /// The event and its payload (flattened into the envelope's JSON).
    #[serde(flatten)]
    pub event: HookEvent,
}

/// What a handler answers. Which variants an event admits is `allowed_for`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "decision", content = "value", rename_all = "snake_case")]
pub enum HookDecision {
    /// No opinion; every event admits it.
    Continue,
    /// Replace the tool input (PreToolUse) or the prompt (UserPromptSubmit, a string value),
    /// with the hook's reason when it gave one.
    Rewrite {
        /// The new tool input, or the new prompt as a JSON string.
        input: Value,
        /// Why, when the hook said.
        reason: Option<String>,
    },
    /// Stop it, with why: a PreToolUse call does not run, a PostToolUse result is withheld, a
    /// blocked prompt ends the turn.
    Block(String),
    /// PreToolUse: ask the person for approval, with why.
    RequestPermission(String),
    /// PostToolUse, UserPromptSubmit: add this text for the model.
    AddContext(String),
    /// PermissionRequest: approve. PreToolUse: recorded, changes nothing.
    Allow,
    /// PermissionRequest: refuse, with why.
    Deny(String),
    /// PermissionRequest: leave it to the usual approval.
    Ask,
    /// PreCompact: put compaction off.
    Defer,
    /// PreCompact: keep this many recent messages.
    KeepRecent(usize),
    /// PreVerify: add misses.
    Strengthen(Vec<String>),
    /// PostVerify: accept the answer.
    Accept,
    /// PostVerify: repair the answer, with this instruction.
    Revise(String),
    /// PostVerify: withhold the answer for an outside check, with why.
    Escalate(String),
    /// Stop: let the turn end.
    Finalize,
    /// Stop: keep working, with this instruction.
    ContinueWith(String),
}

impl HookDecision {
    /// Whether the event admits this decision (runtime.md's table). Others are recorded as a
    /// handler failure and ignored.
    pub fn allowed_for(&self, kind: HookEventKind) -> bool {
        use HookDecision as D;
        use HookEventKind as K;
        if matches!(self, D::Continue) {
            return true;
        }
        match kind {
            // A PreToolUse allow is recorded and changes nothing: the approval step decides.
            K::PreToolUse => matches!(
                self,
                D::Rewrite { .. } | D::Block(_) | D::RequestPermission(_) | D::Allow
            ),
            K::PostToolUse => matches!(self, D::AddContext(_) | D::Block(_)),
            K::UserPromptSubmit => matches!(
                self,
                D::Rewrite {
                    input: Value::String(_),
                    ..
                } | D::Block(_)
                    | D::AddContext(_)
            ),
            K::PermissionRequest => matches!(self, D::Allow | D::Deny(_) | D::Ask),
            K::PreCompact => matches!(self, D::KeepRecent(_) | D::Defer),
            K::PreVerify => matches!(self, D::Strengthen(_)),
            K::PostVerify => matches!(self, D::Accept | D::Revise(_) | D::Escalate(_)),
            K::Stop => matches!(self, D::Finalize | D::ContinueWith(_)),
            _ => false,
        }
    }

    /// Whether this decision ends the handler chain (the first block or deny wins).
    pub fn stops_chain(&self) -> bool {
        matches!(
            self,
            HookDecision::Block(_) | HookDecision::Deny(_) | HookDecision::Escalate(_)
        )
    }
}
