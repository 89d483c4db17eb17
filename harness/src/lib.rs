#![warn(missing_docs)]
//! The GEODE harness: task packs, environments, seeded rollouts and the run store. The `geode`
//! binary (src/main.rs, src/cli/) only parses arguments and calls into this library.

// Libraries do not print: they return values or emit events, and only the binaries decide
// what reaches stdout and stderr.
#![deny(clippy::print_stdout, clippy::print_stderr)]

pub mod agents;
pub mod assembly;
pub mod atif;
pub mod crucible;
pub mod curate;
pub mod datasets;
#[cfg(test)]
mod enum_names;
/// The environment subsystem is its own crate (`harness/env`); `crate::env` keeps its paths.
pub use geode_env as env;
pub mod gateway;
pub mod home;
pub mod pack;
pub mod rollout;
pub mod search;
pub mod store;
pub mod summary;
pub mod tb1;
pub mod view;
