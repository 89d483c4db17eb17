//! The GEODE agent runtime.
//!
//! The model chooses the next action; the host guards the execution boundary. Floors, top down:
//! `agent` (the six-stage loop, guards, verify) drives `model` (the `Model` trait and its
//! adapters) and `tools` (the BoundToolPlan and the guarded pipeline), which record into `store`
//! and consult `hooks`; `policy`, `cognition` and `conversation` are the plain types under all.

pub mod cognition;
pub mod conversation;
pub mod ids;
pub mod policy;
pub mod tools;
