//! Scaffold search end to end with the `flaky-oracle` simulation model (offline research, not
//! a real model): a real gain (repair budget) is found on train and promoted on the sealed
//! holdout; a search over neutral knobs promotes nothing; a search killed with SIGKILL
//! mid-campaign resumes without losing or duplicating a candidate.

use std::path::PathBuf;
use std::process::Output;
use std::time::{Duration, Instant};

const REAL_SPACE: &str = r#"
schema = "geode.search-space.v1"
[frozen]
grader = "geode.grader.tests.v1"
model = "flaky-oracle:0.5"
[[knob]]
path = "repair_budget"
values = [0, 2, 1, 3]
[[knob]]
path = "tool_result_cap"
values = [65536, 32768]
[[knob]]
path = "guards.max_rounds"
values = [50, 30]
"#;

const NEUTRAL_SPACE: &str = r#"
schema = "geode.search-space.v1"
[[knob]]
path = "tool_result_cap"
values = [65536, 32768, 16384]
[[knob]]
path = "guards.max_rounds"
values = [50, 30, 20]
"#;

struct Study {
    dir: tempfile::TempDir,
}

impl Study {
    /// Train (20 tasks) and test (8 tasks, sealed at 5 trials) split from the built-in pack,
    /// a baseline with no repair budget, and a search configuration.
    fn new(space: &str, seed: u64, candidates: u32) -> Study {
        let dir = tempfile::tempdir().unwrap();
        super::common::split_core_pack(dir.path());
        let s = Study { dir };
        // The convergence window lets every repair budget of the space run (3 needs > 3).
        std::fs::write(
            s.path("base.toml"),
            "repair_budget = 0\n[guards]\nconvergence_window = 10\n",
        )
        .unwrap();
        std::fs::write(s.path("space.toml"), space).unwrap();
        // Test contracts use a safety tolerance of 0.5: the veto's upper bound needs ~52
        // trials per arm at 0.05, and the holdout has 40 (flaky-oracle raises no signal).
        let config = format!(
            r#"
schema = "geode.search.v1"
space = "space.toml"
baseline = "base.toml"
policy = "grid"
seed = {seed}
model = "flaky-oracle:0.5"
train = "train"
trials = 3
concurrency = 2
out = "out"
[test]
sealed = "sealed/holdout.seal-state.json"
key = "seal.key"
trials = 5
[rule]
resamples = 1000
min_tasks = 10
safety_tolerance = 0.3
[test_rule]
resamples = 1000
min_tasks = 8
safety_tolerance = 0.5
[budgets]
candidates = {candidates}
"#
        );
        std::fs::write(s.path("search.toml"), config).unwrap();
        let o = s.geode(&[
            "crucible",
            "seal",
            "test",
            "--key",
            "seal.key",
            "--new-key",
            "--name",
            "holdout",
            "-k",
            "5",
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        s
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// `geode` in the study folder, with a `GEODE_HOME` (and so a holdout ledger) of its own.
    fn command(&self) -> std::process::Command {
        let mut c = super::common::geode_bin();
        c.current_dir(self.dir.path())
            .env("GEODE_HOME", self.dir.path().join("home"));
        c
    }

    fn geode(&self, args: &[&str]) -> Output {
        self.command().args(args).output().unwrap()
    }

    fn lineage(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(self.path("out/lineage.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    fn trial_dirs(&self, candidate: &str) -> usize {
        ["baseline", "candidate"]
            .iter()
            .map(|arm| {
                std::fs::read_dir(self.path(&format!("out/candidates/{candidate}/campaign/{arm}")))
                    .map(|d| d.count())
                    .unwrap_or(0)
            })
            .sum()
    }
}

fn text(o: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn search_finds_the_repair_budget_gain_survives_a_kill_and_promotes_on_the_holdout() {
    let s = Study::new(REAL_SPACE, 3, 2);
    let killed = kill_mid_campaign(&s);
    let first = resume_keeps_the_finished_trials_and_keeps_the_gain(&s, &killed);
    status_spends_the_alpha_over_the_candidates(&s);
    promotion_confirms_then_burns_the_holdout_once(&s, &first);
}

/// What a search killed mid-campaign had finished: one trial's result file and its text, and
/// the longest time the campaign had spent.
struct Killed {
    kept_result: PathBuf,
    kept_before: String,
    spent_before: f64,
}

/// Kill the search with SIGKILL in the middle of the first candidate's campaign.
fn kill_mid_campaign(s: &Study) -> Killed {
    let mut child = s
        .command()
        .args(["search", "run", "search.toml"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while s.trial_dirs("c0001") < 30 {
        assert!(start.elapsed() < Duration::from_secs(600), "no progress");
        assert!(
            child.try_wait().unwrap().is_none(),
            "the search ended early"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    // Let sandboxed trials the kill orphaned finish before the campaign folder is replaced.
    std::thread::sleep(Duration::from_secs(3));
    let before = s.lineage();
    assert_eq!(before.len(), 1, "only the baseline is decided: {before:?}");
    assert!(s.path("out/candidates/c0001/proposal.json").is_file());
    // The trials finished before the kill, each with the time the campaign had spent.
    let journal = std::fs::read_to_string(s.path("out/candidates/c0001/campaign/trials.jsonl"))
        .expect("the campaign journal");
    let finished: Vec<serde_json::Value> = journal
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert!(finished.len() >= 20, "{} trials journaled", finished.len());
    let kept = &finished[0];
    let arm = kept["arm"].as_str().unwrap();
    let name = kept["row"]["trial_name"].as_str().unwrap();
    let kept_result = s.path(&format!(
        "out/candidates/c0001/campaign/{arm}/{}/result.json",
        name.trim_end_matches(&format!("__{arm}"))
    ));
    let kept_before = std::fs::read_to_string(&kept_result).unwrap();
    let spent_before = finished
        .iter()
        .map(|f| f["elapsed"].as_f64().unwrap())
        .fold(0.0, f64::max);
    Killed {
        kept_result,
        kept_before,
        spent_before,
    }
}

/// The resumed search decides every candidate, keeps the repair budget's gain, and returns the
/// lineage entry of the candidate it kept.
fn resume_keeps_the_finished_trials_and_keeps_the_gain(
    s: &Study,
    killed: &Killed,
) -> serde_json::Value {
    let o = s.geode(&["search", "run", "search.toml"]);
    assert!(o.status.success(), "resume: {}", text(&o));
    let lineage = s.lineage();
    let ids: Vec<&str> = lineage.iter().map(|e| e["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["c0000", "c0001", "c0002"], "{}", text(&o));
    // The interrupted campaign resumed: its finished trials were kept (not run again), and
    // there is exactly one trial per pair and arm.
    let evidence: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(s.path("out/candidates/c0001/evidence.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(evidence["trials"].as_array().unwrap().len(), 20 * 3 * 2);
    assert_eq!(
        std::fs::read_to_string(&killed.kept_result).unwrap(),
        killed.kept_before,
        "a finished trial was run again"
    );
    // And the time the killed run spent counts against the budgets.
    let spent = lineage[1]["spent"]["wall_seconds"].as_f64().unwrap();
    let spent_before = killed.spent_before;
    assert!(spent > spent_before, "{spent} <= {spent_before}");
    assert!(
        !text(&o).contains("Some("),
        "logs print values, not Options: {}",
        text(&o)
    );
    let first = lineage[1].clone();
    assert_eq!(first["mutation"]["path"], "repair_budget");
    assert_eq!(first["mutation"]["value"], 2);
    assert_eq!(first["verdict"], "KEEP", "{first}");
    assert_eq!(first["champion"], "c0001");
    assert!(first["evidence_hash"].is_string() && first["contract_hash"].is_string());
    // The next candidate is a mutation of the new champion, never the baseline again.
    assert_eq!(lineage[2]["parent"], "c0001");
    assert_ne!(lineage[2]["scaffold_hash"], lineage[0]["scaffold_hash"]);
    first
}

/// `search status` shows the kept candidate and how the search's alpha was shared.
fn status_spends_the_alpha_over_the_candidates(s: &Study) {
    let mut status = s.command();
    status.args(["search", "status", "out"]);
    super::common::ends_quietly_on_a_closed_pipe(status);
    let o = s.geode(&["search", "status", "out"]);
    let out = text(&o);
    assert!(
        o.status.success() && out.contains("c0001") && out.contains("KEEP"),
        "{out}"
    );
    // Two candidates share the search's alpha of 0.05.
    assert!(
        out.contains("family-wise error of the train KEEPs <= 0.05 (2 of 2 tests spent")
            && out.contains("at most 0.05 over the budget")
            && out.contains("each candidate at confidence 0.975"),
        "{out}"
    );
}

/// The champion is confirmed on train on fresh seeds, then kept on the sealed holdout, which
/// cannot be opened a second time.
fn promotion_confirms_then_burns_the_holdout_once(s: &Study, first: &serde_json::Value) {
    let o = s.geode(&["search", "promote", "out"]);
    assert_eq!(o.status.code(), Some(0), "promote: {}", text(&o));
    assert!(text(&o).contains("promotion verdict KEEP"), "{}", text(&o));
    // The champion was confirmed on train on fresh seeds before the holdout opened.
    let promotion: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(s.path("out/promotion.json")).unwrap())
            .unwrap();
    let confirmation = &promotion["confirmation"];
    assert_eq!(confirmation["verdict"], "KEEP", "{promotion}");
    assert!(
        confirmation["estimate"].as_f64().unwrap() > 0.0,
        "{promotion}"
    );
    assert_ne!(confirmation["contract_hash"], first["contract_hash"]);
    let state = std::fs::read_to_string(s.path("sealed/holdout.seal-state.json")).unwrap();
    assert!(
        state.contains("KEEP"),
        "the seal state records the decision: {state}"
    );
    // Decided after the holdout opened, not stamped when the promotion began.
    let opened: serde_json::Value = serde_json::from_str(&state).unwrap();
    let at = |v: &serde_json::Value| {
        chrono::DateTime::parse_from_rfc3339(v.as_str().unwrap_or_default()).unwrap()
    };
    assert!(
        at(&promotion["decided_at"]) >= at(&opened["opening"]["opened_at"]),
        "{promotion} {state}"
    );

    // Burn-once: a second promotion is refused.
    let o = s.geode(&["search", "promote", "out"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o).contains("burned once"), "{}", text(&o));
}

#[test]
fn a_search_over_neutral_knobs_promotes_nothing() {
    let s = Study::new(NEUTRAL_SPACE, 11, 2);
    let o = s.geode(&["search", "run", "search.toml"]);
    assert!(o.status.success(), "{}", text(&o));
    let lineage = s.lineage();
    assert_eq!(lineage.len(), 3);
    for e in &lineage[1..] {
        assert_eq!(e["verdict"], "REJECT", "{e}");
    }
    let o = s.geode(&["search", "promote", "out"]);
    assert_eq!(o.status.code(), Some(6), "{}", text(&o));
    assert!(text(&o).contains("nothing to promote"), "{}", text(&o));
    // The holdout was not opened: it stays available for a later search.
    let state: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(s.path("sealed/holdout.seal-state.json")).unwrap(),
    )
    .unwrap();
    assert!(state["opening"].is_null(), "{state}");
}

/// The false-promotion rate: N seeded searches over neutral knobs, each followed by a
/// promotion attempt. Costly (N x 2 train campaigns); run with
/// `GEODE_FPR_RUNS=N cargo test -p geode-harness --test e2e search::false_promotion -- --ignored --nocapture`.
#[test]
#[ignore]
fn false_promotion_rate_over_seeded_neutral_searches() {
    let runs: u64 = std::env::var("GEODE_FPR_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let (mut promoted, mut train_keeps, mut campaigns) = (0, 0, 0);
    for seed in 0..runs {
        let s = Study::new(NEUTRAL_SPACE, 100 + seed, 2);
        let o = s.geode(&["search", "run", "search.toml"]);
        assert!(o.status.success(), "{}", text(&o));
        let lineage = s.lineage();
        campaigns += lineage.len() - 1;
        train_keeps += lineage.iter().filter(|e| e["verdict"] == "KEEP").count();
        let o = s.geode(&["search", "promote", "out"]);
        if o.status.code() == Some(0) {
            promoted += 1;
        } else {
            campaigns += usize::from(!text(&o).contains("nothing to promote"));
        }
    }
    println!(
        "false-promotion rate: {promoted}/{runs} searches promoted; {train_keeps} train KEEPs \
         over {campaigns} campaigns"
    );
    assert_eq!(promoted, 0);
}

const BUDGET_3_SPACE: &str = r#"
schema = "geode.search-space.v1"
[frozen]
model = "flaky-oracle:0.3"
[[knob]]
path = "repair_budget"
values = [2, 3]
"#;

/// Issue 23: repair budget 3 measured the same as 2 because the default convergence window (3)
/// ended the turn first. With a window that lets the third repair run, the search finds the
/// smaller gain of 3 over 2. At flaky-oracle:0.3 that gain is 1 - 0.7^4 - (1 - 0.7^3) = 0.103
/// (0.760 against 0.657), and 20 trials on each of 20 tasks put it about 3 standard errors
/// above zero, so the gate keeps it with high power (at P = 0.5 the gain is only 0.0625). Under
/// the default window the same space is refused when it is loaded, with the reason.
#[test]
fn the_gain_of_repair_budget_3_over_2_is_found_when_the_guards_allow_it() {
    let s = Study::new(BUDGET_3_SPACE, 5, 1);
    std::fs::write(
        s.path("base.toml"),
        "repair_budget = 2\n[guards]\nconvergence_window = 10\n",
    )
    .unwrap();
    let config = std::fs::read_to_string(s.path("search.toml"))
        .unwrap()
        .replace("trials = 3\n", "trials = 20\n")
        .replace(
            "model = \"flaky-oracle:0.5\"",
            "model = \"flaky-oracle:0.3\"",
        );
    std::fs::write(s.path("search.toml"), config).unwrap();
    let o = s.geode(&["search", "run", "search.toml"]);
    assert!(o.status.success(), "{}", text(&o));
    let lineage = s.lineage();
    let candidate = &lineage[1];
    assert_eq!(candidate["mutation"]["value"], 3, "{candidate}");
    let (b, c) = (
        candidate["baseline_mean"].as_f64().unwrap(),
        candidate["candidate_mean"].as_f64().unwrap(),
    );
    println!(
        "repair budget 2: {b:.3}, 3: {c:.3}, verdict {}",
        candidate["verdict"]
    );
    assert_eq!(candidate["verdict"], "KEEP", "{}", text(&o));

    // The default window: refused at load, before any trial.
    std::fs::write(s.path("base.toml"), "repair_budget = 2\n").unwrap();
    std::fs::write(
        s.path("search.toml"),
        std::fs::read_to_string(s.path("search.toml"))
            .unwrap()
            .replace("out = \"out\"", "out = \"out2\""),
    )
    .unwrap();
    let o = s.geode(&["search", "run", "search.toml"]);
    assert!(!o.status.success());
    assert!(text(&o).contains("convergence_window"), "{}", text(&o));
    assert!(!s.path("out2/candidates").exists(), "no trial ran");
}
