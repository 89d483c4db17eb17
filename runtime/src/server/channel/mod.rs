//! Messaging channels of the serve daemon: a loopback HTTP webhook whose messages become
//! DAEMON turns.
//!
//! The operator binds channels in a TOML file (`geode.channels.v1`, below). Only bound channels
//! are served: a message to an unknown channel (404) or with a wrong token (401) builds nothing,
//! so it leaves no session, checkpoint or timeline row behind.
//!
//! ```toml
//! schema = "geode.channels.v1"     # optional
//! [channels.ops]
//! token = "s3cret"                  # requests carry `Authorization: Bearer s3cret`
//! tools = ["read_file", "list_dir"] # the only tools of the channel's sessions
//! time_budget_secs = 60             # wall-clock budget of one turn
//! allow_writes = false              # unattended WRITE calls (default: refused)
//! computer_use = false              # the operator's computer-use switch (default: off)
//! ```
//!
//! The file holds secrets: it is refused when its mode gives group or others any access.
//!
//! `POST /channels/<name>/messages` with `{"thread", "text", "sender"?}` runs one turn and
//! answers `{session_id, text, rounds, tool_calls, termination_reason}`. A thread keeps one
//! session id, derived from (channel, thread), and one checkpoint chain: the first message
//! creates a durable session, every later one resumes it by id through `resume_session`, the
//! same path before and after a daemon restart. Turns of one thread run one at a time (the
//! session lane of the id); threads run concurrently up to the global lane.
//!
//! Channel sessions are DAEMON sessions built from scratch, never from the daemon's own
//! permissions: `SessionPolicy::for_mode(Daemon)`, the `NoHuman` approver, the channel's tool
//! allow-list enforced by the pipeline, its time budget on the turn's guards.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

use super::{ServerError, Shared};
use crate::ids::{SessionId, canonical_sha256};
use crate::policy::{COMPUTER_TOOL, SafetyLevel, SessionMode, SessionPolicy};
use crate::session::{SessionError, create_session, resume_session};
use crate::store::checkpoint::session_dir;
use crate::tools::approval::NoHuman;

/// The schema of the channels file.
pub const CHANNELS_SCHEMA: &str = "geode.channels.v1";

/// A turn that overruns its time budget by this much is cancelled (the guards stop it at the
/// budget between rounds; this bounds a model call that hangs).
const HARD_STOP_GRACE: Duration = Duration::from_secs(10);

/// Longest thread key accepted.
const MAX_THREAD_LEN: usize = 256;

mod webhook;
pub use webhook::Webhook;

/// Why channels could not be loaded or served, or a message not run.
#[derive(Debug, thiserror::Error)]
pub enum ChannelError {
    /// The channels file or its metadata could not be read.
    #[error("channels file {path}: {source}")]
    Read {
        /// The channels file.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// The channels file gives group or others some access.
    #[error(
        "channels file {path} has mode {mode:03o}: it holds channel tokens, so group and others \
         must have no access (chmod 600 {path})"
    )]
    Exposed {
        /// The channels file.
        path: PathBuf,
        /// Its permission bits, masked with `0o777`.
        mode: u32,
    },
    /// The channels file does not parse, or fails a check (schema, name, token, budget, tools).
    #[error("channels file {path}: {message}")]
    Invalid {
        /// The channels file.
        path: PathBuf,
        /// What is wrong, naming the field at fault.
        message: String,
    },
    /// The webhook address is not a loopback address.
    #[error("webhook address {0}: only loopback addresses (127.0.0.1, ::1) may be bound")]
    NotLoopback(SocketAddr),
    /// The webhook listener could not be bound.
    #[error("webhook address {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// The daemon is draining: the message starts no turn (the webhook answers 503).
    #[error("the daemon is draining: no new turns")]
    Draining,
    /// The factory could not build the config of the thread's session.
    #[error(transparent)]
    Server(#[from] ServerError),
    /// Creating or resuming the thread's session failed.
    #[error(transparent)]
    Session(#[from] SessionError),
    /// The factory gave no checkpoint, or the resumed turn failed.
    #[error("session {id}: {message}")]
    Turn {
        /// The thread's session id.
        id: SessionId,
        /// What went wrong.
        message: String,
    },
}

/// One bound channel.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChannelConfig {
    /// The bearer token of the channel's requests.
    token: String,
    /// The channel's tool allow-list.
    pub tools: Vec<String>,
    /// Wall-clock budget of one turn. The guards make the last 30 s text-only, so a budget
    /// under 30 s leaves the model no tool calls.
    pub time_budget_secs: u64,
    /// Approve WRITE calls unattended (default: refused, like every no-human mode).
    #[serde(default)]
    pub allow_writes: bool,
    /// The operator's computer-use switch: the one DAEMON exception to default deny.
    #[serde(default)]
    pub computer_use: bool,
}

impl std::fmt::Debug for ChannelConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChannelConfig")
            .field("token", &"<redacted>")
            .field("tools", &self.tools)
            .field("time_budget_secs", &self.time_budget_secs)
            .field("allow_writes", &self.allow_writes)
            .field("computer_use", &self.computer_use)
            .finish()
    }
}

impl ChannelConfig {
    /// The policy of the channel's sessions: DAEMON defaults, the allow-list, the explicit
    /// write ceiling and the operator's computer-use switch, nothing inherited from the daemon.
    /// With `computer_use`, the computer tool joins the allow-list: the switch is the
    /// operator's explicit decision.
    pub fn policy(&self, channel: &str) -> SessionPolicy {
        let mut policy = SessionPolicy::for_mode(SessionMode::Daemon);
        if self.allow_writes {
            policy = policy.grant_unattended(
                SafetyLevel::Write,
                format!("channel {channel}: allow_writes = true"),
            );
        }
        let mut tools = self.tools.clone();
        if self.computer_use {
            policy = policy.enable_operator_computer_use();
            tools.push(COMPUTER_TOOL.to_string());
        }
        policy.with_tool_allow_list(tools)
    }

    /// Constant-time in the token's content: both sides are hashed before comparing.
    fn token_matches(&self, given: &str) -> bool {
        let a = Sha256::digest(self.token.as_bytes());
        let b = Sha256::digest(given.as_bytes());
        a.iter()
            .zip(b.iter())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ChannelsFile {
    #[serde(default)]
    schema: Option<String>,
    #[serde(default)]
    channels: BTreeMap<String, ChannelConfig>,
}

/// The channels bound by the operator's file, by name.
#[derive(Debug, Clone, Default)]
pub struct Channels {
    channels: BTreeMap<String, ChannelConfig>,
}

impl Channels {
    /// Load and check the channels file: mode, schema, names, tokens, budgets.
    pub fn load(path: &Path) -> Result<Channels, ChannelError> {
        let read_err = |source| ChannelError::Read {
            path: path.to_path_buf(),
            source,
        };
        let mode = std::fs::metadata(path)
            .map_err(read_err)?
            .permissions()
            .mode()
            & 0o777;
        if mode & 0o077 != 0 {
            return Err(ChannelError::Exposed {
                path: path.to_path_buf(),
                mode,
            });
        }
        let text = std::fs::read_to_string(path).map_err(read_err)?;
        Channels::parse(&text).map_err(|message| ChannelError::Invalid {
            path: path.to_path_buf(),
            message,
        })
    }

    /// Parse the TOML text of a channels file (the mode check is `load`'s).
    pub fn parse(text: &str) -> Result<Channels, String> {
        let file: ChannelsFile = toml::from_str(text).map_err(|e| e.to_string())?;
        if let Some(schema) = &file.schema
            && schema != CHANNELS_SCHEMA
        {
            return Err(format!("schema {schema:?} is not {CHANNELS_SCHEMA}"));
        }
        for (name, ch) in &file.channels {
            let valid_name = !name.is_empty()
                && name.len() <= 64
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
            if !valid_name {
                return Err(format!(
                    "channels.{name}: a channel name is 1-64 of A-Z a-z 0-9 - _"
                ));
            }
            if ch.token.trim().is_empty() {
                return Err(format!("channels.{name}.token: empty"));
            }
            if ch.time_budget_secs == 0 {
                return Err(format!(
                    "channels.{name}.time_budget_secs: must be at least 1"
                ));
            }
            if let Some(bad) = ch.tools.iter().find(|t| t.trim().is_empty()) {
                return Err(format!("channels.{name}.tools: empty tool name {bad:?}"));
            }
        }
        Ok(Channels {
            channels: file.channels,
        })
    }

    pub(crate) fn get(&self, name: &str) -> Option<&ChannelConfig> {
        self.channels.get(name)
    }

    /// The names of the bound channels, in sorted order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.channels.keys().map(String::as_str)
    }

    /// True when the file binds no channel.
    pub fn is_empty(&self) -> bool {
        self.channels.is_empty()
    }
}

/// The fixed session id of a thread: `ch-` and 32 hex digits of the SHA-256 of the canonical
/// JSON `[channel, thread]` (unambiguous for any strings). A valid checkpoint directory name.
pub fn thread_session_id(channel: &str, thread: &str) -> SessionId {
    let digest = canonical_sha256(&json!([channel, thread]));
    SessionId::new(format!("ch-{}", &digest[..32]))
}

/// One inbound message, checked field by field so a 400 names the field at fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboundMessage {
    pub(crate) thread: String,
    pub(crate) text: String,
    pub(crate) sender: Option<String>,
}

impl InboundMessage {
    pub(crate) fn parse(body: &[u8]) -> Result<InboundMessage, String> {
        let value: Value =
            serde_json::from_slice(body).map_err(|e| format!("the body is not JSON: {e}"))?;
        let Value::Object(map) = value else {
            return Err("the body must be a JSON object with fields thread, text, sender".into());
        };
        if let Some(unknown) = map
            .keys()
            .find(|k| !matches!(k.as_str(), "thread" | "text" | "sender"))
        {
            return Err(format!(
                "field `{unknown}`: unknown (expected thread, text, sender)"
            ));
        }
        let string = |field: &str| -> Result<Option<String>, String> {
            match map.get(field) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(other) => Err(format!("field `{field}`: expected a string, got {other}")),
            }
        };
        let thread = string("thread")?.ok_or("field `thread`: missing")?;
        if thread.is_empty() || thread.len() > MAX_THREAD_LEN {
            return Err(format!(
                "field `thread`: must be 1-{MAX_THREAD_LEN} bytes long"
            ));
        }
        let text = string("text")?.ok_or("field `text`: missing")?;
        if text.trim().is_empty() {
            return Err("field `text`: empty".into());
        }
        Ok(InboundMessage {
            thread,
            text,
            sender: string("sender")?,
        })
    }
}

/// The answer to one message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MessageReply {
    pub(crate) session_id: String,
    pub(crate) text: String,
    pub(crate) rounds: u32,
    pub(crate) tool_calls: u32,
    pub(crate) termination_reason: String,
}

/// Run one message of `channel` as a DAEMON turn of its thread's session, under the thread's
/// session lane.
pub async fn run_message(
    shared: &Shared,
    name: &str,
    channel: &ChannelConfig,
    message: &InboundMessage,
) -> Result<MessageReply, ChannelError> {
    let id = thread_session_id(name, &message.thread);
    let reply = {
        let _lane = shared
            .lanes
            .acquire(id.as_str())
            .await
            .map_err(|_| ChannelError::Draining)?;
        run_locked(shared, name, channel, &id, &message.text).await
    };
    shared.lanes.forget(id.as_str()).await;
    reply
}

/// The body of `run_message`, with the thread's lane held.
async fn run_locked(
    shared: &Shared,
    name: &str,
    channel: &ChannelConfig,
    id: &SessionId,
    text: &str,
) -> Result<MessageReply, ChannelError> {
    // One build for both cases: the factory's config of the session with this id (a resumed
    // one keeps the model it last used); its checkpoint root says whether the chain exists.
    let mut cfg = shared.factory.resume(id)?;
    let Some(settings) = cfg.checkpoint.clone() else {
        return Err(ChannelError::Turn {
            id: id.clone(),
            message: "channel sessions must be durable, and the factory gave no checkpoint".into(),
        });
    };
    let continues = session_dir(&settings.root, id).is_dir();
    cfg.session_id = id.clone();
    cfg.policy = channel.policy(name);
    cfg.approver = Arc::new(NoHuman);
    cfg.events = None;
    let budget = Duration::from_secs(channel.time_budget_secs);
    cfg.scaffold.guards.turn_time_budget_secs = Some(channel.time_budget_secs);
    let cancel = CancellationToken::new();
    let hard_stop = {
        let cancel = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(budget + HARD_STOP_GRACE).await;
            cancel.cancel();
        })
    };
    let result = if continues {
        let (mut lp, _report) = resume_session(cfg)?;
        lp.resume_turn(Some(text), &cancel)
            .await
            .map_err(|e| ChannelError::Turn {
                id: id.clone(),
                message: e.to_string(),
            })
    } else {
        let mut lp = create_session(cfg)?;
        Ok(lp.run_turn(text, &cancel).await)
    };
    hard_stop.abort();
    let outcome = result?;
    Ok(MessageReply {
        session_id: id.to_string(),
        text: outcome.text,
        rounds: outcome.rounds,
        tool_calls: outcome.tool_calls,
        termination_reason: outcome.termination.to_string(),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn thread_ids_are_fixed_distinct_and_valid() {
        let a = thread_session_id("ops", "t1");
        assert_eq!(a, thread_session_id("ops", "t1"));
        assert_ne!(a, thread_session_id("ops", "t2"));
        assert_ne!(a, thread_session_id("ops2", "t1"));
        // No ambiguity from joining the two strings.
        assert_ne!(
            thread_session_id("a\",\"b", "c"),
            thread_session_id("a", "b\",\"c")
        );
        crate::store::checkpoint::validate_session_id(&a).unwrap();
        assert!(a.as_str().starts_with("ch-") && a.as_str().len() == 35);
    }

    #[test]
    fn a_bad_body_names_the_field() {
        let err = InboundMessage::parse(br#"{"thread": 1, "text": "x"}"#).unwrap_err();
        assert!(err.contains("field `thread`"), "{err}");
        let err = InboundMessage::parse(br#"{"thread": "t"}"#).unwrap_err();
        assert_eq!(err, "field `text`: missing");
        let err = InboundMessage::parse(br#"{"thread": "t", "text": "x", "to": 1}"#).unwrap_err();
        assert!(err.contains("field `to`"), "{err}");
        let ok = InboundMessage::parse(br#"{"thread": "t", "text": "hi", "sender": "ana"}"#);
        assert_eq!(ok.unwrap().sender.as_deref(), Some("ana"));
    }

    #[test]
    fn channel_policy_is_daemon_default_deny_with_the_allow_list() {
        let ch = Channels::parse(
            "[channels.ops]\ntoken = \"t\"\ntools = [\"read_file\"]\ntime_budget_secs = 5\n",
        )
        .unwrap();
        let p = ch.get("ops").unwrap().policy("ops");
        assert_eq!(p.mode, SessionMode::Daemon);
        assert_eq!(p.unattended_approval_ceiling, SafetyLevel::Safe);
        assert!(p.allows_tool("read_file") && !p.allows_tool("write_file"));
        assert!(!p.operator_computer_use && p.deny_list.contains(COMPUTER_TOOL));
        assert!(format!("{:?}", ch.get("ops").unwrap()).contains("<redacted>"));
    }

    #[test]
    fn channel_file_errors_name_the_field() {
        let err =
            Channels::parse("[channels.ops]\ntoken = \"\"\ntools = []\ntime_budget_secs = 5\n")
                .unwrap_err();
        assert!(err.contains("channels.ops.token"), "{err}");
        let err = Channels::parse(
            "[channels.\"a b\"]\ntoken = \"t\"\ntools = []\ntime_budget_secs = 5\n",
        )
        .unwrap_err();
        assert!(err.contains("channel name"), "{err}");
        let err = Channels::parse("[channels.ops]\ntoken = \"t\"\ntools = []\n").unwrap_err();
        assert!(err.contains("time_budget_secs"), "{err}");
    }

    #[test]
    fn a_readable_channels_file_is_refused_with_its_mode() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("channels.toml");
        std::fs::write(
            &path,
            "[channels.ops]\ntoken = \"t\"\ntools = []\ntime_budget_secs = 5\n",
        )
        .unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = Channels::load(&path).unwrap_err().to_string();
        assert!(
            err.contains("channels.toml") && err.contains("644"),
            "{err}"
        );
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(Channels::load(&path).unwrap().get("ops").is_some());
    }

    #[tokio::test]
    async fn a_non_loopback_bind_is_refused() {
        let err = Webhook::bind("0.0.0.0:0".parse().unwrap()).await.err();
        assert!(matches!(err, Some(ChannelError::NotLoopback(_))));
        let ok = Webhook::bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        assert_ne!(ok.local_addr().port(), 0);
    }
}
