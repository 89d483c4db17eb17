//! The crucible end to end: a truly better scaffold is kept, a better-scoring candidate that
//! raises integrity signals is vetoed, and a sealed test pack opens once.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::Output;

struct Study {
    dir: tempfile::TempDir,
}

impl Study {
    /// Train (20 tasks) and test (8 tasks) packs split from the built-in pack, and two
    /// scaffolds that differ only in the verify-repair budget.
    fn new() -> Study {
        let dir = tempfile::tempdir().unwrap();
        super::common::split_core_pack(dir.path());
        std::fs::write(dir.path().join("base.toml"), "repair_budget = 0\n").unwrap();
        std::fs::write(dir.path().join("cand.toml"), "repair_budget = 2\n").unwrap();
        Study { dir }
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

    fn freeze(&self, out: &str, extra: &[&str]) {
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

    fn run(&self, contract: &str, extra: &[&str]) -> (i32, String, String) {
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
    let (code, out, err) = s.run("keep.json", &["--pack", "train"]);
    assert_eq!(code, 0, "expected KEEP:\n{out}\n{err}");
    assert!(out.contains("verdict KEEP"), "{out}");

    // A replication on fresh seeds: recorded, its exit code the agreement; its index is not
    // run again.
    let campaign = std::fs::read_dir(s.path("jobs/crucible"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    // The campaign is a run store with one run per arm, Harbor's layout, for `geode report`.
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
    assert_eq!(o.status.code(), Some(if agreed { 0 } else { 1 }), "{err}");
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
    assert_eq!(code, 1, "expected REJECT:\n{out}\n{err}");
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
    ];
    let o = s.geode(&args);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("warning: this campaign cannot KEEP: safety veto: with 20 trials per arm"),
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
    assert!(out.contains("run at least 52 trials per arm"), "{out}");
    assert!(!out.contains("minimum detectable effect at"), "{out}");

    // Enough trials: no warning.
    let mut big = args;
    big[11] = "3";
    big[13] = "big.json";
    let o = s.geode(&big);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success() && !err.contains("cannot KEEP"), "{err}");
}

#[test]
fn a_sealed_test_pack_opens_once_and_tampering_is_detected() {
    let s = Study::new();
    let keyfile = s.path("seal.key");
    let o = s.geode(&[
        "crucible",
        "seal",
        "test",
        "--key",
        keyfile.to_str().unwrap(),
        "--new-key",
        "--name",
        "holdout",
        "-k",
        "1",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let blob = std::fs::read(s.path("sealed/holdout.sealed")).unwrap();
    let instruction = std::fs::read(s.path("test/cron-next/instruction.md")).unwrap();
    assert!(
        !blob.windows(32).any(|w| w == &instruction[..32]),
        "plaintext leaked into the sealed blob"
    );
    assert!(s.path("datasets/commitments/holdout.json").is_file());

    // A tampered copy is refused before anything runs.
    let mut bad = blob.clone();
    let mid = bad.len() / 2;
    bad[mid] ^= 1;
    std::fs::write(s.path("sealed/tampered.sealed"), &bad).unwrap();
    std::fs::copy(
        s.path("sealed/holdout.seal-state.json"),
        s.path("sealed/tampered.seal-state.json"),
    )
    .unwrap();

    // Contracts that differ only in their materiality, so each has its own hash.
    let freeze = |out: &str, state: &str, materiality: &str| {
        s.freeze(
            out,
            &[
                "--stage",
                "test",
                "--test-sealed",
                state,
                "-k",
                "1",
                "--min-tasks",
                "5",
                "--safety-tolerance",
                "0.5",
                "--materiality",
                materiality,
            ],
        );
    };
    freeze("test.json", "sealed/holdout.seal-state.json", "0.02");
    // An honest mistake costs nothing: a key file open to others is refused, and so is a
    // well-formed wrong key, both before the one opening is burned.
    let open_to_others = s.path("shared.key");
    std::fs::copy(&keyfile, &open_to_others).unwrap();
    std::fs::set_permissions(&open_to_others, std::fs::Permissions::from_mode(0o644)).unwrap();
    let wrong = s.path("wrong.key");
    std::fs::write(&wrong, format!("{}\n", "ab".repeat(32))).unwrap();
    std::fs::set_permissions(&wrong, std::fs::Permissions::from_mode(0o600)).unwrap();
    for (key, says) in [("shared.key", "chmod 600"), ("wrong.key", "authenticat")] {
        let (code, _, err) = s.run(
            "test.json",
            &["--sealed", "sealed/holdout.seal-state.json", "--key", key],
        );
        assert_eq!(code, 1, "{err}");
        assert!(err.to_lowercase().contains(says), "{key}: {err}");
        let state: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(s.path("sealed/holdout.seal-state.json")).unwrap(),
        )
        .unwrap();
        assert!(
            state["opening"].is_null(),
            "{key} burned the opening: {state}"
        );
    }
    let open_holdout = |contract: &str| {
        s.run(
            contract,
            &[
                "--sealed",
                "sealed/holdout.seal-state.json",
                "--key",
                "seal.key",
            ],
        )
    };
    let (code, out, err) = open_holdout("test.json");
    assert!(
        matches!(code, 0 | 1),
        "a decision, not INVALID or an error:\n{out}\n{err}"
    );
    let state: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(s.path("sealed/holdout.seal-state.json")).unwrap(),
    )
    .unwrap();
    assert!(
        !state["opening"].is_null(),
        "the attestation is recorded: {state}"
    );
    assert!(
        !s.path("jobs/.sandbox")
            .read_dir()
            .unwrap()
            .flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with("opened-")),
        "decrypted files were left behind"
    );

    // Burn-once: a second opening, even for another contract, is refused (by the openings
    // ledger, before the holdout ledger's and the seal state's own refusals).
    freeze("test2.json", "sealed/holdout.seal-state.json", "0.03");
    let (code, _, err) = open_holdout("test2.json");
    assert_eq!(code, 1);
    assert!(err.contains("opens once"), "{err}");

    // The opening and its decision are in the ledger beside the commitment, the decision
    // record names the entry, and the audit finds all of it consistent.
    let ledger = std::fs::read_to_string(s.path("datasets/commitments/holdout.openings.jsonl"))
        .expect("the openings ledger");
    assert_eq!(ledger.lines().count(), 2, "{ledger}");
    let audit = |what: &str| {
        let o = s.geode(&["crucible", "audit"]);
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        eprintln!("audit {what}:\n{out}");
        (o.status.code(), out)
    };
    let (code, out) = audit("after the campaign");
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("1 openings") && out.contains("consistent"),
        "{out}"
    );

    // The reset of issue 23: the seal state's opening and decision set to null, on a machine
    // whose holdout ledger never saw the pack. The openings ledger
    // still refuses the second opening, and the audit names the reset.
    let state_path = s.path("sealed/holdout.seal-state.json");
    let mut state: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&state_path).unwrap()).unwrap();
    state["opening"] = serde_json::Value::Null;
    state["decision"] = serde_json::Value::Null;
    std::fs::write(&state_path, state.to_string()).unwrap();
    std::fs::rename(s.path("home/holdouts"), s.path("home/holdouts.away")).unwrap();
    let (code, _, err) = open_holdout("test2.json");
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("openings ledger records an opening"), "{err}");
    let state: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&state_path).unwrap()).unwrap();
    assert!(state["opening"].is_null(), "refused before anything burned");
    std::fs::remove_dir_all(s.path("home/holdouts")).ok();
    std::fs::rename(s.path("home/holdouts.away"), s.path("home/holdouts")).unwrap();
    let (code, out) = audit("after the reset");
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("the state was reset"), "{out}");
    // The ledger's lines removed as well: the decision record still names the entry.
    std::fs::write(s.path("datasets/commitments/holdout.openings.jsonl"), "").unwrap();
    let (code, out) = audit("after emptying the ledger");
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("entries were removed"), "{out}");
    assert!(out.contains("that no ledger holds"), "{out}");
    std::fs::write(
        s.path("datasets/commitments/holdout.openings.jsonl"),
        &ledger,
    )
    .unwrap();

    // The burned content is not sealed again, under another name or trial count.
    for (name, k) in [("holdout2", "1"), ("holdout3", "3")] {
        let o = s.geode(&[
            "crucible", "seal", "test", "--key", "seal.key", "--name", name, "-k", k,
        ]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "re-sealed as {name}");
        assert!(err.contains("is burned"), "{err}");
        assert!(!s.path(&format!("sealed/{name}.sealed")).exists());
    }

    freeze("test3.json", "sealed/tampered.seal-state.json", "0.04");
    let (code, _, err) = s.run(
        "test3.json",
        &[
            "--sealed",
            "sealed/tampered.seal-state.json",
            "--key",
            "seal.key",
        ],
    );
    assert_eq!(code, 1);
    let err = err.to_lowercase();
    assert!(
        err.contains("commitment") || err.contains("authenticat"),
        "{err}"
    );
}

/// The decrypted holdout lives in a tmpfs that only a child of geode holds: `kill -9` of
/// geode mid-campaign leaves no plaintext anywhere, and the opening stays recorded.
#[test]
fn a_killed_test_stage_run_leaves_no_plaintext() {
    let s = Study::new();
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
        "1",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    s.freeze(
        "test.json",
        &[
            "--stage",
            "test",
            "--test-sealed",
            "sealed/holdout.seal-state.json",
            "-k",
            "1",
            "--min-tasks",
            "5",
        ],
    );
    let mut run = s
        .command()
        .args([
            "crucible",
            "run",
            "test.json",
            "--baseline-scaffold",
            "base.toml",
            "--candidate-scaffold",
            "cand.toml",
            "-n",
            "1",
            "--jobs-dir",
            "jobs",
            "--sealed",
            "sealed/holdout.seal-state.json",
            "--key",
            "seal.key",
        ])
        .current_dir(s.dir.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // The vault: geode's child running `__vault`, whose folder holds the opened pack.
    let geode_pid = run.id().to_string();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let vault = loop {
        let found = std::fs::read_dir("/proc").unwrap().flatten().find_map(|p| {
            let pid = p.file_name().to_string_lossy().into_owned();
            let stat = std::fs::read_to_string(p.path().join("stat")).ok()?;
            let ppid = stat
                .rsplit(')')
                .next()?
                .split_whitespace()
                .nth(1)?
                .to_string();
            let cmdline = std::fs::read(p.path().join("cmdline")).ok()?;
            let vault = ppid == geode_pid && cmdline.windows(7).any(|w| w == b"__vault");
            let opened = std::fs::read_dir(p.path().join("root/tmp"))
                .ok()?
                .flatten()
                .find(|e| e.file_name().to_string_lossy().starts_with("opened-"))?;
            // The folder is made before the pack is decrypted into it: wait for its files.
            let decrypted = opened.path().join("cron-next/instruction.md").is_file();
            (vault && decrypted).then_some(pid)
        });
        if let Some(found) = found {
            break found;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no vault with the opened pack appeared"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    run.kill().unwrap();
    run.wait().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while std::path::Path::new(&format!("/proc/{vault}")).exists()
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(
        !std::path::Path::new(&format!("/proc/{vault}/root/tmp")).exists(),
        "the vault outlived geode"
    );
    // Nothing of the plaintext on disk: no task folder of the test pack under the study.
    let instruction = std::fs::read(s.path("test/cron-next/instruction.md")).unwrap();
    let leaked = walk(&s.path("jobs"))
        .into_iter()
        .filter(|p| p.file_name().is_some_and(|n| n == "instruction.md"))
        .any(|p| std::fs::read(&p).is_ok_and(|b| b == instruction));
    assert!(!leaked, "the decrypted instruction is on disk under jobs/");
    let state: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(s.path("sealed/holdout.seal-state.json")).unwrap(),
    )
    .unwrap();
    assert!(
        !state["opening"].is_null(),
        "the started campaign is recorded: {state}"
    );
}

fn walk(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}
