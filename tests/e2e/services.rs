//! Compose tasks end to end: the built-in `geode-services` pack, whose PostgreSQL sidecar the
//! agent secures with row-level security, and a sidecar whose healthcheck never passes.

use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// `geode run PACK --model MODEL` in `dir`: the summary and the run's folder.
fn run(dir: &Path, pack: &Path, model: &str) -> (serde_json::Value, PathBuf) {
    let cmd = super::common::geode_in(dir);
    super::common::run_model_with(cmd, pack, &dir.join("jobs"), model, &[])
}

fn show(dir: &Path, trial: &Path) -> String {
    let out = super::common::geode_in(dir)
        .arg("show")
        .arg(trial)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn the_postgres_sidecar_task_passes_with_the_oracle_and_fails_with_nop() {
    let dir = tempfile::tempdir().unwrap();
    let pack = repo().join("tasks/geode-services");

    let (oracle, run_dir) = run(dir.path(), &pack, "oracle");
    assert_eq!(oracle["summary"]["outcomes"]["passed"], 1, "{oracle}");
    let trial = run_dir.join("geode-postgres-rls__0");
    let text = show(dir.path(), &trial);
    assert!(
        text.contains("PASS  row-level security is on for follows"),
        "{text}"
    );
    assert!(
        text.contains("PASS  a user cannot post as someone else"),
        "{text}"
    );
    assert!(text.contains("19 passed, 0 failed"), "{text}");
    // The sidecar ran its image's CMD as the image's user, and its output is kept.
    let log = std::fs::read_to_string(trial.join("services/db/agent/logs/service.log")).unwrap();
    assert!(
        log.contains("database system is ready to accept connections"),
        "{log}"
    );
    // Every key of the task's compose file is one GEODE applies: no "not used" note.
    let result: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(trial.join("result.json")).unwrap()).unwrap();
    let notes = result["notes"].as_array().unwrap();
    assert!(
        !notes
            .iter()
            .any(|n| n.as_str().unwrap().contains("compose")),
        "{notes:?}"
    );

    // Without the policies every rule but the ones RLS does not decide fails, one per line.
    let (nop, run_dir) = run(dir.path(), &pack, "nop");
    assert_eq!(nop["summary"]["outcomes"]["failed"], 1, "{nop}");
    let trial = run_dir.join("geode-postgres-rls__0");
    let text = show(dir.path(), &trial);
    assert!(
        text.contains("FAIL  row-level security is on for users"),
        "{text}"
    );
    assert!(
        text.contains("FAIL  anonymous visitors see public posts only"),
        "{text}"
    );
    assert!(text.contains("PASS  the existing rows are kept"), "{text}");
    assert!(text.contains("4 passed, 15 failed"), "{text}");
}

/// A task whose sidecar never becomes healthy, and one whose compose file is broken.
fn sidecar_task(root: &Path, name: &str, compose: &str) -> PathBuf {
    let task = root.join(name);
    std::fs::create_dir_all(task.join("environment/svc")).unwrap();
    std::fs::create_dir_all(task.join("tests")).unwrap();
    std::fs::write(
        task.join("task.toml"),
        format!(
            "schema_version = \"1.1\"\n[task]\nname = \"t/{name}\"\n[environment]\nnetwork_mode = \"no-network\"\n"
        ),
    )
    .unwrap();
    std::fs::write(task.join("instruction.md"), "Do nothing.\n").unwrap();
    std::fs::write(
        task.join("environment/Dockerfile"),
        "FROM debian:bookworm-slim\nWORKDIR /app\n",
    )
    .unwrap();
    std::fs::write(
        task.join("environment/svc/Dockerfile"),
        "FROM debian:bookworm-slim\nCMD [\"sleep\", \"600\"]\n",
    )
    .unwrap();
    std::fs::write(task.join("environment/docker-compose.yaml"), compose).unwrap();
    std::fs::write(
        task.join("tests/test.sh"),
        "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n",
    )
    .unwrap();
    task
}

#[test]
fn a_sidecar_that_never_turns_healthy_fails_the_setup_and_a_broken_file_names_its_field() {
    let dir = tempfile::tempdir().unwrap();
    let pack = dir.path().join("pack");
    sidecar_task(
        &pack,
        "unhealthy",
        "services:\n  svc:\n    build: ./svc\n    healthcheck:\n      test: [\"CMD\", \"test\", \"-e\", \"/nowhere\"]\n      interval: 100ms\n      retries: 2\n",
    );
    // Its one trial never reached its agent: the run measured nothing (exit 8).
    let (out, run_dir) = super::common::run_model_ending(
        super::common::geode_in(dir.path()),
        &pack,
        &dir.path().join("jobs"),
        "oracle",
        &[],
        8,
    );
    assert_eq!(
        out["summary"]["outcomes"]["environment_setup_failed"], 1,
        "{out}"
    );
    let result = std::fs::read_to_string(run_dir.join("t-unhealthy__0/result.json")).unwrap();
    assert!(result.contains("services.svc.healthcheck"), "{result}");
    assert!(result.contains("failed 2 time(s) in a row"), "{result}");

    let broken = dir.path().join("broken");
    sidecar_task(
        &broken,
        "cycle",
        "services:\n  a:\n    build: ./svc\n    depends_on: [b]\n  b:\n    build: ./svc\n    depends_on: [a]\n",
    );
    let out = super::common::geode_in(dir.path())
        .args(["tasks", "list"])
        .arg(&broken)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("docker-compose.yaml: services.a.depends_on: a dependency cycle among a, b"),
        "{text}"
    );
}
