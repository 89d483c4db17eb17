//! Where a setting came from (a flag, the environment, the project's or the user's file, the
//! default) and the errors that name it. Below the layering and the MCP server tables it
//! parses, which both report through them.

use std::fmt;
use std::path::PathBuf;

/// Where an effective value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Flag(String),
    Env(String),
    Project(PathBuf),
    User(PathBuf),
    Default,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Flag(name) => write!(f, "flag {name}"),
            Source::Env(var) => write!(f, "env {var}"),
            Source::Project(p) => write!(f, "project {}", p.display()),
            Source::User(p) => write!(f, "user {}", p.display()),
            Source::Default => f.write_str("default"),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setting {
    pub value: String,
    pub source: Source,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("{path}: unknown key {key:?} (known: {known})")]
    UnknownKey {
        path: PathBuf,
        key: String,
        known: String,
    },
    #[error("{key} = {value:?} ({origin}): {message}")]
    Invalid {
        key: String,
        value: String,
        origin: Source,
        message: String,
    },
}
