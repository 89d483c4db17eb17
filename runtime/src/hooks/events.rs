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
    PreToolUse,
    PostToolUse,
    UserPromptSubmit,
    PermissionRequest,
    PreCompact,
    PostCompact,
    SessionStart,
    SessionEnd,
    SubagentStart,
    SubagentStop,
    PreVerify,
    PostVerify,
    Stop,
}

impl HookEventKind {
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

    pub fn name(self) -> &'static str {
        self.into()
    }

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
    PreToolUse {
        tool_name: String,
        tool_input: Value,
        tool_use_id: String,
    },
    PostToolUse {
        tool_name: String,
        tool_input: Value,
        tool_use_id: String,
        tool_response: ToolResponsePayload,
    },
    UserPromptSubmit {
        prompt: String,
    },
    PermissionRequest {
        tool_name: String,
        tool_input: Value,
        safety_level: SafetyLevel,
        reason: Option<String>,
    },
    PreCompact {
        message_count: usize,
        keep_recent: usize,
    },
    PostCompact {
        summary_sha256: String,
    },
    SessionStart {
        source: String,
    },
    SessionEnd {
        reason: String,
    },
    SubagentStart {
        subagent_session_id: String,
    },
    SubagentStop {
        subagent_session_id: String,
    },
    PreVerify {
        final_text: String,
        misses: Vec<String>,
    },
    PostVerify {
        final_text: String,
        misses: Vec<String>,
    },
    Stop {
        final_text: String,
        termination: String,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolResponsePayload {
    pub content: String,
    pub is_error: bool,
}

impl HookEvent {
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
    pub session_id: SessionId,
    pub turn: u32,
    pub plan_generation: u64,
    pub verify_attempt: u32,
    /// The model call this event belongs to, when there is one.
    pub correlation_id: Option<String>,
    pub cwd: String,
    #[serde(flatten)]
    pub event: HookEvent,
}

/// What a handler answers. Which variants an event admits is `allowed_for`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "decision", content = "value", rename_all = "snake_case")]
pub enum HookDecision {
    Continue,
    /// Replace the tool input (PreToolUse) or the prompt (UserPromptSubmit, a string value),
    /// with the hook's reason when it gave one.
    Rewrite {
        input: Value,
        reason: Option<String>,
    },
    Block(String),
    RequestPermission(String),
    AddContext(String),
    Allow,
    Deny(String),
    Ask,
    Defer,
    /// PreCompact: keep this many recent messages.
    KeepRecent(usize),
    /// PreVerify: add misses.
    Strengthen(Vec<String>),
    Accept,
    Revise(String),
    Escalate(String),
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
