//! MCP (Model Context Protocol), both ways, on the official Rust SDK (`rmcp`).
//!
//! - `server` + `http`: GEODE as a tool of an external MCP host. One tool, `run_agent`, a
//!   separately built headless one-shot session (the headless deny list as is), over stdio or
//!   streamable HTTP (loopback freely; any other address only with a bearer token).
//! - `client`: the servers of `[mcp.servers.*]` (`settings`) become tools of a session,
//!   `mcp__<server>__<tool>`. The user's config file is always read; a project's
//!   `.geode/config.toml` only after `geode trust` (`trust`). A tool is callable only when its
//!   server declares a resource policy, and every call passes the session's pipeline (approval
//!   before the call starts). Each server connects in the background and is restarted with
//!   backoff when it exits (`supervisor`); `/mcp` shows where each stands.

#[cfg(feature = "mcp")]
pub mod client;
#[cfg(feature = "mcp")]
mod connection;
#[cfg(feature = "mcp")]
pub mod http;
#[cfg(feature = "mcp")]
pub mod server;
pub mod settings;
#[cfg(feature = "mcp")]
pub mod supervisor;
pub mod trust;

#[cfg(feature = "mcp")]
pub use client::McpManager;
pub use settings::{McpPolicy, McpServerConfig, McpSettings, McpTransport, ServerOrigin};
pub use trust::{TrustState, TrustStore};

/// Why the MCP server could not start or the trust store could not be used.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    /// The trust store could not be read or written.
    #[error("trust store: {0}")]
    Trust(String),
    /// A non-loopback address without a bearer token.
    #[error(
        "refusing to serve MCP on {addr}: it is not a loopback address, so every request must \
         carry a bearer token; pass --token TOKEN (or set GEODE_MCP_TOKEN), or bind 127.0.0.1"
    )]
    NonLoopbackWithoutToken {
        /// The address asked for.
        addr: std::net::SocketAddr,
    },
    /// The listening address could not be bound.
    #[error("cannot bind {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: std::net::SocketAddr,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The server failed while serving.
    #[error("MCP server: {0}")]
    Serve(#[source] crate::error_chain::BoxError),
}
