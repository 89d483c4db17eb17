//! End-to-end tests of the `geode` binary, run as a real child process.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod agents;
mod attacks;
#[path = "../support/browser.rs"]
mod browser;
mod channel;
mod claude_code;
mod codex_login;
mod command_sandbox;
mod common;
mod computer;
mod crash;
mod crucible;
mod crucible_sealed;
mod daily;
mod daily_cli;
mod datasets;
mod desktop;
mod docker;
#[path = "../support/docker.rs"]
mod dockerd;
mod exec;
#[path = "../support/fake_kube.rs"]
mod fake_kube;
mod gateway;
mod harbor;
mod harbor_compose;
mod harbor_services;
mod hook_events;
mod images;
mod kubernetes;
mod live_output;
mod mcp;
mod mcp_background;
mod mcp_sdk;
mod mcp_server;
mod newcomer;
mod notify;
mod permission_modes;
mod providers;
mod red_team;
#[path = "../support/registry.rs"]
mod registry;
mod repl;
mod rewind;
mod rootless;
mod run;
mod search;
mod seeds;
mod services;
mod skills;
mod slurm;
#[path = "../support/slurm.rs"]
mod slurm_cluster;
mod slurm_crucible;
mod slurm_sites;
mod slurm_stage;
mod stage;
mod streaming;
mod task_formats;
mod validity;
mod view;
mod view_guards;
mod web_fetch;
