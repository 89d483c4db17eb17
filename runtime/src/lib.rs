//! The GEODE agent runtime.
//!
//! The model chooses the next action; the host guards the execution boundary. Floors, top down:
//! `session` assembles an executor and a loop; `agent` (the six-stage loop, guards, verify)
//! drives `model` (the `Model` trait and its adapters) and `tools` (the BoundToolPlan and the
//! guarded pipeline), which record into `store` and consult `hooks`; `policy`, `scaffold`,
//! `cognition` and `conversation` are the plain types under all.

pub mod agent;
pub mod cognition;
pub mod config;
pub mod conversation;
pub mod hooks;
pub mod ids;
pub mod mcp;
pub mod model;
pub mod policy;
pub mod scaffold;
pub mod server;
pub mod session;
pub mod store;
pub mod tools;
