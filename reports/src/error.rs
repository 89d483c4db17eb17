//! The one error type of the crate. Every variant names the file (run store, output file) or the
//! run at fault, so a user who gets it knows where to look.

use std::path::PathBuf;

/// Why a report could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// The run store file does not exist.
    #[error("{path}: no run store here (`geode run` writes geode.db into its jobs folder)", path = .path.display())]
    NoStore {
        /// Where the store was looked for.
        path: PathBuf,
    },

    /// SQLite failed to open or read the store.
    #[error("{path}: {source}", path = .path.display())]
    Sqlite {
        /// The store.
        path: PathBuf,
        /// SQLite's error.
        #[source]
        source: rusqlite::Error,
    },

    /// The store's schema is not the one this crate reads.
    #[error(
        "{path}: {what}; this geode-report reads {expected}",
        path = .path.display(),
        what = match .found {
            Some(f) => format!("schema {f:?}"),
            None => "not a GEODE run store (no schema in its meta table)".to_owned(),
        }
    )]
    Schema {
        /// The store.
        path: PathBuf,
        /// The schema its meta table names; `None` when it names none (not a run store).
        found: Option<String>,
        /// The schema this crate reads.
        expected: &'static str,
    },

    /// The named run is not in the store.
    #[error(
        "{path}: no run {run:?}; known runs: {known}",
        path = .path.display(),
        known = if .known.is_empty() { "(none)".to_owned() } else { .known.join(", ") }
    )]
    UnknownRun {
        /// The store.
        path: PathBuf,
        /// The run asked for.
        run: String,
        /// Every run id the store holds, sorted.
        known: Vec<String>,
    },

    /// A `--reward-key` that is empty or holds a character other than letters, digits, `_`,
    /// `-` and `.`.
    #[error("--reward-key {0:?}: a reward.json key is letters, digits, `_`, `-` and `.`")]
    BadRewardKey(String),

    /// The run has no finished trial, so nothing to report.
    #[error("{path}: run {run} has no finished trials", path = .path.display())]
    EmptyRun {
        /// The store.
        path: PathBuf,
        /// The run.
        run: String,
    },

    /// A trial row holds a value this crate cannot read (an unknown outcome, a wrong type).
    #[error("{path}: run {run}, trial {trial}: {message}", path = .path.display())]
    BadTrial {
        /// The store.
        path: PathBuf,
        /// The run.
        run: String,
        /// The trial's name, `?` when it could not be read.
        trial: String,
        /// What is wrong with the row.
        message: String,
    },

    /// One run id named twice, in one store or in two.
    #[error("run {run} is named twice ({first} and {second})", first = .first.display(), second = .second.display())]
    DuplicateRun {
        /// The run id.
        run: String,
        /// The store of its first mention.
        first: PathBuf,
        /// The store of its second mention.
        second: PathBuf,
    },

    /// A campaign's `decision.json` that does not parse as a decision record.
    #[error("{path}: not a decision record: {message}", path = .path.display())]
    BadDecision {
        /// The file.
        path: PathBuf,
        /// The parse error.
        message: String,
    },

    /// A polars operation failed.
    #[error("{context}: {source}")]
    Polars {
        /// What was being done, and on which store(s).
        context: String,
        /// Polars' error.
        #[source]
        source: polars::error::PolarsError,
    },

    /// Reading or writing a file failed.
    #[error("{path}: {source}", path = .path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
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
