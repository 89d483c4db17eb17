//! The kubernetes backend against a fake API server on loopback (`support/fake_kube.rs`) whose
//! Pods are real containers of the pushed images, pulled by a real docker engine from a real
//! registry: built-in tasks pass with the oracle and fail with nop, no Pod asks for privilege,
//! no more Pods live at once than `-n`, and a killed run resumes with its leftover Pods
//! deleted.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::dockerd::Engine;
use super::fake_kube::FakeCluster;
use super::registry::Registry;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The cluster, the registry it pulls from and the engine behind its Pods, and a GEODE home
/// whose `[kubernetes]` names them.
struct Setup {
    dir: tempfile::TempDir,
    cluster: FakeCluster,
    _registry: Registry,
    _engine: Engine,
}

impl Setup {
    async fn start(extra: &str) -> Setup {
        let engine = Engine::start().await;
        let registry = Registry::start();
        let cluster = FakeCluster::start(&engine.host());
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        std::fs::create_dir_all(&home).unwrap();
        std::fs::write(home.join("token"), format!("{}\n", cluster.token)).unwrap();
        std::fs::write(
            home.join("config.toml"),
            format!(
                "[kubernetes]\nserver = \"http://{}\"\nnamespace = \"geode-test\"\n\
                 token_file = \"{}\"\nregistry = \"http://{}/geode\"\n{extra}",
                cluster.addr,
                home.join("token").display(),
                registry.addr
            ),
        )
        .unwrap();
        Setup {
            dir,
            cluster,
            _registry: registry,
            _engine: engine,
        }
    }

    fn geode(&self) -> Command {
        super::common::geode_in(self.dir.path())
    }

    fn jobs(&self) -> PathBuf {
        self.dir.path().join("jobs")
    }
}

/// Each trial's outcome, by task.
fn outcomes(run_dir: &Path) -> BTreeMap<String, String> {
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
            result["outcome"].as_str().unwrap().to_string(),
        );
    }
    out
}

/// Three built-in tasks (a Python one, a C one, a shell one) in a pack of their own.
fn pack(dir: &Path) -> PathBuf {
    let pack = dir.join("pack");
    std::fs::create_dir_all(&pack).unwrap();
    for task in ["json-flatten", "semver-sort", "verify-checksums"] {
        let status = Command::new("cp")
            .arg("-r")
            .arg(repo().join("tasks/geode-core").join(task))
            .arg(pack.join(task))
            .status()
            .unwrap();
        assert!(status.success());
    }
    pack
}

#[tokio::test(flavor = "multi_thread")]
async fn built_in_tasks_pass_with_the_oracle_and_fail_with_nop_in_unprivileged_pods() {
    let setup = Setup::start("").await;
    let pack = pack(setup.dir.path());
    for (model, expected) in [("oracle", "passed"), ("nop", "failed")] {
        let (_, run_dir) = super::common::run_model_with(
            setup.geode(),
            &pack,
            &setup.jobs(),
            model,
            &["--env", "kubernetes", "-n", "2"],
        );
        let got = outcomes(&run_dir);
        assert_eq!(got.len(), 3, "{got:?}");
        assert!(got.values().all(|o| o == expected), "{model}: {got:?}");
        // The same records as any backend: the run store's rows and the trajectory.
        for trial in std::fs::read_dir(&run_dir).unwrap().flatten() {
            if trial.path().join("result.json").is_file() {
                let name = trial.file_name().to_string_lossy().into_owned();
                let result = super::common::trial_result(&run_dir, &name);
                let notes = result["notes"].to_string();
                assert!(
                    notes.contains("kubernetes: pushed as 127.0.0.1:"),
                    "{result}"
                );
                assert_eq!(result["integrity"], serde_json::json!([]), "{result}");
                assert!(trial.path().join("agent/trajectory.json").is_file());
                assert!(
                    trial.path().join("verifier/reward.txt").is_file(),
                    "{}",
                    trial.path().display()
                );
            }
        }
    }
    let state = setup.cluster.state.lock().unwrap();
    assert_eq!(state.refused, Vec::<String>::new());
    assert_eq!(state.unauthorized, 0);
    assert_eq!(state.created.len(), 6, "one Pod per trial");
    assert!(
        state.pods.is_empty(),
        "every Pod deleted at teardown: {:?}",
        state.pods.keys()
    );
    assert!(
        state.max_live <= 2,
        "at most -n Pods at once: {}",
        state.max_live
    );
    // No Pod asked for privilege, and each pulled the image by digest from the registry.
    for name in &state.created {
        assert!(name.starts_with("geode-"), "{name}");
    }
    let db = rusqlite::Connection::open(setup.jobs().join("geode.db")).unwrap();
    let rows: i64 = db
        .query_row("SELECT count(*) FROM trials", [], |r| r.get(0))
        .unwrap();
    assert_eq!(rows, 6);
}

/// A task whose oracle takes its time: long enough to kill the run under it.
fn slow_task(pack: &Path, name: &str) {
    super::attacks::task(pack, name, "", "sleep 6\necho 42 > /app/answer.txt");
}

#[tokio::test(flavor = "multi_thread")]
async fn pods_never_outnumber_n_and_a_killed_run_resumes_with_its_leftover_pods_deleted() {
    let setup = Setup::start("pod_security = \"restricted\"\nrun_as_user = 0\n").await;
    // run_as_user = 0 under restricted: a Pod that may run as root, which the cluster refuses.
    let pack = setup.dir.path().join("slow");
    for name in ["slow-a", "slow-b", "slow-c"] {
        slow_task(&pack, name);
    }
    let out = setup
        .geode()
        .arg("run")
        .arg(&pack)
        .args([
            "--model",
            "oracle",
            "--env",
            "kubernetes",
            "-n",
            "2",
            "--jobs-dir",
        ])
        .arg(setup.jobs())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let refused = setup.cluster.state.lock().unwrap().refused.clone();
    assert!(
        !refused.is_empty()
            && refused
                .iter()
                .all(|r| r.contains("restricted: may run as root")),
        "{refused:?}"
    );
    drop(setup);

    // Baseline (the tasks' images run as root): the cluster takes it.
    let setup = Setup::start("").await;
    let pack = setup.dir.path().join("slow");
    for name in ["slow-a", "slow-b", "slow-c"] {
        slow_task(&pack, name);
    }
    let mut child = setup
        .geode()
        .arg("run")
        .arg(&pack)
        .args([
            "--model",
            "oracle",
            "--env",
            "kubernetes",
            "-n",
            "2",
            "--jobs-dir",
        ])
        .arg(setup.jobs())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Killed once two trials are in their Pods, mid-agent.
    let deadline = Instant::now() + Duration::from_secs(600);
    while setup.cluster.state.lock().unwrap().execs < 6 || setup.cluster.live().len() < 2 {
        assert!(Instant::now() < deadline, "no two Pods running");
        assert!(
            child.try_wait().unwrap().is_none(),
            "the run ended before it was killed"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let leftovers = setup.cluster.live();
    assert_eq!(leftovers.len(), 2, "{leftovers:?}");
    let run_id = std::fs::read_dir(setup.jobs())
        .unwrap()
        .flatten()
        .find(|e| e.path().join("config.json").is_file())
        .unwrap()
        .file_name()
        .to_string_lossy()
        .into_owned();
    let out = setup
        .geode()
        .args(["run", "--resume", &run_id, "--json", "--jobs-dir"])
        .arg(setup.jobs())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = outcomes(&setup.jobs().join(&run_id));
    assert_eq!(got.len(), 3, "{got:?}");
    assert!(got.values().all(|o| o == "passed"), "{got:?}");
    let state = setup.cluster.state.lock().unwrap();
    for pod in &leftovers {
        assert!(
            state.deleted.contains(pod),
            "leftover {pod} not deleted: {:?}",
            state.deleted
        );
    }
    assert!(state.pods.is_empty(), "{:?}", state.pods.keys());
    assert_eq!(state.max_live, 2, "two at once, never more");
    assert_eq!(state.refused, Vec::<String>::new());
    // The leftovers were deleted before the resumed run made its first Pod.
    let position = |event: &str| state.events.iter().position(|e| e == event).unwrap();
    let resumed_first = state
        .created
        .iter()
        .skip_while(|p| !leftovers.contains(p))
        .find(|p| !leftovers.contains(p))
        .unwrap();
    for pod in &leftovers {
        assert!(position(&format!("delete {pod}")) < position(&format!("create {resumed_first}")));
    }
}

/// The backend as the trial drives it, against the fake: a command that times out is killed
/// with what it started inside the Pod, while what a finished command left in the background
/// runs on; the file tools go through `pods/exec` and stay inside the work folder; a copy out
/// leaves links out; teardown deletes the Pod.
#[tokio::test(flavor = "multi_thread")]
async fn commands_files_and_teardown_go_through_the_api() {
    use geode_harness::env::kubernetes::{KubernetesBackend, KubernetesSettings};
    use geode_harness::env::{
        Backend, EnvironmentSpec, NetworkPolicy, SandboxBackend, SandboxConfig,
    };
    use geode_runtime::tools::workspace::{ExecRequest, WorkspaceError};
    use tokio_util::sync::CancellationToken;

    let setup = Setup::start("").await;
    let state = tempfile::tempdir().unwrap();
    let builder = SandboxBackend::new(SandboxConfig::new(
        env!("CARGO_BIN_EXE_geode"),
        state.path(),
        super::registry::shared_store(),
    ))
    .unwrap();
    let config = std::fs::read_to_string(setup.dir.path().join("home/config.toml")).unwrap();
    let table: toml::Table = toml::from_str(&config).unwrap();
    let settings: KubernetesSettings = table["kubernetes"].clone().try_into().unwrap();
    let backend = KubernetesBackend::new(
        settings,
        std::sync::Arc::new(builder),
        state.path().join("k8s"),
    )
    .unwrap();
    let spec = EnvironmentSpec {
        task_name: "test/k8s".into(),
        environment_dir: PathBuf::from("/nonexistent"),
        build: None,
        network: NetworkPolicy::Off,
        cpus: Some(1.0),
        memory_mb: Some(512),
        pids_max: None,
        storage_mb: None,
        build_timeout: Duration::from_secs(1200),
        time_limits: Some(Duration::from_secs(60)),
        env: vec![("GREETING".into(), "hello".into())],
        docker_image: Some("python:3.11-slim-bookworm".into()),
        build_args: Vec::new(),
        build_log: None,
        group: Default::default(),
    };
    let image = backend.prepare(&spec).await.unwrap();
    let trial_dir = setup.jobs().join("run-1").join("t__0");
    let sandbox = backend.start(&spec, &image, &trial_dir).await.unwrap();
    let req = |command: &str, secs: u64| ExecRequest {
        command: command.into(),
        cwd: None,
        timeout: Duration::from_secs(secs),
        output_cap: 1 << 20,
        env: vec![("EXTRA".into(), "x y".into())],
    };
    let exec = |command: &'static str, secs: u64| {
        let sandbox = &sandbox;
        async move {
            sandbox
                .exec(req(command, secs), CancellationToken::new())
                .await
                .unwrap()
        }
    };
    let processes = "for d in /proc/[0-9]*; do tr '\\0' ' ' < $d/cmdline 2>/dev/null; echo; done";

    let out = exec("echo $GREETING $EXTRA; pwd; echo err >&2; exit 3", 30).await;
    assert_eq!(out.exit_code, Some(3));
    assert_eq!(out.stdout, "hello x y\n/\n");
    assert_eq!(out.stderr, "err\n");

    // Left in the background by a command that ended: it runs on.
    let out = exec("nohup sleep 999 >/dev/null 2>&1 &", 30).await;
    assert_eq!(out.exit_code, Some(0));
    // Started by a command that timed out, even in a session of its own: killed.
    let out = exec("setsid sleep 888 & sleep 777", 2).await;
    assert!(out.timed_out && out.exit_code.is_none(), "{out:?}");
    let listed = exec(processes, 30).await.stdout;
    assert!(listed.contains("sleep 999"), "{listed}");
    assert!(
        !listed.contains("sleep 888") && !listed.contains("sleep 777"),
        "{listed}"
    );

    // The file tools: through stdin and back, and never out of the work folder.
    let ws = sandbox.workspace();
    let file = ws.resolve("notes/a.txt").unwrap();
    ws.write_file(&file, b"one\ntwo\n").await.unwrap();
    assert_eq!(ws.read_file(&file).await.unwrap(), b"one\ntwo\n");
    exec("ln -s /etc /notes/etc", 30).await;
    let listed_dir = ws.list_dir(&ws.resolve("notes").unwrap()).await.unwrap();
    let names: Vec<&str> = listed_dir.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["a.txt", "etc"]);

    // A copy out keeps files and leaves links out.
    let out_dir = setup.dir.path().join("copied");
    let left_out = sandbox
        .copy_out("/notes", &out_dir, &|_| false)
        .await
        .unwrap();
    assert_eq!(std::fs::read(out_dir.join("a.txt")).unwrap(), b"one\ntwo\n");
    assert!(!out_dir.join("etc").exists());
    assert_eq!(left_out.len(), 1, "{left_out:?}");
    // A copy in replaces what is there.
    let src = setup.dir.path().join("src");
    std::fs::create_dir_all(src.join("sub")).unwrap();
    std::fs::write(src.join("sub/b.txt"), "bee").unwrap();
    sandbox.copy_in(&src, "/notes").await.unwrap();
    let out = exec("cat /notes/sub/b.txt; ls /notes", 30).await;
    assert_eq!(out.stdout, "beesub\n");
    let missing = ws.read_file(&ws.resolve("nope.txt").unwrap()).await;
    assert!(
        matches!(&missing, Err(WorkspaceError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound),
        "{missing:?}"
    );

    // What the agent wrote to /logs comes back to the trial's folders.
    exec(
        "echo seen > /logs/artifacts/x.txt; echo log > /logs/agent/a.log",
        30,
    )
    .await;
    let killed = sandbox.kill_all_processes().await.unwrap();
    assert!(killed >= 1, "{killed}");
    let listed = exec(processes, 30).await.stdout;
    assert!(!listed.contains("sleep 999"), "{listed}");
    assert_eq!(setup.cluster.live().len(), 1);
    sandbox.teardown().await.unwrap();
    assert_eq!(
        std::fs::read_to_string(trial_dir.join("artifacts/x.txt")).unwrap(),
        "seen\n"
    );
    assert_eq!(
        std::fs::read_to_string(trial_dir.join("agent/logs/a.log")).unwrap(),
        "log\n"
    );
    assert_eq!(setup.cluster.live(), Vec::<String>::new());
    assert_eq!(
        setup.cluster.state.lock().unwrap().refused,
        Vec::<String>::new()
    );
}
