//! What one hook decided, as the session reports it to its driver (`hook_decision` events of
//! `geode exec --json`). The registry folds every handler's answer into one outcome; this keeps
//! who said what, so a person can see which hook denied, rewrote or asked, and why. A hook
//! with no opinion (continue) decided nothing and leaves no trace here.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::events::{HookDecision, HookEventKind};

/// The decisions a hook can make, named as Claude Code names them where it has the word: a
/// PreToolUse block is `deny`, its request for permission `ask`.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    strum::IntoStaticStr,
    strum::EnumString,
    strum::Display,
    strum::EnumIter,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum HookDecisionKind {
    /// PermissionRequest: allowed; PreToolUse: an allow, recorded without effect.
    Allow,
    /// Asks for the person's approval (a PreToolUse request, or a PermissionRequest ask).
    Ask,
    /// The call may not run (a PreToolUse block, or a PermissionRequest deny).
    Deny,
    /// Replaced the tool input (PreToolUse) or the prompt (UserPromptSubmit).
    Rewrite,
    /// Added text for the model (PostToolUse, UserPromptSubmit).
    AddContext,
    /// A block outside PreToolUse: a withheld result or a blocked prompt.
    Block,
    /// PreCompact: compaction is put off.
    Defer,
    /// PreCompact: keep a given number of recent messages.
    KeepRecent,
    /// PreVerify: misses added to the verifier's.
    Strengthen,
    /// PostVerify: the answer is accepted.
    Accept,
    /// PostVerify: the answer goes back for a repair, with an instruction.
    Revise,
    /// PostVerify: an outside check is needed; the answer is withheld.
    Escalate,
    /// Stop: the turn may end.
    Finalize,
    /// Stop: keep working, with an instruction.
    ContinueWith,
}

/// One handler's decision on one event.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HookDecided {
    /// The event the handler answered.
    pub event: HookEventKind,
    /// The handler's name (`command: ./check.sh`).
    pub hook: String,
    /// What it decided.
    pub decision: HookDecisionKind,
    /// Why, in the hook's words (a deny's reason, the added context, a revise instruction).
    pub reason: Option<String>,
    /// The new tool input (PreToolUse) or prompt (UserPromptSubmit) of a rewrite.
    pub input: Option<Value>,
}

impl HookDecided {
    /// `None` when the handler had no opinion.
    pub fn new(event: HookEventKind, hook: String, decision: &HookDecision) -> Option<Self> {
        use HookDecision as D;
        use HookDecisionKind as K;
        let mut input = None;
        let (decision, reason) = match decision {
            D::Continue => return None,
            D::Rewrite { input: new, reason } => {
                input = Some(new.clone());
                (K::Rewrite, reason.clone())
            }
            D::Block(r) if event == HookEventKind::PreToolUse => (K::Deny, Some(r.clone())),
            D::Block(r) => (K::Block, Some(r.clone())),
            D::RequestPermission(r) => (K::Ask, Some(r.clone())),
            D::AddContext(c) => (K::AddContext, Some(c.clone())),
            D::Allow => (K::Allow, None),
            D::Deny(r) => (K::Deny, Some(r.clone())),
            D::Ask => (K::Ask, None),
            D::Defer => (K::Defer, None),
            D::KeepRecent(n) => (K::KeepRecent, Some(format!("keep the last {n} messages"))),
            D::Strengthen(misses) => (K::Strengthen, Some(misses.join("; "))),
            D::Accept => (K::Accept, None),
            D::Revise(i) => (K::Revise, Some(i.clone())),
            D::Escalate(why) => (K::Escalate, Some(why.clone())),
            D::Finalize => (K::Finalize, None),
            D::ContinueWith(i) => (K::ContinueWith, Some(i.clone())),
        };
        Some(HookDecided {
            event,
            hook,
            decision,
            reason,
            input,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decided(
        event: HookEventKind,
        d: HookDecision,
    ) -> Option<(HookDecisionKind, Option<String>)> {
        HookDecided::new(event, "h".into(), &d).map(|d| (d.decision, d.reason))
    }

    #[test]
    fn a_block_before_a_tool_runs_is_a_deny_and_no_opinion_is_nothing() {
        let k = HookEventKind::PreToolUse;
        assert_eq!(
            decided(k, HookDecision::Block("no rm".into())),
            Some((HookDecisionKind::Deny, Some("no rm".into())))
        );
        assert_eq!(
            decided(
                HookEventKind::PostToolUse,
                HookDecision::Block("hidden".into())
            ),
            Some((HookDecisionKind::Block, Some("hidden".into())))
        );
        assert_eq!(
            decided(k, HookDecision::RequestPermission("sure?".into())),
            Some((HookDecisionKind::Ask, Some("sure?".into())))
        );
        assert_eq!(decided(k, HookDecision::Continue), None);
    }

    #[test]
    fn a_rewrite_carries_the_new_input() {
        let new = serde_json::json!({"command": "ls"});
        let d = HookDecided::new(
            HookEventKind::PreToolUse,
            "h".into(),
            &HookDecision::Rewrite {
                input: new.clone(),
                reason: Some("safer".into()),
            },
        )
        .unwrap();
        assert_eq!(d.decision, HookDecisionKind::Rewrite);
        assert_eq!(d.input, Some(new));
        assert_eq!(d.reason.as_deref(), Some("safer"));
    }
}
