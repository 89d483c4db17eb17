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
//! - [`query`]: runs with their summaries, a run's trial page, the paired comparison;
//! - [`trial`]: one trial's record, transcript, timeline and verifier output;
//! - [`decisions`]: crucible decision folders and search lineages, shown key by key;
//! - [`server`]: the HTTP face (axum), its guards and the embedded assets.

pub mod catalog;
pub mod decisions;
pub mod harbor;
pub mod query;
pub mod server;
pub mod trial;

use std::path::PathBuf;

pub use server::{ViewOptions, Viewer};

/// What the viewer could not do, named by the file or field at fault.
#[derive(Debug, thiserror::Error)]
pub enum ViewError {
    #[error("{path}: {source}")]
    Sqlite {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Json {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    /// A run, trial, decision or search the catalog does not hold.
    #[error("{what} {name:?} is not in {jobs}")]
    NotFound {
        what: &'static str,
        name: String,
        jobs: PathBuf,
    },
    /// A request whose parameters do not make sense (named).
    #[error("{field}: {message}")]
    BadRequest {
        field: &'static str,
        message: String,
    },
    /// `--addr` off loopback without `--allow-remote`.
    #[error(
        "{addr} is not a loopback address: pass --allow-remote to serve it (the token still \
         guards every request)"
    )]
    NotLoopback { addr: std::net::SocketAddr },
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
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
