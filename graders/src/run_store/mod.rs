//! The run store's tables, `geode.runstore.v1`: one SQLite file per jobs folder with a row per
//! run, a row per trial and a row per re-grade. Defined once, here, below both the harness
//! (which writes runs and trials through `geode_harness::store::RunStore`) and the reports
//! (which read stores), so the two cannot drift apart. [`synth`] writes synthetic stores for the
//! tests and benchmarks of both.

use rusqlite::{Connection, params};

pub mod synth;

/// The schema name the store records in its `meta` table.
pub const SCHEMA: &str = "geode.runstore.v1";

/// The run store's file name inside a jobs folder (Harbor's layout: one folder per run beside it).
pub const STORE_FILE: &str = "geode.db";

/// The tables, columns in the order every writer and reader assumes.
const TABLES: &str = "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
     CREATE TABLE IF NOT EXISTS runs (
        run_id TEXT PRIMARY KEY, created TEXT NOT NULL, pack_path TEXT NOT NULL,
        pack_hash TEXT NOT NULL, model_route TEXT NOT NULL, scaffold_hash TEXT NOT NULL,
        seed INTEGER NOT NULL, attempts INTEGER NOT NULL, lock_hash TEXT NOT NULL,
        config TEXT NOT NULL, status TEXT NOT NULL);
     CREATE TABLE IF NOT EXISTS trials (
        run_id TEXT NOT NULL, trial_name TEXT NOT NULL, task_id TEXT NOT NULL,
        task_hash TEXT NOT NULL, category TEXT NOT NULL, difficulty TEXT NOT NULL,
        attempt INTEGER NOT NULL, seed INTEGER NOT NULL, status TEXT NOT NULL,
        outcome TEXT, reward REAL, rewards TEXT, exception_class TEXT,
        exception_message TEXT, started TEXT, finished TEXT, phases TEXT,
        input_tokens INTEGER, cached_tokens INTEGER, output_tokens INTEGER,
        cost_usd REAL, model_route TEXT, scaffold_hash TEXT, infra_retries INTEGER,
        model_calls INTEGER, integrity TEXT,
        PRIMARY KEY (run_id, trial_name));
     CREATE TABLE IF NOT EXISTS grades (
        run_id TEXT NOT NULL, trial_name TEXT NOT NULL, grader TEXT NOT NULL,
        grader_hash TEXT NOT NULL, reward REAL, validity TEXT NOT NULL,
        graded_at TEXT NOT NULL,
        PRIMARY KEY (run_id, trial_name, grader_hash));";

/// Creates the tables that are missing and records the schema name (an existing store keeps
/// its rows and its recorded schema).
pub fn create_tables(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(TABLES)?;
    conn.execute(
        "INSERT OR IGNORE INTO meta(key, value) VALUES ('schema', ?1)",
        params![SCHEMA],
    )?;
    Ok(())
}
