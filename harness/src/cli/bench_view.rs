//! `geode bench view`: how fast `geode view` answers over a large jobs folder. A synthetic
//! store (the graders' synthesizer, the reports' benchmark's too) of one run with N trials,
//! each with a small ATIF trajectory on disk, is made once in `--dir`; then the viewer is
//! started in this process on loopback and asked over HTTP, as the page asks: the runs list
//! (every run's summary), the first page of the run's trials, filtered pages, and a transcript
//! search. Medians and maxima of `--repeat` requests each, in milliseconds.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use geode_graders::run_store::STORE_FILE;
use geode_graders::run_store::synth::{SynthSpec, synthetic_store};
use geode_harness::view::{ViewOptions, Viewer};
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use super::exit::Exit;

#[derive(Debug, Args)]
pub struct BenchViewArgs {
    /// Trials in the synthetic run (tasks x 5 attempts).
    #[arg(long, default_value_t = 10_000)]
    trials: usize,
    /// Where the synthetic jobs folder is kept (made when missing, reused when present).
    dir: PathBuf,
    /// Requests per measurement.
    #[arg(short = 'r', long, default_value_t = 20)]
    repeat: usize,
    /// One JSON object on stdout instead of lines.
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct Measure {
    name: &'static str,
    path: String,
    median_ms: f64,
    max_ms: f64,
    /// What the answer counted (trials matched, runs listed).
    matched: u64,
}

#[derive(Serialize)]
struct Report {
    trials: usize,
    /// The first answer of all: the folder read and every run summarized, cold.
    first_list_ms: f64,
    measures: Vec<Measure>,
}

const ATTEMPTS: usize = 5;

/// The synthetic folder: the store and one small trajectory per trial (what a transcript
/// search reads), words chosen from the trial's index so a search finds a known share.
fn make_folder(dir: &Path, trials: usize) -> anyhow::Result<String> {
    let store = dir.join(STORE_FILE);
    if store.is_file() {
        let conn = rusqlite::Connection::open(&store)?;
        let run: String = conn.query_row("SELECT run_id FROM runs LIMIT 1", [], |r| r.get(0))?;
        return Ok(run);
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let spec = SynthSpec {
        runs: 1,
        tasks: trials.div_ceil(ATTEMPTS),
        attempts: ATTEMPTS,
        seed: 7,
    };
    let run = synthetic_store(&store, spec)?
        .pop()
        .context("the synthesizer made no run")?;
    let conn = rusqlite::Connection::open(&store)?;
    let mut st = conn.prepare("SELECT trial_name FROM trials WHERE run_id = ?1")?;
    let names: Vec<String> = st
        .query_map([&run], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    for (i, name) in names.iter().enumerate() {
        let agent = dir.join(&run).join(name).join("agent");
        std::fs::create_dir_all(&agent)?;
        let word = if i % 10 == 0 { "needle" } else { "hay" };
        let doc = serde_json::json!({
            "schema_version": "ATIF-v1.7",
            "session_id": name,
            "agent": {"name": "synthetic", "model_name": "synthetic/model"},
            "steps": [
                {"step_id": 1, "source": "user", "message": "Solve the task."},
                {"step_id": 2, "source": "agent", "message": format!("Looking for the {word}."),
                 "tool_calls": [{"tool_call_id": "c1", "function_name": "bash",
                                 "arguments": {"command": "ls -la"}}],
                 "observation": {"results": [{"source_call_id": "c1",
                                              "content": "total 0\n".repeat(20)}]}},
            ],
        });
        std::fs::write(agent.join("trajectory.json"), doc.to_string())?;
    }
    Ok(run)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

pub async fn run(a: BenchViewArgs) -> anyhow::Result<Exit> {
    let t = Instant::now();
    let run = make_folder(&a.dir, a.trials)?;
    if !a.json {
        say!(
            "{}: {} trials ready in {:.1} s",
            a.dir.display(),
            a.trials,
            t.elapsed().as_secs_f64()
        );
    }
    let viewer = Viewer::bind(ViewOptions {
        jobs: a.dir.clone(),
        addr: "127.0.0.1:0".parse()?,
        allow_remote: false,
        searches: Vec::new(),
    })
    .await?;
    let url = viewer.url();
    let (base, token) = url
        .split_once("/?token=")
        .context("the viewer's address has no token")?;
    let (base, token) = (base.to_owned(), token.to_owned());
    let shutdown = CancellationToken::new();
    let server = tokio::spawn(viewer.serve(shutdown.clone()));
    let client = reqwest::Client::new();
    let get = |path: String| {
        let client = client.clone();
        let url = format!("{base}{path}&token={token}");
        async move {
            let t = Instant::now();
            let r = client.get(&url).send().await?.error_for_status()?;
            let body: serde_json::Value = r.json().await?;
            anyhow::Ok((t.elapsed(), body))
        }
    };
    let (first, _) = get("/api/runs?".into()).await?;
    let q = |extra: &str| format!("/api/trials?run={run}{extra}");
    let cases: Vec<(&'static str, String)> = vec![
        ("list runs (every run's summary)", "/api/runs?".into()),
        ("list trials (first page of 100)", q("")),
        ("filter outcome=failed", q("&outcome=failed")),
        (
            "filter infrastructure, sorted by duration",
            q("&outcome=infrastructure&sort=duration&desc=true"),
        ),
        (
            "filter task + category + reward",
            q("&task=task-00&category=web&reward_max=0.5"),
        ),
        (
            "filter duration >= 200 s, page 3",
            q("&min_seconds=200&offset=200"),
        ),
        ("transcript search (reads every trajectory)", q("&q=needle")),
    ];
    let mut measures = Vec::new();
    for (name, path) in cases {
        let mut times = Vec::new();
        let mut matched = 0;
        for _ in 0..a.repeat.max(1) {
            let (d, body) = get(path.clone()).await?;
            times.push(d);
            matched = body["total"]
                .as_u64()
                .or_else(|| body["runs"].as_array().map(|r| r.len() as u64))
                .unwrap_or(0);
        }
        times.sort();
        measures.push(Measure {
            name,
            path,
            median_ms: ms(times[times.len() / 2]),
            max_ms: ms(times[times.len() - 1]),
            matched,
        });
    }
    shutdown.cancel();
    server.await??;
    let report = Report {
        trials: a.trials,
        first_list_ms: ms(first),
        measures,
    };
    let mut out = std::io::stdout().lock();
    if a.json {
        writeln!(out, "{}", serde_json::to_string(&report)?)?;
    } else {
        writeln!(
            out,
            "geode view over {} trials (one run): first runs list {:.1} ms",
            report.trials, report.first_list_ms
        )?;
        for m in &report.measures {
            writeln!(
                out,
                "  {:<48} median {:>8.1} ms  max {:>8.1} ms  ({} matched)",
                m.name, m.median_ms, m.max_ms, m.matched
            )?;
        }
    }
    Ok(Exit::Success)
}
