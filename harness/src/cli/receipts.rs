//! `geode receipts list [--session ID] [--json]` and
//! `geode receipts reconcile CALL_ID --outcome done|not-done [--session ID] [--note TEXT]`:
//! the effect receipts of checkpointed sessions, and the by-hand resolution of the uncertain
//! ones (an uncertain effect is never re-run automatically; a person decides).

use super::exit::Exit;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::{Subcommand, ValueEnum};
use geode_runtime::ids::SessionId;
use geode_runtime::store::receipts::{self, Receipt, ReceiptStore, ReconcileOutcome};

use super::assembly::checkpoint_root;

#[derive(Debug, Subcommand)]
pub enum ReceiptsCommand {
    /// List effect receipts, oldest first (every session, or one).
    List {
        /// Only this session.
        #[arg(long)]
        session: Option<String>,
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
        /// Directory of session checkpoints (default: $GEODE_HOME/sessions).
        #[arg(long, value_name = "DIR")]
        checkpoint_dir: Option<PathBuf>,
    },
    /// Record what an uncertain effect really did, after checking it by hand.
    Reconcile {
        /// The call id of the uncertain receipt.
        call_id: String,
        /// What the effect really did: `done` or `not-done`.
        #[arg(long, value_enum)]
        outcome: Outcome,
        /// The session (needed when several sessions have this call id).
        #[arg(long)]
        session: Option<String>,
        /// A note kept with the receipt (what was checked).
        #[arg(long)]
        note: Option<String>,
        /// Directory of session checkpoints (default: $GEODE_HOME/sessions).
        #[arg(long, value_name = "DIR")]
        checkpoint_dir: Option<PathBuf>,
    },
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Outcome {
    /// The effect took place.
    Done,
    /// The effect did not take place.
    NotDone,
}

pub fn run(cmd: ReceiptsCommand) -> anyhow::Result<Exit> {
    match cmd {
        ReceiptsCommand::List {
            session,
            json,
            checkpoint_dir,
        } => list(&checkpoint_root(checkpoint_dir.as_ref()), session, json),
        ReceiptsCommand::Reconcile {
            call_id,
            outcome,
            session,
            note,
            checkpoint_dir,
        } => {
            let outcome = match outcome {
                Outcome::Done => ReconcileOutcome::Done,
                Outcome::NotDone => ReconcileOutcome::NotDone,
            };
            let root = checkpoint_root(checkpoint_dir.as_ref());
            reconcile(&root, &call_id, outcome, session, note.as_deref())
        }
    }
}

/// The receipt stores of `session`, or of every session under `root`.
fn stores(root: &Path, session: Option<String>) -> anyhow::Result<Vec<ReceiptStore>> {
    let ids: Vec<SessionId> = match session {
        Some(s) => vec![SessionId::new(s)],
        None => {
            let mut ids: Vec<SessionId> = match std::fs::read_dir(root) {
                Ok(entries) => entries
                    .flatten()
                    .filter(|e| e.path().join(receipts::DB_FILE).is_file())
                    .map(|e| SessionId::new(e.file_name().to_string_lossy().into_owned()))
                    .collect(),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
                Err(e) => return Err(e).with_context(|| format!("reading {}", root.display())),
            };
            ids.sort();
            ids
        }
    };
    ids.into_iter()
        .map(|id| {
            let path = root.join(id.as_str()).join(receipts::DB_FILE);
            ReceiptStore::open(&path, &id, false)
                .with_context(|| format!("receipts of session {id}"))
        })
        .collect()
}

fn list(root: &Path, session: Option<String>, json: bool) -> anyhow::Result<Exit> {
    let mut all: Vec<Receipt> = Vec::new();
    for store in stores(root, session)? {
        all.extend(store.list()?);
    }
    let mut out = std::io::stdout().lock();
    if json {
        for r in &all {
            writeln!(out, "{}", serde_json::to_string(r)?)?;
        }
        return Ok(Exit::Success);
    }
    writeln!(out, "SESSION\tCALL\tTOOL\tSTATE\tOUTCOME\tACCEPTED\tINPUT")?;
    for r in &all {
        let mut input = r.input.to_string();
        if input.chars().count() > 80 {
            input = input.chars().take(77).collect::<String>() + "...";
        }
        writeln!(
            out,
            "{}\t{}\t{}\t{}\t{}\t{}\t{}",
            r.session_id,
            r.call_id,
            r.tool,
            r.state.as_str(),
            r.outcome.as_deref().unwrap_or("-"),
            r.accepted_at,
            input
        )?;
    }
    Ok(Exit::Success)
}

fn reconcile(
    root: &Path,
    call_id: &str,
    outcome: ReconcileOutcome,
    session: Option<String>,
    note: Option<&str>,
) -> anyhow::Result<Exit> {
    let mut holders = Vec::new();
    for store in stores(root, session)? {
        if store.get(call_id)?.is_some() {
            holders.push(store);
        }
    }
    let store = match holders.len() {
        0 => bail!("no receipt for call {call_id} under {}", root.display()),
        1 => holders.remove(0),
        _ => {
            let sessions: Vec<String> = holders
                .iter()
                .filter_map(|s| s.list().ok()?.first().map(|r| r.session_id.to_string()))
                .collect();
            bail!(
                "call {call_id} has receipts in several sessions ({}); name one with --session",
                sessions.join(", ")
            );
        }
    };
    let r = store.reconcile(call_id, outcome, note)?;
    say!(
        "geode: receipt {} of session {} reconciled: {}",
        r.call_id,
        r.session_id,
        outcome.as_str()
    );
    Ok(Exit::Success)
}
