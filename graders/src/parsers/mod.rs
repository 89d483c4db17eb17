//! Verifier output turned into named checks: CTRF JSON, JUnit XML, pytest `-rA` short
//! summaries, `go test -json` event streams, TAP, and the `PASS: x` / `FAIL: x` lines of the
//! built-in pack.
//!
//! Checks explain a reward; they never make one (only the reward file does, Harbor's rule).
//! So a report that cannot be parsed is an error naming the file, which the test grader turns
//! into a note, not an infrastructure failure.

mod structured;
mod text;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::check::Check;

pub use structured::{parse_ctrf, parse_go_test_json, parse_junit};
pub use text::{parse_pass_fail_lines, parse_pytest_summary, parse_tap};

/// A report that could not be read or parsed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{file}: {why}")]
pub struct ParseError {
    pub(crate) file: String,
    pub(crate) why: String,
}

impl ParseError {
    pub(crate) fn new(file: &str, why: impl Into<String>) -> Self {
        ParseError {
            file: file.to_string(),
            why: why.into(),
        }
    }
}

/// The formats the parsers know.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[derive(strum::IntoStaticStr, strum::EnumString, strum::Display, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
pub enum ReportFormat {
    /// CTRF JSON (`ctrf.json`).
    Ctrf,
    /// JUnit XML (`junit*.xml`).
    Junit,
    /// The short test summary of `pytest -rA`.
    PytestSummary,
    /// The event stream of `go test -json`.
    GoTestJson,
    /// Test Anything Protocol output.
    Tap,
    /// The `PASS: x` / `FAIL: x` lines of the built-in pack.
    PassFailLines,
}

impl ReportFormat {
    /// The snake_case name, as in JSON.
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// Parse `text` (read from `file`, which only names it in errors) in this format.
    pub fn parse(self, text: &str, file: &str) -> Result<Vec<Check>, ParseError> {
        match self {
            ReportFormat::Ctrf => parse_ctrf(text, file),
            ReportFormat::Junit => parse_junit(text, file),
            ReportFormat::PytestSummary => parse_pytest_summary(text, file),
            ReportFormat::GoTestJson => parse_go_test_json(text, file),
            ReportFormat::Tap => parse_tap(text, file),
            ReportFormat::PassFailLines => parse_pass_fail_lines(text, file),
        }
    }
}

/// Checks and where they came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ParsedChecks {
    /// The format the checks were read in.
    pub format: ReportFormat,
    /// The file they were read from (the first, when several JUnit files were).
    pub source: PathBuf,
    /// The checks, in the report's order.
    pub checks: Vec<Check>,
}

/// Guess the format of free verifier output. Structured streams first (a `go test -json`
/// line is unmistakable), then TAP, pytest, and our own lines last since `PASS:` is generic.
pub fn sniff(text: &str) -> Option<ReportFormat> {
    let lines = || text.lines().map(str::trim_end);
    if lines().any(|l| l.starts_with('{') && l.contains("\"Action\"")) {
        return Some(ReportFormat::GoTestJson);
    }
    let tap_line = |l: &str| {
        let rest = l.strip_prefix("not ok").or_else(|| l.strip_prefix("ok"));
        rest.is_some_and(|r| r.trim_start().starts_with(|c: char| c.is_ascii_digit()))
    };
    if lines().any(|l| l.starts_with("TAP version")) || lines().any(tap_line) {
        return Some(ReportFormat::Tap);
    }
    let pytest_line = |l: &str| {
        [
            "PASSED ", "FAILED ", "ERROR ", "SKIPPED ", "XFAIL ", "XPASS ",
        ]
        .iter()
        .any(|p| l.starts_with(p))
    };
    if lines().any(|l| l.contains("short test summary info")) || lines().any(pytest_line) {
        return Some(ReportFormat::PytestSummary);
    }
    if lines().any(|l| l.starts_with("PASS: ") || l.starts_with("FAIL: ")) {
        return Some(ReportFormat::PassFailLines);
    }
    None
}

fn read(path: &Path) -> Result<String, ParseError> {
    crate::safe_fs::read_to_string(path)
        .map_err(|e| ParseError::new(&path.display().to_string(), format!("cannot read: {e}")))
}

/// Parse one file: by its name (`ctrf*.json`, `*.xml`) or by sniffing its text.
pub fn parse_file(path: &Path) -> Result<ParsedChecks, ParseError> {
    let shown = path.display().to_string();
    let text = read(path)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().to_lowercase())
        .unwrap_or_default();
    let format = if name.ends_with(".xml") {
        ReportFormat::Junit
    } else if name.starts_with("ctrf") && name.ends_with(".json") {
        ReportFormat::Ctrf
    } else {
        sniff(&text).ok_or_else(|| ParseError::new(&shown, "no known test report format"))?
    };
    Ok(ParsedChecks {
        format,
        source: path.to_path_buf(),
        checks: format.parse(&text, &shown)?,
    })
}

/// The checks a verifier left in `verifier_dir`: `ctrf.json`, then `junit*.xml`, then
/// `test-stdout.txt` by format sniffing. `Ok(None)`: nothing recognizable (not an error: many
/// verifiers only write a reward). A source that exists but does not parse is an error, so a
/// broken report is reported rather than silently replaced by a weaker source.
pub fn detect_checks(verifier_dir: &Path) -> Result<Option<ParsedChecks>, ParseError> {
    let ctrf = verifier_dir.join("ctrf.json");
    if ctrf.is_file() {
        return parse_file(&ctrf).map(Some);
    }
    let mut junit: Vec<PathBuf> = std::fs::read_dir(verifier_dir)
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| {
                    let n = p
                        .file_name()
                        .map(|n| n.to_string_lossy().to_lowercase())
                        .unwrap_or_default();
                    n.starts_with("junit") && n.ends_with(".xml") && p.is_file()
                })
                .collect()
        })
        .unwrap_or_default();
    junit.sort();
    if !junit.is_empty() {
        let mut all = Vec::new();
        for path in &junit {
            all.extend(parse_file(path)?.checks);
        }
        return Ok(Some(ParsedChecks {
            format: ReportFormat::Junit,
            source: junit[0].clone(),
            checks: all,
        }));
    }
    let stdout = verifier_dir.join("test-stdout.txt");
    if !stdout.is_file() {
        return Ok(None);
    }
    let text = read(&stdout)?;
    let Some(format) = sniff(&text) else {
        return Ok(None);
    };
    Ok(Some(ParsedChecks {
        format,
        checks: format.parse(&text, &stdout.display().to_string())?,
        source: stdout,
    }))
}
