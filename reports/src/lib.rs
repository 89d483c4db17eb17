#![warn(missing_docs)]
//! GEODE reports: tables, plots and exports of the harness's run store.
//!
//! polars lives only in this crate, behind the separate `geode-report` executable (which the
//! `geode` binary runs for `geode report` and `geode compare`), so nothing else waits for it to
//! compile. The pipeline: [`load`] reads runs from `<jobs>/geode.db` into DataFrames, [`report`]
//! aggregates them (per task in polars, scores as in the harness's end-of-run summary, paired
//! comparisons with the crucible's statistics), [`render`] formats the result as terminal text,
//! Markdown or one self-contained HTML page, and [`export`] writes the trial table as Parquet or
//! CSV.

// Libraries do not print: they return values or emit events, and only the binaries decide
// what reaches stdout and stderr.
#![deny(clippy::print_stdout, clippy::print_stderr)]

pub mod compare;
pub mod error;
pub mod export;
pub mod frames;
pub mod load;
pub mod render;
pub mod report;
pub use geode_graders::run_store::synth;

pub use error::ReportError;
pub use load::{Loaded, RewardKey, RunRef, Store, TrialColumns, load, load_scoring, resolve_run};
pub use render::TextFormat;
pub use report::{Report, build};
