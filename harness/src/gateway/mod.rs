//! The model gateway of one trial: the one endpoint an agent under test reaches for its model.
//!
//! A third-party agent (Claude Code, Codex CLI, mini-swe-agent, any command) speaks one of three
//! wire formats: Anthropic Messages (`POST /v1/messages`), OpenAI Responses (`POST
//! /v1/responses`) or Chat Completions (`POST /v1/chat/completions`), streamed or not. The
//! gateway answers all three on loopback TCP and/or a unix socket (a no-network sandbox reaches
//! it through a bind-mounted socket), turns each call into the runtime's typed `ModelRequest`
//! (the agent's own tools become a plan the route's model can call by name), asks the route
//! GEODE resolved (a provider adapter or an embedded model: `scripted`, `replay`, a cassette),
//! and answers in the caller's format. So the agent never holds the real API key (it gets a
//! per-trial token), every call is recorded the same way whatever the agent
//! (`records.rs`: request, reply, tokens, cost, latency, status, one JSONL line each), the ATIF
//! trajectory is built from those records alone (`trajectory.rs`, no per-agent log parser), and
//! the trial's call, token and cost budgets hold (`records::Budgets`).
//!
//! Layout: `call.rs` (the format-neutral call and the model run behind it), one file per wire
//! format (`anthropic.rs`, `chat.rs`, `responses.rs`: request in, reply and SSE events out,
//! errors in the format's own shape), `server.rs` (axum: routes, the token check, streaming),
//! `records.rs`, `trajectory.rs`. This module is the public face: [`start`] one gateway, read its
//! [`Gateway::url`] / [`Gateway::socket`] and [`Gateway::token`], [`Gateway::finish`] it for the
//! records.

mod anthropic;
mod call;
mod chat;
pub mod records;
mod responses;
mod server;
pub mod trajectory;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use geode_runtime::model::Model;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use records::{Budgets, CallRecord, CallStatus};

/// Where a trial keeps its gateway's records, relative to the trial folder.
pub const RECORD_FILE: &str = "agent/gateway.jsonl";

/// Why a gateway could not start or end cleanly.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// Neither a TCP address nor a unix socket was asked for.
    #[error("gateway: no listener asked for (give a loopback address, a unix socket or both)")]
    NoListener,
    /// A TCP address off loopback: the per-trial token is the only guard, so the gateway
    /// stays on this machine.
    #[error("gateway: {0} is not a loopback address")]
    NotLoopback(SocketAddr),
    /// A listener could not be bound.
    #[error("gateway: cannot listen on {what}: {source}")]
    Bind {
        /// The address or socket path.
        what: String,
        /// Why.
        source: std::io::Error,
    },
    /// The record file could not be opened or written.
    #[error("gateway record {path}: {source}")]
    Record {
        /// The record file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The server task ended in a panic or an I/O error.
    #[error("gateway server: {0}")]
    Server(String),
}

/// Where the gateway listens. At least one of the three.
#[derive(Debug, Default)]
pub struct Listen {
    /// A loopback address (port 0 picks a free port).
    pub tcp: Option<SocketAddr>,
    /// A unix socket path, created (0600) for a sandbox to have bind-mounted; an old socket
    /// there is replaced.
    pub unix: Option<PathBuf>,
    /// A listener made elsewhere: on a sandbox's own loopback (`Sandbox::listen_inside`), the
    /// one address of the host's its processes reach.
    pub inside: Option<std::net::TcpListener>,
}

impl Listen {
    /// A free port on 127.0.0.1.
    pub fn loopback() -> Self {
        Listen {
            tcp: Some(SocketAddr::from(([127, 0, 0, 1], 0))),
            unix: None,
            inside: None,
        }
    }
}

/// What one trial's gateway is made of.
pub struct GatewayConfig {
    /// The route's model: every call goes to it.
    pub model: Arc<dyn Model>,
    /// The model's name as the agent sees it (`/v1/models`, each reply's `model`).
    pub model_name: String,
    /// The trial's budgets.
    pub budgets: Budgets,
    /// The JSONL file every call is appended to (see [`RECORD_FILE`]).
    pub record_file: PathBuf,
    /// Where to listen.
    pub listen: Listen,
    /// Texts that must never reach the agent (the route's real API key): cut from every error
    /// message the gateway sends and records.
    pub secrets: Vec<String>,
}

/// A running gateway. Dropping it without [`Gateway::finish`] stops the server too.
pub struct Gateway {
    addr: Option<SocketAddr>,
    socket: Option<PathBuf>,
    token: String,
    shared: Arc<server::Shared>,
    stop: CancellationToken,
    tasks: Vec<JoinHandle<std::io::Result<()>>>,
}

/// Start a gateway for one trial: bind its listeners, make its token, serve until finished.
pub async fn start(config: GatewayConfig) -> Result<Gateway, GatewayError> {
    if config.listen.tcp.is_none() && config.listen.unix.is_none() && config.listen.inside.is_none()
    {
        return Err(GatewayError::NoListener);
    }
    let token = new_token();
    let ledger = records::Ledger::open(&config.record_file, config.budgets)?;
    let shared = Arc::new(server::Shared {
        model: config.model,
        model_name: config.model_name,
        token: token.clone(),
        ledger,
        secrets: config
            .secrets
            .into_iter()
            .filter(|s| !s.is_empty())
            .collect(),
        calls: tokio_util::task::TaskTracker::new(),
    });
    let stop = CancellationToken::new();
    let mut tasks = Vec::new();
    let mut addr = None;
    if let Some(want) = config.listen.tcp {
        if !want.ip().is_loopback() {
            return Err(GatewayError::NotLoopback(want));
        }
        let listener = tokio::net::TcpListener::bind(want)
            .await
            .map_err(|source| GatewayError::Bind {
                what: want.to_string(),
                source,
            })?;
        addr = Some(listener.local_addr().map_err(|source| GatewayError::Bind {
            what: want.to_string(),
            source,
        })?);
        tasks.push(server::serve_tcp(listener, shared.clone(), stop.clone()));
    }
    if let Some(inside) = config.listen.inside {
        let bind = |source| GatewayError::Bind {
            what: "the sandbox's loopback".into(),
            source,
        };
        inside.set_nonblocking(true).map_err(bind)?;
        let listener = tokio::net::TcpListener::from_std(inside).map_err(bind)?;
        tasks.push(server::serve_tcp(listener, shared.clone(), stop.clone()));
    }
    let socket = config.listen.unix;
    if let Some(path) = &socket {
        let listener = bind_unix(path)?;
        tasks.push(server::serve_unix(listener, shared.clone(), stop.clone()));
    }
    Ok(Gateway {
        addr,
        socket,
        token,
        shared,
        stop,
        tasks,
    })
}

/// A unix listener at `path`, 0600: only this user (the sandbox's mapped root) may connect.
fn bind_unix(path: &Path) -> Result<tokio::net::UnixListener, GatewayError> {
    use std::os::unix::fs::PermissionsExt;
    let err = |source| GatewayError::Bind {
        what: path.display().to_string(),
        source,
    };
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(err(e)),
        _ => {}
    }
    let listener = tokio::net::UnixListener::bind(path).map_err(err)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(err)?;
    Ok(listener)
}

/// 32 random bytes in hex behind a prefix that says what the token is when it shows up in a
/// log.
fn new_token() -> String {
    let bytes: [u8; 32] = rand::random();
    format!("geode-gw-{}", hex::encode(bytes))
}

impl Gateway {
    /// The base URL on loopback (`http://127.0.0.1:PORT`), when listening on TCP. Anthropic
    /// clients take it as is; OpenAI clients take it with `/v1`.
    pub fn url(&self) -> Option<String> {
        self.addr.map(|a| format!("http://{a}"))
    }

    /// The loopback address, when listening on TCP.
    pub fn addr(&self) -> Option<SocketAddr> {
        self.addr
    }

    /// The unix socket, when listening on one.
    pub fn socket(&self) -> Option<&Path> {
        self.socket.as_deref()
    }

    /// The per-trial token the agent authenticates with (`x-api-key` or `Authorization:
    /// Bearer`): never the route's real key.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The records so far, in the order the calls ended.
    pub fn records(&self) -> Vec<CallRecord> {
        self.shared.ledger.records()
    }

    /// Stop taking calls, let the calls in flight end, remove the socket, and hand back every
    /// record.
    pub async fn finish(mut self) -> Result<Vec<CallRecord>, GatewayError> {
        self.stop.cancel();
        for task in self.tasks.drain(..) {
            match task.await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(GatewayError::Server(e.to_string())),
                Err(e) => return Err(GatewayError::Server(e.to_string())),
            }
        }
        self.shared.calls.close();
        self.shared.calls.wait().await;
        if let Some(path) = &self.socket {
            let _ = std::fs::remove_file(path);
        }
        Ok(self.shared.ledger.records())
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}
