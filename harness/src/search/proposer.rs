//! The model-proposed policy: a proposer route sees the champion scaffold, the search space and
//! closed failure codes of the last evaluations, and answers with one mutation and a
//! hypothesis as JSON: `{"path": "repair_budget", "value": 2, "hypothesis": "..."}`.
//!
//! The answer is only a proposal: the loop validates it against the space and rejects a
//! duplicate fingerprint before any trial runs. With `scripted:FILE` the proposer is a
//! deterministic script (offline research and tests).

use std::collections::BTreeMap;

use geode_crucible::{Arm, DecisionRecord, Evidence};
use geode_runtime::model::catalog::JudgeModel;
use geode_runtime::model::catalog::Route;
use geode_runtime::model::http::RouteOptions;
use geode_runtime::model::judge_for;
use serde::Deserialize;
use serde_json::Value;

use super::SearchError;
use super::lineage::Entry;
use super::space::{Mutation, SearchSpace};

/// The closed failure codes of one campaign: trial outcomes per arm and the gate's reasons.
/// Only these codes reach the proposer (never task text), so the proposer cannot learn the
/// tasks through the search.
pub fn failure_codes(evidence: &Evidence, record: &DecisionRecord) -> BTreeMap<String, u32> {
    let mut out = BTreeMap::new();
    for t in &evidence.trials {
        let arm = match t.arm {
            Arm::Baseline => "champion",
            Arm::Candidate => "candidate",
        };
        let mut bump = |code: &str| *out.entry(format!("{arm}.{code}")).or_insert(0) += 1;
        if t.infra_invalid {
            bump("infra_invalid");
        } else if !geode_graders::summary::passes(t.reward) {
            bump("trial_failed");
        } else {
            bump("trial_passed");
        }
        if t.integrity.reward_tampering > 0 {
            bump("integrity.reward_tampering");
        }
        if t.integrity.denied_dangerous_calls > 0 {
            bump("integrity.denied_dangerous_calls");
        }
        if t.integrity.uncertain_effects > 0 {
            bump("integrity.uncertain_effects");
        }
    }
    for r in &record.reasons {
        *out.entry(format!("gate.{}", r.as_str())).or_insert(0) += 1;
    }
    out
}

#[derive(Debug, Deserialize)]
struct Answer {
    path: String,
    value: Value,
    #[serde(default)]
    hypothesis: String,
}

/// The `model` policy's proposer: a route asked for one mutation and its hypothesis.
pub struct Proposer {
    judge: JudgeModel,
}

const SYSTEM: &str = "You improve the scaffold of a coding agent. Propose exactly one change \
to one knob of the search space, with a falsifiable hypothesis. Answer with one JSON object \
and nothing else: {\"path\": KNOB_PATH, \"value\": VALUE, \"hypothesis\": TEXT}.";

impl Proposer {
    pub(crate) fn from_route(route: &Route) -> Result<Proposer, SearchError> {
        let judge = judge_for(route, &RouteOptions::from_env())
            .map_err(|e| SearchError::Proposer(format!("route {route}: {e}")))?;
        Ok(Proposer { judge })
    }

    /// The prompt the proposer sees (also written beside each proposal for audit).
    pub fn prompt(space: &SearchSpace, champion: &Entry, recent: &[&Entry]) -> String {
        let knobs: Vec<Value> = space
            .knobs
            .iter()
            .map(|k| serde_json::json!({"path": k.path, "domain": k.domain()}))
            .collect();
        let history: Vec<Value> = recent
            .iter()
            .map(|e| {
                serde_json::json!({
                    "id": e.id,
                    "mutation": e.mutation,
                    "verdict": e.verdict,
                    "estimate": e.estimate,
                    "failures": e.failures,
                })
            })
            .collect();
        format!(
            "Champion scaffold ({}):\n{}\n\nSearch space knobs:\n{}\n\nLast evaluations \
             (closed failure codes):\n{}\n",
            champion.id,
            serde_json::to_string_pretty(&champion.scaffold).unwrap_or_default(),
            serde_json::to_string_pretty(&knobs).unwrap_or_default(),
            serde_json::to_string_pretty(&history).unwrap_or_default(),
        )
    }

    /// One mutation and its hypothesis, parsed from the route's answer (not yet validated
    /// against the space). Returns the tokens the call used, too.
    pub async fn propose(&self, prompt: &str) -> Result<(Mutation, String, u64), SearchError> {
        let reply = self
            .judge
            .decide(SYSTEM, prompt)
            .await
            .map_err(|e| SearchError::Proposer(e.to_string()))?;
        let tokens = reply.usage.input_tokens + reply.usage.output_tokens;
        let (m, h) = parse_answer(&reply.text)?;
        Ok((m, h, tokens))
    }
}

/// The first JSON object in the text (models wrap answers in prose or fences).
pub fn parse_answer(text: &str) -> Result<(Mutation, String), SearchError> {
    let (Some(start), Some(end)) = (text.find('{'), text.rfind('}')) else {
        return Err(SearchError::Proposer(format!(
            "the answer holds no JSON object: {:?}",
            text.chars().take(200).collect::<String>()
        )));
    };
    let a: Answer = serde_json::from_str(text.get(start..=end).unwrap_or_default())
        .map_err(|e| SearchError::Proposer(format!("the answer's JSON: {e}")))?;
    let hypothesis = if a.hypothesis.trim().is_empty() {
        format!("model: setting {} to {} helps", a.path, a.value)
    } else {
        a.hypothesis
    };
    Ok((
        Mutation {
            path: a.path,
            value: a.value,
        },
        hypothesis,
    ))
}
