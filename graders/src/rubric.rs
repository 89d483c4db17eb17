//! The rubric grader: weighted criteria from a TOML file (schema `geode.rubric.v1`).
//!
//! ```toml
//! schema = "geode.rubric.v1"          # optional
//! [judge]                             # optional: for `kind = "judge"` criteria
//! route = "judge:anthropic:claude-haiku-4-5"
//! votes = 3
//!
//! [[criterion]]
//! name = "report written"
//! weight = 2.0                        # > 0, default 1
//! kind = "command"                    # run in the sandbox; passes on `expect_exit` (0)
//! command = "test -s /app/report.md"
//! timeout_sec = 30                    # default 60
//!
//! [[criterion]]
//! name = "states the total"
//! kind = "regex_answer"               # over the final answer; `negate = true` inverts
//! pattern = "(?i)total:\\s*42"
//!
//! [[criterion]]
//! name = "never used curl"
//! kind = "regex_trajectory"           # over the ATIF trajectory JSON text
//! pattern = "curl "
//! negate = true
//!
//! [[criterion]]
//! name = "explains the cause"
//! kind = "judge"
//! question = "Does the answer explain why the build failed?"
//! ```
//!
//! Score = (sum of weights of passed criteria) / (sum of weights of criteria not skipped), in
//! [0, 1]. A criterion is skipped, never failed, when what it needs is not at hand (no sandbox
//! runner when re-grading, no judge configured): an absent tool says nothing about the agent.
//! Every criterion skipped is `reward_missing` (nothing was measured).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use async_trait::async_trait;
use geode_runtime::model::http::RouteOptions;
use regex::Regex;
use serde::Deserialize;

use crate::grade::{
    Check, CheckStatus, CommandRunner, Evidence, Grade, GradeInput, GradeRewards, Grader,
    upstream_grade,
};
use crate::judge::{CRITERION_TEMPLATE, JudgeGrader, Votes};
use crate::outcome::TrialOutcome;

/// Why a rubric could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum RubricError {
    /// The rubric file could not be read.
    #[error("{file}: cannot read: {why}")]
    Read {
        /// The rubric file's path.
        file: String,
        /// The read error.
        why: String,
    },
    /// The rubric is not valid TOML or breaks a rule of `geode.rubric.v1` (or its judge
    /// could not be built).
    #[error("{file}: {why}")]
    Invalid {
        /// The rubric file's path.
        file: String,
        /// What is wrong, naming the criterion where there is one.
        why: String,
    },
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RubricFile {
    #[serde(default)]
    schema: Option<String>,
    #[serde(default)]
    judge: Option<JudgeSection>,
    #[serde(default)]
    criterion: Vec<CriterionFile>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct JudgeSection {
    route: String,
    #[serde(default = "one")]
    votes: u32,
}

fn one() -> u32 {
    1
}

fn default_weight() -> f64 {
    1.0
}

fn default_timeout() -> u64 {
    60
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct CriterionFile {
    name: String,
    #[serde(default = "default_weight")]
    weight: f64,
    kind: String,
    #[serde(default)]
    command: Option<String>,
    #[serde(default)]
    expect_exit: i32,
    #[serde(default = "default_timeout")]
    timeout_sec: u64,
    #[serde(default)]
    pattern: Option<String>,
    #[serde(default)]
    negate: bool,
    #[serde(default)]
    question: Option<String>,
}

/// How a criterion is checked.
#[derive(Debug, Clone)]
pub enum CriterionKind {
    /// A command run in the sandbox; skipped without a sandbox runner.
    Command {
        /// The shell command.
        command: String,
        /// The exit code that passes (default 0).
        expect_exit: i32,
        /// How long the command may run (default 60 s, at least 1 s); a timeout fails.
        timeout: Duration,
    },
    /// A regex over the agent's final answer; skipped without one.
    RegexAnswer {
        /// The regex that must match.
        pattern: Regex,
        /// Pass when it does not match instead.
        negate: bool,
    },
    /// A regex over the ATIF trajectory's JSON text; skipped without one.
    RegexTrajectory {
        /// The regex that must match.
        pattern: Regex,
        /// Pass when it does not match instead.
        negate: bool,
    },
    /// A question the judge answers by majority; skipped without a judge.
    Judge {
        /// The question, put in the criterion prompt.
        question: String,
    },
}

/// One weighted criterion. Invariant: `weight` is finite and positive.
#[derive(Debug, Clone)]
pub struct Criterion {
    /// The criterion's name, unique in its rubric; its check has the same name.
    pub name: String,
    weight: f64,
    /// How it is checked.
    pub kind: CriterionKind,
}

impl Criterion {
    /// The criterion's share of the score (default 1).
    pub fn weight(&self) -> f64 {
        self.weight
    }
}

/// A validated rubric: at least one criterion, unique names, compiled patterns.
#[derive(Debug, Clone)]
pub struct Rubric {
    pub(crate) source: String,
    /// The criteria, in the file's order.
    pub criteria: Vec<Criterion>,
    /// `[judge]`: route and votes for judge criteria.
    pub judge: Option<(String, Votes)>,
}

impl Rubric {
    /// Read and validate the rubric file at `path`.
    pub fn load(path: &Path) -> Result<Self, RubricError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| RubricError::Read {
            file: file.clone(),
            why: e.to_string(),
        })?;
        Rubric::parse(&text, &file)
    }

    /// Validate rubric `text`; `file` only names it in errors and in the grader's spec.
    pub fn parse(text: &str, file: &str) -> Result<Self, RubricError> {
        let bad = |why: String| RubricError::Invalid {
            file: file.to_string(),
            why,
        };
        let raw: RubricFile = toml::from_str(text).map_err(|e| bad(e.to_string()))?;
        if let Some(s) = &raw.schema
            && s != "geode.rubric.v1"
        {
            return Err(bad(format!("schema {s:?} is not geode.rubric.v1")));
        }
        if raw.criterion.is_empty() {
            return Err(bad("no [[criterion]]".into()));
        }
        let judge = match raw.judge {
            Some(j) => Some((
                j.route,
                Votes::new(j.votes).map_err(|e| bad(format!("[judge]: {e}")))?,
            )),
            None => None,
        };
        let mut names = BTreeSet::new();
        let mut criteria = Vec::new();
        for c in raw.criterion {
            let at = format!("criterion {:?}", c.name);
            if !names.insert(c.name.clone()) {
                return Err(bad(format!("{at}: the name is used twice")));
            }
            if !(c.weight.is_finite() && c.weight > 0.0) {
                return Err(bad(format!("{at}: weight must be a positive number")));
            }
            let need = |v: Option<String>, field: &str| {
                v.ok_or_else(|| bad(format!("{at}: kind {:?} needs `{field}`", c.kind)))
            };
            let regex = |p: String| Regex::new(&p).map_err(|e| bad(format!("{at}: pattern: {e}")));
            let kind = match c.kind.as_str() {
                "command" => CriterionKind::Command {
                    command: need(c.command, "command")?,
                    expect_exit: c.expect_exit,
                    timeout: Duration::from_secs(c.timeout_sec.max(1)),
                },
                "regex_answer" => CriterionKind::RegexAnswer {
                    pattern: regex(need(c.pattern, "pattern")?)?,
                    negate: c.negate,
                },
                "regex_trajectory" => CriterionKind::RegexTrajectory {
                    pattern: regex(need(c.pattern, "pattern")?)?,
                    negate: c.negate,
                },
                "judge" => CriterionKind::Judge {
                    question: need(c.question, "question")?,
                },
                k => {
                    return Err(bad(format!(
                        "{at}: kind {k:?} is not command, regex_answer, regex_trajectory or judge"
                    )));
                }
            };
            criteria.push(Criterion {
                name: c.name,
                weight: c.weight,
                kind,
            });
        }
        Ok(Rubric {
            source: file.to_string(),
            criteria,
            judge,
        })
    }
}

/// The rubric grader. Judge criteria use `judge` (built from the rubric's `[judge]` or given).
#[derive(Debug)]
pub struct RubricGrader {
    rubric: Rubric,
    judge: Option<JudgeGrader>,
}

impl RubricGrader {
    /// Without a judge: judge criteria are skipped.
    pub fn new(rubric: Rubric) -> Self {
        RubricGrader {
            rubric,
            judge: None,
        }
    }

    /// Load `path` and build the judge its `[judge]` section names.
    pub fn load(path: &Path, opts: &RouteOptions) -> Result<Self, RubricError> {
        let rubric = Rubric::load(path)?;
        let judge = match &rubric.judge {
            Some((route, votes)) => {
                Some(JudgeGrader::from_route(route, *votes, opts).map_err(|e| {
                    RubricError::Invalid {
                        file: path.display().to_string(),
                        why: format!("[judge]: {e}"),
                    }
                })?)
            }
            None => None,
        };
        Ok(RubricGrader { rubric, judge })
    }

    /// The same grader with `judge` for its judge criteria, replacing any it had.
    pub fn with_judge(mut self, judge: JudgeGrader) -> Self {
        self.judge = Some(judge);
        self
    }

    /// Check one criterion: `Ok` a check, `Err` an infrastructure failure.
    async fn check(
        &self,
        c: &Criterion,
        input: &GradeInput,
        trajectory: Option<&str>,
        runner: Option<&dyn CommandRunner>,
    ) -> Result<Check, String> {
        let check = |s: CheckStatus, m: String| Check::new(c.name.clone(), s).with_message(m);
        Ok(match &c.kind {
            CriterionKind::RegexAnswer { pattern, negate } => regex_check(
                c,
                pattern,
                *negate,
                input.final_answer.as_deref(),
                "final answer",
            ),
            CriterionKind::RegexTrajectory { pattern, negate } => {
                regex_check(c, pattern, *negate, trajectory, "trajectory")
            }
            CriterionKind::Command {
                command,
                expect_exit,
                timeout,
            } => command_check(c, runner, command, *expect_exit, *timeout).await?,
            CriterionKind::Judge { question } => {
                let Some(judge) = &self.judge else {
                    return Ok(check(
                        CheckStatus::Skip,
                        "needs a judge; the rubric has no [judge]".into(),
                    ));
                };
                let poll = judge
                    .poll(&judge.prompt(input, Some(CRITERION_TEMPLATE), Some(question)))
                    .await;
                let votes = poll
                    .checks("")
                    .iter()
                    .map(|v| format!("{} {}", v.name, v.status.as_str()))
                    .collect::<Vec<_>>()
                    .join(", ");
                match poll.decision() {
                    Some(true) => check(
                        CheckStatus::Pass,
                        format!("judge {}: {votes}", judge.route()),
                    ),
                    Some(false) => check(
                        CheckStatus::Fail,
                        format!("judge {}: {votes}", judge.route()),
                    ),
                    None => check(
                        CheckStatus::Skip,
                        format!("judge {} gave no valid verdict: {votes}", judge.route()),
                    ),
                }
            }
        })
    }
}

/// A check whose pass/fail is whether `pattern` matches `text` (negated by `negate`); skipped
/// when there is no `what` to search.
fn regex_check(
    c: &Criterion,
    pattern: &Regex,
    negate: bool,
    text: Option<&str>,
    what: &str,
) -> Check {
    let check = |s: CheckStatus, m: String| Check::new(c.name.clone(), s).with_message(m);
    match text {
        None => check(CheckStatus::Skip, format!("no {what} to search")),
        Some(t) => {
            let found = pattern.find(t);
            let passed = found.is_some() != negate;
            let seen = match found {
                Some(m) => format!(
                    "matched {:?}",
                    m.as_str().chars().take(80).collect::<String>()
                ),
                None => format!("no match for /{}/ in the {what}", pattern.as_str()),
            };
            check(
                if passed {
                    CheckStatus::Pass
                } else {
                    CheckStatus::Fail
                },
                seen,
            )
        }
    }
}

/// A check that runs `command` in the sandbox and expects `expect_exit`; skipped without a
/// sandbox runner (a re-grade). `Err` is an infrastructure failure of the runner.
async fn command_check(
    c: &Criterion,
    runner: Option<&dyn CommandRunner>,
    command: &str,
    expect_exit: i32,
    timeout: Duration,
) -> Result<Check, String> {
    let check = |s: CheckStatus, m: String| Check::new(c.name.clone(), s).with_message(m);
    let Some(runner) = runner else {
        return Ok(check(
            CheckStatus::Skip,
            "needs a command in the sandbox; no sandbox runner (re-grade)".into(),
        ));
    };
    let out = runner.run(command, timeout).await?;
    Ok(if out.timed_out {
        check(
            CheckStatus::Fail,
            format!("timed out after {}s", timeout.as_secs()),
        )
    } else if out.exit_code == Some(expect_exit) {
        check(CheckStatus::Pass, format!("exit {expect_exit}"))
    } else {
        let tail: String = out
            .stdout
            .lines()
            .chain(out.stderr.lines())
            .take(3)
            .collect::<Vec<_>>()
            .join(" | ");
        check(
            CheckStatus::Fail,
            format!("exit {:?}, expected {expect_exit}: {tail}", out.exit_code),
        )
    })
}

#[async_trait]
impl Grader for RubricGrader {
    fn spec(&self) -> String {
        format!("rubric:{}", self.rubric.source)
    }

    async fn grade(&self, input: &GradeInput, runner: Option<&dyn CommandRunner>) -> Grade {
        let spec = self.spec();
        if let Some(g) = upstream_grade(&spec, input) {
            return g;
        }
        let trajectory = input.trajectory_text();
        let (mut passed, mut counted) = (0.0, 0.0);
        let mut checks = Vec::new();
        for c in &self.rubric.criteria {
            match self.check(c, input, trajectory.as_deref(), runner).await {
                Ok(check) => {
                    if check.status != CheckStatus::Skip {
                        counted += c.weight;
                    }
                    if check.status == CheckStatus::Pass {
                        passed += c.weight;
                    }
                    checks.push(check);
                }
                Err(e) => {
                    return Grade::infra(
                        &spec,
                        TrialOutcome::VerifierCrashed,
                        format!("criterion {:?}: the sandbox runner failed: {e}", c.name),
                    )
                    .with_checks(checks);
                }
            }
        }
        let grade = if counted > 0.0 {
            let score = (passed / counted).clamp(0.0, 1.0);
            let extra = BTreeMap::from([("rubric_weight_counted".to_string(), counted)]);
            match GradeRewards::new("reward", score, extra) {
                Some(r) => Grade::valid(&spec, r),
                None => Grade::infra(
                    &spec,
                    TrialOutcome::RewardMalformed,
                    "the rubric score is not finite",
                ),
            }
        } else {
            Grade::infra(
                &spec,
                TrialOutcome::RewardMissing,
                "every rubric criterion was skipped",
            )
        };
        let mut grade = grade.with_checks(checks).with_evidence(Evidence::File {
            label: "rubric".into(),
            path: self.rubric.source.clone().into(),
        });
        if trajectory.is_some() {
            grade = grade.with_evidence(Evidence::File {
                label: "trajectory".into(),
                path: input.trajectory_path(),
            });
        }
        if let Some(j) = &self.judge {
            grade = grade.with_evidence(j.evidence());
        }
        grade
    }
}
