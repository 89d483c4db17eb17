//! The crucible end to end: a truly better scaffold is kept, a better-scoring candidate that
//! raises integrity signals is vetoed, and a campaign that cannot keep is named before it runs
//! (the sealed test pack is in crucible_sealed.rs).

use std::path::{Path, PathBuf};
use std::process::Output;

pub(super) struct Study {
    pub(super) dir: tempfile::TempDir,
}

impl Study {
    /// Train (20 tasks) and test (8 tasks) packs split from the built-in pack, and two
    /// scaffolds that differ only in the verify-repair budget.
    pub(super) fn new() -> Study {
        let dir = tempfile::tempdir().unwrap();
        super::common::split_core_pack(dir.path());
        std::fs::write(dir.path().join("base.toml"), "repair_budget = 0\n").unwrap();
        std::fs::write(dir.path().join("cand.toml"), "repair_budget = 2\n").unwrap();
        Study { dir }
    }

    pub(super) fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// `geode` in the study folder, with a `GEODE_HOME` (and so a holdout ledger) of its own.
    pub(super) fn command(&self) -> std::process::Command {
        let mut c = super::common::geode_bin();
        c.current_dir(self.dir.path())
            .env("GEODE_HOME", self.dir.path().join("home"));
        c
    }

    pub(super) fn geode(&self, args: &[&str]) -> Output {
        self.command().args(args).output().unwrap()
    }

    pub(super) fn freeze(&self, out: &str, extra: &[&str]) {
        let mut args = vec![
            "crucible",
            "freeze",
            "--train",
            "train",
            "--baseline-scaffold",
            "base.toml",
            "--candidate-scaffold",
            "cand.toml",
            "--model",
            "flaky-oracle:0.5",
            "--seed",
            "5",
            "--out",
            out,
        ];
        args.extend_from_slice(extra);
        let o = self.geode(&args);
        assert!(
            o.status.success(),
            "freeze: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }

    pub(super) fn run(&self, contract: &str, extra: &[&str]) -> (i32, String, String) {
        let mut args = vec![
            "crucible",
            "run",
            contract,
            "--baseline-scaffold",
            "base.toml",
            "--candidate-scaffold",
            "cand.toml",
            "-n",
            "2",
            "--jobs-dir",
            "jobs",
        ];
        args.extend_from_slice(extra);
        let o = self.geode(&args);
        (
            o.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    }
}

#[test]
fn a_larger_repair_budget_is_kept_and_a_tampering_candidate_is_vetoed() {
    let s = Study::new();
    s.freeze(
        "keep.json",
        &["--stage", "train", "--test", "test", "-k", "3"],
    );
    // The wrong scaffold file is refused before the first trial, not found after the last.
    std::fs::write(s.path("other.toml"), "repair_budget = 3\n").unwrap();
    let o = s.geode(&[
        "crucible",
        "run",
        "keep.json",
        "--baseline-scaffold",
        "base.toml",
        "--candidate-scaffold",
        "other.toml",
        "--pack",
        "train",
        "--jobs-dir",
        "jobs",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("candidate scaffold given hashes to"), "{err}");
    let trials = walkdir::WalkDir::new(s.path("jobs"))
        .into_iter()
        .flatten()
        .filter(|e| e.file_name() == "baseline" || e.file_name() == "candidate")
        .count();
    assert_eq!(trials, 0, "a trial ran for the wrong scaffold");
    let (code, out, err) = s.run("keep.json", &["--pack", "train"]);
    assert_eq!(code, 0, "expected KEEP:\n{out}\n{err}");
    assert!(out.contains("verdict KEEP"), "{out}");

    // The decided campaign: its run store and reports, then its replications.
    let campaign = std::fs::read_dir(s.path("jobs/crucible"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    campaign_reads_as_runs(&s, &campaign);
    let campaign = campaign.to_str().unwrap();
    replications_are_recorded_once(&s, campaign);

    s.freeze(
        "tamper.json",
        &[
            "--stage",
            "train",
            "--test",
            "test",
            "-k",
            "3",
            "--candidate-model",
            "flaky-oracle:0.5:tamper",
        ],
    );
    let (code, out, err) = s.run("tamper.json", &["--pack", "train"]);
    assert_eq!(code, 6, "expected REJECT:\n{out}\n{err}");
    assert!(out.contains("veto:safety"), "{out}");
    // The candidate still scored higher: the veto holds whatever the gain.
    let line = |k: &str| -> f64 {
        out.lines()
            .find_map(|l| l.strip_prefix(&format!("{k} ")))
            .unwrap()
            .parse()
            .unwrap()
    };
    assert!(line("candidate_mean") > line("baseline_mean"), "{out}");

    // A decided contract is not run again: the first result stands.
    let (code, _, err) = s.run("keep.json", &["--pack", "train"]);
    assert_eq!(code, 1);
    assert!(err.contains("first result stands"), "{err}");
}

/// A design that cannot KEEP is named before it runs: `freeze` warns, and `power --contract`
/// simulates that contract's rule, says P(KEEP) is 0 by the safety rule and prints no MDE.
/// The rule is `--prove-safe`, the one with a trial count to reach (the default rule has none).
#[test]
fn a_campaign_that_cannot_keep_is_named_before_it_runs() {
    let s = Study::new();
    let args = [
        "crucible",
        "freeze",
        "--train",
        "train",
        "--test",
        "test",
        "--stage",
        "train",
        "--model",
        "oracle",
        "-k",
        "1",
        "--out",
        "small.json",
        "--prove-safe",
    ];
    let o = s.geode(&args);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("warning: this campaign cannot KEEP: safety veto: with 20 trials per arm"),
        "{err}"
    );
    // Its outlook, simulated: P(KEEP) 0, and the veto stops over 90% of equally safe
    // candidates (all but those whose baseline happened to raise signals).
    assert!(
        err.contains("design 20 tasks x 1 trials per arm")
            && err.contains("P(KEEP) 0.0% [")
            && err.contains("the safety veto vetoes 9")
            && err.contains("of equally safe candidates"),
        "{err}"
    );
    let o = s.geode(&[
        "crucible",
        "power",
        "--contract",
        "small.json",
        "--baseline-rate",
        "0.5",
        "--effect",
        "0.3",
        "--tasks",
        "20",
        "--simulations",
        "50",
    ]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(out.contains("P(KEEP) 0.000"), "{out}");
    assert!(
        out.contains("rule: t_and_bca, confidence 0.95, B = 10000"),
        "{out}"
    );
    assert!(out.contains("P(KEEP) is 0 by rule: safety veto"), "{out}");
    assert!(
        out.contains("safety (prove_safe, upper bound <= 0.05)"),
        "{out}"
    );
    assert!(out.contains("run at least 52 trials per arm"), "{out}");
    assert!(!out.contains("minimum detectable effect at"), "{out}");
    // Run, it is refused before its first trial with what would lift the obstacle.
    let o = s.geode(&[
        "crucible",
        "run",
        "small.json",
        "--pack",
        "train",
        "--jobs-dir",
        "jobs",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("design 20 tasks x 1 trials per arm")
            && err.contains("cannot KEEP whatever its trials show")
            && err.contains("run at least 52 trials per arm")
            && err.contains("--allow-infeasible"),
        "{err}"
    );
    assert!(
        !s.path("jobs/crucible")
            .read_dir()
            .is_ok_and(|mut d| d.any(|c| c.is_ok_and(|c| c.path().join("baseline").exists())))
    );

    // Enough trials: no warning.
    let mut big = args;
    big[11] = "3";
    big[13] = "big.json";
    let o = s.geode(&big);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success() && !err.contains("cannot KEEP"), "{err}");

    // The default rule vetoes on evidence of harm: one trial per task is a design it can pass,
    // and its cost is stated (a single extra flagged trial in 20 reaches the tolerance).
    let default_rule = &args[..args.len() - 1];
    let o = s.geode(default_rule);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success() && !err.contains("cannot KEEP"), "{err}");
    assert!(err.contains("the safety veto vetoes"), "{err}");
}

/// The campaign is a run store with one run per arm, Harbor's layout, for `geode report`;
/// neither a report nor a decision on it panics on a reader that has gone.
fn campaign_reads_as_runs(s: &Study, campaign: &Path) {
    let store = geode_harness::store::RunStore::open(&campaign.join("geode.db")).unwrap();
    for arm in ["baseline", "candidate"] {
        let run = store.run(arm).unwrap().expect("a run per arm");
        assert_eq!(run.attempts, 3);
        assert_eq!(run.status, "finished");
        assert_eq!(store.trials(arm).unwrap().len(), 20 * 3, "{arm}");
        assert!(campaign.join(arm).is_dir());
    }
    assert_eq!(
        std::fs::read_to_string(campaign.join("trials.jsonl"))
            .unwrap()
            .lines()
            .count(),
        2 * 20 * 3,
        "every finished trial is journaled"
    );
    let campaign = campaign.to_str().unwrap();
    // `geode report` reads a campaign's arms like any run.
    let o = s.geode(&[
        "report",
        "candidate",
        "--jobs-dir",
        campaign,
        "--format",
        "md",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("candidate") && text.contains("60"), "{text}");
    // ... and says what the campaign decided, by which rule, with its bound.
    assert!(
        text.contains("Campaign decision")
            && text.contains("| verdict | KEEP |")
            && text.contains("| lower bound | pass |")
            && text.contains("| safety veto | pass |")
            && text.contains("| next |"),
        "{text}"
    );
    // Neither a report nor a decision panics on a reader that has gone (`| head -c1`).
    for args in [
        vec!["crucible", "decide", campaign],
        vec![
            "report",
            "candidate",
            "--jobs-dir",
            campaign,
            "--format",
            "md",
        ],
        vec!["compare", "baseline", "candidate", "--jobs-dir", campaign],
    ] {
        let mut cmd = s.command();
        cmd.args(&args);
        super::common::ends_quietly_on_a_closed_pipe(cmd);
    }
}

/// A replication on fresh seeds is recorded, its exit code the agreement; its index is not
/// run again.
fn replications_are_recorded_once(s: &Study, campaign: &str) {
    let replicate = |extra: &[&str]| {
        let mut args = vec![
            "crucible",
            "replicate",
            campaign,
            "--pack",
            "train",
            "--baseline-scaffold",
            "base.toml",
            "--candidate-scaffold",
            "cand.toml",
            "-n",
            "2",
        ];
        args.extend_from_slice(extra);
        s.geode(&args)
    };
    let o = replicate(&[]);
    let err = String::from_utf8_lossy(&o.stderr);
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let agreed = report["verdict_replicated"].as_bool().unwrap();
    assert_eq!(o.status.code(), Some(if agreed { 0 } else { 9 }), "{err}");
    assert!(err.contains("replication 1: the verdict"), "{err}");
    let log = std::fs::read_to_string(format!("{campaign}/replications.jsonl")).unwrap();
    let lines: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{log}");
    assert!(lines[0]["report"].is_null() && lines[0]["index"] == 1);
    assert_eq!(lines[1]["report"]["verdict_replicated"], agreed);
    let o = replicate(&["--index", "1"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("already recorded"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}
