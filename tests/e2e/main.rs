//! End-to-end tests of the `geode` binary, run as a real child process.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod crash;
mod crucible;
mod exec;
mod providers;
mod run;
