//! The typed result of grading one trial, and the trait every grader implements.
//!
//! A `Grade` is either valid (it has rewards, `primary` among them) or invalid (an
//! infrastructure class from the closed `TrialOutcome` set, and no rewards): the constructors
//! are the only way to build one, so a score can never sit beside an infrastructure failure.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

pub use crate::check::{Check, CheckStatus};
use crate::outcome::TrialOutcome;

/// Reward at or above which a valid trial counts as `passed` (Harbor's binary reward).
pub const PASS_THRESHOLD: f64 = 1.0;

/// Whether a valid trial's reward counts as a pass (Harbor's binary reward).
pub fn passes(reward: f64) -> bool {
    reward >= PASS_THRESHOLD
}

/// What a command in the sandbox returned.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CommandOutput {
    /// The exit code; `None` when the command was killed (a timeout included).
    pub exit_code: Option<i32>,
    /// Standard output as text.
    pub stdout: String,
    /// Standard error as text.
    pub stderr: String,
    /// Whether the command was stopped at its timeout.
    pub timed_out: bool,
}

/// Runs a shell command in the trial's sandbox (the harness implements it with sandbox exec,
/// after the agent's processes are gone). `Err` is an infrastructure failure (the sandbox is
/// unreachable), which makes the grade invalid, never a failed criterion.
#[async_trait]
pub trait CommandRunner: Send + Sync {
    /// Run `command` in the sandbox, stopped after `timeout`.
    async fn run(&self, command: &str, timeout: Duration) -> Result<CommandOutput, String>;
}

/// Where a grade's evidence is: a file of the trial, the route that judged, or a short text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Evidence {
    /// A file the grade was read from.
    File {
        /// What the file is to the grade (`reward`, `rubric`, `trajectory`).
        label: String,
        /// Where it is.
        path: PathBuf,
    },
    /// The judge-only route that produced a verdict (never the agent's own route).
    JudgeRoute {
        /// The route as configured.
        route: String,
        /// The model the route reached.
        model_id: String,
    },
    /// A short text kept with the grade.
    Text {
        /// What the text is.
        label: String,
        /// The text itself.
        text: String,
    },
}

/// An infrastructure cause. Invariant: `class.is_infrastructure()`; only `InfraCause::new`
/// builds one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InfraCause {
    class: TrialOutcome,
    reason: String,
}

impl InfraCause {
    /// `None` when `class` is an agent outcome: those are never a validity problem.
    pub fn new(class: TrialOutcome, reason: impl Into<String>) -> Option<Self> {
        class.is_infrastructure().then(|| InfraCause {
            class,
            reason: reason.into(),
        })
    }

    /// The infrastructure outcome; never an agent outcome.
    pub fn class(&self) -> TrialOutcome {
        self.class
    }

    /// What went wrong, for a person to read.
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

/// Whether a grade says anything about the agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "validity", rename_all = "snake_case")]
pub enum Validity {
    /// The grade scores the agent.
    Valid,
    /// Excluded from scores and counted separately.
    Invalid(InfraCause),
}

/// Named rewards of a valid grade. Invariant: `primary` is finite and also in `all` under
/// `primary_key`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GradeRewards {
    primary: f64,
    primary_key: String,
    all: BTreeMap<String, f64>,
}

impl GradeRewards {
    /// `None` when a value is not finite.
    pub fn new(
        primary_key: impl Into<String>,
        primary: f64,
        extra: BTreeMap<String, f64>,
    ) -> Option<Self> {
        let primary_key = primary_key.into();
        if !primary.is_finite() || extra.values().any(|v| !v.is_finite()) {
            return None;
        }
        let mut all = extra;
        all.insert(primary_key.clone(), primary);
        Some(GradeRewards {
            primary,
            primary_key,
            all,
        })
    }

    /// The headline reward, the one pass and fail are decided on.
    pub fn primary(&self) -> f64 {
        self.primary
    }

    /// The name the headline reward has in [`GradeRewards::all`].
    pub fn primary_key(&self) -> &str {
        &self.primary_key
    }

    /// Every named reward, the headline included.
    pub fn all(&self) -> &BTreeMap<String, f64> {
        &self.all
    }
}

impl From<crate::reward::Rewards> for GradeRewards {
    fn from(r: crate::reward::Rewards) -> Self {
        GradeRewards {
            primary: r.primary,
            primary_key: r.primary_key,
            all: r.all,
        }
    }
}

/// How the agent phase ended, which the grade needs to pick the trial's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AgentEnd {
    /// The agent stopped by itself.
    Finished,
    /// The agent was stopped at its timeout.
    TimedOut,
    /// The agent ended with an error.
    Errored,
    /// The run was cancelled under the agent: nothing it did can be scored.
    Cancelled,
}

impl AgentEnd {
    /// The agent end an outcome already stands for, so that a trial made of several passes
    /// (the steps of a multi-step task) can hand its worst agent end back to `trial_outcome`.
    pub fn of_outcome(outcome: TrialOutcome) -> AgentEnd {
        match outcome {
            TrialOutcome::AgentTimeout => AgentEnd::TimedOut,
            TrialOutcome::AgentError => AgentEnd::Errored,
            TrialOutcome::Cancelled => AgentEnd::Cancelled,
            _ => AgentEnd::Finished,
        }
    }
}

/// The one rule that turns a trial's end into its outcome, for the trial runner and for a
/// re-grade alike: an infrastructure class first (it says nothing about the agent), then a
/// cancelled run, then the agent's own timeout or error, then passed / failed by
/// `PASS_THRESHOLD` (a valid trial without a reward fails).
pub fn trial_outcome(validity: &Validity, reward: Option<f64>, agent: AgentEnd) -> TrialOutcome {
    match (validity, agent) {
        (Validity::Invalid(c), _) => c.class,
        (Validity::Valid, AgentEnd::Cancelled) => TrialOutcome::Cancelled,
        (Validity::Valid, AgentEnd::TimedOut) => TrialOutcome::AgentTimeout,
        (Validity::Valid, AgentEnd::Errored) => TrialOutcome::AgentError,
        (Validity::Valid, AgentEnd::Finished) => match reward {
            Some(r) if passes(r) => TrialOutcome::Passed,
            _ => TrialOutcome::Failed,
        },
    }
}

/// The result of grading one trial (`grade.json`, schema `geode.grade.v1`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Grade {
    schema: String,
    /// The grader spec that produced it (`tests`, `rubric:FILE`, `judge:ROUTE:3`).
    grader: String,
    /// SHA-256 of what the grader is (`spec::grader_hash`): its kind and content, not the name
    /// it was typed under. Absent in grades written before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    grader_hash: Option<String>,
    validity: Validity,
    rewards: Option<GradeRewards>,
    checks: Vec<Check>,
    evidence: Vec<Evidence>,
    notes: Vec<String>,
}

pub(crate) const GRADE_SCHEMA: &str = "geode.grade.v1";

impl Grade {
    pub(crate) fn valid(grader: impl Into<String>, rewards: GradeRewards) -> Self {
        Grade {
            schema: GRADE_SCHEMA.into(),
            grader: grader.into(),
            grader_hash: None,
            validity: Validity::Valid,
            rewards: Some(rewards),
            checks: Vec::new(),
            evidence: Vec::new(),
            notes: Vec::new(),
        }
    }

    pub(crate) fn invalid(grader: impl Into<String>, cause: InfraCause) -> Self {
        Grade {
            schema: GRADE_SCHEMA.into(),
            grader: grader.into(),
            grader_hash: None,
            validity: Validity::Invalid(cause),
            rewards: None,
            checks: Vec::new(),
            evidence: Vec::new(),
            notes: Vec::new(),
        }
    }

    /// An invalid grade from an infrastructure class; an agent class (a caller bug) becomes
    /// `verifier_crashed` so that it can never be scored.
    pub fn infra(
        grader: impl Into<String>,
        class: TrialOutcome,
        reason: impl Into<String>,
    ) -> Self {
        let reason = reason.into();
        let cause = InfraCause::new(class, reason.clone()).unwrap_or(InfraCause {
            class: TrialOutcome::VerifierCrashed,
            reason,
        });
        Grade::invalid(grader, cause)
    }

    pub(crate) fn with_checks(mut self, checks: Vec<Check>) -> Self {
        self.checks.extend(checks);
        self
    }

    pub(crate) fn with_evidence(mut self, evidence: Evidence) -> Self {
        self.evidence.push(evidence);
        self
    }

    pub(crate) fn with_note(mut self, note: impl Into<String>) -> Self {
        self.notes.push(note.into());
        self
    }

    /// The grader spec that produced the grade.
    pub fn grader(&self) -> &str {
        &self.grader
    }

    /// Names the grader by content (see the field).
    pub fn with_grader_hash(mut self, hash: impl Into<String>) -> Self {
        self.grader_hash = Some(hash.into());
        self
    }

    pub(crate) fn grader_hash(&self) -> Option<&str> {
        self.grader_hash.as_deref()
    }

    /// Whether the grade scores the agent, and if not, the infrastructure cause.
    pub fn validity(&self) -> &Validity {
        &self.validity
    }

    pub(crate) fn is_valid(&self) -> bool {
        self.validity == Validity::Valid
    }

    /// The rewards; `Some` exactly when the grade is valid.
    pub fn rewards(&self) -> Option<&GradeRewards> {
        self.rewards.as_ref()
    }

    /// The score of a valid grade; `None` when invalid.
    pub fn primary(&self) -> Option<f64> {
        self.rewards.as_ref().map(|r| r.primary)
    }

    /// The named checks behind the grade (a verifier report's tests, a rubric's criteria).
    pub fn checks(&self) -> &[Check] {
        &self.checks
    }

    /// Where the grade came from: files, the judge's route, texts.
    pub fn evidence(&self) -> &[Evidence] {
        &self.evidence
    }

    /// Remarks for a person, such as why the verifier's checks could not be read.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// The trial's outcome by the one rule, `trial_outcome`.
    pub fn outcome(&self, agent: AgentEnd) -> TrialOutcome {
        trial_outcome(&self.validity, self.primary(), agent)
    }
}

/// A finished trial's folder, read only: everything a grader may look at without a sandbox.
#[derive(Debug, Clone, PartialEq)]
pub struct GradeInput {
    /// The trial's folder (`agent/`, `verifier/`, `result.json`).
    pub trial_dir: PathBuf,
    /// The task's folder (instruction.md, tests/); `None` when the task is not at hand.
    pub task_dir: Option<PathBuf>,
    /// The instruction the agent got.
    pub instruction: Option<String>,
    /// The agent's final answer text (the last agent message of the trajectory by default).
    pub final_answer: Option<String>,
    /// The outcome `result.json` recorded, if any: an infrastructure class from before the
    /// verifier (environment, sandbox, cancel) is carried into every re-grade.
    pub recorded_outcome: Option<TrialOutcome>,
    /// The reward key the task declares as its headline (`[metadata] reward_key`).
    pub reward_key: Option<String>,
}

impl GradeInput {
    /// Read what can be read: `instruction.md` of the task, the final answer from
    /// `agent/trajectory.json`, the outcome from `result.json`. Missing files leave `None`.
    pub fn from_trial_dir(trial_dir: &Path, task_dir: Option<&Path>) -> Self {
        let instruction =
            task_dir.and_then(|d| std::fs::read_to_string(d.join("instruction.md")).ok());
        let final_answer =
            crate::safe_fs::read_to_string(&trial_dir.join("agent").join("trajectory.json"))
                .ok()
                .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
                .and_then(|doc| final_agent_message(&doc));
        let recorded_outcome = std::fs::read_to_string(trial_dir.join("result.json"))
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .and_then(|doc| doc.get("outcome")?.as_str().and_then(TrialOutcome::parse));
        // A task.toml that does not parse leaves no declaration: the pack loader reports it.
        let reward_key = task_dir
            .and_then(|d| std::fs::read_to_string(d.join("task.toml")).ok())
            .and_then(|t| toml::from_str::<toml::Table>(&t).ok())
            .and_then(|t| {
                t.get("metadata")?
                    .get("reward_key")?
                    .as_str()
                    .map(str::to_string)
            });
        GradeInput {
            trial_dir: trial_dir.to_path_buf(),
            task_dir: task_dir.map(Path::to_path_buf),
            instruction,
            final_answer,
            recorded_outcome,
            reward_key,
        }
    }

    pub(crate) fn verifier_dir(&self) -> PathBuf {
        self.trial_dir.join("verifier")
    }

    pub(crate) fn trajectory_path(&self) -> PathBuf {
        self.trial_dir.join("agent").join("trajectory.json")
    }

    /// `<trial>/agent/timeline.db`, the agent session's timeline.
    pub fn timeline_path(&self) -> PathBuf {
        self.trial_dir.join("agent").join("timeline.db")
    }

    pub(crate) fn result_path(&self) -> PathBuf {
        self.trial_dir.join("result.json")
    }

    /// The ATIF trajectory as text, if the agent phase wrote one.
    pub fn trajectory_text(&self) -> Option<String> {
        std::fs::read_to_string(self.trajectory_path()).ok()
    }

    /// An infrastructure outcome recorded before grading that no grader can undo: the
    /// environment never came up, the sandbox was lost, the run was cancelled, the task changed.
    /// Verifier and reward classes are not in it: re-grading is how those get re-decided.
    pub fn upstream_infra(&self) -> Option<TrialOutcome> {
        self.recorded_outcome.filter(|o| {
            o.is_infrastructure()
                && !matches!(
                    o,
                    TrialOutcome::RewardMissing
                        | TrialOutcome::RewardMalformed
                        | TrialOutcome::VerifierCrashed
                        | TrialOutcome::VerifierTimeout
                )
        })
    }
}

/// The text of the last `source: agent` step of an ATIF document.
pub fn final_agent_message(doc: &serde_json::Value) -> Option<String> {
    doc.get("steps")?
        .as_array()?
        .iter()
        .rev()
        .filter(|s| s.get("source").and_then(|v| v.as_str()) == Some("agent"))
        .find_map(|s| {
            s.get("message")
                .and_then(|m| m.as_str())
                .filter(|m| !m.trim().is_empty())
                .map(str::to_string)
        })
}

/// A grader: a finished trial folder in, a typed grade out. Never fails: a problem with the
/// trial's files is an invalid grade naming the file; only construction (loading a rubric,
/// building a judge) returns errors.
#[async_trait]
pub trait Grader: Send + Sync {
    /// The spec string that rebuilds this grader (`tests`, `rubric:FILE`, `judge:ROUTE:3`).
    fn spec(&self) -> String;

    /// Grade one trial. `runner` executes commands in the trial's sandbox when it is still up;
    /// without one, criteria that need it are skipped (never failed).
    async fn grade(&self, input: &GradeInput, runner: Option<&dyn CommandRunner>) -> Grade;
}

/// The grade a grader returns when the trial never reached grading.
pub(crate) fn upstream_grade(spec: &str, input: &GradeInput) -> Option<Grade> {
    input.upstream_infra().map(|class| {
        Grade::infra(
            spec,
            class,
            format!("result.json records {class} before the verifier"),
        )
        .with_evidence(Evidence::File {
            label: "result".into(),
            path: input.result_path(),
        })
    })
}

/// The file a grade is stored in, in the trial folder: `<trial>/grade.json` for the grade made
/// at run time; re-grades go to `<trial>/grades/<file-safe spec>.json` (`grade_path`).
pub const GRADE_FILE: &str = "grade.json";

/// Why a grade file could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum GradeFileError {
    /// The file could not be written, read or parsed, or holds an inconsistent grade.
    #[error("{file}: {why}")]
    Io {
        /// The grade file's path.
        file: String,
        /// What went wrong with it.
        why: String,
    },
}

/// Where a grade lives: `grade.json` for `tests` (the run's own), else
/// `grades/<kind>-<first 16 of the grader hash>.json` when the grade names its grader by
/// content, so two rubrics typed as the same `rubric.toml` never share a file and an edited
/// rubric never overwrites the old one's results; older grades without a hash keep
/// `grades/<spec with / : @ replaced by _>.json`. Another grader never overwrites the run's own
/// grade (re-grading with `tests` recomputes it from the same files).
pub fn grade_path(trial_dir: &Path, spec: &str, grader_hash: Option<&str>) -> PathBuf {
    if spec == "tests" {
        return trial_dir.join(GRADE_FILE);
    }
    if let Some(hash) = grader_hash {
        let kind = spec.split(':').next().unwrap_or("grader");
        return trial_dir
            .join("grades")
            .join(format!("{kind}-{}.json", &hash[..16.min(hash.len())]));
    }
    let safe: String = spec
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    trial_dir.join("grades").join(format!("{safe}.json"))
}

/// Write `grade` to `grade_path(trial_dir, grade.grader())` and return that path.
pub fn write_grade(trial_dir: &Path, grade: &Grade) -> Result<PathBuf, GradeFileError> {
    let path = grade_path(trial_dir, grade.grader(), grade.grader_hash());
    let io = |why: String| GradeFileError::Io {
        file: path.display().to_string(),
        why,
    };
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| io(e.to_string()))?;
    }
    let text = serde_json::to_string_pretty(grade).map_err(|e| io(e.to_string()))?;
    std::fs::write(&path, text).map_err(|e| io(e.to_string()))?;
    Ok(path)
}

/// Read a grade written by `write_grade`.
pub fn read_grade(path: &Path) -> Result<Grade, GradeFileError> {
    let io = |why: String| GradeFileError::Io {
        file: path.display().to_string(),
        why,
    };
    let text = std::fs::read_to_string(path).map_err(|e| io(e.to_string()))?;
    let grade: Grade = serde_json::from_str(&text).map_err(|e| io(format!("not a grade: {e}")))?;
    if grade.schema != GRADE_SCHEMA {
        return Err(io(format!(
            "schema {:?} is not {GRADE_SCHEMA}",
            grade.schema
        )));
    }
    // The constructors' invariant, checked again for a file someone may have edited.
    if grade.rewards.is_some() != grade.is_valid() {
        return Err(io("rewards and validity disagree".into()));
    }
    Ok(grade)
}

/// A grade for `geode show RUN/TRIAL`: a header (grader, validity, rewards), the checks one
/// line each with the `N passed, M failed` line, notes, and evidence paths.
pub fn render_grade(grade: &Grade) -> String {
    let mut out = format!("grader: {}\n", grade.grader);
    match (&grade.validity, &grade.rewards) {
        (Validity::Invalid(c), _) => {
            out.push_str(&format!("INVALID ({}): {}\n", c.class, c.reason));
        }
        (Validity::Valid, Some(r)) => {
            let others: Vec<String> = r
                .all
                .iter()
                .filter(|(k, _)| **k != r.primary_key)
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            out.push_str(&format!("reward: {}", r.primary));
            // Say where a headline comes from when it is not the `reward` key itself.
            if r.primary_key != "reward" {
                out.push_str(&format!(" [{}]", r.primary_key));
            }
            if !others.is_empty() {
                out.push_str(&format!(" ({})", others.join(", ")));
            }
            out.push('\n');
        }
        (Validity::Valid, None) => out.push_str("reward: -\n"),
    }
    if !grade.checks.is_empty() {
        out.push_str(&crate::check::render_checks(&grade.checks));
    }
    for n in &grade.notes {
        out.push_str(&format!("note: {n}\n"));
    }
    for e in &grade.evidence {
        match e {
            Evidence::File { label, path } => {
                out.push_str(&format!("evidence: {label}: {}\n", path.display()))
            }
            Evidence::JudgeRoute { route, model_id } => {
                out.push_str(&format!("evidence: judge route {route} ({model_id})\n"))
            }
            Evidence::Text { label, text } => out.push_str(&format!("evidence: {label}: {text}\n")),
        }
    }
    out
}
