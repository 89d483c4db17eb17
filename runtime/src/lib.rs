#![warn(missing_docs)]
//! The GEODE agent runtime.
//!
//! The model chooses the next action; the host guards the execution boundary. Floors, top down:
//! `session` assembles an executor and a loop; `agent` (the six-stage loop, guards, verify)
//! drives `model` (the `Model` trait and its adapters) and `tools` (the BoundToolPlan and the
//! guarded pipeline), which record into `store` and consult `hooks`; `policy`, `scaffold`,
//! `cognition` and `conversation` are the plain types under all.
//!
//! Drivers around the loop sit behind features (both on by default): `daemon` (the `server`
//! module: the serve daemon and its channels) and `mcp` (the MCP server and the client of
//! configured servers; MCP settings and trust are plain configuration and always built).

// Libraries do not print: they return values or emit events, and only the binaries decide
// what reaches stdout and stderr.
#![deny(clippy::print_stdout, clippy::print_stderr)]

pub mod agent;
pub mod cognition;
pub mod config;
pub mod conversation;
#[cfg(test)]
mod enum_names;
pub mod error_chain;
pub mod hooks;
pub mod ids;
pub mod mcp;
pub mod model;
pub mod policy;
pub mod scaffold;
#[cfg(feature = "daemon")]
pub mod server;
pub mod session;
pub mod skills;
pub mod store;
pub mod tools;
