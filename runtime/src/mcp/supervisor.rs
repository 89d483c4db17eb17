//! One task per configured MCP server keeps it connected in the background: the first
//! connect never holds a prompt back, and a server that exits (or never answers) is started
//! again after a bounded exponential backoff.
//!
//! What the task learns goes into the server's `ServerSlot`, which `/mcp` reads and the tool
//! handlers call through. The handlers hold the slot, not a connection, so a restart changes
//! no plan: a call while the server is down is a tool error naming its state, never a hang.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rmcp::{Peer, RoleClient};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::connection::{CONNECT_TIMEOUT, Handshake, ListedTool, LivePeer, bind_tool, connect};
use super::settings::McpServerConfig;
use crate::tools::plan::BoundTool;

/// The first retry waits this long; each further one twice as long, up to `BACKOFF_MAX`.
pub const BACKOFF_START: Duration = Duration::from_millis(500);
/// The longest wait between two attempts.
pub const BACKOFF_MAX: Duration = Duration::from_secs(60);
/// A connection that lived this long counts as healthy: the next failure starts the backoff
/// over, so one crash a day is retried at once rather than after the longest wait.
const HEALTHY_AFTER: Duration = Duration::from_secs(60);

/// The wait before retry number `attempt` (0 is the first retry): doubling, capped. No
/// jitter: each process has its own servers, so there is no herd to spread.
pub fn backoff(attempt: u32) -> Duration {
    BACKOFF_START
        .checked_mul(1u32.checked_shl(attempt.min(16)).unwrap_or(u32::MAX))
        .map_or(BACKOFF_MAX, |d| d.min(BACKOFF_MAX))
}

/// Where a configured server stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerState {
    /// The first attempt is under way.
    Connecting,
    /// Up; `tools` is how many tools it offered.
    Connected {
        /// How many tools the server offered.
        tools: usize,
    },
    /// The last attempt failed or the server exited; the next attempt starts at `retry_at`.
    Failed {
        /// Why the attempt failed or how the server exited.
        reason: String,
        /// When the next attempt starts.
        retry_at: Instant,
    },
    /// An attempt after a failure is under way.
    Restarting,
    /// A project server of an untrusted project: never started.
    Untrusted(String),
}

impl std::fmt::Display for ServerState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServerState::Connecting => write!(f, "connecting"),
            ServerState::Connected { tools: 1 } => write!(f, "connected (1 tool)"),
            ServerState::Connected { tools } => write!(f, "connected ({tools} tools)"),
            ServerState::Failed { reason, retry_at } => {
                let left = retry_at.saturating_duration_since(Instant::now());
                write!(
                    f,
                    "failed: {reason}, retry in {}s",
                    left.as_secs_f64().ceil()
                )
            }
            ServerState::Restarting => write!(f, "restarting"),
            ServerState::Untrusted(why) => write!(f, "untrusted: {why}"),
        }
    }
}

impl ServerState {
    /// Whether an attempt has finished (connected, failed) or none will be made.
    pub fn settled(&self) -> bool {
        !matches!(self, ServerState::Connecting | ServerState::Restarting)
    }
}

/// What is known of one server now.
struct Status {
    state: ServerState,
    tools: Vec<ListedTool>,
    bound: Vec<BoundTool>,
    peer: Option<Peer<RoleClient>>,
}

/// One configured server: its config, its state and tools, and the connection its tool
/// handlers call through. Shared by the supervisor task, the manager and the handlers.
pub struct ServerSlot {
    /// The server's configuration, as loaded.
    pub config: McpServerConfig,
    status: Mutex<Status>,
    /// Bumped on every change of state, for those who wait for one (`McpManager::start`).
    changes: watch::Sender<u64>,
}

impl ServerSlot {
    pub(super) fn new(config: McpServerConfig, state: ServerState) -> Arc<Self> {
        Arc::new(ServerSlot {
            config,
            status: Mutex::new(Status {
                state,
                tools: Vec::new(),
                bound: Vec::new(),
                peer: None,
            }),
            changes: watch::channel(0).0,
        })
    }

    fn lock(&self) -> MutexGuard<'_, Status> {
        // A poisoned lock only means a panic elsewhere mid-update; the data is still whole.
        self.status.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Where the server stands now.
    pub fn state(&self) -> ServerState {
        self.lock().state.clone()
    }

    /// The tools of the last successful listing (kept while the server is down).
    pub fn tools(&self) -> Vec<ListedTool> {
        self.lock().tools.clone()
    }

    /// The callable tools of the last successful listing.
    pub fn bound(&self) -> Vec<BoundTool> {
        self.lock().bound.clone()
    }

    /// The live connection, or why there is none (for the model to read).
    fn live_peer(&self) -> Result<Peer<RoleClient>, String> {
        let status = self.lock();
        match &status.peer {
            Some(peer) => Ok(peer.clone()),
            None => Err(format!(
                "MCP server {} is not connected ({}); try again later or go on without it",
                self.config.name, status.state
            )),
        }
    }

    fn set(&self, update: impl FnOnce(&mut Status)) {
        update(&mut self.lock());
        self.changes.send_modify(|n| *n += 1);
    }

    /// Wait until the state is settled (`ServerState::settled`).
    pub async fn settled(&self) {
        let mut rx = self.changes.subscribe();
        while !self.state().settled() {
            if rx.changed().await.is_err() {
                return;
            }
        }
    }
}

impl LivePeer for ServerSlot {
    fn peer(&self) -> Result<Peer<RoleClient>, String> {
        self.live_peer()
    }
}

/// Keep `slot`'s server connected until `stop` is cancelled. Dropping the task (at `stop` or
/// when the runtime ends) drops the connection and the server's process group.
pub(super) async fn supervise(slot: Arc<ServerSlot>, stop: CancellationToken) {
    let name = slot.config.name.clone();
    // The tools bound below reach the connection through this, weakly: the slot owns them.
    let weak_slot = Arc::downgrade(&slot);
    let live: std::sync::Weak<dyn LivePeer> = weak_slot;
    let mut attempt: u32 = 0;
    let mut handshake = Handshake::Discover;
    loop {
        let result = tokio::select! {
            r = tokio::time::timeout(CONNECT_TIMEOUT, connect(&slot.config, &mut handshake)) => r,
            _ = stop.cancelled() => return,
        };
        let reason = match result {
            Err(_) => format!(
                "no answer to the handshake or tools/list within {}s",
                CONNECT_TIMEOUT.as_secs()
            ),
            Ok(Err(why)) => why,
            Ok(Ok((service, listed, group))) => {
                let peer = service.peer().clone();
                let (tools, bound): (Vec<_>, Vec<_>) = listed
                    .into_iter()
                    .map(|t| bind_tool(&slot.config, live.clone(), t))
                    .unzip();
                let offered = tools.len();
                slot.set(|s| {
                    s.state = ServerState::Connected { tools: offered };
                    s.tools = tools;
                    s.bound = bound.into_iter().flatten().collect();
                    s.peer = Some(peer);
                });
                let up = Instant::now();
                let quit = tokio::select! {
                    q = service.waiting() => q,
                    _ = stop.cancelled() => return,
                };
                // Whatever the server left running goes with it before a new one starts.
                drop(group);
                slot.set(|s| s.peer = None);
                if up.elapsed() >= HEALTHY_AFTER {
                    attempt = 0;
                }
                match quit {
                    Ok(q) => format!("the server went away ({q:?})"),
                    Err(e) => format!("the connection task failed: {e}"),
                }
            }
        };
        let wait = backoff(attempt);
        attempt = attempt.saturating_add(1);
        tracing::warn!(
            "MCP server {name}: {reason}; retrying in {:.1}s",
            wait.as_secs_f64()
        );
        slot.set(|s| {
            s.state = ServerState::Failed {
                reason,
                retry_at: Instant::now() + wait,
            }
        });
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.cancelled() => return,
        }
        slot.set(|s| s.state = ServerState::Restarting);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_its_cap() {
        assert_eq!(backoff(0), Duration::from_millis(500));
        assert_eq!(backoff(1), Duration::from_secs(1));
        assert_eq!(backoff(3), Duration::from_secs(4));
        assert_eq!(backoff(7), BACKOFF_MAX);
        assert_eq!(backoff(u32::MAX), BACKOFF_MAX);
    }

    #[test]
    fn states_read_as_the_mcp_command_shows_them() {
        assert_eq!(
            ServerState::Connected { tools: 2 }.to_string(),
            "connected (2 tools)"
        );
        let failed = ServerState::Failed {
            reason: "exited".into(),
            retry_at: Instant::now() + Duration::from_millis(2500),
        };
        assert_eq!(failed.to_string(), "failed: exited, retry in 3s");
        assert!(!ServerState::Restarting.settled());
        assert!(failed.settled());
    }
}
