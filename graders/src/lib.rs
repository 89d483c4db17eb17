#![warn(missing_docs)]
//! Graders: what a trial's verifier left behind, turned into rewards and a validity class.
//!
//! A benchmark number is only worth its validity: an infrastructure failure must never count as
//! an agent failure, so every trial ends in exactly one `TrialOutcome`, and the infrastructure
//! ones are excluded from scores (and counted separately). Every grader is a pure function of a
//! finished trial's folder (plus, for rubric commands, an optional sandbox `CommandRunner`), so
//! `geode grade RUN` can re-grade stored trials without running an agent again.

// Libraries do not print: they return values or emit events, and only the binaries decide
// what reaches stdout and stderr.
#![deny(clippy::print_stdout, clippy::print_stderr)]

pub mod check;
pub mod compare;
#[cfg(test)]
mod enum_names;
pub mod grade;
pub mod integrity;
pub mod judge;
pub mod outcome;
pub mod parsers;
pub mod reward;
pub mod rubric;
pub mod run_store;
pub mod safe_fs;
pub mod spec;
pub mod summary;
pub mod tests_grader;
pub mod validity;

pub use check::render_checks;
pub use grade::{
    AgentEnd, Check, CheckStatus, CommandOutput, CommandRunner, Evidence, GRADE_FILE, Grade,
    GradeFileError, GradeInput, GradeRewards, Grader, InfraCause, PASS_THRESHOLD, Validity,
    grade_path, read_grade, render_grade, trial_outcome, write_grade,
};
pub use integrity::{
    IntegrityError, IntegrityKind, IntegrityOptions, IntegrityReport, IntegritySignal,
    derive_integrity, integrity_rates,
};
pub use judge::{JudgeError, JudgeGrader, Votes};
pub use outcome::TrialOutcome;
pub use parsers::{ParseError, ParsedChecks, ReportFormat, detect_checks};
pub use reward::{RewardError, Rewards, read_rewards};
pub use rubric::{Rubric, RubricError, RubricGrader};
pub use spec::{GraderSpec, SpecError, build_grader, grader_hash};
pub use summary::{Scores, TaskPoint, TaskTally, scores, tally};
pub use tests_grader::TestScriptGrader;
pub use validity::{TaskFlag, TaskTrials, TaskValidity, ValidityReport};
