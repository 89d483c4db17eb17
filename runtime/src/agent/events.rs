//! Typed events a running loop emits to its driver (`geode exec --json` prints them as JSONL;
//! the REPL and the daemon render them).

use serde::Serialize;
use serde_json::Value;

use super::termination::TerminationReason;
use super::verify::Verdict;
use crate::conversation::Usage;
use crate::hooks::{HookDecided, HookDecisionKind, HookEventKind};
use crate::model::ModelDelta;
use crate::store::timeline::CallOutcome;
use crate::tools::executor::CallRecord;

/// Characters of a tool's output an event carries (the timeline keeps all of it).
pub const EVENT_OUTPUT_CHARS: usize = 4000;

/// `text` cut at [`EVENT_OUTPUT_CHARS`] characters, with a marker saying how much was left.
pub fn capped_output(text: &str) -> String {
    let total = text.chars().count();
    if total <= EVENT_OUTPUT_CHARS {
        return text.to_string();
    }
    let kept: String = text.chars().take(EVENT_OUTPUT_CHARS).collect();
    format!(
        "{kept}\n[... {} more characters]",
        total - EVENT_OUTPUT_CHARS
    )
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum LoopEvent {
    TurnStarted {
        session_id: String,
        turn: u32,
        /// The model answering this turn (its catalog id).
        model: String,
    },
    RoundStarted {
        round: u32,
        force_text: bool,
    },
    /// A piece of the reply's text as the model streams it; `assistant_message` still carries
    /// the whole text after.
    TextDelta {
        text: String,
    },
    /// A piece of the model's thinking as it streams.
    ThinkingDelta {
        text: String,
    },
    AssistantMessage {
        text: String,
        tool_calls: usize,
        usage: Usage,
    },
    ToolStarted {
        call_id: String,
        tool: String,
        input: Value,
    },
    /// A piece of a running call's output (its stdout and stderr as read, interleaved), at
    /// most [`LIVE_OUTPUT_CAP`](crate::tools::output::LIVE_OUTPUT_CAP) bytes per call;
    /// `tool_ended` still carries the result.
    ToolOutputDelta {
        call_id: String,
        text: String,
    },
    ToolEnded {
        call_id: String,
        tool: String,
        outcome: CallOutcome,
        is_error: bool,
        /// What the model was given, cut at [`EVENT_OUTPUT_CHARS`] characters.
        output: String,
        duration_ms: u64,
        /// The error's first line, when the call failed.
        error: Option<String>,
    },
    /// A hook decided something (continue is nothing). A tool call's decisions come before its
    /// `ToolEnded`; `tool` and `call_id` are absent for the turn's own events (UserPromptSubmit,
    /// PreVerify, PostVerify, Stop, PreCompact).
    HookDecision {
        event: HookEventKind,
        /// The handler's name (`command: ...`).
        hook: String,
        tool: Option<String>,
        call_id: Option<String>,
        decision: HookDecisionKind,
        reason: Option<String>,
        /// The rewritten tool input or prompt, for a `rewrite`.
        #[serde(skip_serializing_if = "Option::is_none")]
        input: Option<Value>,
    },
    /// A model call failed with a transient error; attempt `attempt` follows after `wait_ms`.
    ModelRetry {
        attempt: u32,
        error: String,
        wait_ms: u64,
    },
    Verification {
        attempt: u32,
        verdict: String,
        misses: Vec<String>,
    },
    TurnEnded {
        termination: TerminationReason,
        verdict: Verdict,
        text: String,
        rounds: u32,
        tool_calls: u32,
        usage: Usage,
        /// What failed, when the turn ended on a failure (a model call that could not be made).
        error: Option<String>,
    },
}

impl LoopEvent {
    pub fn delta(delta: ModelDelta) -> LoopEvent {
        match delta {
            ModelDelta::Text(text) => LoopEvent::TextDelta { text },
            ModelDelta::Thinking(text) => LoopEvent::ThinkingDelta { text },
        }
    }

    /// A hook's decision; `call` names the tool call (tool, call id) it was about.
    pub fn hook_decision(decided: &HookDecided, call: Option<(&str, &str)>) -> LoopEvent {
        LoopEvent::HookDecision {
            event: decided.event,
            hook: decided.hook.clone(),
            tool: call.map(|(tool, _)| tool.to_string()),
            call_id: call.map(|(_, id)| id.to_string()),
            decision: decided.decision,
            reason: decided.reason.clone(),
            input: decided.input.clone(),
        }
    }

    /// The events a finished call is reported with: its hooks' decisions, then its end.
    pub fn call_ended(record: &CallRecord) -> Vec<LoopEvent> {
        let call = (record.tool.as_str(), record.result.tool_use_id.as_str());
        let mut events: Vec<LoopEvent> = record
            .hooks
            .iter()
            .map(|d| LoopEvent::hook_decision(d, Some(call)))
            .collect();
        events.push(LoopEvent::tool_ended(record));
        events
    }

    /// The event a finished call's end is reported with.
    pub fn tool_ended(record: &CallRecord) -> LoopEvent {
        let result = &record.result;
        LoopEvent::ToolEnded {
            call_id: result.tool_use_id.clone(),
            tool: record.tool.clone(),
            outcome: record.outcome.clone(),
            is_error: result.is_error,
            output: capped_output(&result.content),
            duration_ms: u64::try_from(record.duration.as_millis()).unwrap_or(u64::MAX),
            error: result
                .is_error
                .then(|| result.content.lines().next().unwrap_or("").to_string()),
        }
    }
}
