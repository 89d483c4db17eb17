//! `geode rewind [SESSION_ID | --last] [--to N] [--force]`: go back to before a turn of a
//! checkpointed session no process is using (in a live session, `/rewind`). Without `--to` it
//! lists the turns with the files each changed. With it, the files turns N and later changed
//! are put back, then the conversation; `geode resume` continues from there.

use super::exit::Exit;
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use geode_runtime::agent::restore::latest_session;
use geode_runtime::agent::rewind::{describe_points, rewind_points, rewind_session};
use geode_runtime::ids::SessionId;

use super::assembly::checkpoint_root;

#[derive(Debug, Args)]
pub struct RewindArgs {
    /// The session to rewind.
    #[arg(required_unless_present = "last", conflicts_with = "last")]
    session_id: Option<String>,
    /// The session updated last.
    #[arg(long)]
    last: bool,
    /// Go back to before this turn (without it: list the turns).
    #[arg(long, value_name = "N")]
    to: Option<u32>,
    /// Also put back files changed since the session last changed them (by you, an editor).
    #[arg(long, requires = "to")]
    force: bool,
    /// Print the list or the result as JSON.
    #[arg(long)]
    json: bool,
    /// Directory of session checkpoints (default: $GEODE_HOME/sessions).
    #[arg(long, value_name = "DIR")]
    checkpoint_dir: Option<PathBuf>,
}

pub fn run(args: RewindArgs) -> anyhow::Result<Exit> {
    let root = checkpoint_root(args.checkpoint_dir.as_ref());
    let id = match &args.session_id {
        Some(id) => SessionId::new(id.clone()),
        None => {
            latest_session(&root).with_context(|| format!("no session under {}", root.display()))?
        }
    };
    let Some(turn) = args.to else {
        let points = rewind_points(&root, &id).with_context(|| format!("session {id}"))?;
        if args.json {
            println!("{}", serde_json::to_string_pretty(&points)?);
        } else {
            println!("{}", describe_points(&points));
        }
        return Ok(Exit::Success);
    };
    let report = rewind_session(&root, &id, turn, args.force)
        .with_context(|| format!("cannot rewind session {id} to before turn {turn}"))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("{report}");
    }
    Ok(Exit::Success)
}
