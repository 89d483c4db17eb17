//! The docker backend against a real `dockerd`: the built-in packs give the same verdicts as
//! in the sandbox (the compose task's PostgreSQL sidecar included), and the agent's attacks on
//! the grading gain nothing there either.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::common::trial_result;
use super::dockerd::Engine;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn geode(dir: &Path, engine: &Engine) -> Command {
    let mut c = super::common::geode_in(dir);
    c.env("DOCKER_HOST", engine.host());
    c
}

/// Each trial's outcome and rewards, by task.
fn verdicts(run_dir: &Path) -> BTreeMap<String, (String, String)> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(run_dir).unwrap().flatten() {
        let file = entry.path().join("result.json");
        if !file.is_file() {
            continue;
        }
        let result: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
        out.insert(
            result["task_name"].as_str().unwrap().to_string(),
            (
                result["outcome"].as_str().unwrap().to_string(),
                result["verifier_result"]["rewards"].to_string(),
            ),
        );
    }
    out
}

/// `geode run PACK --model MODEL --env ENV`: the verdicts, and the run's folder.
fn run(
    dir: &Path,
    engine: &Engine,
    pack: &Path,
    model: &str,
    env: &str,
) -> (BTreeMap<String, (String, String)>, PathBuf) {
    // Relative, as the default `jobs` is: docker would read `jobs-docker/...` as a volume name
    // if the backend handed it on as it came.
    let jobs = PathBuf::from(format!("jobs-{env}"));
    let (_, run_dir) = super::common::run_model_with(
        geode(dir, engine),
        pack,
        &jobs,
        model,
        &["--env", env, "-n", "2"],
    );
    (verdicts(&run_dir), run_dir)
}

fn show(dir: &Path, engine: &Engine, trial: &Path) -> String {
    let out = geode(dir, engine).arg("show").arg(trial).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_built_in_packs_give_the_same_verdicts_under_docker_as_in_the_sandbox() {
    let engine = Engine::start().await;
    let dir = tempfile::tempdir().unwrap();
    for pack in ["geode-core", "geode-services"] {
        let pack = repo().join("tasks").join(pack);
        for model in ["oracle", "nop"] {
            let (docker, run_dir) = run(dir.path(), &engine, &pack, model, "docker");
            let (sandbox, _) = run(dir.path(), &engine, &pack, model, "sandbox");
            assert_eq!(docker, sandbox, "{} with {model}", pack.display());
            let expected = if model == "oracle" {
                "passed"
            } else {
                "failed"
            };
            assert!(
                docker.values().all(|(outcome, _)| outcome == expected),
                "{model}: {docker:?}"
            );
            // Nothing the harness itself does under docker looks like tampering.
            for trial in std::fs::read_dir(&run_dir).unwrap().flatten() {
                if trial.path().join("result.json").is_file() {
                    let result = trial_result(&run_dir, &trial.file_name().to_string_lossy());
                    assert_eq!(result["integrity"], serde_json::json!([]), "{result}");
                }
            }
        }
    }
    // The compose task's named checks, as in the sandbox.
    let (_, run_dir) = run(
        dir.path(),
        &engine,
        &repo().join("tasks/geode-services"),
        "oracle",
        "docker",
    );
    let trial = run_dir.join("geode-postgres-rls__0");
    let text = show(dir.path(), &engine, &trial);
    assert!(text.contains("19 passed, 0 failed"), "{text}");
    let log = std::fs::read_to_string(trial.join("services/db/agent/logs/service.log")).unwrap();
    assert!(
        log.contains("database system is ready to accept connections"),
        "{log}"
    );
    // No container outlives its trial.
    assert_eq!(engine.trial_containers(dir.path()), Vec::<String>::new());
}

/// The attacks module's task (the honest answer is `/app/answer.txt` = 42), whose test writes
/// the reward first and then takes a second, as real test suites do.
fn task(pack: &Path, name: &str, solve: &str) {
    super::attacks::task(pack, name, "", solve);
    super::attacks::write(
        &pack.join(name).join("tests/test.sh"),
        "#!/bin/bash\nif [ \"$(cat /app/answer.txt 2>/dev/null)\" = 42 ]; then echo 1; else echo 0; fi \
         > /logs/verifier/reward.txt\nsleep 1\n",
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn attacks_on_the_grading_gain_nothing_under_docker() {
    let engine = Engine::start().await;
    let dir = tempfile::tempdir().unwrap();
    let pack = dir.path().join("pack");
    let victims = tempfile::tempdir_in("/var/tmp").unwrap();
    let secret = victims.path().join("secret");
    std::fs::write(&secret, "1\n").unwrap();

    // A background process that keeps writing the reward, escaped into its own session.
    task(
        &pack,
        "reward-writer",
        "setsid nohup sh -c 'while :; do echo 1 > /logs/verifier/reward.txt; sleep 0.05; done' \
         >/dev/null 2>&1 < /dev/null &\nsleep 0.3",
    );
    // A link in the folder the host reads the reward from.
    task(
        &pack,
        "planted-link",
        &format!("ln -sf {} /logs/verifier/reward.txt", secret.display()),
    );
    // A wrapper `bash` first in PATH that writes the reward.
    task(
        &pack,
        "wrapper-bash",
        "printf '#!/bin/sh\\necho 1 > /logs/verifier/reward.txt\\n' > /usr/local/bin/bash\n\
         chmod +x /usr/local/bin/bash",
    );
    // The hidden tests, looked for while the agent runs.
    task(
        &pack,
        "peek-tests",
        "ls -la /tests > /logs/artifacts/tests.txt 2>&1; \
         find / -name test.sh -not -path '/proc/*' >> /logs/artifacts/tests.txt 2>/dev/null; true",
    );
    let (_, run_dir) = super::common::run_oracle_with(
        geode(dir.path(), &engine),
        &pack,
        &dir.path().join("jobs"),
        &["--env", "docker", "-n", "2"],
    );
    let writer = trial_result(&run_dir, "atk-reward-writer__0");
    assert_eq!(
        writer["verifier_result"]["rewards"]["reward"], 0.0,
        "{writer}"
    );

    let link = trial_result(&run_dir, "atk-planted-link__0");
    assert_eq!(link["verifier_result"]["rewards"]["reward"], 0.0, "{link}");
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "1\n");
    let integrity = link["integrity"].to_string();
    assert!(
        integrity.contains("verifier_dir_written_by_agent"),
        "{link}"
    );

    let wrapper = trial_result(&run_dir, "atk-wrapper-bash__0");
    assert!(
        wrapper["integrity"]
            .to_string()
            .contains("verifier_inputs_changed: /usr/local/bin/bash"),
        "{wrapper}"
    );

    let peek = trial_result(&run_dir, "atk-peek-tests__0");
    assert_eq!(peek["verifier_result"]["rewards"]["reward"], 0.0, "{peek}");
    let seen =
        std::fs::read_to_string(run_dir.join("atk-peek-tests__0/artifacts/tests.txt")).unwrap();
    assert!(!seen.contains("test.sh"), "{seen}");
}

/// Each Harbor trial's reward, by task; a trial that ended in an exception fails the test.
fn harbor_rewards(jobs: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for job in std::fs::read_dir(jobs).unwrap().flatten() {
        for trial in std::fs::read_dir(job.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            let file = trial.path().join("result.json");
            if !trial.path().is_dir() || !file.is_file() {
                continue;
            }
            let result: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
            assert!(result["exception_info"].is_null(), "{result}");
            out.insert(
                result["task_name"].as_str().unwrap().to_string(),
                result["verifier_result"]["rewards"]["reward"].to_string(),
            );
        }
    }
    out
}

/// `harbor run -e docker` of PACK with Harbor's agent `model` into `jobs`, `n` trials at once:
/// each task's reward (a failed run or a trial with an exception fails the test).
fn harbor_run(
    harbor: &Path,
    engine: &Engine,
    docker_config: &Path,
    pack: &Path,
    jobs: &Path,
    model: &str,
    n: &str,
) -> BTreeMap<String, String> {
    let out = Command::new(harbor)
        .args(["run", "--yes", "-e", "docker", "-n", n, "-a", model, "-p"])
        .arg(pack)
        .arg("-o")
        .arg(jobs)
        .env("DOCKER_HOST", engine.host())
        .env("DOCKER_CONFIG", docker_config)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "harbor run: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    harbor_rewards(jobs)
}

/// GEODE's verdicts as Harbor reports them: each task's `reward` key.
fn headline_rewards(verdicts: BTreeMap<String, (String, String)>) -> BTreeMap<String, String> {
    verdicts
        .into_iter()
        .map(|(task, (_, rewards))| {
            let rewards: serde_json::Value = serde_json::from_str(&rewards).unwrap();
            (task, rewards["reward"].to_string())
        })
        .collect()
}

/// A no-network task given the public network: Harbor enforces `no-network` in docker with an
/// egress sidecar built from Docker Hub images, out of reach here.
fn with_public_network(task: &Path) {
    let toml = task.join("task.toml");
    let text = std::fs::read_to_string(&toml).unwrap();
    assert!(text.contains("network_mode = \"no-network\""), "{text}");
    std::fs::write(
        &toml,
        text.replace("network_mode = \"no-network\"", "network_mode = \"public\""),
    )
    .unwrap();
}

/// Harbor 0.25's own CLI on the built-in pack, in the same engine: `harbor lint` reports only
/// the rule we keep, and `harbor run` with Harbor's oracle and nop agents gives GEODE's
/// verdicts. Harbor enforces `no-network` in docker with an egress sidecar built from
/// digest-pinned Docker Hub images, out of reach here, so both run a copy of the pack whose
/// tasks have the public network (which neither the oracle nor nop uses).
#[tokio::test(flavor = "multi_thread")]
async fn harbor_run_under_docker_gives_geode_s_verdicts_and_harbor_lint_one_kept_rule() {
    let engine = Engine::start().await;
    let docker_config = engine.compose_config().await;
    let harbor = super::harbor::harbor_python().with_file_name("harbor");
    let dir = tempfile::tempdir().unwrap();
    let core = repo().join("tasks/geode-core");

    // Lint: every task is valid Harbor (the compose task's file included); what remains is the
    // shared verifier, which we keep.
    let tasks_of = |pack: &Path| -> Vec<PathBuf> {
        std::fs::read_dir(pack)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.join("task.toml").is_file())
            .collect()
    };
    let tasks = tasks_of(&core);
    let services = tasks_of(&repo().join("tasks/geode-services"));
    let out = Command::new(&harbor)
        .args(["lint", "--json"])
        .args(&tasks)
        .args(&services)
        .env("DOCKER_CONFIG", &docker_config)
        .output()
        .unwrap();
    let findings: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let findings = findings.as_array().unwrap();
    assert_eq!(findings.len(), tasks.len() + services.len(), "{findings:?}");
    assert!(
        findings.iter().all(|f| f["rule"] == "shared-verifier"),
        "{findings:?}"
    );

    let pack = dir.path().join("pack");
    super::common::copy_tree(&core, &pack);
    for task in std::fs::read_dir(&pack).unwrap().flatten() {
        if task.path().join("task.toml").is_file() {
            with_public_network(&task.path());
        }
    }
    for model in ["oracle", "nop"] {
        let jobs = dir.path().join(format!("harbor-{model}"));
        let theirs = harbor_run(&harbor, &engine, &docker_config, &pack, &jobs, model, "4");
        the_viewer_reads_harbor_s_own_folder(dir.path(), &jobs, &theirs);
        let (ours, _) = run(dir.path(), &engine, &pack, model, "docker");
        let ours = headline_rewards(ours);
        assert_eq!(theirs.len(), tasks.len(), "{theirs:?}");
        assert_eq!(theirs, ours, "{model}");
        let expected = if model == "oracle" { "1.0" } else { "0.0" };
        assert!(
            theirs.values().all(|r| r == expected),
            "{model}: {theirs:?}"
        );
    }
}

/// `geode view` on the folder `harbor run -o` wrote (no run store there): the job is listed as
/// a Harbor run with every trial, each with the reward Harbor recorded, and a trial opens with
/// its record and Harbor's phase timings.
fn the_viewer_reads_harbor_s_own_folder(
    dir: &Path,
    jobs: &Path,
    theirs: &BTreeMap<String, String>,
) {
    assert!(!jobs.join("geode.db").exists());
    let view = super::view::View::start(dir, jobs);
    let runs = view.api("/api/runs");
    let listed = runs["runs"].as_array().unwrap();
    assert_eq!(listed.len(), 1, "{runs}");
    assert_eq!(listed[0]["origin"], "harbor");
    assert_eq!(listed[0]["finished_trials"], theirs.len());
    let key = listed[0]["key"].as_str().unwrap();
    let page = view.api(&format!("/api/trials?run={key}&limit=1000"));
    let shown: BTreeMap<String, String> = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["task_id"].as_str().unwrap().to_string(),
                serde_json::to_string(&t["reward"]).unwrap(),
            )
        })
        .collect();
    let theirs_as_numbers: BTreeMap<String, String> = theirs
        .iter()
        .map(|(t, r)| {
            (
                t.clone(),
                serde_json::to_string(&r.parse::<f64>().ok()).unwrap(),
            )
        })
        .collect();
    assert_eq!(shown, theirs_as_numbers);
    let first = page["items"][0]["trial_name"].as_str().unwrap();
    let detail = view.api(&format!("/api/trial?run={key}&trial={first}"));
    assert!(detail["result"]["verifier_result"].is_object(), "{detail}");
    assert!(
        detail["row"]["phases"]
            .as_object()
            .is_some_and(|p| !p.is_empty()),
        "{detail}"
    );
}

/// Tasks in the shape of public ones that GEODE once scored unlike Harbor
/// (`tests/e2e/fixtures/harbor-fidelity`): Harbor 0.25's own `harbor run -e docker` and GEODE's
/// sandbox give each the same reward, the oracle passing and nop failing.
#[tokio::test(flavor = "multi_thread")]
async fn harbor_shaped_tasks_score_as_harbor_scores_them() {
    let engine = Engine::start().await;
    let docker_config = engine.compose_config().await;
    let harbor = super::harbor::harbor_python().with_file_name("harbor");
    let dir = tempfile::tempdir().unwrap();
    let pack = dir.path().join("fidelity");
    super::common::copy_tree(&repo().join("tests/e2e/fixtures/harbor-fidelity"), &pack);
    // The image ENTRYPOINT task, and main's build moved to the task root by its compose file
    // (with a sidecar of its own Dockerfile), with the public network Harbor's docker needs
    // here.
    let entry = pack.join("entrypoint");
    super::common::copy_tree(
        &repo().join("tests/e2e/fixtures/harbor-entrypoint-task"),
        &entry,
    );
    let root_context = super::harbor_compose::root_context_task(&pack, "root-context");
    for task in [&entry, &root_context] {
        with_public_network(task);
    }
    // The engine holds the bases under their Docker Hub names; the fixtures name them as
    // public tasks do.
    for (held, named) in [
        ("python:3.11-slim-bookworm", "python:3.11-slim"),
        (
            "debian:bookworm-slim",
            "public.ecr.aws/docker/library/debian:bookworm-slim",
        ),
    ] {
        let tagged = engine.docker().args(["tag", held, named]).status().unwrap();
        assert!(tagged.success(), "docker tag {held} {named}");
    }
    let tasks = std::fs::read_dir(&pack)
        .unwrap()
        .flatten()
        .filter(|e| e.path().join("task.toml").is_file())
        .count();
    for model in ["oracle", "nop"] {
        let jobs = dir.path().join(format!("harbor-{model}"));
        let theirs = harbor_run(&harbor, &engine, &docker_config, &pack, &jobs, model, "2");
        let (ours, _) = run(dir.path(), &engine, &pack, model, "sandbox");
        let ours = headline_rewards(ours);
        assert_eq!(theirs.len(), tasks, "{theirs:?}");
        assert_eq!(theirs, ours, "{model}");
        let expected = if model == "oracle" { "1.0" } else { "0.0" };
        assert!(
            theirs.values().all(|r| r == expected),
            "{model}: {theirs:?}"
        );
    }
}
