//! The approval gate: who is asked before a call runs, and what happens when nobody can answer.

use std::collections::BTreeSet;
use std::sync::Mutex;

use async_trait::async_trait;
use serde::Serialize;
use serde_json::Value;

use crate::policy::{HitlLevel, SafetyLevel, SessionPolicy};

/// What the approver is shown.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ApprovalRequest {
    pub call_id: String,
    pub tool_name: String,
    pub input: Value,
    pub safety_level: SafetyLevel,
    /// Why a hook asked for permission, when one did.
    pub reason: Option<String>,
}

/// A human's answer: y / n / a (always for this tool in this session).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalAnswer {
    Yes,
    No,
    Always,
}

#[async_trait]
pub trait Approver: Send + Sync {
    async fn ask(&self, request: &ApprovalRequest) -> ApprovalAnswer;
}

/// The approver of modes without a human: every prompt is a refusal.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoHuman;

#[async_trait]
impl Approver for NoHuman {
    async fn ask(&self, _: &ApprovalRequest) -> ApprovalAnswer {
        ApprovalAnswer::No
    }
}

/// What the gate decides before any prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GateDecision {
    Allowed,
    /// A human must be asked (or, without one, the call is denied).
    Prompt,
    Denied(String),
}

/// The approval rule of one session: policy plus the tools answered "always".
#[derive(Debug)]
pub struct ApprovalGate {
    always: Mutex<BTreeSet<String>>,
}

impl ApprovalGate {
    pub fn new() -> Self {
        ApprovalGate {
            always: Mutex::new(BTreeSet::new()),
        }
    }

    fn always_allowed(&self, tool: &str) -> bool {
        self.always
            .lock()
            .map(|s| s.contains(tool))
            .unwrap_or(false)
    }

    pub fn remember_always(&self, tool: &str) {
        if let Ok(mut s) = self.always.lock() {
            s.insert(tool.to_string());
        }
    }

    /// The gate's rule: by mode and safety level. `hook_asked` forces a prompt (a PreToolUse
    /// hook said request_permission), even for a tool answered "always".
    pub fn decide(
        &self,
        policy: &SessionPolicy,
        tool: &str,
        safety: SafetyLevel,
        hook_asked: bool,
    ) -> GateDecision {
        if !policy.mode.has_human() {
            if hook_asked {
                return GateDecision::Prompt;
            }
            return if safety <= policy.unattended_approval_ceiling {
                GateDecision::Allowed
            } else {
                GateDecision::Denied(format!(
                    "no human can approve a {safety} call in {:?} mode, and the session policy \
                     allows unattended calls only up to {}",
                    policy.mode, policy.unattended_approval_ceiling
                ))
            };
        }
        if hook_asked {
            return GateDecision::Prompt;
        }
        if self.always_allowed(tool) {
            return GateDecision::Allowed;
        }
        let prompts = match policy.hitl {
            HitlLevel::Auto => false,
            HitlLevel::DangerousOnly => safety >= SafetyLevel::Dangerous,
            HitlLevel::Everything => safety > SafetyLevel::Safe,
        };
        if prompts {
            GateDecision::Prompt
        } else {
            GateDecision::Allowed
        }
    }
}

impl Default for ApprovalGate {
    fn default() -> Self {
        ApprovalGate::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::SessionMode;

    #[test]
    fn headless_denies_writes_unless_granted() {
        let gate = ApprovalGate::new();
        let p = SessionPolicy::for_mode(SessionMode::Headless);
        assert_eq!(
            gate.decide(&p, "read_file", SafetyLevel::Safe, false),
            GateDecision::Allowed
        );
        assert!(matches!(
            gate.decide(&p, "write_file", SafetyLevel::Write, false),
            GateDecision::Denied(_)
        ));
        let p = p.grant_unattended(SafetyLevel::Write, "test");
        assert_eq!(
            gate.decide(&p, "write_file", SafetyLevel::Write, false),
            GateDecision::Allowed
        );
    }

    #[test]
    fn repl_prompts_then_remembers_always() {
        let gate = ApprovalGate::new();
        let p = SessionPolicy::for_mode(SessionMode::Repl);
        assert_eq!(
            gate.decide(&p, "bash", SafetyLevel::Dangerous, false),
            GateDecision::Prompt
        );
        gate.remember_always("bash");
        assert_eq!(
            gate.decide(&p, "bash", SafetyLevel::Dangerous, false),
            GateDecision::Allowed
        );
        assert_eq!(
            gate.decide(&p, "bash", SafetyLevel::Dangerous, true),
            GateDecision::Prompt
        );
    }
}
