//! Steps 1-4 of the pipeline: scope, request-middleware rewrites, policy, schema. Each either
//! lets the call on or returns the denial that stops it before anything runs.

use std::path::PathBuf;

use serde_json::Value;

use crate::policy::SafetyLevel;
use crate::tools::plan::BoundTool;

use super::{Denial, Pending, PipelineStep, ToolExecutor, ToolRequest, deny};

impl ToolExecutor {
    // --- 1. scope -------------------------------------------------------------------------

    pub(super) fn check_scope<'p>(
        &'p self,
        id: &str,
        name: &str,
        input: Value,
    ) -> Result<Pending<'p>, Denial> {
        if self.policy.deny_list.contains(name) {
            return deny(PipelineStep::Scope, self.policy.scope_denial(name));
        }
        if let Some(allowed) = &self.policy.tool_allow_list
            && !allowed.contains(name)
        {
            let names: Vec<&str> = allowed.iter().map(String::as_str).collect();
            return deny(
                PipelineStep::Scope,
                format!(
                    "tool {name} is not on this session's tool allow-list ({})",
                    names.join(", ")
                ),
            );
        }
        let Some(tool) = self.plan.get(name) else {
            return deny(
                PipelineStep::Scope,
                format!("no tool named {name} is bound to this session"),
            );
        };
        let paths = self.resolve_paths(tool, &input)?;
        Ok(Pending {
            id: id.to_string(),
            tool,
            input,
            classification: tool.spec.classification(),
            paths,
        })
    }

    fn resolve_paths(
        &self,
        tool: &BoundTool,
        input: &Value,
    ) -> Result<Vec<(String, PathBuf)>, Denial> {
        let mut paths = Vec::new();
        for arg in &tool.spec.path_args {
            let Some(raw) = input.get(arg).and_then(Value::as_str) else {
                continue;
            };
            match self.workspace.resolve(raw) {
                Ok(p) => paths.push((arg.clone(), p)),
                Err(v) => return deny(PipelineStep::Scope, v.to_string()),
            }
        }
        Ok(paths)
    }

    // --- 2. request middleware ------------------------------------------------------------

    pub(super) fn apply_request_middleware<'p>(
        &'p self,
        mut pending: Pending<'p>,
    ) -> Result<Pending<'p>, Denial> {
        for mw in &self.middleware {
            let request = ToolRequest {
                name: pending.tool.spec.name.clone(),
                input: pending.input.clone(),
                classification: pending.classification,
            };
            let Some(rewritten) = mw.rewrite(&request) else {
                continue;
            };
            let Some(target) = self.plan.get(&rewritten.name) else {
                return deny(
                    PipelineStep::Rewrite,
                    format!(
                        "middleware {} rewrote to unknown tool {}",
                        mw.name(),
                        rewritten.name
                    ),
                );
            };
            let after = rewritten.classification.max(target.spec.classification());
            if after.lowers(&pending.classification) {
                return deny(
                    PipelineStep::Rewrite,
                    format!(
                        "middleware {} tried to lower the call's classification from {:?} to {:?}",
                        mw.name(),
                        pending.classification,
                        after
                    ),
                );
            }
            let mut next = self.check_scope(&pending.id, &rewritten.name, rewritten.input)?;
            next.classification = after;
            pending = next;
        }
        Ok(pending)
    }

    // --- 3. policy ------------------------------------------------------------------------

    pub(super) fn check_policy(&self, pending: &Pending<'_>) -> Result<(), Denial> {
        if pending.classification.personal_data > self.policy.personal_data_ceiling {
            return deny(
                PipelineStep::Policy,
                format!(
                    "the call carries {:?} personal data; this session allows up to {:?}",
                    pending.classification.personal_data, self.policy.personal_data_ceiling
                ),
            );
        }
        if let Some(command) = pending.tool.spec.command(&pending.input)
            && pending.classification.safety >= SafetyLevel::Dangerous
            && let Some(rule) = self
                .policy
                .forbidden_commands
                .iter()
                .find(|r| r.is_match(command))
        {
            return deny(
                PipelineStep::Policy,
                format!("command matches forbidden pattern {}", rule.as_str()),
            );
        }
        Ok(())
    }

    // --- 4. schema ------------------------------------------------------------------------

    pub(super) fn check_schema(&self, pending: &Pending<'_>) -> Result<(), Denial> {
        let Some(validator) = self.validators.get(&pending.tool.spec.name) else {
            return deny(PipelineStep::Schema, "no schema is bound for this tool");
        };
        let errors: Vec<String> = validator
            .iter_errors(&pending.input)
            .take(3)
            .map(|e| {
                let at = e.instance_path().to_string();
                if at.is_empty() {
                    e.to_string()
                } else {
                    format!("{at}: {e}")
                }
            })
            .collect();
        if errors.is_empty() {
            Ok(())
        } else {
            deny(
                PipelineStep::Schema,
                format!("invalid input: {}", errors.join("; ")),
            )
        }
    }
}
