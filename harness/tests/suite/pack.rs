//! Task packs: loading as users write them, errors naming file and field, content hashes,
//! Terminal-Bench 1 import.

use std::path::Path;

use geode_harness::env::NetworkPolicy;
use geode_harness::pack::{Task, TaskPack};
use geode_harness::tb1::import_tb1;

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn task(root: &Path, folder: &str, toml: &str) {
    let d = root.join(folder);
    write(&d.join("task.toml"), toml);
    write(&d.join("instruction.md"), "Do the thing.\n");
    write(
        &d.join("environment/Dockerfile"),
        "FROM debian:bookworm-slim\nWORKDIR /app\n",
    );
    write(
        &d.join("tests/test.sh"),
        "echo 1 > /logs/verifier/reward.txt\n",
    );
    write(&d.join("solution/solve.sh"), "true\n");
}

#[test]
fn harbor_tasks_load_with_unknown_keys_and_broken_ones_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    task(
        dir.path(),
        "good",
        r#"
version = "1.0"
some_future_key = 3
[task]
name = "org/good"
authors = [{ name = "A", email = "a@example.com" }]
[metadata]
difficulty = "hard"
category = "git"
custom = { nested = true }
[agent]
timeout_sec = 120.0
[verifier]
timeout_sec = 30
env = { A = "1" }
[environment]
network_mode = "no-network"
memory_mb = 512
mystery = "x"
"#,
    );
    task(dir.path(), "bad-type", "[agent]\ntimeout_sec = \"soon\"\n");
    // Harbor loads any format version (a third-party suite writes "2.0" in every task.toml).
    task(
        dir.path(),
        "two-oh",
        "schema_version = \"2.0\"\n[task]\nname = \"org/two-oh\"\n",
    );
    task(
        dir.path(),
        "legacy-two-oh",
        "version = \"2.0\"\n[task]\nname = \"org/legacy-two-oh\"\n",
    );
    task(
        dir.path(),
        "no-hosts",
        "[environment]\nnetwork_mode = \"allowlist\"\n",
    );
    task(
        dir.path(),
        "url-host",
        "[environment]\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"pypi.org\", \"https://x.org/a\"]\n",
    );
    task(
        dir.path(),
        "odd-mode",
        "[verifier]\nenvironment_mode = \"isolated\"\n",
    );
    task(
        dir.path(),
        "shared-env",
        "[verifier]\nenvironment_mode = \"shared\"\n[verifier.environment]\ndocker_image = \"x\"\n",
    );
    task(
        dir.path(),
        "climb",
        "artifacts = [\"/app/out\", { source = \"/app/../etc/shadow\" }]\n",
    );
    let pack = TaskPack::load(dir.path()).unwrap();
    let ids: Vec<&str> = pack.tasks.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, ["org/good", "org/legacy-two-oh", "org/two-oh"]);
    let t = &pack.tasks[0];
    assert_eq!(t.config.agent_timeout().as_secs(), 120);
    assert_eq!(t.config.verifier_timeout().as_secs(), 30);
    assert_eq!(t.config.network_policy(), NetworkPolicy::Off);
    assert_eq!(
        (t.config.category(), t.config.difficulty()),
        ("git", "hard")
    );
    assert_eq!(pack.broken.len(), 6);
    let msgs: Vec<String> = pack.broken.iter().map(|e| e.to_string()).collect();
    let bad = msgs.iter().find(|m| m.contains("bad-type")).unwrap();
    assert!(
        bad.contains("task.toml") && bad.contains("timeout_sec"),
        "{bad}"
    );
    let empty = msgs.iter().find(|m| m.contains("no-hosts")).unwrap();
    assert!(
        empty.contains("environment.allowed_hosts is empty"),
        "{empty}"
    );
    let url = msgs.iter().find(|m| m.contains("url-host")).unwrap();
    assert!(
        url.contains("allowed_hosts[1]") && url.contains("https://x.org/a"),
        "{url}"
    );
}

#[test]
fn schema_1_4_fields_load_as_harbor_reads_them() {
    let dir = tempfile::tempdir().unwrap();
    task(
        dir.path(),
        "full",
        r#"
schema_version = "1.4"
[environment]
os = "LINUX"
memory = "2G"
storage = "512M"
skills_dir = "/skills"
[environment.healthcheck]
command = "test -f /tmp/ready"
retries = 5
[[environment.mcp_servers]]
name = "db"
transport = "stdio"
command = "db-mcp"
[[verifier.collect]]
command = "pg_dump > /tmp/dump.sql"
[[verifier.collect]]
command = "redis-cli save"
service = "cache"
timeout_sec = 5
"#,
    );
    task(
        dir.path(),
        "gpu",
        "[environment]\ngpus = 2\ngpu_types = [\"H100\", \"A100\"]\n",
    );
    task(dir.path(), "windows", "[environment]\nos = \"windows\"\n");
    task(
        dir.path(),
        "conflict",
        "[environment]\nmemory = \"1G\"\nmemory_mb = 512\n",
    );
    task(
        dir.path(),
        "bad-size",
        "[environment]\nstorage = \"lots\"\n",
    );
    task(
        dir.path(),
        "bad-hook",
        "[[verifier.collect]]\ncommand = \"true\"\ntimeout_sec = -1\n",
    );
    let pack = TaskPack::load(dir.path()).unwrap();
    let by = |name: &str| pack.tasks.iter().find(|t| t.id == name).unwrap();
    let full = &by("full").config;
    assert_eq!(full.environment.memory_mb, Some(2048));
    assert_eq!(full.environment.storage_mb, Some(512));
    assert_eq!(full.environment.skills_dir.as_deref(), Some("/skills"));
    let check = full.environment.healthcheck.as_ref().unwrap();
    assert_eq!(
        (
            check.command.as_str(),
            check.retries,
            check.interval_sec,
            check.timeout_sec
        ),
        ("test -f /tmp/ready", 5, 5.0, 30.0)
    );
    assert_eq!(full.environment.mcp_servers.len(), 1);
    let hooks = &full.verifier.collect;
    assert_eq!(
        hooks
            .iter()
            .map(|h| (h.service.as_str(), h.timeout_sec))
            .collect::<Vec<_>>(),
        [("main", 60.0), ("cache", 5.0)]
    );
    assert_eq!(full.environment.unsupported(), None);
    let gpu = by("gpu").config.environment.unsupported().unwrap();
    assert!(gpu.contains("gpus = 2 (H100, A100)"), "{gpu}");
    let windows = by("windows").config.environment.unsupported().unwrap();
    assert!(windows.contains("os = \"windows\""), "{windows}");
    let broken: Vec<String> = pack.broken.iter().map(|b| b.to_string()).collect();
    assert_eq!(broken.len(), 3, "{broken:?}");
    for (folder, says) in [
        (
            "conflict",
            "environment.memory = \"1G\" (1024 MB) conflicts with environment.memory_mb = 512",
        ),
        (
            "bad-size",
            "environment.storage = \"lots\": expected a size",
        ),
        ("bad-hook", "verifier.collect[0].timeout_sec = -1.0"),
    ] {
        assert!(
            broken
                .iter()
                .any(|b| b.contains(&format!("{folder}/task.toml")) && b.contains(says)),
            "{folder}: {broken:?}"
        );
    }
}

#[test]
fn multi_step_tasks_load_and_their_mistakes_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let two = "[[steps]]\nname = \"one\"\nmin_reward = { reward = 1.0, speed = 0.5 }\n\
               [steps.agent]\ntimeout_sec = 30\n[[steps]]\nname = \"two\"\n";
    for folder in [
        "good",
        "no-step-instruction",
        "no-tests",
        "dup",
        "bad-name",
        "bad-strategy",
        "empty",
    ] {
        let toml = match folder {
            "dup" => "[[steps]]\nname = \"one\"\n[[steps]]\nname = \"ONE\"\n".to_string(),
            "bad-name" => "[[steps]]\nname = \"../up\"\n".to_string(),
            "bad-strategy" => format!("multi_step_reward_strategy = \"best\"\n{two}"),
            "empty" => "steps = []\n".to_string(),
            _ => two.to_string(),
        };
        task(dir.path(), folder, &toml);
        let d = dir.path().join(folder);
        // Multi-step tasks need no top-level instruction.
        std::fs::remove_file(d.join("instruction.md")).unwrap();
        for step in ["one", "two"] {
            if !(folder == "no-step-instruction" && step == "two") {
                write(&d.join(format!("steps/{step}/instruction.md")), "Do it.\n");
            }
        }
        write(
            &d.join("steps/one/tests/test.sh"),
            "echo 1 > /logs/verifier/reward.txt\n",
        );
        if folder == "no-tests" {
            std::fs::remove_file(d.join("tests/test.sh")).unwrap();
        }
    }
    let pack = TaskPack::load(dir.path()).unwrap();
    assert_eq!(
        pack.tasks.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(),
        ["good"]
    );
    let good = &pack.tasks[0];
    assert_eq!(
        good.steps.iter().map(|s| s.name()).collect::<Vec<_>>(),
        ["one", "two"]
    );
    assert_eq!(good.steps[0].instruction, "Do it.\n");
    assert_eq!(good.steps[0].config.agent.timeout_sec, Some(30.0));
    let gate = good.steps[0].config.min_reward.as_ref().unwrap();
    let rewards = |pairs: &[(&str, f64)]| {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), *v))
            .collect::<std::collections::BTreeMap<_, _>>()
    };
    assert_eq!(
        gate.shortfall(&rewards(&[("reward", 1.0), ("speed", 0.5)])),
        None
    );
    assert_eq!(
        gate.shortfall(&rewards(&[("reward", 1.0)])),
        Some(("speed".to_string(), None))
    );
    let broken: Vec<String> = pack.broken.iter().map(|b| b.to_string()).collect();
    for (folder, says) in [
        ("no-step-instruction", "steps/two/instruction.md"),
        (
            "no-tests",
            "step \"two\" needs steps/two/tests/test.sh or the task's tests/test.sh",
        ),
        ("dup", "steps[1].name = \"ONE\": step names must be unique"),
        ("bad-name", "steps[0].name = \"../up\""),
        ("bad-strategy", "multi_step_reward_strategy = \"best\""),
        ("empty", "steps = []"),
    ] {
        assert!(
            broken
                .iter()
                .any(|b| b.contains(&format!("/{folder}/")) && b.contains(says)),
            "{folder}: {broken:?}"
        );
    }
}

#[test]
fn the_task_hash_ignores_the_folder_name_and_sees_content_and_mode() {
    let dir = tempfile::tempdir().unwrap();
    task(dir.path(), "a", "[task]\nname = \"org/a\"\n");
    let h1 = Task::load(&dir.path().join("a")).unwrap().hash;
    std::fs::rename(dir.path().join("a"), dir.path().join("renamed")).unwrap();
    let h2 = Task::load(&dir.path().join("renamed")).unwrap().hash;
    assert_eq!(h1, h2);
    write(
        &dir.path().join("renamed/tests/test.sh"),
        "echo 0 > /logs/verifier/reward.txt\n",
    );
    let h3 = Task::load(&dir.path().join("renamed")).unwrap().hash;
    assert_ne!(h2, h3);
    use std::os::unix::fs::PermissionsExt;
    let p = dir.path().join("renamed/tests/test.sh");
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    let h4 = Task::load(&dir.path().join("renamed")).unwrap().hash;
    assert_ne!(h3, h4);

    let pack = TaskPack::load(dir.path()).unwrap();
    assert_ne!(
        pack.hash(1),
        pack.hash(5),
        "trials per task are part of the pack hash"
    );
}

#[test]
fn terminal_bench_1_tasks_import_to_harbor_layout() {
    let src = tempfile::tempdir().unwrap();
    tb1_hello_world(&src.path().join("hello-world"));
    let dest = tempfile::tempdir().unwrap();
    let out = import_tb1(src.path(), dest.path()).unwrap();
    assert!(out.skipped.is_empty(), "{:?}", out.skipped);
    let out = out.tasks;
    assert_eq!(out.len(), 1);
    assert_hello_world_in_harbor_layout(&out[0]);
    // Beside it: a task.yaml without an instruction, a task without run-tests.sh, and one with a
    // sidecar. A second import reports all four (one exists already), converts nothing, and
    // leaves nothing.
    tb1_tasks_that_cannot_import(src.path());
    let again = import_tb1(src.path(), dest.path()).unwrap();
    assert!(again.tasks.is_empty(), "{:?}", again.tasks);
    let why: Vec<String> = again.skipped.iter().map(|e| e.to_string()).collect();
    assert_eq!(why.len(), 4, "{why:?}");
    assert!(
        why.iter()
            .any(|w| w.contains("with-db/docker-compose.yaml") && w.contains("(db)")),
        "{why:?}"
    );
    assert!(
        why.iter()
            .any(|w| w.contains("broken/task.yaml") && w.contains("instruction")),
        "{why:?}"
    );
    assert!(why.iter().any(|w| w.contains("run-tests.sh")), "{why:?}");
    assert!(why.iter().any(|w| w.contains("already exists")), "{why:?}");
    let left: Vec<_> = std::fs::read_dir(dest.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, ["hello-world"], "a partial task was left behind");
    // The one that failed imports once fixed, beside the others.
    write(&src.path().join("untested/run-tests.sh"), "true\n");
    let fixed = import_tb1(src.path(), dest.path()).unwrap();
    assert_eq!(fixed.tasks.len(), 1, "{:?}", fixed.skipped);
    assert!(Task::load(&fixed.tasks[0]).is_ok());
}

/// A Terminal-Bench 1 task in its own layout: task.yaml, Dockerfile, compose file, solution.sh,
/// run-tests.sh and a pytest file.
fn tb1_hello_world(t: &Path) {
    write(
        &t.join("task.yaml"),
        "instruction: |\n  Create hello.txt containing 'Hello, world!'.\nauthor_email: a@example.com\ndifficulty: easy\ncategory: file-operations\ntags: [file-operations]\nparser_name: pytest\nmax_agent_timeout_sec: 360\nmax_test_timeout_sec: 60\n",
    );
    write(
        &t.join("Dockerfile"),
        "FROM python:3.11-slim\nWORKDIR /app\n",
    );
    write(
        &t.join("docker-compose.yaml"),
        "services:\n  client:\n    build: .\n",
    );
    write(&t.join("solution.sh"), "echo 'Hello, world!' > hello.txt\n");
    write(
        &t.join("run-tests.sh"),
        "pytest $TEST_DIR/test_outputs.py -rA\n",
    );
    write(
        &t.join("tests/test_outputs.py"),
        "def test_hello():\n    assert open('/app/hello.txt').read().strip() == 'Hello, world!'\n",
    );
}

/// The imported hello-world task: its instruction, timeouts, difficulty, test folder, files
/// and Harbor's author shape, with TB1's compose file dropped.
fn assert_hello_world_in_harbor_layout(task: &Path) {
    let loaded = Task::load(task).unwrap();
    assert_eq!(loaded.id, "tb1/hello-world");
    assert!(loaded.instruction.contains("hello.txt"));
    assert_eq!(loaded.config.agent_timeout().as_secs(), 360);
    assert_eq!(loaded.config.verifier_timeout().as_secs(), 60);
    assert_eq!(loaded.config.difficulty(), "easy");
    assert_eq!(
        loaded
            .config
            .verifier
            .env
            .get("TEST_DIR")
            .map(String::as_str),
        Some("/tests")
    );
    // TB1's compose file describes the agent's own container: not a sidecar.
    assert!(!task.join("environment/docker-compose.yaml").exists());
    assert!(loaded.compose.is_none());
    for f in [
        "environment/Dockerfile",
        "solution/solve.sh",
        "tests/run-tests.sh",
        "tests/test_outputs.py",
        "tests/test.sh",
    ] {
        assert!(task.join(f).is_file(), "{f}");
    }
    // Harbor's author shape.
    let toml_text = std::fs::read_to_string(task.join("task.toml")).unwrap();
    let doc: toml::Table = toml::from_str(&toml_text).unwrap();
    assert_eq!(
        doc["task"]["authors"][0]["email"].as_str(),
        Some("a@example.com"),
        "{toml_text}"
    );
}

/// A task.yaml without an instruction, a task without run-tests.sh, and one with a sidecar.
fn tb1_tasks_that_cannot_import(src: &Path) {
    write(&src.join("broken/task.yaml"), "difficulty: easy\n");
    write(&src.join("broken/Dockerfile"), "FROM x\n");
    write(&src.join("untested/task.yaml"), "instruction: Do it.\n");
    write(&src.join("untested/Dockerfile"), "FROM x\n");
    // And one whose compose file has a database beside the agent's container.
    write(&src.join("with-db/task.yaml"), "instruction: Query it.\n");
    write(&src.join("with-db/Dockerfile"), "FROM x\n");
    write(&src.join("with-db/run-tests.sh"), "true\n");
    write(
        &src.join("with-db/docker-compose.yaml"),
        "services:\n  client:\n    build: .\n  db:\n    image: postgres:15\n",
    );
}

#[test]
fn a_display_is_read_as_a_size_and_a_bad_one_names_file_and_field() {
    let dir = tempfile::tempdir().unwrap();
    task(dir.path(), "desk", "[environment]\ndisplay = \"800x600\"\n");
    task(dir.path(), "plain", "[environment]\ncpus = 1\n");
    task(
        dir.path(),
        "huge",
        "[environment]\ndisplay = \"9000x600\"\n",
    );
    task(dir.path(), "word", "[environment]\ndisplay = \"big\"\n");
    let pack = TaskPack::load(dir.path()).unwrap();
    let by = |name: &str| pack.tasks.iter().find(|t| t.id == name).unwrap();
    let size = by("desk").config.environment.display.unwrap();
    assert_eq!((size.width, size.height), (800, 600));
    assert_eq!(size.to_string(), "800x600");
    assert_eq!(by("plain").config.environment.display, None);
    let broken: Vec<String> = pack.broken.iter().map(|b| b.to_string()).collect();
    assert_eq!(broken.len(), 2, "{broken:?}");
    for folder in ["huge", "word"] {
        assert!(
            broken
                .iter()
                .any(|b| b.contains(&format!("{folder}/task.toml"))
                    && b.contains("display")
                    && b.contains("WIDTHxHEIGHT")),
            "{folder}: {broken:?}"
        );
    }
}

#[test]
fn resources_outside_their_sane_range_and_names_with_control_characters_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "no-cpu",
            "[environment]\ncpus = 0\n",
            "environment.cpus = 0.0",
        ),
        (
            "many-cpus",
            "[environment]\ncpus = 1e9\n",
            "environment.cpus = 1000000000.0",
        ),
        (
            "huge-memory",
            "[environment]\nmemory_mb = 99999999999999\n",
            "environment.memory_mb = 99999999999999",
        ),
        (
            "huge-disk",
            "[environment]\nstorage_mb = 1000000000000\n",
            "environment.storage_mb = 1000000000000",
        ),
        (
            "huge-disk-string",
            "[environment]\nstorage = \"9000000G\"\n",
            "environment.storage_mb = 9216000000",
        ),
        (
            "tiny-verifier",
            "[verifier.environment]\nmemory_mb = 1\n",
            "verifier.environment.memory_mb = 1",
        ),
        (
            "escape",
            "[task]\nname = \"org/x\\u001b[2J\"\n",
            "holds the control character",
        ),
    ];
    for (folder, toml, _) in &cases {
        task(dir.path(), folder, toml);
    }
    task(
        dir.path(),
        "fine",
        "[environment]\ncpus = 0.5\nmemory_mb = 512\nstorage_mb = 300\n",
    );
    let pack = TaskPack::load(dir.path()).unwrap();
    assert_eq!(
        pack.tasks.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(),
        ["fine"]
    );
    let broken: Vec<String> = pack.broken.iter().map(|b| b.to_string()).collect();
    assert_eq!(broken.len(), cases.len(), "{broken:#?}");
    for (folder, _, says) in cases {
        assert!(
            broken
                .iter()
                .any(|b| b.contains(&format!("{folder}/task.toml")) && b.contains(says)),
            "{folder}: {says:?} in {broken:#?}"
        );
    }
    assert!(
        broken.iter().all(|b| !b.contains('\u{1b}')),
        "the name is quoted escaped: {broken:#?}"
    );
}
