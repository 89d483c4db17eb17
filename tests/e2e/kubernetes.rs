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
