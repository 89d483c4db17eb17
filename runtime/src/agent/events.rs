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

/// One thing a running loop did, serialized with a snake_case `type` tag.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum LoopEvent {
    /// A user turn began.
    TurnStarted {
        /// The session's id.
        session_id: String,
        /// The turn's number in the session (1-based).
        turn: u32,
        /// The model answering this turn (its catalog id).
        model: String,
    },
    /// A round (one model call and its tool batch) began.
    RoundStarted {
        /// The round's number in the turn (1-based).
        round: u32,
        /// The wrap-up rule made this call text-only (no tools).
        force_text: bool,
    },
    /// A piece of the reply's text as the model streams it; `assistant_message` still carries
    /// the whole text after.
    TextDelta {
        /// The streamed piece of text.
        text: String,
    },
    /// A piece of the model's thinking as it streams.
    ThinkingDelta {
        /// The streamed piece of thinking.
        text: String,
    },
    /// The model's complete reply of a round.
    AssistantMessage {
        /// The reply's text (empty when it only calls tools).
        text: String,
        /// Tool calls the reply makes.
        tool_calls: usize,
        /// Tokens and cost of this model call.
        usage: Usage,
    },
    /// A tool call is about to run.
    ToolStarted {
        /// The id the model gave the call.
        call_id: String,
        /// The tool's name.
        tool: String,
        /// The call's input as the model wrote it.
        input: Value,
    },
    /// A piece of a running call's output (its stdout and stderr as read, interleaved), at
    /// most [`LIVE_OUTPUT_CAP`](crate::tools::output::LIVE_OUTPUT_CAP) bytes per call;
    /// `tool_ended` still carries the result.
    ToolOutputDelta {
        /// The id of the call the output belongs to.
        call_id: String,
        /// The output read since the last delta.
        text: String,
    },
    /// A tool call finished.
    ToolEnded {
        /// The id the model gave the call.
        call_id: String,
        /// The tool's name.
        tool: String,
        /// How the call ended, as the timeline records it.
        outcome: CallOutcome,
        /// The result the model was given is an error.
        is_error: bool,
        /// What the model was given, cut at [`EVENT_OUTPUT_CHARS`] characters.
        output: String,
        /// Wall-clock time of the call, in milliseconds.
        duration_ms: u64,
        /// The error's first line, when the call failed.
        error: Option<String>,
    },
    /// A hook decided something (continue is nothing). A tool call's decisions come before its
    /// `ToolEnded`; `tool` and `call_id` are absent for the turn's own events (UserPromptSubmit,
    /// PreVerify, PostVerify, Stop, PreCompact).
    HookDecision {
        /// The hook event that was dispatched.
        event: HookEventKind,
        /// The handler's name (`command: ...`).
        hook: String,
        /// The tool of the call decided on; absent for the turn's own events.
        tool: Option<String>,
        /// The id of the call decided on; absent for the turn's own events.
        call_id: Option<String>,
        /// What the hook decided.
        decision: HookDecisionKind,
        /// The reason the hook gave, if any.
        reason: Option<String>,
        /// The rewritten tool input or prompt, for a `rewrite`.
        #[serde(skip_serializing_if = "Option::is_none")]
        input: Option<Value>,
    },
    /// A model call failed with a transient error; attempt `attempt` follows after `wait_ms`.
    ModelRetry {
        /// Model calls failed in a row so far (1-based).
        attempt: u32,
        /// The error of the failed call.
        error: String,
        /// Milliseconds the loop waits before retrying.
        wait_ms: u64,
    },
    /// A verification of the turn's answer, and what it decided.
    Verification {
        /// Repairs already spent on the answer (0 at the first verification).
        attempt: u32,
        /// The outcome: `passed`, `failed`, `repair`, `escalated` or `skipped`.
        verdict: String,
        /// What the verifier and the hooks found missing.
        misses: Vec<String>,
    },
    /// The turn ended; the same facts as its `TurnOutcome`.
    TurnEnded {
        /// Why the turn ended.
        termination: TerminationReason,
        /// What verification said of the final answer.
        verdict: Verdict,
        /// The final answer (empty when withheld or when there was none).
        text: String,
        /// Rounds the turn took.
        rounds: u32,
        /// Tool calls the turn made.
        tool_calls: u32,
        /// Tokens and cost of the turn's model calls.
        usage: Usage,
        /// What failed, when the turn ended on a failure (a model call that could not be made).
        error: Option<String>,
    },
}

impl LoopEvent {
    /// The event that carries one piece of a streamed reply.
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
