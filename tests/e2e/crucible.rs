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

    fn geode(&self, args: &[&str]) -> Output {
        super::common::geode_bin()
            .args(args)
            .current_dir(self.dir.path())
            .output()
            .unwrap()
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
    assert!(out.contains("verdict Keep"), "{out}");

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
    let (code, out, err) = s.run(
        "test.json",
        &[
            "--sealed",
            "sealed/holdout.seal-state.json",
            "--key",
            "seal.key",
        ],
    );
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

    // Burn-once: a second opening, even for another contract, is refused.
    freeze("test2.json", "sealed/holdout.seal-state.json", "0.03");
    let (code, _, err) = s.run(
        "test2.json",
        &[
            "--sealed",
            "sealed/holdout.seal-state.json",
            "--key",
            "seal.key",
        ],
    );
    assert_eq!(code, 1);
    assert!(err.to_lowercase().contains("opened"), "{err}");

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
