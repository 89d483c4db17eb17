//! `geode-report`: the reports executable. The `geode` binary runs it for `geode report ...` and
//! `geode compare ...` with the remaining arguments unchanged (as git runs external
//! subcommands), which keeps polars out of `geode` itself. This file only parses arguments and
//! calls the library.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand, ValueEnum};
use geode_reports::synth::{SynthSpec, synthetic_store};
use geode_reports::{
    RewardKey, TextFormat, TrialColumns, build, export, load, load_scoring, render, resolve_run,
};

#[derive(Parser)]
#[command(
    name = "geode-report",
    version,
    about = "Reports, comparisons and exports of GEODE runs"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Tables and plots of one or more runs, or their trial table as Parquet/CSV.
    Report {
        /// Run ids in the jobs folder, or paths to run folders (<jobs>/<run_id>).
        #[arg(required = true, value_name = "RUN")]
        runs: Vec<String>,
        #[arg(long, value_enum, default_value_t = ReportFormat::Term)]
        format: ReportFormat,
        /// Output file (default: stdout; for parquet, trials.parquet).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Where runs are kept (the run store geode.db and one folder per run).
        #[arg(long, default_value = "jobs")]
        jobs_dir: PathBuf,
        /// Score this key of each trial's reward.json (Harbor's multi-reward tasks) instead of
        /// its headline reward; a trial without the key counts as infrastructure.
        #[arg(long, value_name = "KEY")]
        reward_key: Option<String>,
    },
    /// Paired comparison of RUN_B (candidate) against RUN_A (baseline) on their shared tasks.
    Compare {
        #[arg(value_name = "RUN_A")]
        baseline: String,
        #[arg(value_name = "RUN_B")]
        candidate: String,
        #[arg(long, value_enum, default_value_t = CompareFormat::Term)]
        format: CompareFormat,
        /// Output file (default: stdout).
        #[arg(long)]
        out: Option<PathBuf>,
        #[arg(long, default_value = "jobs")]
        jobs_dir: PathBuf,
        /// Score this key of each trial's reward.json (Harbor's multi-reward tasks) instead of
        /// its headline reward; a trial without the key counts as infrastructure.
        #[arg(long, value_name = "KEY")]
        reward_key: Option<String>,
    },
    /// Benchmark: time `report` on a synthetic store (created if missing) and print the median
    /// and the peak memory.
    Bench {
        /// Jobs folder of the synthetic store.
        #[arg(long, default_value = "bench-jobs")]
        jobs_dir: PathBuf,
        #[arg(long, default_value_t = 2)]
        runs: usize,
        #[arg(long, default_value_t = 5000)]
        tasks: usize,
        #[arg(long, default_value_t = 100)]
        attempts: usize,
        #[arg(long, default_value_t = 5)]
        iterations: usize,
        #[arg(long, value_enum, default_value_t = ReportFormat::Term)]
        format: ReportFormat,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum ReportFormat {
    Term,
    Md,
    Html,
    Parquet,
    Csv,
}

#[derive(Clone, Copy, ValueEnum)]
enum CompareFormat {
    Term,
    Md,
    Html,
}

fn text_format(f: ReportFormat) -> Option<TextFormat> {
    match f {
        ReportFormat::Term => Some(TextFormat::Term),
        ReportFormat::Md => Some(TextFormat::Markdown),
        ReportFormat::Html => Some(TextFormat::Html),
        ReportFormat::Parquet | ReportFormat::Csv => None,
    }
}

fn emit(text: &str, out: Option<&Path>) -> Result<()> {
    match out {
        Some(p) => {
            std::fs::write(p, text).with_context(|| format!("{}: cannot write", p.display()))
        }
        None => {
            let mut so = std::io::stdout().lock();
            so.write_all(text.as_bytes())
                .and_then(|_| so.flush())
                .context("stdout")
        }
    }
}

/// Runs `report` once; returns the number of trials read.
fn report(
    runs: &[String],
    format: ReportFormat,
    out: Option<&Path>,
    jobs: &Path,
    reward_key: Option<&RewardKey>,
) -> Result<usize> {
    let refs: Vec<_> = runs.iter().map(|r| resolve_run(r, jobs)).collect();
    match text_format(format) {
        Some(tf) => {
            let loaded = load_scoring(&refs, TrialColumns::Report, reward_key)?;
            let r = build(&loaded)?;
            emit(&render::report(&r, tf), out)?;
            Ok(loaded.trials.height())
        }
        None => {
            let mut loaded = load_scoring(&refs, TrialColumns::Export, reward_key)?;
            let n = loaded.trials.height();
            if let ReportFormat::Parquet = format {
                let path = out
                    .map(Path::to_path_buf)
                    .unwrap_or_else(|| "trials.parquet".into());
                export::write_parquet(&mut loaded.trials, &path)?;
                eprintln!("wrote {n} trials to {}", path.display());
            } else if let Some(p) = out {
                let f = std::fs::File::create(p)
                    .with_context(|| format!("{}: cannot create", p.display()))?;
                export::write_csv(
                    &mut loaded.trials,
                    std::io::BufWriter::new(f),
                    &p.display().to_string(),
                )?;
                eprintln!("wrote {n} trials to {}", p.display());
            } else {
                export::write_csv(&mut loaded.trials, std::io::stdout().lock(), "stdout")?;
            }
            Ok(n)
        }
    }
}

/// Peak resident memory of this process (Linux `VmHWM`), in MiB.
fn peak_rss_mib() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

fn bench(spec: SynthSpec, jobs: &Path, iterations: usize, format: ReportFormat) -> Result<()> {
    let store = jobs.join(geode_reports::load::STORE_FILE);
    let runs = if store.is_file() {
        geode_reports::Store::open(&store)?.run_ids()?
    } else {
        std::fs::create_dir_all(jobs)
            .with_context(|| format!("{}: cannot create", jobs.display()))?;
        let t = Instant::now();
        let ids = synthetic_store(&store, spec)?;
        eprintln!(
            "created {} in {:.1} s",
            store.display(),
            t.elapsed().as_secs_f64()
        );
        ids
    };
    if iterations == 0 {
        bail!("--iterations must be at least 1");
    }
    let sink = std::env::temp_dir().join(format!("geode-report-bench-{}.out", std::process::id()));
    let mut times = Vec::with_capacity(iterations);
    let mut trials = 0;
    for _ in 0..iterations {
        let t = Instant::now();
        trials = report(&runs, format, Some(&sink), jobs, None)?;
        times.push(t.elapsed().as_secs_f64());
    }
    let _ = std::fs::remove_file(&sink);
    if let Some(tf) = text_format(format) {
        // One more pass, split by stage, to show where the time goes.
        let refs: Vec<_> = runs.iter().map(|r| resolve_run(r, jobs)).collect();
        let t = Instant::now();
        let loaded = load(&refs, TrialColumns::Report)?;
        let t_load = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let r = build(&loaded)?;
        let t_build = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let text = render::report(&r, tf);
        eprintln!(
            "stages: load {t_load:.3} s, tables {t_build:.3} s, render {:.3} s ({} bytes)",
            t.elapsed().as_secs_f64(),
            text.len()
        );
    }
    times.sort_by(f64::total_cmp);
    let median = times[times.len() / 2];
    writeln!(
        std::io::stdout(),
        "report of {} runs, {trials} trials: median {median:.3} s (min {:.3}, max {:.3}, {iterations} iterations); peak RSS {} MiB",
        runs.len(),
        times[0],
        times[times.len() - 1],
        peak_rss_mib()
            .map(|m| format!("{m:.0}"))
            .unwrap_or_else(|| "?".into())
    )
    .context("stdout")?;
    Ok(())
}

/// The reward key to score, said on stderr so a report read later is not mistaken for one of
/// the headline reward.
fn scored_key(key: Option<&str>) -> Result<Option<RewardKey>> {
    let Some(key) = key else { return Ok(None) };
    let key = RewardKey::parse(key)?;
    eprintln!(
        "scoring reward key {:?} of each trial's reward.json",
        key.as_str()
    );
    Ok(Some(key))
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Report {
            runs,
            format,
            out,
            jobs_dir,
            reward_key,
        } => {
            let key = scored_key(reward_key.as_deref())?;
            report(&runs, format, out.as_deref(), &jobs_dir, key.as_ref()).map(|_| ())
        }
        Command::Compare {
            baseline,
            candidate,
            format,
            out,
            jobs_dir,
            reward_key,
        } => {
            let key = scored_key(reward_key.as_deref())?;
            let refs = [
                resolve_run(&baseline, &jobs_dir),
                resolve_run(&candidate, &jobs_dir),
            ];
            let loaded = load_scoring(&refs, TrialColumns::Report, key.as_ref())?;
            let c =
                geode_reports::compare::compare(&loaded.trials, &refs[0].run_id, &refs[1].run_id)
                    .context("comparing runs")?;
            let tf = match format {
                CompareFormat::Term => TextFormat::Term,
                CompareFormat::Md => TextFormat::Markdown,
                CompareFormat::Html => TextFormat::Html,
            };
            emit(&render::comparison(&c, tf), out.as_deref())
        }
        Command::Bench {
            jobs_dir,
            runs,
            tasks,
            attempts,
            iterations,
            format,
        } => bench(
            SynthSpec {
                runs,
                tasks,
                attempts,
                seed: 7,
            },
            &jobs_dir,
            iterations,
            format,
        ),
    }
}

fn main() {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            // --help and --version are successes; every usage error exits 1 like any failure.
            let code = if e.use_stderr() { 1 } else { 0 };
            let _ = e.print();
            std::process::exit(code);
        }
    };
    if let Err(e) = run(cli) {
        // `geode report | head`: the reader is gone, which is no failure of the report; end
        // with the status a shell gives a pipe's writer killed by SIGPIPE, as `geode` does.
        if reader_gone(&e) {
            std::process::exit(141);
        }
        eprintln!("geode-report: {e:#}");
        std::process::exit(1);
    }
}

/// The error is a write to a standard output whose reader has gone (directly, or as the
/// message of a polars error that wraps it).
fn reader_gone(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            || cause.to_string().contains("Broken pipe")
    })
}
