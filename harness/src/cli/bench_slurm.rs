//! `geode bench slurm-overhead PACK`: what running a pack on the Slurm cluster this machine's
//! clients talk to (`SLURM_CONF`, or the site's default) costs per trial over running it here.
//! The pack runs `-r` times each way, alternated (local, then Slurm), as real `geode run`
//! processes with the same options; each pair gives (Slurm wall - local wall) / trials. Where
//! the time went comes from the run store's rows: before the first trial started, between
//! trials (no trial running), after the last one ended, and inside the trials; the difference
//! of the time outside trials, per trial, is the executor's share alone (the trials' own times
//! vary more than it on a loaded machine).
//!
//! The jobs folder must be one the cluster's nodes see at the same path (a fresh folder in the
//! current one by default, removed at the end unless `--keep`).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Instant;

use anyhow::{Context, bail};
use chrono::{DateTime, Utc};
use clap::Args;
use geode_harness::store::{RunStore, TrialRow};
use serde::Serialize;

use super::exit::Exit;

#[derive(Debug, Args)]
pub struct BenchSlurmArgs {
    /// The task pack, run on this machine and on the cluster.
    pack: PathBuf,
    /// Pairs of runs (one local, then one on Slurm).
    #[arg(short = 'r', long, default_value_t = 3)]
    repeat: usize,
    /// Trials running at once, in both runs (`geode run -n`).
    #[arg(short = 'n', long, default_value_t = 1)]
    concurrency: usize,
    /// Only tasks whose id matches this glob (`geode run --tasks`).
    #[arg(long)]
    tasks: Option<String>,
    /// The agent's model route: the oracle by default, so the figure is the executor's, not a
    /// model's.
    #[arg(long, default_value = "oracle")]
    model: String,
    /// The jobs folder of every run, on the filesystem the nodes share [default: a fresh
    /// folder in the current one].
    #[arg(long)]
    jobs_dir: Option<PathBuf>,
    /// Keep the jobs folder (the runs, their Slurm logs and results) instead of removing it.
    #[arg(long)]
    keep: bool,
    /// One JSON object on stdout instead of lines.
    #[arg(long)]
    json: bool,
    /// Options for the Slurm runs only, after `--` (`--partition debug`,
    /// `--sbatch-arg=--qos=high`, `--worker-bin /shared/bin/geode`).
    #[arg(last = true)]
    slurm_args: Vec<String>,
}

/// Where one run's wall time went, from its stored trials.
#[derive(Debug, Clone, Serialize)]
struct Split {
    /// The process's start to the first trial's start (planning; for Slurm the first
    /// submission, scheduling and the worker's start).
    before_s: f64,
    /// Time within the run with no trial running (for Slurm at `-n 1`: hand-overs between
    /// array tasks and workers' starts).
    between_s: f64,
    /// The last trial's end to the process's exit (for Slurm: noticing the last result).
    after_s: f64,
    /// Trial time summed over the trials (start to end of each).
    trials_s: f64,
}

impl Split {
    /// The run's time with no trial running.
    fn idle(&self) -> f64 {
        self.before_s + self.between_s + self.after_s
    }
}

#[derive(Debug, Clone, Serialize)]
struct Run {
    run_id: String,
    wall_s: f64,
    split: Split,
}

#[derive(Debug, Serialize)]
struct Pair {
    local: Run,
    slurm: Run,
    /// (Slurm wall - local wall) / trials.
    overhead_per_trial_s: f64,
    /// (Slurm's time with no trial running - local's) / trials: the executor's own share,
    /// without the trials' own times, which a loaded machine makes vary more than it.
    idle_overhead_per_trial_s: f64,
}

#[derive(Debug, Serialize)]
struct Report {
    pack: String,
    trials: usize,
    concurrency: usize,
    pairs: Vec<Pair>,
    median_overhead_per_trial_s: f64,
    median_idle_overhead_per_trial_s: f64,
    /// The machine's 1-minute load average before the first run and after the last.
    load_before: Option<f64>,
    load_after: Option<f64>,
}

fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn time(text: &str, what: &str) -> anyhow::Result<DateTime<Utc>> {
    Ok(DateTime::parse_from_rfc3339(text)
        .with_context(|| format!("{what}: {text:?} is not an RFC 3339 time"))?
        .with_timezone(&Utc))
}

fn secs(from: DateTime<Utc>, to: DateTime<Utc>) -> f64 {
    (to - from).as_seconds_f64()
}

/// Each stored trial's (start, end).
fn spans(rows: &[TrialRow]) -> anyhow::Result<Vec<(DateTime<Utc>, DateTime<Utc>)>> {
    rows.iter()
        .map(|r| {
            let start = time(&r.started, &format!("trial {} started", r.trial_name))?;
            let end = time(&r.finished, &format!("trial {} finished", r.trial_name))?;
            Ok((start, end))
        })
        .collect()
}

/// The split of one run that ran from `began` to `ended`, its trials' spans `spans`.
fn split(
    mut spans: Vec<(DateTime<Utc>, DateTime<Utc>)>,
    began: DateTime<Utc>,
    ended: DateTime<Utc>,
) -> anyhow::Result<Split> {
    spans.sort();
    let (Some(first), Some(last_end)) = (spans.first(), spans.iter().map(|s| s.1).max()) else {
        bail!("the run stored no trial");
    };
    // Idle time inside the run: the gaps of the union of the trials' spans.
    let mut between = 0.0;
    let mut covered = first.1;
    for (start, end) in &spans[1..] {
        if *start > covered {
            between += secs(covered, *start);
        }
        covered = covered.max(*end);
    }
    Ok(Split {
        before_s: secs(began, first.0),
        between_s: between,
        after_s: secs(last_end, ended),
        trials_s: spans.iter().map(|(s, e)| secs(*s, *e)).sum(),
    })
}

impl BenchSlurmArgs {
    /// One `geode run` of the pack, timed; its stderr kept in `log`.
    async fn run(&self, jobs: &Path, slurm: bool, log: &Path) -> anyhow::Result<(Run, usize)> {
        let exe = std::env::current_exe().context("locating the geode executable")?;
        let mut cmd = tokio::process::Command::new(exe);
        cmd.arg("run")
            .arg(&self.pack)
            .args(["--model", &self.model, "--json"])
            .args(["-n", &self.concurrency.to_string()])
            .arg("--jobs-dir")
            .arg(jobs);
        if let Some(glob) = &self.tasks {
            cmd.args(["--tasks", glob]);
        }
        if slurm {
            cmd.args(["--executor", "slurm"]).args(&self.slurm_args);
        }
        let stderr =
            std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
        cmd.stdout(Stdio::piped()).stderr(stderr).kill_on_drop(true);
        let began = Utc::now();
        let clock = Instant::now();
        let out = cmd.output().await.context("starting geode run")?;
        let wall_s = clock.elapsed().as_secs_f64();
        let ended = Utc::now();
        let how = if slurm { "on Slurm" } else { "locally" };
        if !out.status.success() {
            bail!(
                "the run {how} failed ({}); its log: {}",
                out.status,
                log.display()
            );
        }
        let summary: serde_json::Value = serde_json::from_slice(&out.stdout)
            .with_context(|| format!("the run {how} printed no JSON summary"))?;
        let run_id = summary["run_id"]
            .as_str()
            .context("the run's summary has no run_id")?
            .to_string();
        let store = RunStore::open(&jobs.join("geode.db"))?;
        let rows = store.trials(&run_id)?;
        let passed = rows
            .iter()
            .filter(|r| r.outcome == geode_graders::TrialOutcome::Passed)
            .count();
        if passed != rows.len() {
            // An overhead over failed trials measures something else (a model, a broken task).
            bail!(
                "the run {how} ({run_id}) passed {passed} of {} trials; its log: {}",
                rows.len(),
                log.display()
            );
        }
        let split = split(spans(&rows)?, began, ended)?;
        Ok((
            Run {
                run_id,
                wall_s,
                split,
            },
            rows.len(),
        ))
    }
}

fn line(what: &str, r: &Run) -> String {
    format!(
        "{what} {:>6.1} s (before first trial {:.2} s, between trials {:.2} s, after last {:.2} s, \
         in trials {:.1} s)",
        r.wall_s, r.split.before_s, r.split.between_s, r.split.after_s, r.split.trials_s
    )
}

pub async fn run(args: BenchSlurmArgs) -> anyhow::Result<Exit> {
    if args.repeat == 0 {
        bail!("-r must be at least 1");
    }
    let (jobs, made) = match &args.jobs_dir {
        Some(d) => (std::path::absolute(d)?, false),
        None => {
            let d = std::path::absolute(format!(
                ".geode-bench-slurm-{}",
                uuid::Uuid::new_v4().simple()
            ))?;
            (d, true)
        }
    };
    std::fs::create_dir_all(&jobs).with_context(|| format!("creating {}", jobs.display()))?;
    let result = measure(&args, &jobs).await;
    if made && !args.keep {
        let _ = std::fs::remove_dir_all(&jobs);
    } else {
        say!("the runs are kept in {}", jobs.display());
    }
    let report = result?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    }
    Ok(Exit::Success)
}

async fn measure(args: &BenchSlurmArgs, jobs: &Path) -> anyhow::Result<Report> {
    let load_before = load_average();
    let mut pairs = Vec::new();
    let mut trials = 0;
    for i in 0..args.repeat {
        let (local, n) = args
            .run(jobs, false, &jobs.join(format!("bench-{i}-local.log")))
            .await?;
        let (slurm, m) = args
            .run(jobs, true, &jobs.join(format!("bench-{i}-slurm.log")))
            .await?;
        if n != m {
            bail!("the local run stored {n} trials and the Slurm run {m}");
        }
        trials = n;
        let overhead = (slurm.wall_s - local.wall_s) / n as f64;
        let idle = (slurm.split.idle() - local.split.idle()) / n as f64;
        if !args.json {
            println!("pair {}: {n} trials at -n {}", i + 1, args.concurrency);
            println!("  {}", line("local", &local));
            println!("  {}", line("slurm", &slurm));
            println!("  overhead per trial: {overhead:.3} s (outside trials: {idle:.3} s)");
        }
        pairs.push(Pair {
            local,
            slurm,
            overhead_per_trial_s: overhead,
            idle_overhead_per_trial_s: idle,
        });
    }
    let mut overheads: Vec<f64> = pairs.iter().map(|p| p.overhead_per_trial_s).collect();
    overheads.sort_by(f64::total_cmp);
    let median = overheads[overheads.len() / 2];
    let mut idles: Vec<f64> = pairs.iter().map(|p| p.idle_overhead_per_trial_s).collect();
    idles.sort_by(f64::total_cmp);
    let median_idle = idles[idles.len() / 2];
    let load_after = load_average();
    if !args.json {
        println!(
            "{} pairs over {}: Slurm overhead per trial median {median:.3} s (min {:.3} s, max \
             {:.3} s), outside trials median {median_idle:.3} s (min {:.3} s, max {:.3} s); load \
             average {} before, {} after",
            pairs.len(),
            args.pack.display(),
            overheads[0],
            overheads[overheads.len() - 1],
            idles[0],
            idles[idles.len() - 1],
            load_before.map_or("?".into(), |l| format!("{l:.2}")),
            load_after.map_or("?".into(), |l| format!("{l:.2}")),
        );
    }
    Ok(Report {
        pack: args.pack.display().to_string(),
        trials,
        concurrency: args.concurrency,
        pairs,
        median_overhead_per_trial_s: median,
        median_idle_overhead_per_trial_s: median_idle,
        load_before,
        load_after,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runs_time_splits_into_before_between_after_and_in_trials() {
        let t = |s: &str| time(&format!("2026-01-01T00:00:{s}Z"), "t").unwrap();
        let spans = vec![
            (t("07.5"), t("09")),
            (t("02"), t("05")),
            // Overlaps the first: no idle time between them.
            (t("04"), t("06")),
        ];
        let s = split(spans, t("00"), t("10")).unwrap();
        assert_eq!(s.before_s, 2.0);
        assert_eq!(s.between_s, 1.5);
        assert_eq!(s.after_s, 1.0);
        assert_eq!(s.trials_s, 6.5);
        assert_eq!(s.idle(), 4.5);
        assert!(split(Vec::new(), t("00"), t("10")).is_err());
    }
}
