//! `geode config explain`: every effective value and the layer it came from.

use super::exit::Exit;

use clap::Subcommand;
use geode_runtime::config::Config;

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Print each effective value with its source (flag, env, project, user, default).
    Explain,
}

pub fn run(cmd: ConfigCommand, cfg: &Config) -> anyhow::Result<Exit> {
    match cmd {
        ConfigCommand::Explain => print!("{}", cfg.explain()),
    }
    Ok(Exit::Success)
}
