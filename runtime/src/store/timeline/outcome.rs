//! How a tool call ended (`CallOutcome`) and the pipeline step that refused one
//! (`PipelineStep`): the words a `tool.completed` row records. They sit on the store's floor, below
//! the executor that produces them, so the timeline holds a typed step rather than its text.

use serde::{Deserialize, Serialize};

/// The pipeline step that refused a call. Its serde and strum name (`pre_tool_use`) is the
/// `step` text of a denied `tool.completed` row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[derive(strum::IntoStaticStr, strum::EnumString, strum::Display, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
pub enum PipelineStep {
    /// The tool is denied, off the allow-list, not bound, or its paths leave the workspace.
    Scope,
    /// A request middleware rewrote the call to an unknown tool or a lower classification.
    Rewrite,
    /// The call carries more personal data than allowed, or matches a forbidden command.
    Policy,
    /// The input does not match the tool's schema (or no schema is bound).
    Schema,
    /// A PreToolUse hook blocked the call.
    PreToolUse,
    /// The approval gate, a PermissionRequest hook or the person refused, or no one could ask.
    Approval,
    /// The effect receipt could not be written, so the effect never started.
    Receipt,
}

impl PipelineStep {
    pub(crate) fn as_str(self) -> &'static str {
        self.into()
    }
}

/// How a tool call ended, as the pipeline saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum CallOutcome {
    /// The handler ran and returned success.
    Succeeded,
    /// The handler ran and returned an error.
    Failed,
    /// Dispatch passed its deadline; the outside work may still be running.
    TimedOut,
    /// Refused before dispatch; nothing ran.
    Denied {
        /// The step that refused it.
        step: PipelineStep,
        /// Why it was refused.
        reason: String,
    },
    /// The handler ran, a PostToolUse hook withheld the result.
    Withheld {
        /// The hook's reason.
        reason: String,
    },
    /// The call was dispatched but its outcome is unknown (the process died before the result
    /// was saved). It is never re-run automatically; its receipt asks for reconciliation.
    Uncertain {
        /// Why the outcome is unknown.
        reason: String,
    },
}

impl CallOutcome {
    /// True when the call reached its handler: every outcome but `Denied`.
    pub fn dispatched(&self) -> bool {
        !matches!(self, CallOutcome::Denied { .. })
    }
}

/// In words, for a person (`denied at approval: the user refused`); the daemon's `tool_end`
/// carries this text, and [`CallOutcome::from_str`] reads it back.
impl std::fmt::Display for CallOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallOutcome::Succeeded => f.write_str("succeeded"),
            CallOutcome::Failed => f.write_str("failed"),
            CallOutcome::TimedOut => f.write_str("timed out"),
            CallOutcome::Denied { step, reason } => {
                write!(f, "denied at {}: {reason}", step.as_str().replace('_', " "))
            }
            CallOutcome::Withheld { reason } => write!(f, "result withheld: {reason}"),
            CallOutcome::Uncertain { reason } => write!(f, "outcome uncertain: {reason}"),
        }
    }
}

/// Text that is not the words of any [`CallOutcome`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a call outcome: {0:?}")]
pub struct UnknownOutcome(pub String);

/// The inverse of `Display`, so a wire that carries the words still yields the typed outcome.
impl std::str::FromStr for CallOutcome {
    type Err = UnknownOutcome;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let unknown = || UnknownOutcome(s.to_string());
        match s {
            "succeeded" => return Ok(CallOutcome::Succeeded),
            "failed" => return Ok(CallOutcome::Failed),
            "timed out" => return Ok(CallOutcome::TimedOut),
            _ => {}
        }
        if let Some(rest) = s.strip_prefix("denied at ") {
            let (words, reason) = rest.split_once(": ").ok_or_else(unknown)?;
            let step = words.replace(' ', "_").parse().map_err(|_| unknown())?;
            return Ok(CallOutcome::Denied {
                step,
                reason: reason.to_string(),
            });
        }
        let reason = |prefix: &str| s.strip_prefix(prefix).map(str::to_string);
        if let Some(reason) = reason("result withheld: ") {
            return Ok(CallOutcome::Withheld { reason });
        }
        if let Some(reason) = reason("outcome uncertain: ") {
            return Ok(CallOutcome::Uncertain { reason });
        }
        Err(unknown())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use strum::IntoEnumIterator;

    use super::*;

    #[test]
    fn the_words_read_back_as_the_outcome() {
        let mut all = vec![
            CallOutcome::Succeeded,
            CallOutcome::Failed,
            CallOutcome::TimedOut,
            CallOutcome::Withheld {
                reason: "a: b".into(),
            },
            CallOutcome::Uncertain {
                reason: "died".into(),
            },
        ];
        all.extend(PipelineStep::iter().map(|step| CallOutcome::Denied {
            step,
            reason: "the user refused: use notes.md".into(),
        }));
        for outcome in all {
            assert_eq!(outcome.to_string().parse::<CallOutcome>(), Ok(outcome));
        }
        assert!("denied at nowhere: x".parse::<CallOutcome>().is_err());
        assert!("denied at scope".parse::<CallOutcome>().is_err());
        assert!("exploded".parse::<CallOutcome>().is_err());
    }

    #[test]
    fn a_denied_row_keeps_its_step_text() {
        let row = serde_json::to_value(CallOutcome::Denied {
            step: PipelineStep::PreToolUse,
            reason: "hook".into(),
        })
        .unwrap();
        assert_eq!(
            row,
            serde_json::json!({"status": "denied", "step": "pre_tool_use", "reason": "hook"})
        );
    }
}
