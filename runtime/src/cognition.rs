//! Cognitive state: the plan with its revisions, and the reflexion hypotheses.
//!
//! The loop owns one `CognitiveState` per session; the `update_plan` and `record_reflection`
//! tools change it, tool results can contradict hypotheses, and a failed verification or a low
//! confidence arms a replan that is recorded as a plan revision.

use regex::Regex;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Confidence below which the runtime asks for a replan.
pub const LOW_CONFIDENCE: f64 = 0.3;
/// How much a contradicting tool result takes off a hypothesis' confidence (multiplied).
const CONTRADICTION_FACTOR: f64 = 0.5;

// Where a plan step stands; `remaining` counts `Pending` and `InProgress` steps. Plain
// comments, not doc comments, here and on `PlanStep`'s fields: schemars turns doc comments into
// the `update_plan` schema's descriptions (an enum with them becomes a `oneOf`), which would
// change what the model is shown.
#[allow(missing_docs)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum StepStatus {
    // Not started yet.
    Pending,
    // Being worked on now.
    InProgress,
    // Done.
    Completed,
    // Given up on; no longer counts as remaining.
    Abandoned,
}

/// One step of a plan; also the shape `update_plan` takes its steps in, so unknown fields are
/// the model's mistake and refused.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct PlanStep {
    // What the step does, in the model's words; never empty.
    #[schemars(length(min = 1))]
    pub description: String,
    // What the step should produce when it succeeds; empty when the model gave none.
    #[serde(default)]
    pub expected_outcome: String,
    // Where the step stands.
    pub status: StepStatus,
}

/// The model's current plan, as last set by `update_plan`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// What the plan is for, in the model's words.
    pub objective: String,
    /// The steps, in the order the model gave them.
    pub steps: Vec<PlanStep>,
}

impl Plan {
    /// Steps still `Pending` or `InProgress`.
    pub fn remaining(&self) -> usize {
        self.steps
            .iter()
            .filter(|s| matches!(s.status, StepStatus::Pending | StepStatus::InProgress))
            .count()
    }
}

/// Why the plan changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RevisionTrigger {
    /// The model called `update_plan`.
    ModelUpdate {
        /// The reason the model gave, if any.
        reason: Option<String>,
    },
    /// Verification rejected the answer.
    VerifyFailed {
        /// What the verification found missing or wrong.
        misses: Vec<String>,
    },
    /// A hypothesis (or the reflection's overall confidence) fell below `LOW_CONFIDENCE`.
    LowConfidence {
        /// The confidence that fell below the threshold, from 0 to 1.
        confidence: f64,
    },
}

/// One revision of the plan: a model update or an armed replan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanRevision {
    /// 1-based position of this revision in the session.
    pub number: u32,
    /// Why the plan changed.
    pub trigger: RevisionTrigger,
    /// The plan as it stood after this revision (`None`: no plan yet).
    pub plan: Option<Plan>,
}

/// A belief the model recorded in a reflection, with how sure it is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hypothesis {
    /// The belief, in the model's words.
    pub statement: String,
    /// From 0 to 1, clamped on record; halved by each contradicting tool result.
    pub confidence: f64,
    /// A regular expression; a tool result matching it contradicts the hypothesis.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refuted_by: Option<String>,
    /// How many tool results have contradicted the hypothesis so far.
    #[serde(default)]
    pub contradictions: u32,
}

/// The plan, its revisions and the hypotheses of one session, owned by the loop.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CognitiveState {
    /// The current plan; `None` until the model sets one.
    pub plan: Option<Plan>,
    /// Every revision of the session (model updates and armed replans), oldest first.
    pub revisions: Vec<PlanRevision>,
    /// The hypotheses of the latest reflection; each reflection replaces them all.
    pub hypotheses: Vec<Hypothesis>,
    /// The next action the latest reflection suggested, shown in the system prompt.
    pub next_action_hint: Option<String>,
    /// Set when a replan was requested and the model has not updated the plan since.
    pub replan_pending: Option<RevisionTrigger>,
}

impl CognitiveState {
    /// Replace the plan (the `update_plan` tool); clears a pending replan.
    pub fn update_plan(&mut self, plan: Plan, reason: Option<String>) {
        self.plan = Some(plan);
        self.replan_pending = None;
        self.push_revision(RevisionTrigger::ModelUpdate { reason });
    }

    /// Ask the model to replan, recorded as a revision of the current plan.
    pub fn arm_replan(&mut self, trigger: RevisionTrigger) {
        self.replan_pending = Some(trigger.clone());
        self.push_revision(trigger);
    }

    fn push_revision(&mut self, trigger: RevisionTrigger) {
        let number = self.revisions.len() as u32 + 1;
        self.revisions.push(PlanRevision {
            number,
            trigger,
            plan: self.plan.clone(),
        });
    }

    /// Replace the hypotheses (the `record_reflection` tool or a reflection call).
    pub fn record_reflection(&mut self, hypotheses: Vec<Hypothesis>, next_action: Option<String>) {
        self.hypotheses = hypotheses
            .into_iter()
            .map(|mut h| {
                h.confidence = h.confidence.clamp(0.0, 1.0);
                h
            })
            .collect();
        self.next_action_hint = next_action;
        self.check_confidence();
    }

    /// Lower the confidence of every hypothesis the tool result contradicts. Returns how many
    /// were contradicted. Arms a replan when one falls below `LOW_CONFIDENCE`.
    pub fn observe_tool_result(&mut self, content: &str) -> usize {
        let mut hit = 0;
        for h in &mut self.hypotheses {
            let Some(pattern) = &h.refuted_by else {
                continue;
            };
            // A pattern that is not a valid regex is matched literally.
            let matched = match Regex::new(pattern) {
                Ok(re) => re.is_match(content),
                Err(_) => content.contains(pattern.as_str()),
            };
            if matched {
                h.confidence *= CONTRADICTION_FACTOR;
                h.contradictions += 1;
                hit += 1;
            }
        }
        if hit > 0 {
            self.check_confidence();
        }
        hit
    }

    /// Lowest confidence over the hypotheses (1.0 with none).
    pub fn confidence(&self) -> f64 {
        self.hypotheses
            .iter()
            .map(|h| h.confidence)
            .fold(1.0, f64::min)
    }

    fn check_confidence(&mut self) {
        let c = self.confidence();
        if c < LOW_CONFIDENCE && self.replan_pending.is_none() {
            self.arm_replan(RevisionTrigger::LowConfidence { confidence: c });
        }
    }

    /// Lines for the dynamic context block of the system prompt.
    pub fn prompt_hints(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(plan) = &self.plan {
            out.push(format!(
                "Plan: {} ({} of {} steps remaining)",
                plan.objective,
                plan.remaining(),
                plan.steps.len()
            ));
        }
        if let Some(trigger) = &self.replan_pending {
            let why = match trigger {
                RevisionTrigger::VerifyFailed { misses } => {
                    format!("verification failed ({})", misses.join("; "))
                }
                RevisionTrigger::LowConfidence { confidence } => {
                    format!("confidence fell to {confidence:.2}")
                }
                RevisionTrigger::ModelUpdate { .. } => "the plan changed".to_string(),
            };
            out.push(format!(
                "Replan needed: {why}. Revise the plan with update_plan before continuing."
            ));
        }
        if let Some(hint) = &self.next_action_hint {
            out.push(format!("Next action (from reflection): {hint}"));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hyp(conf: f64, refuted_by: &str) -> Hypothesis {
        Hypothesis {
            statement: "the build passes".into(),
            confidence: conf,
            refuted_by: Some(refuted_by.into()),
            contradictions: 0,
        }
    }

    #[test]
    fn contradiction_lowers_confidence_and_arms_replan() {
        let mut s = CognitiveState::default();
        s.record_reflection(vec![hyp(0.5, "error: .*undefined")], None);
        assert!(s.replan_pending.is_none());
        assert_eq!(s.observe_tool_result("all good"), 0);
        assert_eq!(s.observe_tool_result("error: x undefined"), 1);
        assert!((s.hypotheses[0].confidence - 0.25).abs() < 1e-9);
        assert!(matches!(
            s.replan_pending,
            Some(RevisionTrigger::LowConfidence { .. })
        ));
        assert_eq!(s.revisions.len(), 1);
    }

    #[test]
    fn update_plan_keeps_revisions_and_clears_replan() {
        let mut s = CognitiveState::default();
        s.arm_replan(RevisionTrigger::VerifyFailed {
            misses: vec!["empty".into()],
        });
        s.update_plan(
            Plan {
                objective: "o".into(),
                steps: vec![],
            },
            None,
        );
        assert!(s.replan_pending.is_none());
        assert_eq!(s.revisions.len(), 2);
        assert_eq!(s.revisions[1].number, 2);
    }
}
