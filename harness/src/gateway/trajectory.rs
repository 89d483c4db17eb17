//! The ATIF trajectory of a trial built from its gateway's records alone, the same way for
//! every agent and every wire format: no agent's own logs are read.
//!
//! Each call's request holds the whole conversation so far. A call that continues the one
//! before it (its messages start with that call's messages, then that call's reply) adds only
//! what is new: the tool results (observations of the previous step) and any new user text.
//! A call that does not (a side call: a title, a summary, a sub-agent, or an agent that
//! compacted) contributes its user messages as they are. Every reply is an agent step. Calls
//! that got no reply (refused, failed) are not steps: the records keep them.

use geode_runtime::conversation::{AssistantTurn, Message, Role};
use serde_json::{Value, json};

use super::records::{CallRecord, CallStatus};
use crate::atif::{Entry, trajectory_of};

/// The trajectory document of `records` (in their order), written by `agent_name`.
pub fn trajectory(agent_name: &str, session_id: &str, records: &[CallRecord]) -> Value {
    let answered: Vec<(&CallRecord, &[Message], &AssistantTurn)> = records
        .iter()
        .filter(|r| r.status == CallStatus::Ok)
        .filter_map(|r| {
            let request = r.request.as_ref()?;
            let reply = r.reply.as_ref()?;
            Some((r, request.messages.as_slice(), reply))
        })
        .collect();
    let mut entries = Vec::new();
    let mut before: Option<(&[Message], &Message)> = None;
    for (record, messages, turn) in &answered {
        let reply = &turn.message;
        let new = match before {
            Some((prior, prior_reply)) if continues(messages, prior, prior_reply) => {
                &messages[prior.len() + 1..]
            }
            _ => messages,
        };
        for message in new.iter().filter(|m| m.role == Role::User) {
            entries.push(Entry::User {
                ts: &record.started_at,
                message,
            });
        }
        entries.push(Entry::Agent {
            ts: &record.started_at,
            message: reply,
            usage: &turn.usage,
        });
        before = Some((messages, reply));
    }
    let model_name = answered
        .last()
        .and_then(|(r, _, _)| r.request.as_ref())
        .map(|q| q.model.clone())
        .unwrap_or_default();
    let tools: Vec<Value> = answered
        .last()
        .and_then(|(r, _, _)| r.request.as_ref())
        .map(|q| {
            q.tools
                .iter()
                .map(|t| {
                    json!({"type": "function", "function": {"name": t.name,
                           "description": t.description, "parameters": t.input_schema}})
                })
                .collect()
        })
        .unwrap_or_default();
    trajectory_of(agent_name, session_id, &model_name, tools, entries, &[])
}

/// Whether `messages` is `prior`, then the reply to it (as the agent sent it back), then more.
/// The reply is matched by its tool calls' ids and its text, which every client sends back
/// as it got them; thinking and cache markers may differ.
fn continues(messages: &[Message], prior: &[Message], reply: &Message) -> bool {
    messages.len() > prior.len()
        && messages[..prior.len()] == *prior
        && messages[prior.len()].role == Role::Assistant
        && {
            let echoed = &messages[prior.len()];
            let ids = |m: &Message| m.tool_calls().into_iter().map(|c| c.id).collect::<Vec<_>>();
            ids(echoed) == ids(reply) && echoed.text() == reply.text()
        }
}
