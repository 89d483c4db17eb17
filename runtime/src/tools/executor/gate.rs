//! Steps 5-6 of the pipeline: PreToolUse hooks (a rewrite goes back through the checks) and
//! the approval gate.

use crate::hooks::{HookDecided, HookDecision, HookEvent, HookEventKind};
use crate::tools::approval::{
    ApprovalAnswer, ApprovalRequest, GateDecision, always_prompts, changes_a_file, preview,
};

use super::{Denial, Pending, PipelineStep, StepContext, ToolExecutor, deny};

/// What the PreToolUse hooks said about asking a person.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum HookWord {
    Nothing,
    /// Ask a person, for this reason (`permissionDecision: "ask"`).
    Ask(String),
    /// No person need be asked (`permissionDecision: "allow"`, as in Claude Code): the policy
    /// still decides, and a call leaving the command sandbox is still put to a person.
    Allow,
}

impl ToolExecutor {
    // --- 5. PreToolUse ----------------------------------------------------------------------

    /// Returns the (possibly rewritten) call and what the hooks said about asking.
    pub(super) async fn run_pre_tool_use_hooks<'p>(
        &'p self,
        pending: Pending<'p>,
        step: &StepContext,
        hooks: &mut Vec<HookDecided>,
    ) -> Result<(Pending<'p>, HookWord), Denial> {
        if !self.hooks.has(HookEventKind::PreToolUse) {
            return Ok((pending, HookWord::Nothing));
        }
        let outcome = self
            .dispatch_hook(
                HookEvent::PreToolUse {
                    tool_name: pending.tool.spec.name.clone(),
                    tool_input: pending.input.clone(),
                    tool_use_id: pending.id.clone(),
                },
                step,
                hooks,
            )
            .await;
        let asked = match outcome.decision {
            HookDecision::Block(reason) => return deny(PipelineStep::PreToolUse, reason),
            HookDecision::RequestPermission(reason) => HookWord::Ask(reason),
            HookDecision::Allow => HookWord::Allow,
            _ => HookWord::Nothing,
        };
        let Some(input) = outcome.rewrite else {
            return Ok((pending, asked));
        };
        // A rewritten call is a new call: it passes scope, policy and schema again.
        let mut again = self.check_scope(&pending.id, &pending.tool.spec.name, input)?;
        again.classification = pending.classification;
        self.check_policy(&again)?;
        self.check_schema(&again)?;
        Ok((again, asked))
    }

    // --- 6. approval ------------------------------------------------------------------------

    /// A call asking to run outside the command sandbox, as a reason a person must approve it
    /// (whatever was answered "always" for the tool, as a hook asking would).
    fn escalation(&self, pending: &Pending<'_>) -> Option<String> {
        if !self.workspace.confines_commands() || pending.tool.spec.command_arg.is_none() {
            return None;
        }
        let why = pending.input.get(crate::tools::builtin::ESCALATE_ARG)?;
        Some(format!(
            "runs OUTSIDE the sandbox (network, the whole machine writable): {}",
            why.as_str().unwrap_or("no reason given")
        ))
    }

    /// What a person reads about `pending`: its preview, and why they are asked (`asked`).
    async fn approval_request(
        &self,
        pending: &Pending<'_>,
        asked: Option<String>,
    ) -> ApprovalRequest {
        let name = &pending.tool.spec.name;
        // The file a write would replace, for the diff a person reads: the path the scope
        // step resolved from the tool's declared path argument.
        let target = pending.paths.iter().find(|(arg, _)| arg == "path");
        let current = match (name.as_str(), target) {
            ("write_file", Some((_, resolved))) => self
                .workspace
                .read_file(resolved)
                .await
                .ok()
                .map(|bytes| String::from_utf8_lossy(&bytes).into_owned()),
            _ => None,
        };
        ApprovalRequest {
            call_id: pending.id.clone(),
            tool_name: name.clone(),
            input: pending.input.clone(),
            safety_level: pending.classification.safety,
            reason: asked,
            preview: preview(&pending.tool.spec, &pending.input, current.as_deref()),
        }
    }

    pub(super) async fn approve(
        &self,
        pending: &Pending<'_>,
        word: HookWord,
        step: &StepContext,
        hooks: &mut Vec<HookDecided>,
    ) -> Result<(), Denial> {
        if step.by_person {
            return Ok(());
        }
        let name = &pending.tool.spec.name;
        let escalation = self.escalation(pending);
        let hook_allowed = word == HookWord::Allow && escalation.is_none();
        let asked = match word {
            HookWord::Ask(reason) => Some(reason),
            _ => None,
        }
        .or(escalation);
        let no_one_asked = match self.gate.decide(
            &self.policy,
            name,
            pending.classification.safety,
            asked.is_some(),
            always_prompts(&pending.tool.binding),
        ) {
            GateDecision::Allowed => true,
            GateDecision::Denied(reason) => return deny(PipelineStep::Approval, reason),
            GateDecision::Prompt => hook_allowed,
        };
        if no_one_asked {
            if changes_a_file(name) {
                let request = self.approval_request(pending, asked).await;
                self.approver.show(&request).await;
            }
            return Ok(());
        }
        if self.hooks.has(HookEventKind::PermissionRequest) {
            let outcome = self
                .dispatch_hook(
                    HookEvent::PermissionRequest {
                        tool_name: name.clone(),
                        tool_input: pending.input.clone(),
                        safety_level: pending.classification.safety,
                        reason: asked.clone(),
                    },
                    step,
                    hooks,
                )
                .await;
            match outcome.decision {
                HookDecision::Allow => return Ok(()),
                HookDecision::Deny(reason) => return deny(PipelineStep::Approval, reason),
                _ => {}
            }
        }
        let request = self.approval_request(pending, asked).await;
        match self.approver.ask(&request).await {
            ApprovalAnswer::Yes => Ok(()),
            ApprovalAnswer::Always => {
                self.gate.remember_always(name);
                Ok(())
            }
            ApprovalAnswer::No if self.policy.mode.has_human() => {
                deny(PipelineStep::Approval, "the user refused")
            }
            ApprovalAnswer::NoBecause(why) if self.policy.mode.has_human() => {
                deny(PipelineStep::Approval, format!("the user refused: {why}"))
            }
            ApprovalAnswer::No | ApprovalAnswer::NoBecause(_) => deny(
                PipelineStep::Approval,
                format!(
                    "approval required and no human is present ({:?} mode)",
                    self.policy.mode
                ),
            ),
        }
    }
}
