//! End-to-end tests of the `geode` binary, run as a real child process.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod channel;
mod common;
mod crash;
mod crucible;
mod daily;
mod exec;
mod mcp;
mod providers;
mod repl;
mod run;
mod search;
mod validity;
