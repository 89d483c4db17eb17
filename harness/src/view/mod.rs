//! `geode view`: a local web UI over a jobs folder, for looking *into* runs as researchers do
//! with `inspect view` and `harbor view`: the runs with their scores, a run's trials filtered
//! and sorted, a trial's transcript beside its timeline's pipeline decisions and its verifier's
//! checks, two runs paired task by task, crucible decisions and search lineages.
//!
//! It reads what `geode run`, `geode crucible run` and `geode search run` already write (the run
//! store, Harbor's folder layout, decision folders, lineages), and folders Harbor itself wrote,
//! and never writes: no second store. A run's trials are listed, filtered and paged in SQLite
//! from the run store's columns (a Harbor folder's `result.json` files are indexed into an
//! in-memory table of the same schema), and a trajectory is read only when its trial is opened
//! or a transcript search asks for it, so ten thousand trials stay fast.
//!
//! The server is loopback-only unless told otherwise, answers only requests that carry the
//! random token printed at start (in the URL, then as a cookie) and only its own `Host` and
//! `Origin`, and serves every asset from the binary (no CDN). Agent-written text reaches the
//! page only as text (the page never builds HTML from data, and the content security policy
//! forbids inline script).
//!
//! - [`catalog`]: which stores and Harbor folders the jobs folder holds, and its change stamp;
//! - [`harbor`]: a Harbor trial's `result.json` as a run-store row;
//! - [`runs`]: runs with their summaries, the paired comparison of two;
//! - [`filter`]: a page of a run's trials under typed filters and a sort;
//! - [`trial`]: one trial's record, transcript, timeline and verifier output;
//! - [`files`]: files of folders others wrote, read without following links or blocking;
//! - [`decisions`]: crucible decision folders and search lineages, shown key by key;
//! - [`server`]: the HTTP face (axum), its guards and the embedded assets.

pub mod catalog;
pub mod decisions;
pub mod files;
pub mod filter;
pub mod harbor;
pub mod runs;
pub mod server;
pub mod trial;

use std::path::PathBuf;

use serde_json::Value;

pub use server::{ViewOptions, Viewer};

/// The largest integer a browser's numbers hold exactly (2^53 - 1).
const JS_SAFE: u64 = (1 << 53) - 1;

/// `value` with every integer a browser would round (seeds are u64) as its decimal text, so
/// a seed on the page is the seed in the record.
pub fn exact_in_browsers(value: Value) -> Value {
    match value {
        Value::Number(n) => {
            let big = n
                .as_u64()
                .map(|u| u > JS_SAFE)
                .or_else(|| n.as_i64().map(|i| i.unsigned_abs() > JS_SAFE));
            if big == Some(true) {
                Value::String(n.to_string())
            } else {
                Value::Number(n)
            }
        }
        Value::Array(a) => Value::Array(a.into_iter().map(exact_in_browsers).collect()),
        Value::Object(m) => Value::Object(
            m.into_iter()
                .map(|(k, v)| (k, exact_in_browsers(v)))
                .collect(),
        ),
        other => other,
    }
}

/// What the viewer could not do, named by the file or field at fault.
#[derive(Debug, thiserror::Error)]
pub enum ViewError {
    /// A SQLite query over a run store (or the in-memory Harbor index) failed.
    #[error("{path}: {source}")]
    Sqlite {
        /// The database file queried.
        path: PathBuf,
        /// What SQLite reported.
        #[source]
        source: rusqlite::Error,
    },
    /// A file or folder of the jobs folder could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file or folder at fault.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// A JSON file that does not parse.
    #[error("{path}: {source}")]
    Json {
        /// The file at fault.
        path: PathBuf,
        /// The parser's error.
        #[source]
        source: serde_json::Error,
    },
    /// A run, trial, decision or search the catalog does not hold.
    #[error("{what} {name:?} is not in {jobs}")]
    NotFound {
        /// The kind of thing asked for ("run", "trial", ...).
        what: &'static str,
        /// The key or name asked for.
        name: String,
        /// The jobs folder searched.
        jobs: PathBuf,
    },
    /// A request whose parameters do not make sense (named).
    #[error("{field}: {message}")]
    BadRequest {
        /// The request parameter at fault.
        field: &'static str,
        /// Why its value was refused.
        message: String,
    },
    /// `--addr` off loopback without `--allow-remote`.
    #[error(
        "{addr} is not a loopback address: pass --allow-remote to serve it (the token still \
         guards every request)"
    )]
    NotLoopback {
        /// The address asked for.
        addr: std::net::SocketAddr,
    },
    /// The address could not be bound (in use, or not permitted).
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: std::net::SocketAddr,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// The server failed while serving (or the token could not be drawn).
    #[error("the viewer's server stopped: {0}")]
    Serve(#[source] std::io::Error),
}

impl ViewError {
    pub(crate) fn sqlite(path: &std::path::Path) -> impl Fn(rusqlite::Error) -> ViewError + '_ {
        move |source| ViewError::Sqlite {
            path: path.to_path_buf(),
            source,
        }
    }

    pub(crate) fn io(path: &std::path::Path) -> impl Fn(std::io::Error) -> ViewError + '_ {
        move |source| ViewError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_a_browser_would_round_travel_as_text() {
        let v = serde_json::json!({"seed": 9396120259312708001u64, "small": 7, "neg": -9007199254740993i64,
                                   "list": [1.5, 9007199254740991u64]});
        let out = exact_in_browsers(v);
        assert_eq!(out["seed"], "9396120259312708001");
        assert_eq!(out["neg"], "-9007199254740993");
        assert_eq!(out["small"], 7);
        assert_eq!(out["list"], serde_json::json!([1.5, 9007199254740991u64]));
    }
}
