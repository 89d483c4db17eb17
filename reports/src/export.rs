//! The trial table for notebooks: every column of every finished trial (see
//! [`crate::load::TrialColumns::Export`]), as Parquet (typed, compressed) or CSV.

use std::fs::File;
use std::io::Write;
use std::path::Path;

use polars::prelude::*;

use crate::error::ReportError;

/// Writes `trials` to `path` as Parquet (zstd, polars' default).
pub fn write_parquet(trials: &mut DataFrame, path: &Path) -> Result<(), ReportError> {
    let file = File::create(path).map_err(ReportError::io(path))?;
    ParquetWriter::new(file)
        .finish(trials)
        .map(|_| ())
        .map_err(ReportError::polars(path.display().to_string()))
}

/// Writes `trials` as CSV with a header row to `out`; `what` names the destination in errors.
pub fn write_csv(trials: &mut DataFrame, out: impl Write, what: &str) -> Result<(), ReportError> {
    CsvWriter::new(out)
        .include_header(true)
        .finish(trials)
        .map_err(ReportError::polars(what))
}

/// Reads a Parquet file written by [`write_parquet`] (tests, and users checking a file).
pub fn read_parquet(path: &Path) -> Result<DataFrame, ReportError> {
    let file = File::open(path).map_err(ReportError::io(path))?;
    ParquetReader::new(file)
        .finish()
        .map_err(ReportError::polars(path.display().to_string()))
}
