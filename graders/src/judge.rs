//! The LLM-judge grader: a prompt template filled from the trial, a JSON-schema verdict,
//! several votes and a majority.
//!
//! The judge is built with `judge_from_route` (decisions only, no tools), never from the
//! agent's route, and the route is recorded in the grade's evidence. A vote whose text is not a
//! valid verdict is recorded as a malformed vote, never a panic; malformed and unavailable votes
//! do not count toward the majority, and a tie among the valid votes is a fail (a judge that
//! cannot make up its mind must not award credit).

use std::collections::BTreeMap;

use async_trait::async_trait;
use geode_runtime::model::catalog::JudgeModel;
use geode_runtime::model::http::RouteOptions;
use geode_runtime::model::judge_from_route;
use serde_json::{Value, json};

use crate::grade::{
    Check, CheckStatus, CommandRunner, Evidence, Grade, GradeInput, GradeRewards, Grader,
    upstream_grade,
};
use crate::outcome::TrialOutcome;

/// The default prompt of `judge:ROUTE`.
pub const DEFAULT_TEMPLATE: &str = "You are grading whether an agent completed a task.\n\n\
## Task instruction\n{instruction}\n\n## The agent's final answer\n{answer}\n\n\
## The agent's trajectory (ATIF JSON, possibly truncated)\n{trajectory}\n\n\
Decide whether the task was completed as instructed.";

/// The prompt of a rubric's judge criterion: `{criterion}` is its question.
pub const CRITERION_TEMPLATE: &str = "You are checking one criterion of an agent's work.\n\n\
## Criterion\n{criterion}\n\n## Task instruction\n{instruction}\n\n\
## The agent's final answer\n{answer}\n\n## The agent's trajectory (ATIF JSON, possibly truncated)\n{trajectory}\n\n\
Decide whether the criterion holds.";

const SYSTEM: &str = "You are a strict, impartial grader. Reply with one JSON object and nothing \
else: {\"verdict\": \"pass\" or \"fail\", \"score\": a number from 0 to 1, \"reason\": one sentence}.";

/// Characters of trajectory put in a prompt; the end is kept (it holds the outcome).
const TRAJECTORY_CAP: usize = 60_000;

/// The verdict's JSON schema.
pub fn verdict_schema() -> Value {
    json!({
        "type": "object",
        "required": ["verdict", "score", "reason"],
        "properties": {
            "verdict": {"enum": ["pass", "fail"]},
            "score": {"type": "number", "minimum": 0, "maximum": 1},
            "reason": {"type": "string"}
        }
    })
}

/// Why a judge grader could not be built.
#[derive(Debug, thiserror::Error)]
pub enum JudgeError {
    /// A vote count that is even or outside 1..=99.
    #[error("votes must be an odd number from 1 to 99, got {0}")]
    Votes(u32),
    /// The judge's route could not be opened.
    #[error("judge route {route:?}: {message}")]
    Route {
        /// The route as given.
        route: String,
        /// Why it could not be opened.
        message: String,
    },
    /// A prompt template that mentions neither `{answer}` nor `{trajectory}`.
    #[error("{file}: {why}")]
    Template {
        /// The file the template was read from.
        file: String,
        /// What is wrong with it.
        why: String,
    },
    /// The verdict's JSON schema does not compile (a bug of this crate).
    #[error("the verdict schema does not compile: {0}")]
    Schema(String),
}

/// An odd number of votes (so two valid camps cannot tie when every vote is valid).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Votes(u32);

impl Votes {
    /// `n` votes; refused unless odd and below 100.
    pub fn new(n: u32) -> Result<Self, JudgeError> {
        if n % 2 == 1 && n < 100 {
            Ok(Votes(n))
        } else {
            Err(JudgeError::Votes(n))
        }
    }

    pub(crate) fn get(self) -> u32 {
        self.0
    }
}

/// How one vote went.
#[derive(Debug, Clone, PartialEq)]
pub enum VoteOutcome {
    /// A schema-valid verdict.
    Verdict {
        /// Whether the verdict is `pass`.
        pass: bool,
        /// The judge's score, from 0 to 1.
        score: f64,
        /// The judge's one-sentence reason.
        reason: String,
    },
    /// The judge answered, but not with a schema-valid verdict.
    Malformed {
        /// What is wrong with the answer.
        why: String,
    },
    /// The judge could not be reached (provider error).
    Unavailable {
        /// The provider's error.
        why: String,
    },
}

/// All votes of one question.
#[derive(Debug, Clone, PartialEq)]
pub struct Poll {
    pub(crate) votes: Vec<VoteOutcome>,
}

impl Poll {
    fn count(&self, pass: bool) -> usize {
        self.votes
            .iter()
            .filter(|v| matches!(v, VoteOutcome::Verdict { pass: p, .. } if *p == pass))
            .count()
    }

    /// `Some(true)`: a strict majority of the valid votes passed; `Some(false)`: otherwise;
    /// `None`: no valid vote at all.
    pub fn decision(&self) -> Option<bool> {
        let (pass, fail) = (self.count(true), self.count(false));
        (pass + fail > 0).then_some(pass > fail)
    }

    /// Mean score of the valid votes.
    pub fn mean_score(&self) -> Option<f64> {
        let scores: Vec<f64> = self
            .votes
            .iter()
            .filter_map(|v| match v {
                VoteOutcome::Verdict { score, .. } => Some(*score),
                _ => None,
            })
            .collect();
        (!scores.is_empty()).then(|| scores.iter().sum::<f64>() / scores.len() as f64)
    }

    /// One check per vote, prefixed with `prefix` (`vote 1`, `criterion x: vote 2`).
    pub fn checks(&self, prefix: &str) -> Vec<Check> {
        self.votes
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let name = format!("{prefix}vote {}", i + 1);
                match v {
                    VoteOutcome::Verdict {
                        pass,
                        score,
                        reason,
                    } => Check::new(
                        name,
                        if *pass {
                            CheckStatus::Pass
                        } else {
                            CheckStatus::Fail
                        },
                    )
                    .with_message(format!("score {score}: {reason}")),
                    VoteOutcome::Malformed { why } => Check::new(name, CheckStatus::Fail)
                        .with_message(format!("malformed verdict: {why}")),
                    VoteOutcome::Unavailable { why } => Check::new(name, CheckStatus::Skip)
                        .with_message(format!("judge unavailable: {why}")),
                }
            })
            .collect()
    }
}

/// The LLM-judge grader.
pub struct JudgeGrader {
    judge: JudgeModel,
    route: String,
    votes: Votes,
    template: String,
    validator: jsonschema::Validator,
}

impl std::fmt::Debug for JudgeGrader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JudgeGrader")
            .field("route", &self.route)
            .field("votes", &self.votes)
            .finish_non_exhaustive()
    }
}

impl JudgeGrader {
    /// A judge from `judge:ROUTE` or a plain route (`scripted:FILE`, `cassette:DIR`, a provider).
    pub fn from_route(route: &str, votes: Votes, opts: &RouteOptions) -> Result<Self, JudgeError> {
        let judge = judge_from_route(route, opts).map_err(|e| JudgeError::Route {
            route: route.to_string(),
            message: e.to_string(),
        })?;
        JudgeGrader::new(judge, route, votes)
    }

    pub(crate) fn new(
        judge: JudgeModel,
        route: impl Into<String>,
        votes: Votes,
    ) -> Result<Self, JudgeError> {
        let validator = jsonschema::validator_for(&verdict_schema())
            .map_err(|e| JudgeError::Schema(e.to_string()))?;
        Ok(JudgeGrader {
            judge,
            route: route.into(),
            votes,
            template: DEFAULT_TEMPLATE.to_string(),
            validator,
        })
    }

    /// Replace the prompt template (read from `file`, named in errors). It must mention
    /// `{answer}` or `{trajectory}`: a judge that sees neither grades nothing.
    pub fn with_template(mut self, template: String, file: &str) -> Result<Self, JudgeError> {
        if !template.contains("{answer}") && !template.contains("{trajectory}") {
            return Err(JudgeError::Template {
                file: file.to_string(),
                why: "the template has neither {answer} nor {trajectory}".into(),
            });
        }
        self.template = template;
        Ok(self)
    }

    pub(crate) fn route(&self) -> &str {
        &self.route
    }

    /// How many times each question is asked.
    pub fn votes(&self) -> Votes {
        self.votes
    }

    /// Ask `votes` times (one after another: scripted judges answer in order).
    pub async fn poll(&self, prompt: &str) -> Poll {
        let mut votes = Vec::new();
        for _ in 0..self.votes.get() {
            let outcome = match self.judge.decide(SYSTEM, prompt).await {
                Ok(d) => self.read_verdict(&d.text),
                Err(e) => VoteOutcome::Unavailable { why: e.to_string() },
            };
            votes.push(outcome);
        }
        Poll { votes }
    }

    /// Parse and validate one answer.
    pub fn read_verdict(&self, text: &str) -> VoteOutcome {
        let Some(value) = extract_json(text) else {
            let shown: String = text.chars().take(80).collect();
            return VoteOutcome::Malformed {
                why: format!("no JSON object in {shown:?}"),
            };
        };
        if let Err(e) = self.validator.validate(&value) {
            return VoteOutcome::Malformed {
                why: format!("schema: {e}"),
            };
        }
        VoteOutcome::Verdict {
            pass: value["verdict"] == "pass",
            score: value["score"].as_f64().unwrap_or(0.0),
            reason: value["reason"].as_str().unwrap_or_default().to_string(),
        }
    }

    /// The prompt for `input`, from this grader's template (or `template`).
    pub fn prompt(
        &self,
        input: &GradeInput,
        template: Option<&str>,
        criterion: Option<&str>,
    ) -> String {
        let trajectory = input
            .trajectory_text()
            .map(|t| tail(&t, TRAJECTORY_CAP))
            .unwrap_or_default();
        fill(
            template.unwrap_or(&self.template),
            &[
                (
                    "instruction",
                    input.instruction.as_deref().unwrap_or("(not available)"),
                ),
                (
                    "answer",
                    input.final_answer.as_deref().unwrap_or("(no final answer)"),
                ),
                ("trajectory", &trajectory),
                ("criterion", criterion.unwrap_or("")),
            ],
        )
    }

    /// The evidence entry naming this judge's route and model id.
    pub fn evidence(&self) -> Evidence {
        Evidence::JudgeRoute {
            route: self.route.clone(),
            model_id: self.judge.id().to_string(),
        }
    }

    fn spec_string(&self) -> String {
        format!(
            "judge:{}:{}",
            self.route.strip_prefix("judge:").unwrap_or(&self.route),
            self.votes.get()
        )
    }
}

#[async_trait]
impl Grader for JudgeGrader {
    fn spec(&self) -> String {
        self.spec_string()
    }

    async fn grade(&self, input: &GradeInput, _runner: Option<&dyn CommandRunner>) -> Grade {
        let spec = self.spec_string();
        if let Some(g) = upstream_grade(&spec, input) {
            return g;
        }
        let poll = self.poll(&self.prompt(input, None, None)).await;
        let checks = poll.checks("");
        let all_unavailable = poll
            .votes
            .iter()
            .all(|v| matches!(v, VoteOutcome::Unavailable { .. }));
        let grade = match (poll.decision(), poll.mean_score()) {
            (Some(pass), Some(mean)) => {
                let extra = BTreeMap::from([
                    ("judge_score".to_string(), mean),
                    ("judge_pass_votes".to_string(), poll.count(true) as f64),
                ]);
                match GradeRewards::new("reward", if pass { 1.0 } else { 0.0 }, extra) {
                    Some(r) => Grade::valid(&spec, r),
                    None => Grade::infra(
                        &spec,
                        TrialOutcome::RewardMalformed,
                        "a judge score is not finite",
                    ),
                }
            }
            _ if all_unavailable => Grade::infra(
                &spec,
                TrialOutcome::ProviderUnavailable,
                format!("judge {}: every vote failed to reach the model", self.route),
            ),
            _ => Grade::infra(
                &spec,
                TrialOutcome::RewardMalformed,
                format!("judge {}: no vote was a valid verdict", self.route),
            ),
        };
        grade
            .with_checks(checks)
            .with_evidence(self.evidence())
            .with_evidence(Evidence::File {
                label: "trajectory".into(),
                path: input.trajectory_path(),
            })
    }
}

/// The JSON object of a judge's answer: the whole text, a fenced block, or the span from the
/// first `{` to the last `}` (models wrap JSON in prose despite being told not to).
fn extract_json(text: &str) -> Option<Value> {
    let t = text.trim();
    let unfenced = t
        .strip_prefix("```json")
        .or_else(|| t.strip_prefix("```"))
        .and_then(|r| r.trim_end().strip_suffix("```"))
        .unwrap_or(t)
        .trim();
    if let Ok(v @ Value::Object(_)) = serde_json::from_str(unfenced) {
        return Some(v);
    }
    let (start, end) = (t.find('{')?, t.rfind('}')?);
    match serde_json::from_str(t.get(start..=end)?) {
        Ok(v @ Value::Object(_)) => Some(v),
        _ => None,
    }
}

fn tail(text: &str, cap: usize) -> String {
    let n = text.chars().count();
    if n <= cap {
        return text.to_string();
    }
    let kept: String = text.chars().skip(n - cap).collect();
    format!("[... {} characters cut ...]\n{kept}", n - cap)
}

/// Fill `{name}` placeholders in one pass, so a value that contains `{answer}` is not filled
/// again (an agent must not be able to inject text into other slots).
pub fn fill(template: &str, values: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let hit = after.find('}').and_then(|close| {
            let key = &after[..close];
            values
                .iter()
                .find(|(k, _)| *k == key)
                .map(|(_, v)| (close, *v))
        });
        match hit {
            Some((close, v)) => {
                out.push_str(v);
                rest = &after[close + 1..];
            }
            None => {
                out.push('{');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}
