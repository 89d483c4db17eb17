//! Verify: a model's stop proposal becomes completion only after the rule-based verifier and the
//! PreVerify / PostVerify / Stop hooks accept it; otherwise a repair re-enters the loop, within
//! the repair budget. Completed tools are never replayed: a repair continues the conversation.

use serde::{Deserialize, Serialize};

/// Final texts shorter than this, in a turn that used no tools, are suspect.
const SHORT_OUTPUT_CHARS: usize = 20;

/// The verdict on a finished turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum Verdict {
    Passed,
    /// The repair budget ran out with these misses left.
    Failed {
        misses: Vec<String>,
    },
    /// Verification was off, or the turn did not end with a text answer.
    Skipped,
    /// A PostVerify hook asked for an outside check; the text was withheld.
    Escalated {
        reason: String,
    },
}

impl Verdict {
    pub fn name(&self) -> &'static str {
        match self {
            Verdict::Passed => "passed",
            Verdict::Failed { .. } => "failed",
            Verdict::Skipped => "skipped",
            Verdict::Escalated { .. } => "escalated",
        }
    }
}

/// What the rule-based verifier looks at.
#[derive(Debug, Clone, Default)]
pub struct TurnFacts<'a> {
    pub final_text: &'a str,
    pub tool_calls: u32,
    /// The last tool call of the turn failed: its tool and first line.
    pub last_tool_error: Option<(String, String)>,
}

/// Words that show the answer acknowledges a failure instead of ignoring it.
const ACKNOWLEDGES: [&str; 5] = ["fail", "error", "could not", "unable", "cannot"];

/// The rule-based misses: an empty turn, short output without tools, a tool error left
/// unaddressed.
pub fn rule_misses(facts: &TurnFacts<'_>) -> Vec<String> {
    let text = facts.final_text.trim();
    let mut misses = Vec::new();
    if text.is_empty() {
        misses.push("empty answer: the turn ended without any text".to_string());
    } else if facts.tool_calls == 0 && text.chars().count() < SHORT_OUTPUT_CHARS {
        misses.push(format!(
            "short answer without any tool use ({} characters)",
            text.chars().count()
        ));
    }
    if let Some((tool, line)) = &facts.last_tool_error {
        let lower = text.to_lowercase();
        if !ACKNOWLEDGES.iter().any(|w| lower.contains(w)) {
            misses.push(format!(
                "the last tool call ({tool}) failed and the answer does not address it: {line}"
            ));
        }
    }
    misses
}

/// The user message that asks for a repair.
pub fn repair_instruction(misses: &[String], instruction: Option<&str>) -> String {
    let mut text = String::from("[verification] Your answer was not accepted.");
    for m in misses {
        text.push_str("\n- ");
        text.push_str(m);
    }
    if let Some(i) = instruction {
        text.push('\n');
        text.push_str(i);
    }
    text.push_str("\nAddress this, then answer again.");
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules() {
        let empty = TurnFacts::default();
        assert_eq!(rule_misses(&empty).len(), 1);
        let short = TurnFacts {
            final_text: "ok",
            ..Default::default()
        };
        assert!(rule_misses(&short)[0].starts_with("short answer"));
        let fine = TurnFacts {
            final_text: "ok",
            tool_calls: 2,
            ..Default::default()
        };
        assert!(rule_misses(&fine).is_empty());
        let ignored = TurnFacts {
            final_text: "All done and everything works.",
            tool_calls: 1,
            last_tool_error: Some(("bash".into(), "exit 1".into())),
        };
        assert_eq!(rule_misses(&ignored).len(), 1);
        let addressed = TurnFacts {
            final_text: "The build failed; the compiler is missing.",
            tool_calls: 1,
            last_tool_error: Some(("bash".into(), "exit 1".into())),
        };
        assert!(rule_misses(&addressed).is_empty());
    }
}
