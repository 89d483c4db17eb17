//! Persistent records, one store per concern: the append-only timeline (what happened), the
//! checkpoint (what to bring back), effect receipts (which effects started and how they ended)
//! and the evidence ledger (masked diagnostic rows). They never share a transaction.

pub mod checkpoint;
pub mod effects;
pub mod files;
pub mod ledger;
pub mod receipts;
pub mod rewind;
pub mod timeline;

/// A store could not be opened, read or written. Every variant names the file at fault.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// SQLite refused to open, read or write a database.
    #[error("{path}: {source}")]
    Sqlite {
        /// The database file.
        path: String,
        /// SQLite's error.
        #[source]
        source: rusqlite::Error,
    },
    /// A row (or a message a state file names) is missing or does not parse.
    #[error("{path}: row {row}: {message}")]
    Corrupt {
        /// The database file.
        path: String,
        /// The row at fault: its id, or a message's seq; 0 when unknown.
        row: i64,
        /// What is wrong with it.
        message: String,
    },
    /// A file or directory could not be read, written, synced or locked.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory at fault.
        path: String,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// A JSON file that does not parse or does not have the expected shape.
    #[error("{path}: {message}")]
    Json {
        /// The file at fault.
        path: String,
        /// What is wrong with it.
        message: String,
    },
    /// A file or record that should be there is not.
    #[error("{path}: {message}")]
    NotFound {
        /// Where it was looked for.
        path: String,
        /// What is missing.
        message: String,
    },
    /// A session whose checkpoint was never committed (started, then left before its first
    /// turn was saved): nothing to resume, and nothing to list.
    #[error("{path}: no state file: the checkpoint was never committed")]
    NotCommitted {
        /// The state file that is missing.
        path: String,
    },
    /// The request contradicts what the store holds (an existing session, a status change the
    /// status machine forbids, a receipt already settled, a session in use).
    #[error("{path}: {message}")]
    Refused {
        /// The file, directory or database the request was about.
        path: String,
        /// Why it was refused.
        message: String,
    },
}

impl StoreError {
    pub(crate) fn sqlite(path: &std::path::Path, source: rusqlite::Error) -> Self {
        StoreError::Sqlite {
            path: path.display().to_string(),
            source,
        }
    }

    pub(crate) fn io(path: &std::path::Path, source: std::io::Error) -> Self {
        StoreError::Io {
            path: path.display().to_string(),
            source,
        }
    }

    pub(crate) fn refused(path: &std::path::Path, message: impl Into<String>) -> Self {
        StoreError::Refused {
            path: path.display().to_string(),
            message: message.into(),
        }
    }
}
