//! Paired comparison of two runs of a loaded store: the trial frame's columns handed to the one
//! pairing and its statistics (`geode_graders::compare`), which `geode view`'s paired page
//! also counts through.

use polars::prelude::*;

pub use geode_graders::compare::{Comparison, TaskDelta, report_rule, report_seeds};
use geode_graders::compare::{RunColumns, compare as compare_columns};

use crate::frames::Cols;

/// The trials of `run`, sorted by (task, attempt), with a missing reward as 0.
fn sorted_side(trials: &DataFrame, run: &str) -> PolarsResult<DataFrame> {
    trials
        .clone()
        .lazy()
        .filter(col("run_id").eq(lit(run)))
        .select([
            col("task_id"),
            col("category"),
            col("attempt"),
            col("infra"),
            col("reward").fill_null(lit(0.0)),
        ])
        .sort(["task_id", "attempt"], SortMultipleOptions::default())
        .collect()
}

/// One run's columns, borrowed from its sorted frame.
struct Side<'a> {
    task: Vec<&'a str>,
    category: Vec<&'a str>,
    attempt: Vec<i64>,
    infra: Vec<bool>,
    reward: Vec<f64>,
}

impl<'a> Side<'a> {
    fn new(df: &'a DataFrame) -> PolarsResult<Side<'a>> {
        let c = Cols::new(df);
        let text = |name| -> PolarsResult<Vec<&'a str>> {
            Ok(c.str(name)?.into_iter().map(|s| s.unwrap_or("")).collect())
        };
        Ok(Side {
            task: text("task_id")?,
            category: text("category")?,
            attempt: c.i64("attempt")?,
            infra: c.bool("infra")?,
            reward: c
                .f64("reward")?
                .into_iter()
                .map(|r| r.unwrap_or(0.0))
                .collect(),
        })
    }

    fn columns(&self) -> RunColumns<'_> {
        RunColumns {
            task: &self.task,
            category: &self.category,
            attempt: &self.attempt,
            infra: &self.infra,
            reward: &self.reward,
        }
    }
}

/// Compares `candidate` with `baseline` over the trials of both in `trials`.
pub fn compare(trials: &DataFrame, baseline: &str, candidate: &str) -> PolarsResult<Comparison> {
    let a = sorted_side(trials, baseline)?;
    let b = sorted_side(trials, candidate)?;
    let (a, b) = (Side::new(&a)?, Side::new(&b)?);
    compare_columns((baseline, a.columns()), (candidate, b.columns()))
        .map_err(|e| PolarsError::ComputeError(e.to_string().into()))
}
