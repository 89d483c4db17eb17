//! `geode trust`: allow a project's files that name commands (`.geode/config.toml`, `.mcp.json`,
//! `.claude/settings.json`, `.claude/settings.local.json`) to start MCP servers and hooks.
//!
//! Trust is recorded per project path with the SHA-256 of each such file's bytes in
//! `$GEODE_HOME/trust.json`; an edited, added or removed file makes the project untrusted again
//! until `geode trust` runs anew.

use super::exit::Exit;
use std::path::PathBuf;

use clap::Args;
use geode_runtime::mcp::trust::{TrustState, TrustStore};

use super::assembly::geode_home;

#[derive(Debug, Args)]
pub struct TrustArgs {
    /// Print the project's trust state instead of changing it.
    #[arg(long, conflicts_with = "revoke")]
    show: bool,
    /// Forget the project's trust.
    #[arg(long)]
    revoke: bool,
    /// The project directory (default: the current directory).
    project: Option<PathBuf>,
}

pub fn run(args: TrustArgs) -> anyhow::Result<Exit> {
    let project = match args.project {
        Some(p) => p,
        None => std::env::current_dir()?,
    };
    let store = TrustStore::new(&geode_home());
    if args.show {
        let state = store.check(&project)?;
        let word = match &state {
            TrustState::Trusted(_) => "trusted",
            TrustState::Untrusted => "untrusted",
            TrustState::Changed { .. } => "changed",
            TrustState::NoConfig => "no-config",
        };
        println!("{word}: {}", state.explain(&project));
        return Ok(Exit::Success);
    }
    if args.revoke {
        if store.revoke(&project)? {
            println!("revoked: {} is no longer trusted", project.display());
        } else {
            println!("{} was not trusted", project.display());
        }
        return Ok(Exit::Success);
    }
    let entry = store.trust(&project)?;
    let files: Vec<String> = entry
        .files
        .iter()
        .map(|(f, sha)| format!("{f} sha256 {sha}"))
        .collect();
    println!(
        "trusted: {} ({}); its MCP servers and hooks may start. Editing any of these files \
         revokes this.",
        entry.project.display(),
        files.join(", ")
    );
    Ok(Exit::Success)
}
