//! The polars side: aggregations over the trial DataFrame (the only place a report touches all
//! trials) and typed column access for turning small aggregated frames into Rust rows.
//!
//! Rewards follow the harness summary: an infrastructure trial (column `infra`) is left out of
//! every score, and a non-infrastructure trial without a reward counts as 0.

use polars::prelude::*;

/// Per (run, task): counts, means, the reward spread, tokens, cost and time.
///
/// Columns: run_id, task_id, category, difficulty, trials (valid), infra_trials, passes,
/// mean_reward, reward_sd, mean_reward_infra_zero, input_tokens, cached_tokens, output_tokens,
/// model_calls, cost_usd, mean_duration_sec, total_duration_sec.
pub fn task_frame(trials: &DataFrame) -> PolarsResult<DataFrame> {
    let valid = col("infra").not();
    let reward = col("reward").fill_null(lit(0.0));
    let int = |e: Expr| e.cast(DataType::Int64);
    trials
        .clone()
        .lazy()
        .group_by([col("run_id"), col("task_id")])
        .agg([
            col("category").first(),
            col("difficulty").first(),
            int(valid.clone().sum()).alias("trials"),
            int(col("infra").sum()).alias("infra_trials"),
            int(reward
                .clone()
                .gt_eq(lit(geode_graders::PASS_THRESHOLD))
                .and(valid.clone())
                .sum())
            .alias("passes"),
            reward
                .clone()
                .filter(valid.clone())
                .mean()
                .alias("mean_reward"),
            reward.clone().filter(valid).std(1).alias("reward_sd"),
            when(col("infra"))
                .then(lit(0.0))
                .otherwise(reward)
                .mean()
                .alias("mean_reward_infra_zero"),
            int(col("input_tokens").sum()),
            int(col("cached_tokens").sum()),
            int(col("output_tokens").sum()),
            int(col("model_calls").sum()),
            col("cost_usd").sum(),
            col("duration_sec").mean().alias("mean_duration_sec"),
            col("duration_sec").sum().alias("total_duration_sec"),
        ])
        .collect()
}

/// Per run: trials, tokens, model calls, cost, trial time (sum, mean, median, 95th percentile)
/// and wall time (first start to last finish).
pub fn usage_frame(trials: &DataFrame) -> PolarsResult<DataFrame> {
    let int = |e: Expr| e.cast(DataType::Int64);
    let d = || col("duration_sec");
    trials
        .clone()
        .lazy()
        .group_by([col("run_id")])
        .agg([
            int(len()).alias("trials"),
            int(col("input_tokens").sum()),
            int(col("cached_tokens").sum()),
            int(col("output_tokens").sum()),
            int(col("model_calls").sum()),
            col("cost_usd").sum(),
            d().sum().alias("trial_seconds"),
            d().mean().alias("mean_trial_sec"),
            d().quantile(lit(0.5), QuantileMethod::Linear)
                .alias("p50_trial_sec"),
            d().quantile(lit(0.95), QuantileMethod::Linear)
                .alias("p95_trial_sec"),
            (col("finished_unix").max() - col("started_unix").min()).alias("wall_sec"),
        ])
        .collect()
}

/// Trial counts per (run, outcome).
pub fn outcome_frame(trials: &DataFrame) -> PolarsResult<DataFrame> {
    trials
        .clone()
        .lazy()
        .group_by([col("run_id"), col("outcome")])
        .agg([len().cast(DataType::Int64).alias("trials")])
        .collect()
}

/// Errors by class: every trial that neither passed nor failed, or raised an exception,
/// grouped by (run, outcome, exception class), with the tasks it hit and one example message.
pub fn error_frame(trials: &DataFrame) -> PolarsResult<DataFrame> {
    let plain = col("outcome")
        .eq(lit("passed"))
        .or(col("outcome").eq(lit("failed")));
    let msg = || col("exception_message");
    trials
        .clone()
        .lazy()
        .filter(plain.not().or(col("exception_class").is_not_null()))
        .group_by([col("run_id"), col("outcome"), col("exception_class")])
        .agg([
            len().cast(DataType::Int64).alias("trials"),
            col("task_id")
                .n_unique()
                .cast(DataType::Int64)
                .alias("tasks"),
            col("infra").first(),
            msg().filter(msg().is_not_null()).first().alias("example"),
        ])
        .collect()
}

/// Typed views of a (small, aggregated) frame's columns.
pub(crate) struct Cols<'a> {
    df: &'a DataFrame,
}

impl<'a> Cols<'a> {
    pub fn new(df: &'a DataFrame) -> Self {
        Cols { df }
    }

    pub fn str(&self, name: &str) -> PolarsResult<Vec<Option<&'a str>>> {
        Ok(self.df.column(name)?.str()?.iter().collect())
    }

    /// Text with nulls as "".
    pub fn text(&self, name: &str) -> PolarsResult<Vec<String>> {
        Ok(self
            .str(name)?
            .iter()
            .map(|s| s.unwrap_or("").to_owned())
            .collect())
    }

    pub fn f64(&self, name: &str) -> PolarsResult<Vec<Option<f64>>> {
        let c = self.df.column(name)?.cast(&DataType::Float64)?;
        Ok(c.f64()?.iter().collect())
    }

    pub fn i64(&self, name: &str) -> PolarsResult<Vec<i64>> {
        let c = self.df.column(name)?.cast(&DataType::Int64)?;
        Ok(c.i64()?.iter().map(|v| v.unwrap_or(0)).collect())
    }

    pub fn bool(&self, name: &str) -> PolarsResult<Vec<bool>> {
        Ok(self
            .df
            .column(name)?
            .bool()?
            .iter()
            .map(|v| v.unwrap_or(false))
            .collect())
    }
}
