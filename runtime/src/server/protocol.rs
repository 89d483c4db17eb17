//! The thin-client protocol (`geode.ipc.v1`): newline-delimited JSON over the daemon's Unix
//! socket, one JSON object per line, tagged by `type`.
//!
//! Server -> client: first a `session` greeting; then, per prompt, `text_delta` and
//! `thinking_delta` as the model streams, `stream` (a round's whole assistant text, after its
//! deltas, so a client that showed the deltas need not show it again), events (`round_start`,
//! `tool_start`, `tool_output_delta` (a running command's output as it is read), `hook_decision`
//! (a hook denied, rewrote, asked or added context), `tool_end`, `tokens`, `turn_end`), possibly
//! `approval_request` (answered by the client's `approval_response`, denied on timeout with an
//! `approval_timeout` notice), and finally `result` (with the turn's token usage and cost).
//! `command_result` answers a `command`;
//! `sessions` answers `/resume` without an id (the sessions one may resume, for the client to
//! offer as a picker or a numbered list);
//! `error` reports a bad line or a refused request without closing the connection.
//!
//! Client -> server: `client_capability` (optional, first), `prompt`, `command` (a slash
//! command without the slash: `status`, `cost`, ...), `cancel` (the running turn),
//! `resume` (switch this connection to a checkpointed session), `approval_response`, `exit`.

use serde::{Deserialize, Serialize};

use crate::agent::{LoopEvent, TerminationReason};
use crate::conversation::Usage;
use crate::hooks::{HookDecisionKind, HookEventKind};
use crate::ids::SessionId;
use crate::policy::{SafetyLevel, SessionMode};
use crate::store::timeline::CallOutcome;
use crate::tools::approval::ApprovalAnswer;

pub const PROTOCOL: &str = "geode.ipc.v1";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ClientMessage {
    ClientCapability {
        #[serde(default)]
        approvals: bool,
        #[serde(default)]
        version: Option<String>,
    },
    Prompt {
        text: String,
    },
    Command {
        name: String,
        #[serde(default)]
        args: String,
    },
    /// `!COMMAND` typed at the prompt: run in the session's workspace through its pipeline.
    Shell {
        command: String,
    },
    Cancel,
    Resume {
        session_id: String,
    },
    ApprovalResponse {
        approval_id: String,
        /// `y`, `n`, `a` (always for this tool in this session) or `n: WHY`.
        decision: ApprovalAnswer,
    },
    Exit,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ServerMessage {
    Session {
        protocol: String,
        session_id: String,
        model: String,
        mode: SessionMode,
        /// Why the session's model cannot answer (none configured, no key), for the client to
        /// show before anything is typed; absent when it can.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model_unavailable: Option<String>,
    },
    Stream {
        text: String,
    },
    TextDelta {
        text: String,
    },
    ThinkingDelta {
        text: String,
    },
    RoundStart {
        round: u32,
    },
    ToolStart {
        call_id: String,
        tool: String,
        input: serde_json::Value,
    },
    /// A piece of a running call's output, at most 64 KiB per call (the runtime's
    /// `LIVE_OUTPUT_CAP`); `tool_end` follows when the call is done.
    ToolOutputDelta {
        call_id: String,
        text: String,
    },
    /// A hook decided something (denied, rewrote, asked, added context): shown so a person
    /// knows why a call or prompt changed.
    HookDecision {
        event: HookEventKind,
        hook: String,
        tool: Option<String>,
        decision: HookDecisionKind,
        reason: Option<String>,
    },
    ToolEnd {
        call_id: String,
        tool: String,
        /// In words (`succeeded`, `denied at approval: WHY`): the outcome's `Display`.
        #[serde(with = "outcome_words")]
        outcome: CallOutcome,
        is_error: bool,
    },
    Tokens {
        input: u64,
        output: u64,
    },
    TurnEnd {
        termination: TerminationReason,
        /// What failed, when the turn ended on a failure: the client shows it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    ApprovalRequest {
        approval_id: String,
        tool_name: String,
        detail: String,
        safety_level: SafetyLevel,
    },
    ApprovalTimeout {
        approval_id: String,
    },
    /// A file change allowed without asking: its diff, as an approval would have shown it.
    AutoApproved {
        tool_name: String,
        detail: String,
    },
    Result {
        text: String,
        rounds: u32,
        tool_calls: u32,
        termination: TerminationReason,
        model: String,
        /// Hash of the system prompt the turn ran under.
        system_prompt_hash: Option<String>,
        /// The turn's tokens and cost, all its model calls summed.
        #[serde(default)]
        usage: Usage,
    },
    CommandResult {
        name: String,
        text: String,
    },
    /// The answer to `/resume` without an id: newest first, the live session left out.
    /// `/resume N` resumes the Nth of this list.
    Sessions {
        sessions: Vec<SessionEntry>,
    },
    Error {
        message: String,
        /// True when the error answers a `prompt` or `command` (the client may send the next
        /// one); false for a bad line or a stale approval answer while a turn still runs.
        #[serde(default)]
        ends_request: bool,
    },
}

/// A checkpointed session as a person picks it: what it was about, when it was last active,
/// how far it went and what it cost.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionEntry {
    pub session_id: SessionId,
    /// The first line of its first prompt.
    pub title: String,
    /// RFC 3339, as the checkpoint store writes it.
    pub updated_at: String,
    pub turns: u32,
    pub model: String,
    pub cost_usd: f64,
    /// The folder it runs in (empty from a daemon older than the field).
    #[serde(default)]
    pub cwd: String,
}

impl ServerMessage {
    /// The wire form of a loop event; `None` for events the thin client does not render.
    pub fn from_event(event: &LoopEvent) -> Option<ServerMessage> {
        Some(match event {
            LoopEvent::RoundStarted { round, .. } => ServerMessage::RoundStart { round: *round },
            LoopEvent::TextDelta { text } => ServerMessage::TextDelta { text: text.clone() },
            LoopEvent::ThinkingDelta { text } => {
                ServerMessage::ThinkingDelta { text: text.clone() }
            }
            LoopEvent::AssistantMessage { text, usage, .. } => {
                // Tokens first so a client can print usage under the text it belongs to.
                return Some(if text.is_empty() {
                    ServerMessage::Tokens {
                        input: usage.input_tokens,
                        output: usage.output_tokens,
                    }
                } else {
                    ServerMessage::Stream { text: text.clone() }
                });
            }
            LoopEvent::ToolStarted {
                call_id,
                tool,
                input,
            } => ServerMessage::ToolStart {
                call_id: call_id.clone(),
                tool: tool.clone(),
                input: input.clone(),
            },
            LoopEvent::ToolOutputDelta { call_id, text } => ServerMessage::ToolOutputDelta {
                call_id: call_id.clone(),
                text: text.clone(),
            },
            LoopEvent::ToolEnded {
                call_id,
                tool,
                outcome,
                is_error,
                ..
            } => ServerMessage::ToolEnd {
                call_id: call_id.clone(),
                tool: tool.clone(),
                outcome: outcome.clone(),
                is_error: *is_error,
            },
            LoopEvent::HookDecision {
                event,
                hook,
                tool,
                decision,
                reason,
                ..
            } => ServerMessage::HookDecision {
                event: *event,
                hook: hook.clone(),
                tool: tool.clone(),
                decision: *decision,
                reason: reason.clone(),
            },
            LoopEvent::TurnEnded {
                termination, error, ..
            } => ServerMessage::TurnEnd {
                termination: *termination,
                error: error.clone(),
            },
            _ => return None,
        })
    }
}

/// A call outcome on the wire as the words a person reads, parsed back where it arrives.
mod outcome_words {
    use serde::{Deserialize, Deserializer, Serializer, de};

    use crate::store::timeline::CallOutcome;

    pub fn serialize<S: Serializer>(outcome: &CallOutcome, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(outcome)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<CallOutcome, D::Error> {
        String::deserialize(d)?.parse().map_err(de::Error::custom)
    }
}

/// One line of the wire: the JSON and a newline.
pub fn encode<T: Serialize>(msg: &T) -> String {
    let mut line = serde_json::to_string(msg).unwrap_or_else(|e| {
        format!("{{\"type\":\"error\",\"message\":\"cannot encode a message: {e}\"}}")
    });
    line.push('\n');
    line
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn messages_have_the_documented_wire_shape() {
        let m: ClientMessage = serde_json::from_str(
            r#"{"type":"approval_response","approval_id":"a1","decision":"y"}"#,
        )
        .unwrap();
        assert_eq!(
            m,
            ClientMessage::ApprovalResponse {
                approval_id: "a1".into(),
                decision: ApprovalAnswer::Yes
            }
        );
        let line = encode(&ServerMessage::ApprovalRequest {
            approval_id: "a1".into(),
            tool_name: "write_file".into(),
            detail: "{}".into(),
            safety_level: SafetyLevel::Write,
        });
        assert!(line.starts_with(r#"{"type":"approval_request","approval_id":"a1""#));
        assert!(line.ends_with('\n'));
        let back: ServerMessage = serde_json::from_str(line.trim()).unwrap();
        assert!(matches!(back, ServerMessage::ApprovalRequest { .. }));
        let exit: ClientMessage = serde_json::from_str(r#"{"type":"exit"}"#).unwrap();
        assert_eq!(exit, ClientMessage::Exit);
    }

    /// The enums on the wire keep the strings a client sends and reads: a decision as typed,
    /// a mode, a termination and a safety level by their serde names.
    #[test]
    fn typed_fields_keep_their_wire_strings() {
        let why: ClientMessage = serde_json::from_str(
            r#"{"type":"approval_response","approval_id":"a1","decision":"n: use notes.md"}"#,
        )
        .unwrap();
        let ClientMessage::ApprovalResponse { decision, .. } = &why else {
            panic!("{why:?}")
        };
        assert_eq!(decision, &ApprovalAnswer::NoBecause("use notes.md".into()));
        assert!(encode(&why).contains(r#""decision":"n: use notes.md""#));
        for (text, answer) in [
            ("y", ApprovalAnswer::Yes),
            ("always", ApprovalAnswer::Always),
        ] {
            let json =
                format!(r#"{{"type":"approval_response","approval_id":"a","decision":"{text}"}}"#);
            let m: ClientMessage = serde_json::from_str(&json).unwrap();
            assert!(
                matches!(m, ClientMessage::ApprovalResponse { decision, .. } if decision == answer)
            );
        }
        let bad = serde_json::from_str::<ClientMessage>(
            r#"{"type":"approval_response","approval_id":"a","decision":"maybe"}"#,
        )
        .unwrap_err();
        assert!(
            bad.to_string()
                .contains("decision \"maybe\": use y, n, a or n: WHY"),
            "{bad}"
        );
        let line = encode(&ServerMessage::Session {
            protocol: "1".into(),
            session_id: "s".into(),
            model: "nop".into(),
            mode: SessionMode::Ipc,
            model_unavailable: None,
        });
        assert!(line.contains(r#""mode":"ipc""#), "{line}");
        let line = encode(&ServerMessage::TurnEnd {
            termination: TerminationReason::MaxRounds,
            error: None,
        });
        assert!(line.contains(r#""termination":"max_rounds""#), "{line}");
        for mode in [
            SessionMode::Repl,
            SessionMode::Ipc,
            SessionMode::Daemon,
            SessionMode::Headless,
        ] {
            assert_eq!(serde_json::to_value(mode).unwrap(), mode.as_str());
        }
    }

    #[test]
    fn a_running_call_s_output_travels_as_tool_output_delta() {
        let event = LoopEvent::ToolOutputDelta {
            call_id: "c1".into(),
            text: "building\n".into(),
        };
        let line = encode(&ServerMessage::from_event(&event).unwrap());
        assert_eq!(
            line,
            "{\"type\":\"tool_output_delta\",\"call_id\":\"c1\",\"text\":\"building\\n\"}\n"
        );
    }

    /// `tool_end` keeps the outcome's words on the wire and reads them back typed.
    #[test]
    fn tool_end_carries_the_outcome_in_words() {
        let end = ServerMessage::ToolEnd {
            call_id: "c1".into(),
            tool: "write_file".into(),
            outcome: CallOutcome::Denied {
                step: crate::store::timeline::PipelineStep::PreToolUse,
                reason: "the user refused: use notes.md".into(),
            },
            is_error: true,
        };
        let line = encode(&end);
        assert!(
            line.contains(r#""outcome":"denied at pre tool use: the user refused: use notes.md""#),
            "{line}"
        );
        assert_eq!(
            serde_json::from_str::<ServerMessage>(line.trim()).unwrap(),
            end
        );
        let bad =
            r#"{"type":"tool_end","call_id":"c","tool":"t","outcome":"exploded","is_error":false}"#;
        assert!(serde_json::from_str::<ServerMessage>(bad).is_err());
    }
}
