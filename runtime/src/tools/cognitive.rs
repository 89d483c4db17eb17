//! The cognitive tools: `update_plan` and `record_reflection`. They change only the session's
//! cognitive state, never the world, so they are SAFE and take no locks.

use std::sync::Arc;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};

use super::plan::{BoundTool, ResourceKeyRule, ToolContext, ToolHandler, ToolOutput, ToolSpec};
use crate::cognition::{Hypothesis, Plan, PlanStep};
use crate::policy::{PersonalDataClass, SafetyLevel};

fn spec(name: &str, description: &str, schema: Value) -> ToolSpec {
    ToolSpec {
        name: name.to_string(),
        description: description.to_string(),
        input_schema: schema,
        safety: SafetyLevel::Safe,
        personal_data: PersonalDataClass::None,
        resource_keys: ResourceKeyRule::None,
        path_args: Vec::new(),
        effectful: false,
    }
}

/// `update_plan` and `record_reflection`, bound.
pub fn cognitive_tools() -> Vec<BoundTool> {
    vec![
        BoundTool {
            spec: UpdatePlan::spec(),
            binding: "builtin:update_plan".into(),
            handler: Arc::new(UpdatePlan),
        },
        BoundTool {
            spec: RecordReflection::spec(),
            binding: "builtin:record_reflection".into(),
            handler: Arc::new(RecordReflection),
        },
    ]
}

pub struct UpdatePlan;

#[derive(Deserialize)]
struct UpdatePlanInput {
    objective: String,
    steps: Vec<PlanStep>,
    reason: Option<String>,
}

impl UpdatePlan {
    pub fn spec() -> ToolSpec {
        spec(
            "update_plan",
            "Record or revise the plan: an objective and steps, each with its expected outcome \
             and status. Earlier versions are kept as revisions.",
            json!({
                "type": "object",
                "properties": {
                    "objective": {"type": "string", "minLength": 1},
                    "steps": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "description": {"type": "string", "minLength": 1},
                                "expected_outcome": {"type": "string"},
                                "status": {"enum": ["pending", "in_progress", "completed", "abandoned"]}
                            },
                            "required": ["description", "status"],
                            "additionalProperties": false
                        }
                    },
                    "reason": {"type": "string"}
                },
                "required": ["objective", "steps"],
                "additionalProperties": false
            }),
        )
    }
}

#[async_trait]
impl ToolHandler for UpdatePlan {
    async fn call(&self, input: &Value, ctx: &ToolContext) -> ToolOutput {
        let parsed: UpdatePlanInput = match serde_json::from_value(input.clone()) {
            Ok(p) => p,
            Err(e) => return ToolOutput::error(format!("invalid plan: {e}")),
        };
        let plan = Plan {
            objective: parsed.objective,
            steps: parsed.steps,
        };
        let remaining = plan.remaining();
        let total = plan.steps.len();
        let Ok(mut state) = ctx.cognition.lock() else {
            return ToolOutput::error("cognitive state is unavailable");
        };
        state.update_plan(plan, parsed.reason);
        ToolOutput::ok(format!(
            "plan revision {} recorded: {remaining} of {total} steps remaining",
            state.revisions.len()
        ))
    }
}

pub struct RecordReflection;

#[derive(Deserialize)]
struct ReflectionInput {
    hypotheses: Vec<Hypothesis>,
    next_action: Option<String>,
}

impl RecordReflection {
    pub fn spec() -> ToolSpec {
        spec(
            "record_reflection",
            "Record your current hypotheses with a confidence in [0, 1] each, optionally a regex \
             `refuted_by` that a contradicting tool result would match, and the next action.",
            json!({
                "type": "object",
                "properties": {
                    "hypotheses": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "statement": {"type": "string", "minLength": 1},
                                "confidence": {"type": "number", "minimum": 0, "maximum": 1},
                                "refuted_by": {"type": "string"}
                            },
                            "required": ["statement", "confidence"],
                            "additionalProperties": false
                        }
                    },
                    "next_action": {"type": "string"}
                },
                "required": ["hypotheses"],
                "additionalProperties": false
            }),
        )
    }
}

#[async_trait]
impl ToolHandler for RecordReflection {
    async fn call(&self, input: &Value, ctx: &ToolContext) -> ToolOutput {
        let parsed: ReflectionInput = match serde_json::from_value(input.clone()) {
            Ok(p) => p,
            Err(e) => return ToolOutput::error(format!("invalid reflection: {e}")),
        };
        let Ok(mut state) = ctx.cognition.lock() else {
            return ToolOutput::error("cognitive state is unavailable");
        };
        state.record_reflection(parsed.hypotheses, parsed.next_action);
        let replan = if state.replan_pending.is_some() {
            "; confidence is low: revise the plan"
        } else {
            ""
        };
        ToolOutput::ok(format!(
            "{} hypotheses recorded, lowest confidence {:.2}{replan}",
            state.hypotheses.len(),
            state.confidence()
        ))
    }
}
