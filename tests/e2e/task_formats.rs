//! Task files written for Harbor by other people: a suite with `"2.0"` format versions loads
//! and runs as Harbor runs it, `geode tasks check` says before any run what GEODE does unlike
//! Harbor, and every trial folder holds the `lock.json` Harbor 0.26's viewer requires.

use std::path::Path;

use super::attacks::write;
use super::common::{geode_in, run_model_with};

/// A task whose honest answer is `/tmp/answer.txt` = 42; `toml` is the whole task.toml.
fn task(pack: &Path, folder: &str, toml: &str) {
    let dir = pack.join(folder);
    write(&dir.join("task.toml"), toml);
    write(
        &dir.join("instruction.md"),
        "Write 42 to /tmp/answer.txt.\n",
    );
    write(
        &dir.join("environment/Dockerfile"),
        "FROM debian:bookworm-slim\n",
    );
    write(
        &dir.join("solution/solve.sh"),
        "#!/bin/sh\necho 42 > /tmp/answer.txt\n",
    );
    write(
        &dir.join("tests/test.sh"),
        "#!/bin/sh\nif [ \"$(cat /tmp/answer.txt 2>/dev/null)\" = 42 ]; then echo 1; else echo 0; fi \
         > /logs/verifier/reward.txt\n",
    );
}

fn suite(pack: &Path) {
    task(
        pack,
        "legacy",
        "version = \"2.0\"\nsome_future_key = 1\n[task]\nname = \"formats/v2-legacy\"\n\
         [environment]\nnetwork_mode = \"no-network\"\nmystery = \"x\"\n",
    );
    task(
        pack,
        "schema",
        "schema_version = \"2.0\"\n[task]\nname = \"formats/v2-schema\"\n\
         [environment]\nnetwork_mode = \"no-network\"\n",
    );
    // Named as that suite names every base: ECR Public's copy of Docker Hub's official image.
    write(
        &pack.join("schema/environment/Dockerfile"),
        "FROM public.ecr.aws/docker/library/debian:bookworm-slim\n",
    );
    task(
        pack,
        "gpu",
        "[task]\nname = \"formats/gpu\"\n[environment]\ngpus = 1\n",
    );
    task(pack, "broken", "[agent]\ntimeout_sec = \"soon\"\n");
}

#[test]
fn a_suite_of_2_0_tasks_is_checked_before_it_runs_then_runs_as_in_harbor() {
    let dir = tempfile::tempdir().unwrap();
    let pack = dir.path().join("suite");
    suite(&pack);

    // Before anything runs: what GEODE does unlike Harbor, per task.
    let out = geode_in(dir.path())
        .args(["tasks", "check"])
        .arg(&pack)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(10), "some are refused:\n{text}");
    for says in [
        "formats/v2-legacy: runs, with differences",
        "`some_future_key` is not read by GEODE",
        "`environment.mystery` is not read by GEODE",
        "formats/v2-schema: runs as in Harbor",
        "formats/gpu: refused: environment.gpus = 1",
        "broken: refused: ",
        "timeout_sec",
        "docker.io/library/debian:bookworm-slim: ",
        "public.ecr.aws/docker/library/debian:bookworm-slim: in the image store as \
         docker.io/library/debian:bookworm-slim",
        "4 tasks: 1 as in Harbor, 1 with differences, 2 refused",
    ] {
        assert!(text.contains(says), "{says:?} not in:\n{text}");
    }
    let json = geode_in(dir.path())
        .args(["tasks", "check", "--json"])
        .arg(&pack)
        .output()
        .unwrap();
    let rows: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(rows.as_array().unwrap().len(), 4, "{rows}");
    // A pack with nothing refused passes the check.
    let out = geode_in(dir.path())
        .args(["tasks", "check"])
        .arg(pack.join("schema"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");

    // The "2.0" tasks load and run: the oracle passes them, nop fails them.
    let jobs = dir.path().join("jobs");
    let only = ["--tasks", "formats/v2-*", "-n", "2"];
    let (oracle, run_dir) = run_model_with(geode_in(dir.path()), &pack, &jobs, "oracle", &only);
    assert_eq!(oracle["summary"]["outcomes"]["passed"], 2, "{oracle}");
    let (nop, _) = run_model_with(geode_in(dir.path()), &pack, &jobs, "nop", &only);
    assert_eq!(nop["summary"]["outcomes"]["failed"], 2, "{nop}");

    // Each trial folder has Harbor's TrialLock for the task it ran.
    for trial in ["formats-v2-legacy__0", "formats-v2-schema__0"] {
        let folder = run_dir.join(trial);
        let lock: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(folder.join("lock.json")).unwrap())
                .unwrap();
        let result = super::common::trial_result(&run_dir, trial);
        assert_eq!(lock["schema_version"], 2, "{lock}");
        assert_eq!(lock["task"]["name"], result["task_name"], "{lock}");
        assert_eq!(
            lock["task"]["digest"].as_str().unwrap(),
            format!("sha256:{}", result["task_checksum"].as_str().unwrap()),
        );
        assert_eq!(lock["agent"]["model_name"], "oracle", "{lock}");
        if trial == "formats-v2-schema__0" {
            assert_eq!(
                result["image"]["alias"], "docker.io/library/debian:bookworm-slim",
                "{result}"
            );
        }
        assert_eq!(lock["verifier"]["environment_mode"], "shared", "{lock}");
    }
}

/// `[environment] extra_ca_certs`: a trial with network finds the configured certificate in the
/// bundle its clients are pointed at (beside the machine's roots); a trial without network and
/// a run without the setting get nothing.
#[test]
fn trials_with_network_trust_the_configured_extra_certificates() {
    let dir = tempfile::tempdir().unwrap();
    let pack = dir.path().join("pack");
    let marker = "GEODEtestCAmarker0123456789";
    let pem = dir.path().join("proxy-ca.pem");
    write(
        &pem,
        &format!("-----BEGIN CERTIFICATE-----\n{marker}\n-----END CERTIFICATE-----\n"),
    );
    // The solution records what its clients would trust; the test reads the record.
    let probe = format!(
        "#!/bin/sh\nif [ -n \"$SSL_CERT_FILE\" ] && grep -q {marker} \"$SSL_CERT_FILE\" \
         && [ \"$PIP_CERT\" = \"$SSL_CERT_FILE\" ]; then echo 42 > /tmp/answer.txt; fi\n"
    );
    for (folder, network) in [("online", "public"), ("offline", "no-network")] {
        task(
            &pack,
            folder,
            &format!(
                "[task]\nname = \"ca/{folder}\"\n[environment]\nnetwork_mode = \"{network}\"\n"
            ),
        );
        write(&pack.join(folder).join("solution/solve.sh"), &probe);
    }
    let rewards = |jobs: &str| {
        let (summary, _) = run_model_with(
            geode_in(dir.path()),
            &pack,
            &dir.path().join(jobs),
            "oracle",
            &["-n", "2"],
        );
        let mut by_task: Vec<(String, f64)> = summary["summary"]["per_task"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                (
                    t["task_id"].as_str().unwrap().to_string(),
                    t["mean_reward"].as_f64().unwrap(),
                )
            })
            .collect();
        by_task.sort_by(|a, b| a.0.cmp(&b.0));
        by_task
    };
    let without = rewards("jobs-without");
    assert_eq!(
        without,
        [
            ("ca/offline".to_string(), 0.0),
            ("ca/online".to_string(), 0.0)
        ]
    );
    write(
        &dir.path().join("home/config.toml"),
        &format!("[environment]\nextra_ca_certs = [\"{}\"]\n", pem.display()),
    );
    let with = rewards("jobs-with");
    assert_eq!(
        with,
        [
            ("ca/offline".to_string(), 0.0),
            ("ca/online".to_string(), 1.0)
        ]
    );
    // A file that is not a certificate is refused by name before anything runs.
    write(&pem, "not a certificate\n");
    let out = geode_in(dir.path())
        .arg("run")
        .arg(&pack)
        .args(["--model", "oracle", "--jobs-dir", "jobs-bad"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("extra_ca_certs") && err.contains("proxy-ca.pem"),
        "{err}"
    );
}
