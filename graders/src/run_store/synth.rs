//! Writing run stores: the fixtures of the tests and the synthetic stores of the benchmarks
//! (the reports' million trials, the viewer's ten thousand). The tables are the one run-store
//! schema ([`super::create_tables`]), the harness's too.
//!
//! Everything is deterministic: values come from the caller or from a seeded SplitMix64, and
//! timestamps from a fixed epoch.

use std::path::Path;

use rusqlite::{Connection, Statement, params};

/// A synthetic store that could not be written.
#[derive(Debug, thiserror::Error)]
#[error("{}: {source}", path.display())]
pub struct SynthError {
    pub(crate) path: std::path::PathBuf,
    #[source]
    pub(crate) source: rusqlite::Error,
}

/// A run row.
#[derive(Debug, Clone)]
pub struct RunRecord<'a> {
    /// The run's id (its folder name).
    pub run_id: &'a str,
    /// When the run was created, in seconds since the Unix epoch.
    pub created_unix: i64,
    /// The model route the run's agent used.
    pub model_route: &'a str,
    /// Attempts per task.
    pub attempts: u32,
    /// The run's seed.
    pub seed: u64,
    /// The run's status (`finished`).
    pub status: &'a str,
}

/// A finished trial row; the rest of the row (name, hashes, JSON) is derived.
#[derive(Debug, Clone)]
pub struct TrialRecord<'a> {
    /// The run the trial belongs to.
    pub run_id: &'a str,
    /// The task's id; with `attempt` it names the trial.
    pub task_id: &'a str,
    /// The task's category.
    pub category: &'a str,
    /// The task's difficulty.
    pub difficulty: &'a str,
    /// The attempt number within the task; also the trial's seed.
    pub attempt: u32,
    /// The trial's outcome, as a `TrialOutcome` name.
    pub outcome: &'a str,
    /// The headline reward; `None` for no reward.
    pub reward: Option<f64>,
    /// Harbor's exception class, for a trial that ended in one.
    pub exception_class: Option<&'a str>,
    /// The exception's message.
    pub exception_message: Option<&'a str>,
    /// Start, milliseconds since the Unix epoch.
    pub started_ms: i64,
    /// Wall time of the trial in milliseconds; the phases are split from it.
    pub duration_ms: i64,
    /// Model input tokens.
    pub input_tokens: i64,
    /// Input tokens served from the provider's cache.
    pub cached_tokens: i64,
    /// Model output tokens.
    pub output_tokens: i64,
    /// Model cost in US dollars.
    pub cost_usd: f64,
    /// Model calls made.
    pub model_calls: i64,
}

/// A store being written.
pub struct Writer {
    conn: Connection,
    path: std::path::PathBuf,
}

fn sqlite(path: &Path) -> impl Fn(rusqlite::Error) -> SynthError + '_ {
    move |source| SynthError {
        path: path.to_path_buf(),
        source,
    }
}

/// RFC 3339 UTC with milliseconds (what the harness writes), from Unix milliseconds.
pub fn rfc3339_ms(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let milli = ms.rem_euclid(1000);
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{milli:03}Z",
        sod / 3600,
        sod % 3600 / 60,
        sod % 60
    )
}

impl Writer {
    /// Creates (or opens) the store at `path` with the harness's tables.
    pub fn create(path: &Path) -> Result<Writer, SynthError> {
        let conn = Connection::open(path).map_err(sqlite(path))?;
        super::create_tables(&conn).map_err(sqlite(path))?;
        Ok(Writer {
            conn,
            path: path.to_path_buf(),
        })
    }

    /// Inserts one run row (the pack, hashes and config are fixed placeholders).
    pub fn insert_run(&self, r: &RunRecord<'_>) -> Result<(), SynthError> {
        self.conn
            .execute(
                "INSERT INTO runs VALUES (?1, ?2, 'packs/synthetic', ?3, ?4, ?5, ?6, ?7, ?8, '{}', ?9)",
                params![
                    r.run_id,
                    rfc3339_ms(r.created_unix * 1000),
                    "ab".repeat(32),
                    r.model_route,
                    "cd".repeat(32),
                    r.seed as i64,
                    r.attempts,
                    "ef".repeat(32),
                    r.status
                ],
            )
            .map(|_| ())
            .map_err(sqlite(&self.path))
    }

    /// Inserts `trials` in one transaction.
    pub fn insert_trials<'a>(
        &mut self,
        trials: impl IntoIterator<Item = TrialRecord<'a>>,
    ) -> Result<(), SynthError> {
        let path = self.path.clone();
        let tx = self.conn.transaction().map_err(sqlite(&path))?;
        {
            let mut st = tx
                .prepare(
                    "INSERT INTO trials VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 'finished', ?9,
                     ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, 'synthetic/model',
                     ?21, 0, ?22, '{}')",
                )
                .map_err(sqlite(&path))?;
            for t in trials {
                insert(&mut st, &t).map_err(sqlite(&path))?;
            }
        }
        tx.commit().map_err(sqlite(&path))
    }
}

fn insert(st: &mut Statement<'_>, t: &TrialRecord<'_>) -> rusqlite::Result<()> {
    let d = t.duration_ms as f64 / 1000.0;
    let phases = format!(
        "{{\"agent_execution\":{:.3},\"environment_setup\":{:.3},\"teardown\":{:.3},\"verifier\":{:.3}}}",
        d * 0.8,
        d * 0.1,
        d * 0.02,
        d * 0.08
    );
    let rewards = t
        .reward
        .map(|r| format!("{{\"reward\":{r}}}"))
        .unwrap_or_else(|| "{}".to_owned());
    st.execute(params![
        t.run_id,
        format!("{}__{}", t.task_id.replace('/', "__"), t.attempt),
        t.task_id,
        "12".repeat(32),
        t.category,
        t.difficulty,
        t.attempt,
        i64::from(t.attempt),
        t.outcome,
        t.reward,
        rewards,
        t.exception_class,
        t.exception_message,
        rfc3339_ms(t.started_ms),
        rfc3339_ms(t.started_ms + t.duration_ms),
        phases,
        t.input_tokens,
        t.cached_tokens,
        t.output_tokens,
        t.cost_usd,
        "cd".repeat(32),
        t.model_calls,
    ])
    .map(|_| ())
}

/// SplitMix64: a tiny seeded generator, enough for synthetic data.
pub(crate) struct SplitMix(u64);

impl SplitMix {
    pub fn new(seed: u64) -> SplitMix {
        SplitMix(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Shape of a synthetic store.
#[derive(Debug, Clone, Copy)]
pub struct SynthSpec {
    /// Runs written (ids are derived from the run's index).
    pub runs: usize,
    /// Tasks per run.
    pub tasks: usize,
    /// Attempts per task.
    pub attempts: usize,
    /// Seed of every random value.
    pub seed: u64,
}

const CATEGORIES: [&str; 8] = [
    "build", "data", "debug", "games", "ml", "security", "system", "web",
];
const DIFFICULTIES: [&str; 3] = ["easy", "medium", "hard"];

/// Fills a new store at `path` with `runs x tasks x attempts` trials: task difficulty varies,
/// each later run is a little better, 2 % of trials are infrastructure failures and 3 % time
/// out. Returns the run ids.
pub fn synthetic_store(path: &Path, spec: SynthSpec) -> Result<Vec<String>, SynthError> {
    let mut w = Writer::create(path)?;
    let mut rng = SplitMix::new(spec.seed);
    let base = 1_767_225_600_000i64; // 2026-01-01T00:00:00Z
    let task_ids: Vec<String> = (0..spec.tasks)
        .map(|t| format!("synth/task-{t:05}"))
        .collect();
    let task_p: Vec<f64> = (0..spec.tasks).map(|_| rng.unit()).collect();
    let mut ids = Vec::new();
    for r in 0..spec.runs {
        let run_id = format!("2026-01-0{}__00-00-00", 1 + r % 9);
        let run_id = if r >= 9 {
            format!("{run_id}_{r}")
        } else {
            run_id
        };
        w.insert_run(&RunRecord {
            run_id: &run_id,
            created_unix: base / 1000,
            model_route: "synthetic/model",
            attempts: u32::try_from(spec.attempts).unwrap_or(u32::MAX),
            seed: spec.seed,
            status: "finished",
        })?;
        let mut rows = Vec::with_capacity(spec.tasks * spec.attempts);
        let mut clock = base;
        for (t, task) in task_ids.iter().enumerate() {
            let p = (task_p[t] + 0.03 * r as f64).min(1.0);
            for a in 0..spec.attempts {
                let u = rng.unit();
                let (outcome, reward, exc) = if u < 0.02 {
                    ("sandbox_lost", None, Some("SandboxLost"))
                } else if u < 0.05 {
                    ("agent_timeout", Some(0.0), Some("AgentTimeout"))
                } else if rng.unit() < p {
                    ("passed", Some(1.0), None)
                } else {
                    ("failed", Some(0.0), None)
                };
                let duration_ms = 20_000 + (rng.unit() * 280_000.0) as i64;
                let input = 2_000 + (rng.unit() * 50_000.0) as i64;
                let output = input / 10;
                rows.push(TrialRecord {
                    run_id: &run_id,
                    task_id: task,
                    category: CATEGORIES[t % CATEGORIES.len()],
                    difficulty: DIFFICULTIES[t % DIFFICULTIES.len()],
                    attempt: u32::try_from(a).unwrap_or(u32::MAX),
                    outcome,
                    reward,
                    exception_class: exc,
                    exception_message: exc.map(|_| "synthetic failure"),
                    started_ms: clock,
                    duration_ms,
                    input_tokens: input,
                    cached_tokens: input / 2,
                    output_tokens: output,
                    cost_usd: (input as f64 * 3.0 + output as f64 * 15.0) / 1e6,
                    model_calls: 1 + input / 2_000,
                });
                clock += duration_ms / 8;
            }
        }
        w.insert_trials(rows)?;
        ids.push(run_id);
    }
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_rfc3339() {
        assert_eq!(rfc3339_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339_ms(1_767_225_600_123), "2026-01-01T00:00:00.123Z");
        assert_eq!(rfc3339_ms(951_782_400_000), "2000-02-29T00:00:00.000Z");
    }
}
