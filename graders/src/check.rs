//! A named check of a verifier (a test case, a rubric criterion, a judge vote) and how a list of
//! them reads in a terminal. Below the grade and the report parsers, which both build checks.

use serde::{Deserialize, Serialize};

/// How one named check ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[derive(strum::IntoStaticStr, strum::EnumString, strum::Display, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
pub enum CheckStatus {
    /// The check held.
    Pass,
    /// The check did not hold.
    Fail,
    /// The check was not run or not decided (skipped, pending, or nothing to run it with).
    Skip,
}

impl CheckStatus {
    pub(crate) fn as_str(self) -> &'static str {
        self.into()
    }
}

/// One named check: a test case of the verifier, a rubric criterion, a judge vote.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Check {
    /// The test case's or criterion's name, as its source writes it.
    pub name: String,
    /// How it ended.
    pub status: CheckStatus,
    /// Why it failed or was skipped (or what it saw); `None` when there is nothing to say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl Check {
    /// A check without a message.
    pub fn new(name: impl Into<String>, status: CheckStatus) -> Self {
        Check {
            name: name.into(),
            status,
            message: None,
        }
    }

    /// The same check with `message`; a blank message leaves none.
    pub fn with_message(mut self, message: impl Into<String>) -> Self {
        let m = message.into();
        self.message = (!m.trim().is_empty()).then_some(m);
        self
    }
}

/// One line per check (`PASS  name`, `FAIL  name: message`, `SKIP  name: message`) and a final
/// `18 passed, 0 failed` line (`, 2 skipped` when any were), as `geode show RUN/TRIAL` prints.
pub fn render_checks(checks: &[Check]) -> String {
    let mut out = String::new();
    let (mut passed, mut failed, mut skipped) = (0usize, 0usize, 0usize);
    for c in checks {
        let tag = match c.status {
            CheckStatus::Pass => {
                passed += 1;
                "PASS"
            }
            CheckStatus::Fail => {
                failed += 1;
                "FAIL"
            }
            CheckStatus::Skip => {
                skipped += 1;
                "SKIP"
            }
        };
        out.push_str(tag);
        out.push_str("  ");
        out.push_str(&c.name);
        if let Some(m) = &c.message {
            // One line per check: the first line of the message is the useful one.
            let first = m.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
            out.push_str(": ");
            out.push_str(first.trim());
        }
        out.push('\n');
    }
    out.push_str(&format!("{passed} passed, {failed} failed"));
    if skipped > 0 {
        out.push_str(&format!(", {skipped} skipped"));
    }
    out.push('\n');
    out
}
