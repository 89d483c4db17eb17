//! The `checkpoint.db` file: its tables, the schema check that guards every open, and the
//! mapping between a message and its row's inspection columns. The store's handle keeps the
//! session logic; the SQL layout lives here in one place.

use std::path::Path;

use rusqlite::{Connection, OpenFlags, OptionalExtension, params};

use super::{DB_SCHEMA, SessionRow, SessionStatus};
use crate::conversation::{ContentBlock, Message, Role};
use crate::ids::SessionId;
use crate::store::StoreError;

pub(super) fn open_db(path: &Path, create: bool) -> Result<Connection, StoreError> {
    let err = |e| StoreError::sqlite(path, e);
    let mut flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    if create {
        flags |= OpenFlags::SQLITE_OPEN_CREATE;
    }
    let conn = Connection::open_with_flags(path, flags).map_err(err)?;
    // Reading the schema first makes a file that is not a database fail here, before any
    // pragma or table creation could write to it.
    if !create {
        check_schema(&conn, path)?;
    }
    conn.pragma_update(None, "journal_mode", "WAL")
        .map_err(err)?;
    // FULL: a commit is on disk when it returns. The pending batch is saved before any tool
    // runs, so "saved" has to mean it.
    conn.pragma_update(None, "synchronous", "FULL")
        .map_err(err)?;
    if create {
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
            CREATE TABLE IF NOT EXISTS sessions (
                session_id TEXT PRIMARY KEY,
                status TEXT NOT NULL CHECK (status IN ('active', 'paused', 'completed', 'error')),
                created_at TEXT NOT NULL,
                updated_at TEXT NOT NULL,
                model TEXT NOT NULL,
                cwd TEXT NOT NULL
            );
            CREATE TABLE IF NOT EXISTS messages (
                session_id TEXT NOT NULL,
                seq INTEGER NOT NULL,
                role TEXT NOT NULL,
                content TEXT NOT NULL,
                tool_call_id TEXT,
                tool_calls TEXT,
                tool_name TEXT,
                ts TEXT NOT NULL,
                tokens INTEGER,
                finish_reason TEXT,
                UNIQUE (session_id, seq)
            );",
        )
        .map_err(err)?;
        conn.execute(
            "INSERT OR IGNORE INTO meta(key, value) VALUES ('schema', ?1)",
            params![DB_SCHEMA],
        )
        .map_err(err)?;
    }
    Ok(conn)
}

pub(super) fn check_schema(conn: &Connection, path: &Path) -> Result<(), StoreError> {
    let schema: Option<String> = conn
        .query_row("SELECT value FROM meta WHERE key = 'schema'", [], |r| {
            r.get(0)
        })
        .optional()
        .map_err(|e| StoreError::sqlite(path, e))?;
    match schema {
        Some(s) if s == DB_SCHEMA => Ok(()),
        other => Err(StoreError::Json {
            path: path.display().to_string(),
            message: format!("schema {other:?}, expected {DB_SCHEMA:?}"),
        }),
    }
}

pub(super) fn read_row(
    conn: &Connection,
    path: &Path,
    id: &SessionId,
) -> Result<SessionRow, StoreError> {
    let row = conn
        .query_row(
            "SELECT status, created_at, updated_at, model, cwd FROM sessions
             WHERE session_id = ?1",
            params![id.as_str()],
            |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, String>(3)?,
                    r.get::<_, String>(4)?,
                ))
            },
        )
        .optional()
        .map_err(|e| StoreError::sqlite(path, e))?;
    let Some((status, created_at, updated_at, model, cwd)) = row else {
        return Err(StoreError::NotFound {
            path: path.display().to_string(),
            message: format!("no sessions row for {id}"),
        });
    };
    let status = SessionStatus::parse(&status).ok_or_else(|| StoreError::Corrupt {
        path: path.display().to_string(),
        row: 0,
        message: format!("unknown session status {status:?}"),
    })?;
    Ok(SessionRow {
        session_id: id.clone(),
        status,
        created_at,
        updated_at,
        model,
        cwd,
    })
}
/// The inspection columns of one message row.
pub(super) struct Columns {
    pub(super) role: &'static str,
    pub(super) content: String,
    pub(super) tool_call_id: Option<String>,
    pub(super) tool_calls: Option<String>,
    pub(super) tool_name: Option<String>,
    pub(super) tokens: i64,
    pub(super) finish_reason: Option<&'static str>,
}

pub(super) fn columns(m: &Message) -> Result<Columns, serde_json::Error> {
    let content = serde_json::to_string(&m.content)?;
    let (mut results, mut uses, mut names) = (Vec::new(), Vec::new(), Vec::new());
    for b in &m.content {
        match b {
            ContentBlock::ToolResult { tool_use_id, .. } => results.push(tool_use_id.as_str()),
            ContentBlock::ToolUse { name, .. } => {
                uses.push(b);
                names.push(name.as_str());
            }
            _ => {}
        }
    }
    let json_list = |empty: bool, v: String| (!empty).then_some(v);
    Ok(Columns {
        role: match m.role {
            Role::User => "user",
            Role::Assistant => "assistant",
        },
        tokens: (content.chars().count() / 4) as i64,
        tool_call_id: json_list(results.is_empty(), serde_json::to_string(&results)?),
        tool_calls: json_list(uses.is_empty(), serde_json::to_string(&uses)?),
        tool_name: json_list(names.is_empty(), serde_json::to_string(&names)?),
        finish_reason: match (m.role, uses.is_empty()) {
            (Role::Assistant, false) => Some("tool_use"),
            (Role::Assistant, true) => Some("end_turn"),
            (Role::User, _) => None,
        },
        content,
    })
}
