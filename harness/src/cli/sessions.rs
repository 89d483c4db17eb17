//! `geode sessions [--json] [--limit N]`: the checkpointed sessions, newest first, with what a
//! person picks one by (its first prompt, when it was last active, its model and cost); `geode
//! resume ID` or `/resume ID` continues one.

use super::exit::Exit;
use std::io::Write;
use std::path::PathBuf;

use clap::Args;
use geode_runtime::agent::restore::load_checkpoint;
use geode_runtime::conversation::{ContentBlock, Message, Role};
use geode_runtime::model::catalog::cost_text;
use geode_runtime::server::protocol::SessionEntry;
use geode_runtime::store::StoreError;
use geode_runtime::store::checkpoint::{CheckpointStore, SessionRow};

use super::assembly::checkpoint_root;

#[derive(Debug, Args)]
pub struct SessionsArgs {
    /// At most this many, newest first.
    #[arg(long, default_value_t = 20)]
    limit: usize,
    /// One JSON object per line.
    #[arg(long)]
    json: bool,
    /// Directory of session checkpoints (default: $GEODE_HOME/sessions).
    #[arg(long, value_name = "DIR")]
    checkpoint_dir: Option<PathBuf>,
}

/// Characters of the first prompt shown as a session's title.
const TITLE_CHARS: usize = 60;

const NO_PROMPT: &str = "(no prompt yet)";

/// A session's title: the first line of its first prompt.
pub(super) fn title(messages: &[Message]) -> String {
    let first = messages
        .iter()
        .filter(|m| m.role == Role::User)
        .flat_map(|m| &m.content)
        .find_map(|b| match b {
            ContentBlock::Text { text } if !text.trim().is_empty() => Some(text.as_str()),
            _ => None,
        })
        .unwrap_or(NO_PROMPT);
    let line = first.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    let mut shown: String = line.trim().chars().take(TITLE_CHARS).collect();
    if line.trim().chars().count() > TITLE_CHARS {
        shown.push_str("...");
    }
    shown
}

/// What a person picks a session by, read from its checkpoint (an unreadable one says why in
/// its title). `None` for a session that never committed a turn (a start that was left at
/// once): there is nothing in it to resume.
fn entry(root: &std::path::Path, row: &SessionRow) -> Option<SessionEntry> {
    let (title, turns, cost_usd) = match load_checkpoint(root, &row.session_id) {
        Ok(c) => (
            first_prompt(root, row).unwrap_or_else(|| title(&c.messages)),
            c.state.turn_number,
            c.state.session_usage.cost_usd,
        ),
        Err(StoreError::NotCommitted { .. }) => return None,
        Err(e) => (format!("(unreadable: {e})"), 0, 0.0),
    };
    Some(SessionEntry {
        session_id: row.session_id.clone(),
        title,
        updated_at: row.updated_at.clone(),
        turns,
        model: row.model.clone(),
        cost_usd,
        cwd: row.cwd.clone(),
    })
}

/// Messages read from the start of the log for a title.
const TITLE_MESSAGES: u64 = 8;

/// The title from the first messages of the session's log, which compaction summarises in the
/// conversation but never deletes: `/compact` keeps the name a person knows the session by.
fn first_prompt(root: &std::path::Path, row: &SessionRow) -> Option<String> {
    let store = CheckpointStore::inspect(root, &row.session_id).ok()?;
    let first = store.messages(0, TITLE_MESSAGES).ok()?;
    let found = title(&first);
    (found != NO_PROMPT).then_some(found)
}

/// The `limit` most recently active sessions under `root` that hold a turn, for `/resume`;
/// with `project`, only those that ran in that folder.
pub(super) fn recent(
    root: &std::path::Path,
    limit: usize,
    project: Option<&std::path::Path>,
) -> Vec<SessionEntry> {
    let (rows, _) = CheckpointStore::list(root);
    let here = project.map(|p| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf()));
    rows.iter()
        .filter(|row| {
            here.as_ref()
                .is_none_or(|p| std::path::Path::new(&row.cwd) == p.as_path())
        })
        .filter_map(|row| entry(root, row))
        .take(limit)
        .collect()
}

pub fn run(args: SessionsArgs) -> anyhow::Result<Exit> {
    let root = checkpoint_root(args.checkpoint_dir.as_ref());
    let (rows, problems) = CheckpointStore::list(&root);
    for p in problems {
        say!("geode: skipped an unreadable session: {p}");
    }
    let mut out = std::io::stdout().lock();
    if rows.is_empty() && !args.json {
        writeln!(out, "no sessions under {}", root.display())?;
        return Ok(Exit::Success);
    }
    if !args.json {
        writeln!(
            out,
            "SESSION\tLAST ACTIVE\tSTATUS\tMODEL\tCOST\tFOLDER\tFIRST PROMPT"
        )?;
    }
    for (row, entry) in rows
        .iter()
        .filter_map(|row| entry(&root, row).map(|e| (row, e)))
        .take(args.limit)
    {
        let SessionEntry {
            title,
            cost_usd: cost,
            ..
        } = entry;
        if args.json {
            let line = serde_json::json!({
                "session_id": row.session_id.as_str(),
                "updated_at": row.updated_at,
                "created_at": row.created_at,
                "status": row.status.as_str(),
                "model": row.model,
                "cwd": row.cwd,
                "cost_usd": cost,
                "title": title,
            });
            writeln!(out, "{line}")?;
        } else {
            writeln!(
                out,
                "{}\t{}\t{}\t{}\t{}\t{}\t{title}",
                row.session_id,
                row.updated_at,
                row.status.as_str(),
                row.model,
                cost_text(&row.model, cost),
                row.cwd
            )?;
        }
    }
    Ok(Exit::Success)
}
