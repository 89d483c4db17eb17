//! Drivers that serve sessions to other processes: the serve daemon and its thin-client
//! protocol (`ipc`, `protocol`, `connection`), and the slash commands both the daemon and the
//! in-process REPL answer (`commands`).

pub mod attach;
pub mod channel;
pub mod commands;
pub mod connection;
pub mod ipc;
pub mod protocol;
mod resume;

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::agent::ModelSwitch;
use crate::ids::SessionId;
use crate::model::effort::Effort;
use crate::policy::SessionMode;
use crate::session::lanes::LaneQueue;
use crate::session::{SessionConfig, SessionError};

/// Why a server could not start, build a session or answer a request.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The socket path already accepts connections: another daemon serves it.
    #[error("a geode daemon is already answering on {0}")]
    AlreadyRunning(std::path::PathBuf),
    /// Creating, removing or binding the socket (or its directory) failed.
    #[error("socket {path}: {source}")]
    Socket {
        /// The socket file or directory at fault.
        path: std::path::PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// Creating or resuming the session failed.
    #[error(transparent)]
    Session(#[from] SessionError),
    /// The driver could not assemble a session (model route, workspace, config).
    #[error("{0}")]
    Setup(String),
    /// `/resume ARG` names no session, or more than one.
    #[error("{0}")]
    NoSuchSession(String),
}

/// How the driver (the `geode` binary) builds sessions: the model, workspace, hooks,
/// checkpoint and policy of its configuration. The server adds the approver and the events.
pub trait SessionFactory: Send + Sync {
    /// The config of a fresh session: for a new connection and for `/clear`.
    fn new_session(&self) -> Result<SessionConfig, ServerError>;
    /// The config of a checkpointed session to restore.
    fn resume(&self, id: &SessionId) -> Result<SessionConfig, ServerError>;
    /// One line per configured hook, for `/hooks`.
    fn describe_hooks(&self) -> String {
        "no hooks configured".into()
    }
    /// The `limit` most recently active sessions one may resume, newest first, for `/resume`
    /// without an id and `/resume N`; `None` when this server keeps no list.
    fn recent_sessions(&self, limit: usize) -> Option<Vec<protocol::SessionEntry>> {
        let _ = limit;
        None
    }
    /// One line per skill, for `/skills`.
    fn describe_skills(&self) -> String {
        "no skills".into()
    }
    /// One line per MCP server, for `/mcp`.
    fn describe_mcp(&self) -> String {
        "no MCP servers configured".into()
    }
    /// The MCP tools callable now; a session takes those it lacks before each turn (servers
    /// connect in the background, so some arrive after the session started).
    fn mcp_tools(&self) -> Vec<crate::tools::plan::BoundTool> {
        Vec::new()
    }
    /// The model of `route` at `effort`, for `/model` and `/effort` mid-session.
    fn switch_model(
        &self,
        route: &str,
        effort: Option<Effort>,
    ) -> Result<ModelSwitch, ServerError> {
        let _ = effort;
        Err(ServerError::Setup(format!(
            "this server cannot build models, so it cannot switch to {route}"
        )))
    }
}

/// What every connection of one server shares. Immutable but for the lanes, which lock
/// internally with async-native primitives.
pub struct Shared {
    pub(crate) lanes: LaneQueue,
    pub(crate) factory: Arc<dyn SessionFactory>,
    pub(crate) approval_timeout: Duration,
    /// Cancelled when the daemon drains: connections finish their turn and close.
    pub draining: CancellationToken,
    pub(crate) mode: SessionMode,
}

impl Shared {
    /// The state of a server whose sessions come from `factory`: at most `global_lanes` turns
    /// (at least one) run at once, an approval unanswered for `approval_timeout` is denied, and
    /// `mode` is the session mode it reports.
    pub fn new(
        factory: Arc<dyn SessionFactory>,
        global_lanes: usize,
        approval_timeout: Duration,
        mode: SessionMode,
    ) -> Self {
        Shared {
            lanes: LaneQueue::new(global_lanes),
            factory,
            approval_timeout,
            draining: CancellationToken::new(),
            mode,
        }
    }
}
