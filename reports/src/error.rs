//! The one error type of the crate. Every variant names the file (run store, output file) or the
//! run at fault, so a user who gets it knows where to look.

use std::path::PathBuf;

/// Why a report could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("{path}: no run store here (`geode run` writes geode.db into its jobs folder)", path = .path.display())]
    NoStore { path: PathBuf },

    #[error("{path}: {source}", path = .path.display())]
    Sqlite {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },

    #[error(
        "{path}: {what}; this geode-report reads {expected}",
        path = .path.display(),
        what = match .found {
            Some(f) => format!("schema {f:?}"),
            None => "not a GEODE run store (no schema in its meta table)".to_owned(),
        }
    )]
    Schema {
        path: PathBuf,
        found: Option<String>,
        expected: &'static str,
    },

    #[error(
        "{path}: no run {run:?}; known runs: {known}",
        path = .path.display(),
        known = if .known.is_empty() { "(none)".to_owned() } else { .known.join(", ") }
    )]
    UnknownRun {
        path: PathBuf,
        run: String,
        known: Vec<String>,
    },

    #[error("--reward-key {0:?}: a reward.json key is letters, digits, `_`, `-` and `.`")]
    BadRewardKey(String),

    #[error("{path}: run {run} has no finished trials", path = .path.display())]
    EmptyRun { path: PathBuf, run: String },

    #[error("{path}: run {run}, trial {trial}: {message}", path = .path.display())]
    BadTrial {
        path: PathBuf,
        run: String,
        trial: String,
        message: String,
    },

    #[error("run {run} is named twice ({first} and {second})", first = .first.display(), second = .second.display())]
    DuplicateRun {
        run: String,
        first: PathBuf,
        second: PathBuf,
    },

    #[error("{path}: not a decision record: {message}", path = .path.display())]
    BadDecision { path: PathBuf, message: String },

    #[error("{context}: {source}")]
    Polars {
        context: String,
        #[source]
        source: polars::error::PolarsError,
    },

    #[error("{path}: {source}", path = .path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl ReportError {
    /// A polars error, with what we were doing and on which store(s).
    pub(crate) fn polars(
        context: impl Into<String>,
    ) -> impl FnOnce(polars::error::PolarsError) -> Self {
        let context = context.into();
        move |source| ReportError::Polars { context, source }
    }

    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| ReportError::Io { path, source }
    }
}
