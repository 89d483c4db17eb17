//! Typed events a running loop emits to its driver (`geode exec --json` prints them as JSONL;
//! the REPL and the daemon render them).

use serde::Serialize;
use serde_json::Value;

use super::termination::TerminationReason;
use super::verify::Verdict;
use crate::conversation::Usage;
use crate::store::timeline::CallOutcome;

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum LoopEvent {
    TurnStarted {
        session_id: String,
        turn: u32,
    },
    RoundStarted {
        round: u32,
        force_text: bool,
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
    ToolEnded {
        call_id: String,
        tool: String,
        outcome: CallOutcome,
        is_error: bool,
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
    },
}
