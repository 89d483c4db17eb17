//! Compaction as pure functions over the conversation: how many tokens it holds, where a cut
//! may fall, the deterministic extractive summary (first user request, the plan, the last tool
//! calls with the first line of their results) and the compacted conversation. The loop's
//! stage that runs them (hooks, artifact, checkpoint commit) is `compaction_stage.rs`. The
//! summary is extractive so embedded models and tests get the same bytes every time; nothing
//! needs a model call.
//!
//! The cut never breaks a tool_use / tool_result pair: the kept part starts at an assistant
//! message and holds every result of every call it holds.

use std::collections::{HashMap, HashSet};

use sha2::{Digest, Sha256};

use crate::cognition::{Plan, StepStatus};
use crate::conversation::{ContentBlock, Message, Role};

/// The first words of a summary message; marks it as one in sessions without a checkpoint.
pub const SUMMARY_MARKER: &str = "[compacted context]";
/// Characters of the first user request kept in a summary.
const REQUEST_CHARS: usize = 4000;
/// Characters of a tool input shown per summarized call.
const INPUT_CHARS: usize = 200;
/// An image counted as the characters of its tokens: the computer tool scales screenshots to
/// at most 1.15 megapixels, about 1 600 tokens at the providers' rate of (w x h) / 750.
const IMAGE_CHARS: usize = 1_600 * 4;

/// Tokens of the context estimated as characters / 4 (system prompt included).
pub fn estimate_tokens(system: &str, messages: &[Message]) -> u64 {
    let mut chars = system.chars().count();
    for m in messages {
        for b in &m.content {
            chars += match b {
                ContentBlock::Text { text } => text.chars().count(),
                ContentBlock::ToolUse { name, input, .. } => {
                    name.chars().count() + input.to_string().chars().count()
                }
                ContentBlock::ToolResult { content, .. } => content.chars().count(),
                ContentBlock::Thinking { thinking, .. } => thinking.chars().count(),
                ContentBlock::Image(_) => IMAGE_CHARS,
            };
        }
    }
    (chars / 4) as u64
}

/// Why a conversation's tool_use / tool_result pairing is broken, or `None` when every
/// tool_use is answered in the next message and every tool_result answers the message before.
/// `open_tail`: the last message may be an assistant batch not answered yet (a pending batch).
pub fn pairing_problem(messages: &[Message], open_tail: bool) -> Option<String> {
    let uses = |m: &Message| -> Vec<String> {
        m.content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::ToolUse { id, .. } if m.role == Role::Assistant => Some(id.clone()),
                _ => None,
            })
            .collect()
    };
    let results = |m: &Message| -> HashSet<String> {
        m.content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::ToolResult { tool_use_id, .. } => Some(tool_use_id.clone()),
                _ => None,
            })
            .collect()
    };
    for (i, m) in messages.iter().enumerate() {
        let answered: HashSet<String> = match i.checked_sub(1).map(|p| &messages[p]) {
            Some(prev) => uses(prev).into_iter().collect(),
            None => HashSet::new(),
        };
        if let Some(orphan) = results(m).into_iter().find(|r| !answered.contains(r)) {
            return Some(format!(
                "message {i}: tool_result {orphan} has no tool_use in the message before"
            ));
        }
        let asked = uses(m);
        if asked.is_empty() {
            continue;
        }
        match messages.get(i + 1) {
            None if open_tail => {}
            None => return Some(format!("message {i}: tool_use {} has no result", asked[0])),
            Some(next) => {
                let got = results(next);
                if let Some(missing) = asked.iter().find(|a| !got.contains(*a)) {
                    return Some(format!("message {i}: tool_use {missing} has no result"));
                }
            }
        }
    }
    None
}

/// Where to cut: the kept part `messages[cut..]` holds at least `keep_recent` messages (one at
/// least), starts at an assistant message, keeps pairs whole, and the dropped part holds more
/// than the `prefix_len` messages of an earlier summary. `None`: nothing worth compacting.
pub fn choose_cut(messages: &[Message], keep_recent: usize, prefix_len: usize) -> Option<usize> {
    let keep = keep_recent.max(1);
    let mut cut = messages.len().checked_sub(keep)?;
    while cut > prefix_len {
        if messages[cut].role == Role::Assistant
            && pairing_problem(&messages[cut..], true).is_none()
        {
            return Some(cut);
        }
        cut -= 1;
    }
    None
}

fn capped(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{} [...]", &text[..at]),
        None => text.to_string(),
    }
}

/// A summary of `dropped` that needs no model: the first user request, the plan, the last
/// `tool_calls` calls with the first line of each result, and the last assistant note.
pub fn extractive_summary(dropped: &[Message], plan: Option<&Plan>, tool_calls: usize) -> String {
    let mut out = format!(
        "{SUMMARY_MARKER} The first {} messages of this conversation were replaced by this \
         summary; the full text stays in the session's checkpoint.\n",
        dropped.len()
    );
    let first_request = dropped
        .iter()
        .filter(|m| m.role == Role::User)
        .map(Message::text)
        .find(|t| !t.trim().is_empty());
    if let Some(request) = first_request {
        out.push_str("\nFirst user request:\n");
        out.push_str(&capped(&request, REQUEST_CHARS));
        out.push('\n');
    }
    if let Some(plan) = plan {
        out.push_str(&format!("\nPlan: {}\n", plan.objective));
        for step in &plan.steps {
            let status = match step.status {
                StepStatus::Pending => "pending",
                StepStatus::InProgress => "in progress",
                StepStatus::Completed => "completed",
                StepStatus::Abandoned => "abandoned",
            };
            out.push_str(&format!("- [{status}] {}\n", step.description));
        }
    }
    let mut first_lines: HashMap<&str, (&str, bool)> = HashMap::new();
    let mut calls = Vec::new();
    for m in dropped {
        for b in &m.content {
            match b {
                ContentBlock::ToolUse { id, name, input } => calls.push((id, name, input)),
                ContentBlock::ToolResult {
                    tool_use_id,
                    content,
                    is_error,
                } => {
                    let line = content.lines().next().unwrap_or("");
                    first_lines.insert(tool_use_id, (line, *is_error));
                }
                _ => {}
            }
        }
    }
    if !calls.is_empty() {
        let shown = calls.len().min(tool_calls);
        out.push_str(&format!(
            "\nTool calls in the summarized part (the last {shown} of {}):\n",
            calls.len()
        ));
        for (id, name, input) in &calls[calls.len() - shown..] {
            let result = match first_lines.get(id.as_str()) {
                Some((line, true)) => format!("error: {}", capped(line, INPUT_CHARS)),
                Some((line, false)) => capped(line, INPUT_CHARS),
                None => "(no result)".to_string(),
            };
            out.push_str(&format!(
                "- {name} {} -> {result}\n",
                capped(&input.to_string(), INPUT_CHARS)
            ));
        }
    }
    let last_note = dropped
        .iter()
        .rev()
        .filter(|m| m.role == Role::Assistant)
        .map(Message::text)
        .find(|t| !t.trim().is_empty());
    if let Some(note) = last_note {
        out.push_str("\nLast assistant note before the cut:\n");
        out.push_str(&capped(&note, 1000));
        out.push('\n');
    }
    out
}

/// A conversation compacted at a cut: the summary of the dropped part, its SHA-256, and the
/// new conversation (the summary, then the kept messages).
pub(crate) struct Compacted {
    pub text: String,
    pub sha: String,
    pub summary: Message,
    pub messages: Vec<Message>,
}

/// Compacts `messages` at `cut`. A pure function of the conversation, so the loop only decides
/// when to compact and commits the result; the same input always gives the same bytes.
pub(crate) fn compact_at(
    messages: &[Message],
    cut: usize,
    plan: Option<&Plan>,
    tool_calls: usize,
) -> Compacted {
    let text = extractive_summary(&messages[..cut], plan, tool_calls);
    let sha = hex::encode(Sha256::digest(text.as_bytes()));
    let summary = Message::user_text(text.clone());
    let mut kept = Vec::with_capacity(messages.len() - cut + 1);
    kept.push(summary.clone());
    kept.extend_from_slice(&messages[cut..]);
    Compacted {
        text,
        sha,
        summary,
        messages: kept,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(id: &str) -> Message {
        Message {
            role: Role::Assistant,
            content: vec![ContentBlock::ToolUse {
                id: id.into(),
                name: "bash".into(),
                input: json!({"command": "ls"}),
            }],
        }
    }

    fn result(id: &str) -> Message {
        Message {
            role: Role::User,
            content: vec![ContentBlock::ToolResult {
                tool_use_id: id.into(),
                content: format!("out {id}\nmore"),
                is_error: false,
            }],
        }
    }

    fn conversation(rounds: usize) -> Vec<Message> {
        let mut m = vec![Message::user_text("fix the build")];
        for i in 0..rounds {
            m.push(call(&format!("c{i}")));
            m.push(result(&format!("c{i}")));
        }
        m
    }

    #[test]
    fn the_cut_never_splits_a_pair() {
        let m = conversation(5);
        assert!(pairing_problem(&m, false).is_none());
        for keep in 1..m.len() {
            if let Some(cut) = choose_cut(&m, keep, 0) {
                assert_eq!(m[cut].role, Role::Assistant);
                assert!(pairing_problem(&m[cut..], false).is_none(), "keep {keep}");
                assert!(m.len() - cut >= keep);
            }
        }
        // Keeping one message would keep a result without its call: the cut moves back.
        assert_eq!(choose_cut(&m, 1, 0), Some(m.len() - 2));
        assert_eq!(choose_cut(&m, m.len(), 0), None);
        // An earlier summary alone is not worth summarizing again.
        assert_eq!(choose_cut(&m[..3], 2, 1), None);
    }

    #[test]
    fn pairing_problems_are_found() {
        let mut m = conversation(2);
        m.remove(2);
        assert!(pairing_problem(&m, false).unwrap().contains("c0"));
        let mut open = conversation(1);
        open.push(call("c9"));
        assert!(pairing_problem(&open, true).is_none());
        assert!(pairing_problem(&open, false).is_some());
    }

    #[test]
    fn the_summary_is_extractive_and_deterministic() {
        let m = conversation(3);
        let plan = Plan {
            objective: "green build".into(),
            steps: vec![],
        };
        let a = extractive_summary(&m[..5], Some(&plan), 1);
        assert_eq!(a, extractive_summary(&m[..5], Some(&plan), 1));
        assert!(a.starts_with(SUMMARY_MARKER));
        assert!(a.contains("fix the build") && a.contains("Plan: green build"));
        assert!(
            a.contains("the last 1 of 2") && a.contains("-> out c1"),
            "{a}"
        );
        assert!(estimate_tokens("", &m) > 0);
    }
}
