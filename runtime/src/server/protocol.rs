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

pub(crate) const PROTOCOL: &str = "geode.ipc.v1";

/// One line a client sends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ClientMessage {
    /// What the client can do, optionally sent first; the server changes nothing on it yet.
    ClientCapability {
        /// True when the client answers approval requests.
        #[serde(default)]
        approvals: bool,
        /// The client's version, when it says.
        #[serde(default)]
        version: Option<String>,
    },
    /// A prompt for the next turn; one sent while a turn runs waits for that turn to end.
    Prompt {
        /// What the person typed.
        text: String,
    },
    /// A slash command, answered by `command_result` (`/resume` without an id by `sessions`).
    Command {
        /// The command without the slash: `status`, `cost`, ...
        name: String,
        /// The rest of the line; empty when absent.
        #[serde(default)]
        args: String,
    },
    /// `!COMMAND` typed at the prompt: run in the session's workspace through its pipeline.
    Shell {
        /// The command line, without the `!`.
        command: String,
    },
    /// Cancel the running turn (and refuse its pending approvals); nothing when none runs.
    Cancel,
    /// Switch this connection to a checkpointed session, as `/resume ARG` does.
    Resume {
        /// The `/resume` argument: a session id, an id prefix or a number of the last listing.
        session_id: String,
    },
    /// The person's answer to an `approval_request`.
    ApprovalResponse {
        /// The request answered.
        approval_id: String,
        /// `y`, `n`, `a` (always for this tool in this session) or `n: WHY`.
        decision: ApprovalAnswer,
    },
    /// Close the connection; a running turn is cancelled.
    Exit,
}

/// One line the server sends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ServerMessage {
    /// The greeting: sent first, and again when `/clear` or `/resume` switches the session.
    Session {
        /// The protocol's name and version, `geode.ipc.v1`.
        protocol: String,
        /// The live session's id.
        session_id: String,
        /// The model route id the session calls.
        model: String,
        /// The server's session mode: who can answer approval prompts.
        mode: SessionMode,
        /// Why the session's model cannot answer (none configured, no key), for the client to
        /// show before anything is typed; absent when it can.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model_unavailable: Option<String>,
    },
    /// A round's whole assistant text, after its `text_delta`s.
    Stream {
        /// The round's text.
        text: String,
    },
    /// A piece of the reply's text as the model streams it.
    TextDelta {
        /// The next piece.
        text: String,
    },
    /// A piece of the model's thinking as it streams.
    ThinkingDelta {
        /// The next piece.
        text: String,
    },
    /// A round (one model call and the tool calls it asks for) starts.
    RoundStart {
        /// The round's number in the turn, from 1.
        round: u32,
    },
    /// A tool call starts.
    ToolStart {
        /// The call's id; its `tool_output_delta` and `tool_end` carry the same.
        call_id: String,
        /// The tool called.
        tool: String,
        /// The call's input.
        input: serde_json::Value,
    },
    /// A piece of a running call's output, at most 64 KiB per call (the runtime's
    /// `LIVE_OUTPUT_CAP`); `tool_end` follows when the call is done.
    ToolOutputDelta {
        /// The call the output belongs to.
        call_id: String,
        /// The next piece of its output (stdout and stderr as read, interleaved).
        text: String,
    },
    /// A hook decided something (denied, rewrote, asked, added context): shown so a person
    /// knows why a call or prompt changed.
    HookDecision {
        /// The hook event that fired.
        event: HookEventKind,
        /// The handler's name (`command: ...`).
        hook: String,
        /// The tool of the call decided on; absent for the turn's own events.
        tool: Option<String>,
        /// What the hook decided.
        decision: HookDecisionKind,
        /// The hook's reason, when it gave one.
        reason: Option<String>,
    },
    /// A tool call ended.
    ToolEnd {
        /// The call's id, as in its `tool_start`.
        call_id: String,
        /// The tool called.
        tool: String,
        /// In words (`succeeded`, `denied at approval: WHY`): the outcome's `Display`.
        #[serde(with = "outcome_words")]
        outcome: CallOutcome,
        /// True when the model was given an error result.
        is_error: bool,
    },
    /// The tokens of a model reply without text (for which no `stream` is sent).
    Tokens {
        /// Prompt tokens, cache reads and writes included.
        input: u64,
        /// Tokens written by the model, reasoning excluded.
        output: u64,
    },
    /// The loop ended the turn; `result` follows.
    TurnEnd {
        /// Why the turn ended.
        termination: TerminationReason,
        /// What failed, when the turn ended on a failure: the client shows it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// A call waits for the person's approval: answer with `approval_response`; a request left
    /// unanswered past the server's timeout is denied.
    ApprovalRequest {
        /// Names the request for its answer (`ap-1`, `ap-2`, ... on one connection).
        approval_id: String,
        /// The tool called.
        tool_name: String,
        /// What the call would do (a diff for a file change), and a hook's reason if one asked.
        detail: String,
        /// How much the call could change.
        safety_level: SafetyLevel,
    },
    /// No answer came in time: the call was denied.
    ApprovalTimeout {
        /// The request that timed out.
        approval_id: String,
    },
    /// A file change allowed without asking: its diff, as an approval would have shown it.
    AutoApproved {
        /// The tool called.
        tool_name: String,
        /// The change, as an approval request would have shown it.
        detail: String,
    },
    /// The end of a turn, its last message.
    Result {
        /// The turn's final text.
        text: String,
        /// Rounds (model calls) the turn ran.
        rounds: u32,
        /// Tool calls the turn made.
        tool_calls: u32,
        /// Why the turn ended.
        termination: TerminationReason,
        /// The model route id the session calls.
        model: String,
        /// Hash of the system prompt the turn ran under.
        system_prompt_hash: Option<String>,
        /// The turn's tokens and cost, all its model calls summed.
        #[serde(default)]
        usage: Usage,
    },
    /// The answer to a `command`, or to a `shell` line.
    CommandResult {
        /// The command answered, without the slash; `!` for a shell line.
        name: String,
        /// The answer, as a person reads it.
        text: String,
    },
    /// The answer to `/resume` without an id: newest first, the live session left out.
    /// `/resume N` resumes the Nth of this list.
    Sessions {
        /// At most 20; `/resume N` takes the Nth.
        sessions: Vec<SessionEntry>,
    },
    /// A bad line, or a request refused or failed; the connection stays open.
    Error {
        /// What went wrong.
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
    /// The id `/resume` takes.
    pub session_id: SessionId,
    /// The first line of its first prompt.
    pub title: String,
    /// RFC 3339, as the checkpoint store writes it.
    pub updated_at: String,
    /// Turns its checkpoint holds.
    pub turns: u32,
    /// The model its checkpoint was created with.
    pub model: String,
    /// What its turns cost so far, in US dollars.
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
