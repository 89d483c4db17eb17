//! The crucible's sealed test pack end to end: it opens once, tampering is detected, and a
//! killed test-stage run leaves no plaintext behind. Apart from crucible.rs, which decides
//! KEEP and vetoes, because these tests are about the holdout's secrecy.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use super::crucible::Study;

#[test]
fn a_sealed_test_pack_opens_once_and_tampering_is_detected() {
    let s = Study::new();
    let keyfile = s.path("seal.key");
    seal_holdout(&s, keyfile.to_str().unwrap());
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

    freeze_test(&s, "test.json", "sealed/holdout.seal-state.json", "0.02");
    honest_mistakes_burn_nothing(&s, &keyfile);
    let (code, out, err) = open_holdout(&s, "test.json");
    assert!(
        matches!(code, 0 | 6),
        "a decision, not INVALID or an error:\n{out}\n{err}"
    );
    let state = seal_state(&s);
    assert!(
        !state["opening"].is_null(),
        "the attestation is recorded: {state}"
    );
    // Nowhere in the study: its jobs, its GEODE_HOME (the trials' scratch) or elsewhere.
    assert!(
        !walkdir::WalkDir::new(s.path(""))
            .into_iter()
            .flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with("opened-")),
        "decrypted files were left behind"
    );

    // Burn-once: a second opening, even for another contract, is refused (by the openings
    // ledger, before the holdout ledger's and the seal state's own refusals).
    freeze_test(&s, "test2.json", "sealed/holdout.seal-state.json", "0.03");
    let (code, _, err) = open_holdout(&s, "test2.json");
    assert_eq!(code, 1);
    assert!(err.contains("opens once"), "{err}");

    // The opening and its decision are in the ledger beside the commitment, the decision
    // record names the entry, and the audit finds all of it consistent.
    let ledger = std::fs::read_to_string(s.path("datasets/commitments/holdout.openings.jsonl"))
        .expect("the openings ledger");
    assert_eq!(ledger.lines().count(), 2, "{ledger}");
    let (code, out) = audit(&s, "after the campaign");
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("1 openings") && out.contains("consistent"),
        "{out}"
    );

    a_reset_is_refused_and_named(&s, &ledger);

    burned_content_is_not_sealed_again(&s);

    freeze_test(&s, "test3.json", "sealed/tampered.seal-state.json", "0.04");
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

    reopenings_are_refused_or_caught(&s);
}

/// The machine's holdout ledger entry of the study's test content, named by the receipt in the
/// decision record of its opening.
fn machine_ledger_file(s: &Study) -> PathBuf {
    let decision = walk(&s.path("jobs/crucible"))
        .into_iter()
        .find(|p| p.file_name().is_some_and(|f| f == "decision.json"))
        .expect("a decision record");
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(decision).unwrap()).unwrap();
    let content = record["holdout"]["content"]
        .as_str()
        .unwrap_or_else(|| panic!("no holdout receipt: {record}"));
    let file = PathBuf::from("/var/lib/geode/holdouts").join(format!("{content}.json"));
    assert!(file.is_file(), "{} missing", file.display());
    file
}

/// The three ways a burned holdout was reopened: sealed again under another `GEODE_HOME`, a
/// copy with a fresh state and commitment folder, and every local record deleted. The first
/// two are refused before anything burns; the third opens, and the audit over both decision
/// folders finds one content opened twice.
fn reopenings_are_refused_or_caught(s: &Study) {
    let o = s
        .command()
        .env("GEODE_HOME", s.path("home2"))
        .args([
            "crucible", "seal", "test", "--key", "seal.key", "--name", "again",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "sealed again under another GEODE_HOME");
    assert!(err.contains("is burned"), "{err}");

    std::fs::create_dir_all(s.path("copy/commitments")).unwrap();
    std::fs::copy(
        s.path("sealed/holdout.sealed"),
        s.path("copy/holdout.sealed"),
    )
    .unwrap();
    std::fs::copy(
        s.path("datasets/commitments/holdout.json"),
        s.path("copy/commitments/holdout.json"),
    )
    .unwrap();
    let mut state: serde_json::Value = seal_state(s);
    state["opening"] = serde_json::Value::Null;
    state["decision"] = serde_json::Value::Null;
    std::fs::write(s.path("copy/holdout.seal-state.json"), state.to_string()).unwrap();
    freeze_test(s, "test4.json", "copy/holdout.seal-state.json", "0.05");
    // The first opening's own contract too, from a jobs folder that holds no decision.
    for contract in ["test.json", "test4.json"] {
        let o = s.geode(&[
            "crucible",
            "run",
            contract,
            "--baseline-scaffold",
            "base.toml",
            "--candidate-scaffold",
            "cand.toml",
            "--jobs-dir",
            "elsewhere",
            "--sealed",
            "copy/holdout.seal-state.json",
            "--key",
            "seal.key",
            "--commitments",
            "copy/commitments",
        ]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(
            o.status.code(),
            Some(1),
            "{contract} reopened a copy: {err}"
        );
        assert!(err.contains("opened before"), "{err}");
    }
    let copy_state: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(s.path("copy/holdout.seal-state.json")).unwrap(),
    )
    .unwrap();
    assert!(copy_state["opening"].is_null(), "the copy was burned");

    // Every local record gone: the machine's entry, the openings ledger, the seal state.
    std::fs::remove_file(machine_ledger_file(s)).unwrap();
    std::fs::remove_file(s.path("datasets/commitments/holdout.openings.jsonl")).unwrap();
    std::fs::write(s.path("sealed/holdout.seal-state.json"), state.to_string()).unwrap();
    let (code, out, err) = open_holdout(s, "test4.json");
    assert!(matches!(code, 0 | 6), "opened again:\n{out}\n{err}");
    assert!(err.contains("holdout receipt: content"), "{err}");
    let o = s.geode(&["crucible", "audit", "--decisions", "jobs/crucible"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(10), "{out}");
    assert!(out.contains("was opened 2 times"), "{out}");
}

/// The decrypted holdout lives in a tmpfs that only a child of geode holds: `kill -9` of
/// geode mid-campaign leaves no plaintext anywhere, and the opening stays recorded.
#[test]
fn a_killed_test_stage_run_leaves_no_plaintext() {
    let s = Study::new();
    seal_holdout(&s, "seal.key");
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
            "--safety-tolerance",
            "0.5",
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
    let started = std::time::SystemTime::now();
    let geode_pid = run.id().to_string();
    let vault = vault_of(&geode_pid);
    // Killed mid-campaign: once the trial of the task whose image holds the study's marker has
    // started, seen through geode's own mount namespace (its trials are in memory there).
    let trials = format!(
        "/proc/{geode_pid}/root{}",
        std::fs::canonicalize(s.path("jobs")).unwrap().display()
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !walk(std::path::Path::new(&trials))
        .iter()
        .any(|p| p.to_string_lossy().contains("json-flatten") && p.ends_with("timeline.db"))
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the json-flatten trial never started: {:?}",
            walk(std::path::Path::new(&trials))
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    std::thread::sleep(std::time::Duration::from_millis(500));
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
    // Nothing of the plaintext on disk, in any file written since: not in the study (its
    // jobs, its GEODE_HOME with the trials' scratch), not in the shared image store. Looked
    // for: the instruction's text, the reference solution's, and the marker in the image.
    let instruction = std::fs::read_to_string(s.path("test/json-flatten/instruction.md")).unwrap();
    let solution = std::fs::read_to_string(s.path("test/json-flatten/solution/solve.sh")).unwrap();
    let secrets = [
        longest_line(&instruction),
        longest_line(&solution),
        super::common::study_marker(s.dir.path()),
    ];
    let store = super::registry::shared_store();
    let mut written: Vec<PathBuf> = walk(&s.path("jobs"));
    written.extend(walk(&s.path("home")));
    written.extend(walk(&store).into_iter().filter(|p| {
        std::fs::symlink_metadata(p)
            .and_then(|m| m.modified())
            .is_ok_and(|t| t >= started)
    }));
    for file in &written {
        assert!(
            file.file_name().is_none_or(|n| n != "disk.img"),
            "a trial's disk outlived geode: {}",
            file.display()
        );
        let Ok(bytes) = std::fs::read(file) else {
            continue;
        };
        for secret in &secrets {
            assert!(
                !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
                "{} holds the holdout's {secret:?}",
                file.display()
            );
        }
    }
    let state = seal_state(&s);
    assert!(
        !state["opening"].is_null(),
        "the started campaign is recorded: {state}"
    );
}

/// The longest line of `text`: distinctive enough to find it verbatim.
fn longest_line(text: &str) -> String {
    text.lines()
        .max_by_key(|l| l.len())
        .unwrap_or_default()
        .to_string()
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

/// Seals the test pack as `holdout` (one trial per task) under a new key at `key`.
fn seal_holdout(s: &Study, key: &str) {
    let o = s.geode(&[
        "crucible",
        "seal",
        "test",
        "--key",
        key,
        "--new-key",
        "--name",
        "holdout",
        "-k",
        "1",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// The holdout's seal state as it is on disk now.
fn seal_state(s: &Study) -> serde_json::Value {
    serde_json::from_str(
        &std::fs::read_to_string(s.path("sealed/holdout.seal-state.json")).unwrap(),
    )
    .unwrap()
}

/// An honest mistake costs nothing: a key file open to others is refused, and so is a
/// well-formed wrong key, both before the one opening of `test.json` is burned.
fn honest_mistakes_burn_nothing(s: &Study, keyfile: &Path) {
    let open_to_others = s.path("shared.key");
    std::fs::copy(keyfile, &open_to_others).unwrap();
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
        let state = seal_state(s);
        assert!(
            state["opening"].is_null(),
            "{key} burned the opening: {state}"
        );
    }
    // The wrong scaffold file, a misspelled scaffold key, a rule no outcome of the sealed
    // pack's size can pass: each refused by name before the opening.
    std::fs::write(s.path("other.toml"), "repair_budget = 3\n").unwrap();
    std::fs::write(s.path("typo.toml"), "repair_budgt = 2\n").unwrap();
    s.freeze(
        "too-big.json",
        &[
            "--stage",
            "test",
            "--test-sealed",
            "sealed/holdout.seal-state.json",
            "-k",
            "1",
            "--min-tasks",
            "50",
            "--safety-tolerance",
            "0.5",
        ],
    );
    for (contract, candidate, says) in [
        (
            "test.json",
            "other.toml",
            "candidate scaffold given hashes to",
        ),
        ("test.json", "typo.toml", "unknown field `repair_budgt`"),
        (
            "too-big.json",
            "cand.toml",
            "cannot KEEP whatever its trials show",
        ),
    ] {
        let o = s.geode(&[
            "crucible",
            "run",
            contract,
            "--baseline-scaffold",
            "base.toml",
            "--candidate-scaffold",
            candidate,
            "--sealed",
            "sealed/holdout.seal-state.json",
            "--key",
            "seal.key",
            "--jobs-dir",
            "jobs",
        ]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{candidate}: {err}");
        assert!(err.contains(says), "{contract} with {candidate}: {err}");
        assert!(
            seal_state(s)["opening"].is_null(),
            "{contract} with {candidate} burned the opening"
        );
        assert!(
            !s.path("datasets/commitments/holdout.openings.jsonl")
                .exists(),
            "{contract} with {candidate} recorded an opening"
        );
    }
    // The vault is this machine's, out of a Slurm node's reach: refused before the opening.
    let sealed = [
        "--sealed",
        "sealed/holdout.seal-state.json",
        "--key",
        "seal.key",
    ];
    let (code, _, err) = s.run(
        "test.json",
        &[&sealed[..], &["--executor", "slurm"]].concat(),
    );
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("train-stage contracts only"), "{err}");
    assert!(
        seal_state(s)["opening"].is_null(),
        "--executor slurm burned it"
    );
}

/// The pid of geode's child running `__vault` once its folder holds the decrypted pack.
fn vault_of(geode_pid: &str) -> String {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
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
            return found;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no vault with the opened pack appeared"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Opens the sealed holdout for `contract` with the right key.
fn open_holdout(s: &Study, contract: &str) -> (i32, String, String) {
    s.run(
        contract,
        &[
            "--sealed",
            "sealed/holdout.seal-state.json",
            "--key",
            "seal.key",
        ],
    )
}

/// `geode crucible audit`: its exit code and report (echoed, for a failing test's log).
fn audit(s: &Study, what: &str) -> (Option<i32>, String) {
    let o = s.geode(&["crucible", "audit"]);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    eprintln!("audit {what}:\n{out}");
    (o.status.code(), out)
}

/// The reset of issue 23: the seal state's opening and decision set to null, with the machine's
/// holdout ledger entry of the content out of the way. The openings ledger
/// still refuses the second opening, and the audit names the reset.
fn a_reset_is_refused_and_named(s: &Study, ledger: &str) {
    let state_path = s.path("sealed/holdout.seal-state.json");
    let mut state: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&state_path).unwrap()).unwrap();
    state["opening"] = serde_json::Value::Null;
    state["decision"] = serde_json::Value::Null;
    std::fs::write(&state_path, state.to_string()).unwrap();
    let machine = machine_ledger_file(s);
    let away = machine.with_extension("away");
    std::fs::rename(&machine, &away).unwrap();
    let (code, _, err) = open_holdout(s, "test2.json");
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("openings ledger records an opening"), "{err}");
    let state: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&state_path).unwrap()).unwrap();
    assert!(state["opening"].is_null(), "refused before anything burned");
    std::fs::rename(&away, &machine).unwrap();
    let (code, out) = audit(s, "after the reset");
    assert_eq!(code, Some(10), "{out}");
    assert!(out.contains("the state was reset"), "{out}");
    // The ledger's lines removed as well: the decision record still names the entry.
    std::fs::write(s.path("datasets/commitments/holdout.openings.jsonl"), "").unwrap();
    let (code, out) = audit(s, "after emptying the ledger");
    assert_eq!(code, Some(10), "{out}");
    assert!(out.contains("entries were removed"), "{out}");
    assert!(out.contains("that no ledger holds"), "{out}");
    std::fs::write(
        s.path("datasets/commitments/holdout.openings.jsonl"),
        ledger,
    )
    .unwrap();
}

/// Freezes a test-stage contract on the sealed pack of `state`. Contracts that differ only in
/// their materiality each have their own hash.
fn freeze_test(s: &Study, out: &str, state: &str, materiality: &str) {
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
}

/// The burned content is not sealed again, under another name or trial count.
fn burned_content_is_not_sealed_again(s: &Study) {
    for (name, k) in [("holdout2", "1"), ("holdout3", "3")] {
        let o = s.geode(&[
            "crucible", "seal", "test", "--key", "seal.key", "--name", name, "-k", k,
        ]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "re-sealed as {name}");
        assert!(err.contains("is burned"), "{err}");
        assert!(!s.path(&format!("sealed/{name}.sealed")).exists());
    }
}

/// A train pack holding a test task is not frozen against it: an exact copy by its id, a copy
/// under another name as a near-duplicate, and the same against the sealed pack, compared by
/// the tasks recorded when it was sealed here.
#[test]
fn a_train_pack_holding_a_test_task_is_not_frozen() {
    let s = Study::new();
    seal_holdout(&s, "seal.key");
    let copy = s.path("train/cron-next");
    super::common::copy_tree(&s.path("test/cron-next"), &copy);
    let freeze = |test: [&str; 2]| {
        s.geode(&[
            "crucible", "freeze", "--stage", "train", "--train", "train", test[0], test[1],
            "--model", "oracle", "-k", "3", "--out", "c.json",
        ])
    };
    // Refused against the plain test pack and the sealed one alike, naming `says`.
    let refused_by_both = |says: &str| {
        for test in [
            ["--test", "test"],
            ["--test-sealed", "sealed/holdout.seal-state.json"],
        ] {
            let o = freeze(test);
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(1), "{test:?}: {err}");
            assert!(err.contains(says), "{err}");
            assert!(!s.path("c.json").exists(), "frozen anyway");
        }
    };
    refused_by_both("same_id: test/geode/cron-next");
    // Renamed: its own id and hash, the same task.
    let toml = std::fs::read_to_string(copy.join("task.toml")).unwrap();
    std::fs::write(
        copy.join("task.toml"),
        toml.replace("geode/cron-next", "geode/cron-next-again"),
    )
    .unwrap();
    refused_by_both("near_duplicate");
    std::fs::remove_dir_all(&copy).unwrap();
    let o = freeze(["--test-sealed", "sealed/holdout.seal-state.json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}
