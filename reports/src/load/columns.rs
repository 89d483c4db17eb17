//! The column table of the run store: which SQL computes each loaded column, its type, and
//! the typed polars builder that receives its values. The store's schema is mirrored here once
//! so the loader itself only walks rows.

use geode_graders::TrialOutcome;
use polars::prelude::*;
use rusqlite::types::ValueRef;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Str,
    Int,
    /// A seed: a u64 the store keeps in SQLite's signed integer, bits unchanged.
    Seed,
    Float,
    Bool,
}

/// One loaded column: its name in the DataFrame, the SQL that computes it, its type, and
/// whether the report needs it.
pub(super) struct Spec {
    pub(super) name: &'static str,
    pub(super) sql: &'static str,
    kind: Kind,
    pub(super) report: bool,
}

const fn spec(name: &'static str, sql: &'static str, kind: Kind, report: bool) -> Spec {
    Spec {
        name,
        sql,
        kind,
        report,
    }
}

/// Stands for the SQL of the `infra` column, which is built from the graders' outcome set.
const INFRA_SQL: &str = "<infra>";

/// The trial table. Times: `started`/`finished` are RFC 3339 text in the store; SQLite's
/// `unixepoch(.., 'subsec')` turns them into seconds so no date library is needed here
/// (`duration_sec` is their difference, computed after loading). Phase seconds are pulled out of
/// the `phases` JSON with the names the harness writes (its `TrialPhase`). `infra` is true for the
/// infrastructure outcomes of graders/src/outcome.rs.
const TRIAL_SPECS: &[Spec] = &[
    spec("run_id", "run_id", Kind::Str, true),
    spec("trial_name", "trial_name", Kind::Str, false),
    spec("task_id", "task_id", Kind::Str, true),
    spec("task_hash", "task_hash", Kind::Str, false),
    spec("category", "category", Kind::Str, true),
    spec("difficulty", "difficulty", Kind::Str, true),
    spec("attempt", "attempt", Kind::Int, true),
    spec("seed", "seed", Kind::Seed, false),
    spec("outcome", "outcome", Kind::Str, true),
    spec("infra", INFRA_SQL, Kind::Bool, true),
    spec("reward", "reward", Kind::Float, true),
    spec("rewards", "rewards", Kind::Str, false),
    spec("exception_class", "exception_class", Kind::Str, true),
    spec("exception_message", "exception_message", Kind::Str, true),
    spec("started", "started", Kind::Str, false),
    spec("finished", "finished", Kind::Str, false),
    spec(
        "started_unix",
        "unixepoch(started, 'subsec')",
        Kind::Float,
        true,
    ),
    spec(
        "finished_unix",
        "unixepoch(finished, 'subsec')",
        Kind::Float,
        true,
    ),
    spec(
        "environment_setup_sec",
        "json_extract(phases, '$.environment_setup')",
        Kind::Float,
        false,
    ),
    spec(
        "agent_execution_sec",
        "json_extract(phases, '$.agent_execution')",
        Kind::Float,
        false,
    ),
    spec(
        "verifier_sec",
        "json_extract(phases, '$.verifier')",
        Kind::Float,
        false,
    ),
    spec(
        "teardown_sec",
        "json_extract(phases, '$.teardown')",
        Kind::Float,
        false,
    ),
    spec("input_tokens", "input_tokens", Kind::Int, true),
    spec("cached_tokens", "cached_tokens", Kind::Int, true),
    spec("output_tokens", "output_tokens", Kind::Int, true),
    spec("cost_usd", "cost_usd", Kind::Float, true),
    spec("model_route", "model_route", Kind::Str, false),
    spec("scaffold_hash", "scaffold_hash", Kind::Str, false),
    spec("infra_retries", "infra_retries", Kind::Int, true),
    // Added to the store after its first version: a store written before has no such column,
    // and reads NULL (see `Store::columns`).
    spec("model_calls", "model_calls", Kind::Int, true),
    spec("integrity", "integrity", Kind::Str, false),
];

/// Trial columns a store may lack (written by an older harness): selected as NULL then.
pub(super) const LATER_COLUMNS: [&str; 2] = ["model_calls", "integrity"];

const RUN_SPECS: &[Spec] = &[
    spec("run_id", "run_id", Kind::Str, true),
    spec("created", "created", Kind::Str, true),
    spec("pack_path", "pack_path", Kind::Str, true),
    spec("pack_hash", "pack_hash", Kind::Str, true),
    spec("model_route", "model_route", Kind::Str, true),
    // A run's agent under test lives in its config (absent: GEODE's own runtime).
    spec(
        "agent",
        "COALESCE(json_extract(config, '$.agent'), 'geode')",
        Kind::Str,
        true,
    ),
    spec("scaffold_hash", "scaffold_hash", Kind::Str, true),
    spec("seed", "seed", Kind::Seed, true),
    spec("attempts", "attempts", Kind::Int, true),
    spec("status", "status", Kind::Str, true),
];

/// A query for one run's rows: the columns, the table and filter (with `?1` the run id) and
/// order, and the SQL naming a row in errors.
pub(super) struct Query {
    pub(super) specs: &'static [Spec],
    pub(super) from: &'static str,
    pub(super) name_sql: &'static str,
}

pub(super) const TRIAL_QUERY: Query = Query {
    specs: TRIAL_SPECS,
    from: "trials WHERE run_id = ?1 AND status = 'finished' ORDER BY trial_name",
    name_sql: "trial_name",
};

pub(super) const RUN_QUERY: Query = Query {
    specs: RUN_SPECS,
    from: "runs WHERE run_id = ?1",
    name_sql: "run_id",
};

/// A typed column under construction.
pub(super) enum Builder {
    Str(StringChunkedBuilder),
    Int(PrimitiveChunkedBuilder<Int64Type>),
    Seed(PrimitiveChunkedBuilder<UInt64Type>),
    Float(PrimitiveChunkedBuilder<Float64Type>),
    Bool(BooleanChunkedBuilder),
}

impl Builder {
    pub(super) fn new(s: &Spec) -> Builder {
        let name = PlSmallStr::from_static(s.name);
        // The row count is not known before reading (counting costs a scan): grow as needed.
        let capacity = 0;
        match s.kind {
            Kind::Str => Builder::Str(StringChunkedBuilder::new(name, capacity)),
            Kind::Int => Builder::Int(PrimitiveChunkedBuilder::new(name, capacity)),
            Kind::Seed => Builder::Seed(PrimitiveChunkedBuilder::new(name, capacity)),
            Kind::Float => Builder::Float(PrimitiveChunkedBuilder::new(name, capacity)),
            Kind::Bool => Builder::Bool(BooleanChunkedBuilder::new(name, capacity)),
        }
    }

    /// Appends one SQLite value; `Err` says what was wrong with it.
    pub(super) fn push(&mut self, v: ValueRef<'_>) -> Result<(), String> {
        match (self, v) {
            (Builder::Str(b), ValueRef::Null) => b.append_null(),
            (Builder::Int(b), ValueRef::Null) => b.append_null(),
            (Builder::Seed(b), ValueRef::Null) => b.append_null(),
            (Builder::Float(b), ValueRef::Null) => b.append_null(),
            (Builder::Bool(b), ValueRef::Null) => b.append_null(),
            (Builder::Bool(b), ValueRef::Integer(i)) => b.append_value(i != 0),
            (Builder::Str(b), ValueRef::Text(t)) => {
                let s = std::str::from_utf8(t).map_err(|e| format!("text is not UTF-8: {e}"))?;
                b.append_value(s);
            }
            (Builder::Int(b), ValueRef::Integer(i)) => b.append_value(i),
            // The same 64 bits read back as the u64 they were written from.
            (Builder::Seed(b), ValueRef::Integer(i)) => b.append_value(i as u64),
            (Builder::Float(b), ValueRef::Real(x)) => b.append_value(x),
            // SQLite stores 1.0 in a REAL column as it likes; accept integers as floats.
            (Builder::Float(b), ValueRef::Integer(i)) => b.append_value(i as f64),
            (_, other) => return Err(format!("unexpected {:?} value", other.data_type())),
        }
        Ok(())
    }

    pub(super) fn finish(self) -> Column {
        match self {
            Builder::Str(b) => b.finish().into_column(),
            Builder::Int(b) => b.finish().into_column(),
            Builder::Seed(b) => b.finish().into_column(),
            Builder::Float(b) => b.finish().into_column(),
            Builder::Bool(b) => b.finish().into_column(),
        }
    }
}

/// The SQL of a column: `infra` is true unless the outcome is one of the graders' agent
/// outcomes (so a new infrastructure outcome there is excluded from scores here too).
pub(super) fn sql_of(s: &Spec) -> String {
    if s.sql != INFRA_SQL {
        return s.sql.to_owned();
    }
    let agent: Vec<String> = TrialOutcome::ALL
        .iter()
        .filter(|o| !o.is_infrastructure())
        .map(|o| format!("'{}'", o.as_str()))
        .collect();
    format!("outcome NOT IN ({})", agent.join(", "))
}
