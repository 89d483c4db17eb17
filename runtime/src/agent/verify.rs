//! Verify: a model's stop proposal becomes completion only after the rule-based verifier and the
//! PreVerify / PostVerify / Stop hooks accept it; otherwise a repair re-enters the loop, within
//! the repair budget. Completed tools are never replayed: a repair continues the conversation.

use serde::{Deserialize, Serialize};

/// The verdict on a finished turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
#[derive(strum::IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum Verdict {
    /// The answer was accepted.
    Passed,
    /// The repair budget ran out with these misses left.
    Failed {
        /// What was still missing.
        misses: Vec<String>,
    },
    /// Verification was off, or the turn did not end with a text answer.
    Skipped,
    /// A PostVerify hook asked for an outside check; the text was withheld.
    Escalated {
        /// Why the hook escalated.
        reason: String,
    },
}

impl Verdict {
    /// The verdict's tag, as serde writes it.
    pub fn name(&self) -> &'static str {
        self.into()
    }
}

/// What the rule-based verifier looks at.
#[derive(Debug, Clone, Default)]
pub struct TurnFacts<'a> {
    /// The answer the turn would end with.
    pub final_text: &'a str,
    /// Tool calls the turn made.
    pub tool_calls: u32,
    /// The last tool call of the turn failed: its tool and first line.
    pub last_tool_error: Option<(String, String)>,
}

/// Words that show the answer acknowledges a failure instead of ignoring it.
const ACKNOWLEDGES: [&str; 16] = [
    "fail",
    "error",
    "could not",
    "couldn't",
    "unable",
    "cannot",
    "can't",
    "not found",
    "no such",
    "missing",
    "denied",
    "did not",
    "didn't",
    "does not",
    "doesn't",
    "instead",
];

/// The rule-based misses, on evidence only: an empty turn, or a failed last tool call the
/// answer says nothing about. A short direct answer ("4") is an answer.
pub fn rule_misses(facts: &TurnFacts<'_>) -> Vec<String> {
    let text = facts.final_text.trim();
    let mut misses = Vec::new();
    if text.is_empty() {
        misses.push("empty answer: the turn ended without any text".to_string());
    }
    if let Some((tool, line)) = &facts.last_tool_error
        && !addresses(text, line)
    {
        misses.push(format!(
            "the last tool call ({tool}) failed and the answer does not address it: {line}"
        ));
    }
    misses
}

/// Whether `answer` speaks of the failure `error_line`: in words that acknowledge a failure,
/// or by naming something the error named (a word of five letters or more, `ENOENT`, a path).
fn addresses(answer: &str, error_line: &str) -> bool {
    let answer = answer.to_lowercase();
    if ACKNOWLEDGES.iter().any(|w| answer.contains(w)) {
        return true;
    }
    error_line
        .to_lowercase()
        .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '/' || c == '.'))
        .map(|w| w.trim_matches('.'))
        .filter(|w| w.chars().count() >= 5)
        .any(|w| answer.contains(w))
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
    fn a_verdicts_name_is_its_serde_tag() {
        for v in [
            Verdict::Passed,
            Verdict::Failed { misses: vec![] },
            Verdict::Skipped,
            Verdict::Escalated { reason: "r".into() },
        ] {
            let json = serde_json::to_value(&v).unwrap();
            assert_eq!(json["verdict"], v.name(), "{v:?}");
        }
    }

    #[test]
    fn rules() {
        let empty = TurnFacts::default();
        assert_eq!(rule_misses(&empty).len(), 1);
        // A short direct answer to a question is accepted.
        let short = TurnFacts {
            final_text: "4",
            ..Default::default()
        };
        assert!(rule_misses(&short).is_empty());
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
        // Addressed without the word "fail": by what the error named.
        let named = TurnFacts {
            final_text: "config.yaml was absent, so I wrote a default one.",
            tool_calls: 1,
            last_tool_error: Some(("read_file".into(), "config.yaml: ENOENT".into())),
        };
        assert!(rule_misses(&named).is_empty());
    }
}
