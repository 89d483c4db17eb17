//! Where a setting came from (a flag, the environment, the project's or the user's file, the
//! default) and the errors that name it. Below the layering and the MCP server tables it
//! parses, which both report through them.

use std::fmt;
use std::path::PathBuf;

/// Where an effective value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A command-line flag, by its name.
    Flag(String),
    /// An environment variable, by its name.
    Env(String),
    /// The project's configuration file.
    Project(PathBuf),
    /// The user's configuration file.
    User(PathBuf),
    /// The built-in default.
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

/// An effective value and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setting {
    /// The value, as text.
    pub value: String,
    /// Where the value came from.
    pub source: Source,
}

/// Why the configuration could not be loaded or a value is unusable.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A configuration file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A configuration file is not valid.
    #[error("{path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// A configuration file sets a key the CLI does not know.
    #[error("{path}: unknown key {key:?} (known: {known})")]
    UnknownKey {
        /// The file.
        path: PathBuf,
        /// The unknown key.
        key: String,
        /// The known keys, comma-separated.
        known: String,
    },
    /// A value that the key does not accept.
    #[error("{key} = {value:?} ({origin}): {message}")]
    Invalid {
        /// The key.
        key: String,
        /// The value as given.
        value: String,
        /// Where the value came from.
        origin: Source,
        /// What the key accepts.
        message: String,
    },
}
