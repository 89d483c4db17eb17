//! A small fixed run store: two runs of five shared tasks (four attempts each) plus a task only
//! the first run has, with every kind of row a report must handle: fractional rewards, agent
//! timeouts and errors (scored), infrastructure failures (excluded), a task that only failed
//! for infrastructure, and an agent error without a reward.

use std::path::{Path, PathBuf};

use geode_reports::synth::{RunRecord, TrialRecord, Writer};

pub const RUN_A: &str = "2026-01-05__10-00-00";
pub const RUN_B: &str = "2026-01-06__10-00-00";

/// (task, category, difficulty)
const TASKS: [(&str, &str, &str); 6] = [
    ("tb/hello-world", "basics", "easy"),
    ("tb/fix-git", "vcs", "medium"),
    ("tb/sqlite-db", "data", "medium"),
    ("tb/train-model", "ml", "hard"),
    ("tb/crack-hash", "security", "hard"),
    ("tb/only-a", "basics", "easy"),
];

/// A trial: outcome and reward.
type T = (&'static str, Option<f64>);
const P: T = ("passed", Some(1.0));
const F: T = ("failed", Some(0.0));
const HALF: T = ("failed", Some(0.5));
const TIMEOUT: T = ("agent_timeout", Some(0.0));
const AGENT_ERR: T = ("agent_error", None);
const LOST: T = ("sandbox_lost", None);
const SETUP: T = ("environment_setup_failed", None);
const PROVIDER: T = ("provider_unavailable", None);

const A: [[T; 4]; 6] = [
    [P, P, P, P],
    [P, F, P, F],
    [F, F, P, LOST],
    [F, F, F, TIMEOUT],
    [HALF, P, F, F],
    [SETUP, SETUP, SETUP, SETUP],
];
const B: [[T; 4]; 5] = [
    [P, P, P, P],
    [P, P, P, F],
    [P, F, P, P],
    [F, P, F, AGENT_ERR],
    [P, P, F, PROVIDER],
];

/// The (task, outcome, reward) trials the fixture writes for `run`.
pub fn trials(run: &str) -> Vec<(&'static str, &'static str, Option<f64>)> {
    let grid: &[[T; 4]] = if run == RUN_A { &A } else { &B };
    grid.iter()
        .enumerate()
        .flat_map(|(ti, trials)| trials.iter().map(move |&(o, r)| (TASKS[ti].0, o, r)))
        .collect()
}

fn exception(outcome: &str) -> Option<(&'static str, &'static str)> {
    match outcome {
        "agent_timeout" => Some(("AgentTimeout", "agent ran past 900 s")),
        "agent_error" => Some(("ModelError", "model returned an empty response")),
        "sandbox_lost" => Some(("SandboxLost", "sandbox process exited (signal 9)")),
        "environment_setup_failed" => Some(("BuildFailed", "docker build: exit status 1 | step 4")),
        "provider_unavailable" => Some(("ProviderUnavailable", "HTTP 503 from provider")),
        _ => None,
    }
}

/// Writes the fixture into `dir/geode.db` (and the run folders) and returns the jobs dir.
pub fn write(dir: &Path) -> PathBuf {
    let jobs = dir.join("jobs");
    std::fs::create_dir_all(jobs.join(RUN_A)).unwrap();
    std::fs::create_dir_all(jobs.join(RUN_B)).unwrap();
    let mut w = Writer::create(&jobs.join("geode.db")).unwrap();
    for (i, (run, model)) in [(RUN_A, "anthropic/claude-a"), (RUN_B, "anthropic/claude-b")]
        .into_iter()
        .enumerate()
    {
        w.insert_run(&RunRecord {
            run_id: run,
            created_unix: 1_767_607_200 + 86_400 * i as i64,
            model_route: model,
            attempts: 4,
            seed: 42,
            status: "finished",
        })
        .unwrap();
    }
    let mut rows = Vec::new();
    for (ri, (run, grid)) in [(RUN_A, &A[..]), (RUN_B, &B[..])].into_iter().enumerate() {
        let start = 1_767_607_200_000i64 + 86_400_000 * ri as i64;
        for (ti, trials) in grid.iter().enumerate() {
            let (task, category, difficulty) = TASKS[ti];
            for (a, &(outcome, reward)) in trials.iter().enumerate() {
                let k = (ti * 4 + a) as i64;
                let exc = exception(outcome);
                rows.push(TrialRecord {
                    run_id: run,
                    task_id: task,
                    category,
                    difficulty,
                    attempt: a as u32,
                    outcome,
                    reward,
                    exception_class: exc.map(|e| e.0),
                    exception_message: exc.map(|e| e.1),
                    started_ms: start + 60_000 * k,
                    duration_ms: 30_000 + 7_000 * k + 12_345 * ri as i64,
                    input_tokens: 1_000 + 250 * k,
                    cached_tokens: 100 * k,
                    output_tokens: 200 + 20 * k + 5 * ri as i64,
                    cost_usd: 0.001 * (k + 1) as f64,
                    model_calls: 3 + k % 5,
                });
            }
        }
    }
    w.insert_trials(rows).unwrap();
    jobs
}

/// Two re-grades of every trial of `run`, as `geode grade` records them: grader `aa..` (reward 1,
/// graded first) and grader `bb..` (0.25); the first trial by name is `verifier_crashed` under
/// both. Returns the run's trial names in order.
pub fn add_grades(jobs: &Path, run: &str) -> Vec<String> {
    let conn = rusqlite::Connection::open(jobs.join("geode.db")).unwrap();
    let mut names = conn
        .prepare("SELECT trial_name FROM trials WHERE run_id = ?1 ORDER BY trial_name")
        .unwrap();
    let trials: Vec<String> = names
        .query_map([run], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    for (i, t) in trials.iter().enumerate() {
        for (hash, reward) in [("aa".repeat(32), 1.0), ("bb".repeat(32), 0.25)] {
            conn.execute(
                "INSERT INTO grades VALUES (?1, ?2, 'rubric:rubric.toml', ?3, ?4, ?5, ?6)",
                rusqlite::params![
                    run,
                    t,
                    hash,
                    (i > 0).then_some(reward),
                    if i > 0 { "valid" } else { "verifier_crashed" },
                    format!("2026-01-0{}T00:00:00Z", 1 + usize::from(reward < 1.0)),
                ],
            )
            .unwrap();
        }
    }
    trials
}
