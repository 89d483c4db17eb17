//! Curation: the judge tournament (Elo, Bradley-Terry) and the checkpointed pipeline.

use std::path::Path;

use geode_harness::curate::pipeline::{Phase, PhaseStatus, RouteFactory, run};
use geode_harness::curate::tournament::{
    self, Outcome, TournamentConfig, bradley_terry, expected, kendall_tau,
};
use geode_harness::pack::hash_task_dir;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{Value, json};

/// Simulated judges: voter v prefers the stronger task with the Elo probability, plus a
/// position bias for whatever is shown first and a per-voter offset.
#[test]
fn elo_and_bradley_terry_recover_a_known_ranking() {
    let n = 24;
    let truth: Vec<f64> = (0..n).map(|i| 1000.0 + 40.0 * i as f64).collect();
    let (mut tau_elo, mut tau_bt) = (0.0, 0.0);
    let seeds = [1u64, 2, 3, 4, 5];
    for seed in seeds {
        let mut rng = ChaCha8Rng::seed_from_u64(seed * 1000);
        let config = TournamentConfig {
            bootstrap: 50,
            ..TournamentConfig::default()
        };
        let (outcomes, ratings) = tournament::run(n, &config, seed, |first, second, voter| {
            let bias = 30.0 + 10.0 * voter as f64;
            rng.random_bool(expected(truth[first] + bias, truth[second]))
        });
        assert_eq!(outcomes.len(), 111, "ceil(24 log2 24) distinct pairs");
        tau_elo += kendall_tau(&ratings.elo, &truth);
        tau_bt += kendall_tau(&ratings.bt, &truth);
        for (i, (lo, hi)) in ratings.bt_interval.iter().enumerate() {
            assert!(lo <= hi && *lo <= ratings.bt[i] + 1e-6 && ratings.bt[i] <= hi + 1e-6);
        }
        // Bradley-Terry does not depend on the order of the outcomes; Elo does.
        let mut reversed: Vec<Outcome> = outcomes.clone();
        reversed.reverse();
        let again = bradley_terry(n, &reversed);
        assert!(
            again
                .iter()
                .zip(&ratings.bt)
                .all(|(a, b)| (a - b).abs() < 1e-6)
        );
    }
    tau_elo /= seeds.len() as f64;
    tau_bt /= seeds.len() as f64;
    println!(
        "kendall tau over {} seeds: elo {tau_elo:.3}, bradley-terry {tau_bt:.3}",
        seeds.len()
    );
    assert!(tau_elo > 0.6, "elo tau {tau_elo}");
    assert!(tau_bt > 0.65, "bt tau {tau_bt}");
}

#[test]
fn elo_update_follows_the_formula() {
    let o = Outcome {
        a: 0,
        b: 1,
        votes_a: 2,
        votes_b: 1,
    };
    let r = tournament::elo(2, &[o], 32.0, 1000.0);
    assert!((r[0] - 1016.0).abs() < 1e-9 && (r[1] - 984.0).abs() < 1e-9);
}

fn task(id: &str, category: &str, difficulty: &str, instruction: &str, check: &str) -> Value {
    json!({
        "id": id, "category": category, "difficulty": difficulty,
        "instruction": instruction,
        "files": {
            "environment/Dockerfile": "FROM ubuntu:24.04\nWORKDIR /app\n",
            "tests/test.sh": format!("#!/bin/bash\nset -e\n{check}\n"),
            "solution/solve.sh": "#!/bin/bash\necho solved > /app/out.txt\n",
        }
    })
}

fn script(turns: &[Value], repeat_last: bool) -> Value {
    json!({"repeat_last": repeat_last,
           "turns": turns.iter().map(|t| json!({"text": match t {
               Value::String(s) => s.clone(), other => other.to_string() }}))
               .collect::<Vec<_>>()})
}

fn write_setup(dir: &Path, top_k: usize) {
    let csv = "Read /app/data.csv, drop the rows whose email column is empty, sort the rest by \
               the id column and write the result to /app/clean.csv keeping the header line.";
    let gen_turns = vec![
        task("csv-clean", "data", "easy", csv, "test -s /app/clean.csv"),
        task(
            "git-squash",
            "git",
            "medium",
            "The repository in /app/repo has five commits on the branch feature; squash them into \
             one commit whose message is the first commit's message, without changing the tree.",
            "git -C /app/repo log --oneline feature | wc -l | grep -q 2",
        ),
        task(
            "log-top-ip",
            "logs",
            "hard",
            "Parse /app/access.log, find the client address with the most failed requests per \
             minute over any window of ten minutes and write it to /app/answer.txt.",
            "grep -q 203.0.113.5 /app/answer.txt",
        ),
        // A near-duplicate of csv-clean (one word changed): dedup must drop it.
        task(
            "csv-clean-2",
            "data",
            "easy",
            &csv.replace("sort", "order"),
            "test -s /app/clean.csv",
        ),
        // Invalid: no instruction text; synthesis must reject it.
        json!({"id": "broken", "instruction": "", "files": {}}),
    ];
    std::fs::write(dir.join("gen.json"), script(&gen_turns, false).to_string()).unwrap();
    let judge: Vec<Value> = ["A", "B", "The answer is A.", "B"]
        .iter()
        .map(|s| json!(s))
        .collect();
    std::fs::write(dir.join("judge.json"), script(&judge, true).to_string()).unwrap();
    let config = format!(
        r#"schema = "geode.curate.v1"
out = "out"
seed = 11

[synthesis]
generator = "scripted:gen.json"
topics = ["csv cleanup", "git history", "log analysis", "csv again", "broken"]

[dedup]
threshold = 0.6

[tournament]
judges = ["scripted:judge.json"]
voters = 3
bootstrap = 20

[selection]
top_k = {top_k}
by = "blend"
blend = 0.5
"#
    );
    std::fs::write(dir.join("curate.toml"), config).unwrap();
}

fn statuses(reports: &[geode_harness::curate::pipeline::PhaseReport]) -> Vec<(Phase, PhaseStatus)> {
    reports.iter().map(|r| (r.phase, r.status)).collect()
}

#[tokio::test]
async fn curation_runs_end_to_end_and_resumes_from_checkpoints() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write_setup(dir, 2);
    let config = dir.join("curate.toml");
    let models = RouteFactory {
        base: dir.to_path_buf(),
    };

    // Phases 1-2, then stop (an interruption).
    let first = run(&config, Some(Phase::Dedup), None, &models)
        .await
        .unwrap();
    assert_eq!(
        statuses(&first),
        [
            (Phase::Synthesis, PhaseStatus::Ran),
            (Phase::Dedup, PhaseStatus::Ran)
        ]
    );
    assert!(dir.join("out/state/01-synthesis.json").is_file());
    assert!(dir.join("out/state/02-dedup.json").is_file());
    let synth: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("out/state/01-synthesis.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(synth["schema"], "geode.curate.state.v1");
    assert_eq!(synth["output"]["candidates"].as_array().unwrap().len(), 4);
    assert_eq!(synth["output"]["rejected"].as_array().unwrap().len(), 1);
    // A marker: a re-run of synthesis would clear out/tasks.
    std::fs::write(dir.join("out/tasks/marker"), "kept").unwrap();

    let second = run(&config, None, None, &models).await.unwrap();
    let s = statuses(&second);
    assert_eq!(s[0], (Phase::Synthesis, PhaseStatus::Resumed));
    assert_eq!(s[1], (Phase::Dedup, PhaseStatus::Resumed));
    assert!(
        s[2..].iter().all(|(_, st)| *st == PhaseStatus::Ran),
        "{s:?}"
    );
    assert!(
        dir.join("out/tasks/marker").is_file(),
        "synthesis was not redone"
    );

    let dedup: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("out/state/02-dedup.json")).unwrap(),
    )
    .unwrap();
    let dropped = dedup["output"]["dropped"].as_array().unwrap();
    assert_eq!(dropped.len(), 1);
    assert_eq!(dropped[0]["id"], "csv-clean-2");

    let pool: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("out/pool/pool.json")).unwrap())
            .unwrap();
    assert_eq!(pool["schema"], "geode.pool.v1");
    let tasks = pool["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 2);
    for t in tasks {
        let id = t["id"].as_str().unwrap();
        let hash = hash_task_dir(&dir.join("out/pool/tasks").join(id)).unwrap();
        assert_eq!(t["hash"], hash.0);
    }
    let tour: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("out/state/04-tournament.json")).unwrap(),
    )
    .unwrap();
    // 3 tasks: all 3 pairs, 3 votes each.
    assert_eq!(tour["output"]["outcomes"].as_array().unwrap().len(), 3);
    assert_eq!(tour["output"]["votes"].as_array().unwrap().len(), 9);

    // Nothing changed: everything resumes.
    let third = run(&config, None, None, &models).await.unwrap();
    assert!(third.iter().all(|r| r.status == PhaseStatus::Resumed));

    // A different selection re-runs selection, and the frozen pool refuses to change.
    write_setup(dir, 1);
    let err = run(&config, None, None, &models).await.unwrap_err();
    assert!(err.to_string().contains("never overwritten"), "{err}");
}

fn pilot_task(root: &Path, name: &str, test: &str) {
    let dir = root.join(name);
    for sub in ["environment", "tests", "solution"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
    }
    std::fs::write(
        dir.join("task.toml"),
        format!(
            "schema_version = \"1.1\"\n[task]\nname = \"pilot/{name}\"\n[metadata]\n\
             difficulty = \"easy\"\ncategory = \"pilot\"\n[agent]\ntimeout_sec = 60\n\
             [verifier]\ntimeout_sec = 60\n[environment]\nnetwork_mode = \"no-network\"\n"
        ),
    )
    .unwrap();
    std::fs::write(
        dir.join("instruction.md"),
        format!("Write solved to /app/out.txt ({name}).\n"),
    )
    .unwrap();
    std::fs::write(
        dir.join("environment/Dockerfile"),
        "FROM debian:bookworm-slim\nWORKDIR /app\n",
    )
    .unwrap();
    let exec = |p: &Path, text: &str| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::write(p, text).unwrap();
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
    };
    exec(
        &dir.join("tests/test.sh"),
        &format!("#!/bin/bash\nmkdir -p /logs/verifier\n{test}\n"),
    );
    exec(
        &dir.join("solution/solve.sh"),
        "#!/bin/bash\necho solved > /app/out.txt\n",
    );
}

/// The pilot phase through real sandboxes: oracle must pass and nop must fail every trial.
#[tokio::test]
async fn pilot_through_sandboxes_keeps_only_valid_tasks() {
    use geode_harness::curate::pilot::RunPilot;
    use geode_harness::env::{SandboxBackend, SandboxConfig};
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: the pilot runs sandboxes, which need root");
        return;
    }
    let tmp = tempfile::Builder::new()
        .prefix("geode-curate-pilot-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    let dir = tmp.path();
    let pack = dir.join("pack");
    pilot_task(
        &pack,
        "sound",
        "if grep -q solved /app/out.txt 2>/dev/null; then echo 1; else echo 0; fi \
         > /logs/verifier/reward.txt",
    );
    // Passes whatever the agent does: nop passes, so the pilot must drop it.
    pilot_task(&pack, "always-passes", "echo 1 > /logs/verifier/reward.txt");
    std::fs::write(
        dir.join("curate.toml"),
        "schema = \"geode.curate.v1\"\nout = \"out\"\nseed = 3\nseed_packs = [\"pack\"]\n\
         [dedup]\nthreshold = 0.95\n[pilot]\nenabled = true\ntrials = 2\n",
    )
    .unwrap();
    let jobs = dir.join("jobs");
    std::fs::create_dir_all(&jobs).unwrap();
    let jobs = std::fs::canonicalize(&jobs).unwrap();
    let config = SandboxConfig::new(
        env!("CARGO_BIN_EXE_geode"),
        jobs.join(".sandbox"),
        super::registry::shared_store(),
    );
    let pilot = RunPilot {
        backend: std::sync::Arc::new(SandboxBackend::new(config).unwrap()),
        jobs_dir: jobs,
        backend_kind: geode_harness::env::kind::BackendKind::Sandbox,
    };
    let models = RouteFactory {
        base: dir.to_path_buf(),
    };
    let reports = run(
        &dir.join("curate.toml"),
        Some(Phase::Pilot),
        Some(&pilot),
        &models,
    )
    .await
    .unwrap();
    assert_eq!(reports.len(), 3);
    let state: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("out/state/03-pilot.json")).unwrap(),
    )
    .unwrap();
    let results = state["output"]["results"].as_array().unwrap();
    println!("{}", serde_json::to_string_pretty(results).unwrap());
    let valid = |id: &str| {
        results
            .iter()
            .find(|r| r["id"] == id)
            .map(|r| r["valid"].as_bool().unwrap())
            .unwrap()
    };
    assert!(valid("pilot/sound"));
    assert!(!valid("pilot/always-passes"));
    let kept = state["output"]["candidates"].as_array().unwrap();
    assert_eq!(kept.len(), 1);
}

/// The shipped example (tests/fixtures/datasets/curate) runs offline end to end.
#[tokio::test]
async fn fixture_curation_freezes_a_pool() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/datasets/curate");
    let tmp = tempfile::tempdir().unwrap();
    for f in ["curate.toml", "gen.json", "judge.json"] {
        std::fs::copy(fixture.join(f), tmp.path().join(f)).unwrap();
    }
    let models = RouteFactory {
        base: tmp.path().to_path_buf(),
    };
    let reports = run(&tmp.path().join("curate.toml"), None, None, &models)
        .await
        .unwrap();
    assert_eq!(reports.len(), 7);
    let pool: Value = serde_json::from_str(
        &std::fs::read_to_string(tmp.path().join("out/pool/pool.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(pool["tasks"].as_array().unwrap().len(), 1);
    let review: Value = serde_json::from_str(
        &std::fs::read_to_string(tmp.path().join("out/state/05-meta-review.json")).unwrap(),
    )
    .unwrap();
    // The duplicate topic lost its task, and no hard task exists: both are reported gaps.
    let gaps = review["output"]["review"]["gaps"].as_array().unwrap();
    assert!(
        gaps.iter()
            .any(|g| g.as_str().unwrap().contains("line counting again"))
    );
    assert!(
        gaps.iter()
            .any(|g| g.as_str().unwrap().contains("difficulty hard"))
    );
}

#[test]
fn judge_votes_parse_the_first_standalone_letter() {
    use geode_harness::curate::pipeline::parse_vote;
    assert_eq!(parse_vote("A"), Some(true));
    assert_eq!(parse_vote("Answer: B."), Some(false));
    assert_eq!(parse_vote("Both are fine"), None);
}

/// Issue 23's judges: one that always answers "A" and one that always answers "B" used to give
/// exactly reversed rankings, because the presentation order decided every pair. With balanced
/// presentation their preference is measured and flagged: alone, either one fails the phase;
/// beside a judge without that preference, its votes are discounted and the meta-review says so.
#[tokio::test]
async fn a_judge_that_prefers_a_position_is_flagged() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let models = RouteFactory {
        base: dir.to_path_buf(),
    };
    write_setup(dir, 2);
    for (name, letter) in [("always-a.json", "A"), ("always-b.json", "B")] {
        std::fs::write(dir.join(name), script(&[json!(letter)], true).to_string()).unwrap();
    }
    let base = std::fs::read_to_string(dir.join("curate.toml")).unwrap();
    let with_judges = |judges: &str, voters: usize, out: &str| {
        let text = base
            .replace(
                r#"judges = ["scripted:judge.json"]"#,
                &format!("judges = [{judges}]"),
            )
            .replace("voters = 3", &format!("voters = {voters}"))
            .replace(r#"out = "out""#, &format!("out = \"{out}\""));
        let path = dir.join(format!("{out}.toml"));
        std::fs::write(&path, text).unwrap();
        path
    };
    for judge in ["always-a.json", "always-b.json"] {
        let out = format!("out-{}", judge.trim_end_matches(".json"));
        let config = with_judges(&format!("\"scripted:{judge}\""), 3, &out);
        let err = run(&config, None, None, &models).await.unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("position bias"), "{msg}");
        assert!(msg.contains("of 9 votes"), "{msg}");
    }

    // Five voters: judge 0 (always "A") casts voters 0, 2 and 4, judge 1 (alternating) 1 and 3.
    let config = with_judges(
        r#""scripted:always-a.json", "scripted:judge.json""#,
        5,
        "mixed",
    );
    run(&config, None, None, &models).await.unwrap();
    let state = |n: &str| -> Value {
        serde_json::from_str(&std::fs::read_to_string(dir.join("mixed/state").join(n)).unwrap())
            .unwrap()
    };
    let tour = state("04-tournament.json");
    let bias = tour["output"]["position_bias"].as_array().unwrap();
    assert_eq!(bias[0]["first_rate"], 1.0);
    assert_eq!(bias[0]["flagged"], true);
    assert_eq!(bias[1]["flagged"], false);
    assert_eq!(
        tour["output"]["discounted"],
        json!(["scripted:always-a.json"])
    );
    // The counted votes are judge 1's: two per pair.
    let counted: u64 = tour["output"]["outcomes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["votes_a"].as_u64().unwrap() + o["votes_b"].as_u64().unwrap())
        .sum();
    assert_eq!(counted, 6);
    let review = state("05-meta-review.json");
    let gaps = review["output"]["review"]["gaps"].to_string();
    assert!(gaps.contains("prefers the task shown first"), "{gaps}");
    assert!(
        review["output"]["review"]["judges"]
            .as_array()
            .unwrap()
            .len()
            == 2
    );
}

/// A pilot runner that passes oracle, fails nop, and breaks (as a killed run would) once it
/// has been asked `fail_at` times.
struct CountingPilot {
    calls: std::sync::Mutex<Vec<String>>,
    fail_at: Option<usize>,
}

#[async_trait::async_trait]
impl geode_harness::curate::pipeline::PilotRunner for CountingPilot {
    async fn run(
        &self,
        task_dir: &Path,
        agent: &str,
        trials: u32,
        _seed: u64,
    ) -> Result<Vec<bool>, String> {
        let mut calls = self.calls.lock().unwrap();
        if self.fail_at == Some(calls.len()) {
            return Err("interrupted".into());
        }
        calls.push(format!(
            "{}:{agent}",
            task_dir.file_name().unwrap().to_string_lossy()
        ));
        Ok(vec![agent == "oracle"; trials as usize])
    }
}

/// Issue 23: a seed pack named relative to the config (`../seed`) loads from the config's
/// folder, a checkpoint whose folders are gone is not reused, and a pilot interrupted midway
/// resumes without redoing its finished tasks.
#[tokio::test]
async fn curation_resolves_paths_and_resumes_inside_a_phase() {
    let tmp = tempfile::tempdir().unwrap();
    let seed = tmp.path().join("seed");
    for name in ["one", "two", "three"] {
        pilot_task(&seed, name, "echo 1 > /logs/verifier/reward.txt");
    }
    let project = tmp.path().join("project");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(
        project.join("curate.toml"),
        "schema = \"geode.curate.v1\"\nout = \"out\"\nseed = 3\nseed_packs = [\"../seed\"]\n\
         [dedup]\nthreshold = 0.95\n[pilot]\nenabled = true\ntrials = 1\n",
    )
    .unwrap();
    // The config named relative to a working folder other than its own.
    let up: std::path::PathBuf = std::env::current_dir()
        .unwrap()
        .components()
        .skip(1)
        .map(|_| "..")
        .collect();
    let config = up
        .join(tmp.path().strip_prefix("/").unwrap())
        .join("project/curate.toml");
    assert!(
        config.is_relative() && config.is_file(),
        "{}",
        config.display()
    );
    let models = RouteFactory {
        base: project.clone(),
    };

    // Interrupted at the fourth pilot call: task one is done (2 calls), task two half done.
    let broken = CountingPilot {
        calls: Default::default(),
        fail_at: Some(3),
    };
    let err = run(&config, Some(Phase::Pilot), Some(&broken), &models)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("interrupted"), "{err}");
    assert!(project.join("out/state/03-pilot.partial.jsonl").is_file());
    let whole = CountingPilot {
        calls: Default::default(),
        fail_at: None,
    };
    let reports = run(&config, Some(Phase::Pilot), Some(&whole), &models)
        .await
        .unwrap();
    assert_eq!(reports[2].status, PhaseStatus::Ran);
    let calls = whole.calls.lock().unwrap().clone();
    assert!(
        !calls.iter().any(|c| c.starts_with("one:")),
        "a finished task was piloted again: {calls:?}"
    );
    assert_eq!(calls.len(), 4, "{calls:?}");
    assert!(!project.join("out/state/03-pilot.partial.jsonl").exists());
    let state: Value = serde_json::from_str(
        &std::fs::read_to_string(project.join("out/state/03-pilot.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(state["output"]["candidates"].as_array().unwrap().len(), 3);

    // A synthesis checkpoint whose folder is gone (as the relative-path bug left them) is
    // run again rather than reused.
    let path = project.join("out/state/01-synthesis.json");
    let mut synth: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    synth["output"]["candidates"][0]["dir"] = json!("../nowhere/one");
    std::fs::write(&path, synth.to_string()).unwrap();
    let reports = run(&config, Some(Phase::Dedup), None, &models)
        .await
        .unwrap();
    assert_eq!(reports[0].status, PhaseStatus::Ran, "{:?}", reports[0]);
    assert!(
        reports[0].summary.contains("not reused"),
        "{:?}",
        reports[0]
    );
    assert_eq!(
        reports[1].status,
        PhaseStatus::Resumed,
        "same output, same key"
    );
}
