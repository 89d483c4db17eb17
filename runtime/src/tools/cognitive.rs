//! The cognitive tools: `update_plan` and `record_reflection`. They change only the session's
//! cognitive state, never the world, so they are SAFE and take no locks.

use std::sync::Arc;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::input::{input_schema, parse_input};
use super::plan::{BoundTool, ResourceKeyRule, ToolContext, ToolHandler, ToolOutput, ToolSpec};
use crate::cognition::{Hypothesis, Plan, PlanStep};
use crate::policy::{PersonalDataClass, SafetyLevel};

/// A cognitive tool's spec; `I` is its input type, whose schema the model is shown.
fn spec<I: JsonSchema>(name: &str, description: &str) -> ToolSpec {
    ToolSpec {
        name: name.to_string(),
        description: description.to_string(),
        input_schema: input_schema::<I>(),
        safety: SafetyLevel::Safe,
        personal_data: PersonalDataClass::None,
        resource_keys: ResourceKeyRule::None,
        path_args: Vec::new(),
        effectful: false,
        command_arg: None,
        deadline_arg: None,
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

pub(crate) struct UpdatePlan;

/// The input of `update_plan`.
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct UpdatePlanInput {
    #[schemars(length(min = 1))]
    pub objective: String,
    pub steps: Vec<PlanStep>,
    pub reason: Option<String>,
}

impl UpdatePlan {
    pub fn spec() -> ToolSpec {
        spec::<UpdatePlanInput>(
            "update_plan",
            "Record or revise the plan: an objective and steps, each with its expected outcome \
             and status. Earlier versions are kept as revisions.",
        )
    }
}

#[async_trait]
impl ToolHandler for UpdatePlan {
    async fn call(&self, input: &Value, ctx: &ToolContext) -> ToolOutput {
        let parsed: UpdatePlanInput = match parse_input(input) {
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

pub(crate) struct RecordReflection;

/// The input of `record_reflection`.
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReflectionInput {
    pub hypotheses: Vec<HypothesisInput>,
    pub next_action: Option<String>,
}

/// A hypothesis as the model states it; the runtime keeps its own count of contradictions,
/// which is why this is not [`Hypothesis`] itself.
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct HypothesisInput {
    #[schemars(length(min = 1))]
    pub statement: String,
    #[schemars(range(min = 0.0, max = 1.0))]
    pub confidence: f64,
    pub refuted_by: Option<String>,
}

impl From<HypothesisInput> for Hypothesis {
    fn from(h: HypothesisInput) -> Self {
        Hypothesis {
            statement: h.statement,
            confidence: h.confidence,
            refuted_by: h.refuted_by,
            contradictions: 0,
        }
    }
}

impl RecordReflection {
    pub fn spec() -> ToolSpec {
        spec::<ReflectionInput>(
            "record_reflection",
            "Record your current hypotheses with a confidence in [0, 1] each, optionally a regex \
             `refuted_by` that a contradicting tool result would match, and the next action.",
        )
    }
}

#[async_trait]
impl ToolHandler for RecordReflection {
    async fn call(&self, input: &Value, ctx: &ToolContext) -> ToolOutput {
        let parsed: ReflectionInput = match parse_input(input) {
            Ok(p) => p,
            Err(e) => return ToolOutput::error(format!("invalid reflection: {e}")),
        };
        let Ok(mut state) = ctx.cognition.lock() else {
            return ToolOutput::error("cognitive state is unavailable");
        };
        let hypotheses = parsed
            .hypotheses
            .into_iter()
            .map(Hypothesis::from)
            .collect();
        state.record_reflection(hypotheses, parsed.next_action);
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
