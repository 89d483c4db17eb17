//! What runs inside a sandbox's namespaces: the server that builds them ([`setup`]), the
//! agent that serves the [`protocol`](super::protocol) ([`server`]), the namespace's init,
//! the agent's and the verifier's [`views`], the seccomp filter, and command execution.
//!
//! These run as separate processes of the `geode` binary (see [`crate::sandbox_entry`]),
//! so the host side never calls into them: it speaks the protocol, and this side knows
//! nothing of the host side but that wire.

pub(crate) mod exec;
pub(crate) mod init;
mod rootfs;
mod seccomp;
pub(crate) mod server;
pub(crate) mod setup;
mod step;
mod user;
mod views;
mod watch;
