//! A staged, read-only image store: `geode image stage PACK` pulls and builds everything a
//! pack needs (here from a registry on loopback serving the tasks' base), staging again
//! changes nothing, and then `geode run` on a read-only bind mount of that store, in a network
//! namespace with no network at all, passes every trial with the oracle and writes nothing to
//! the store; a task the store lacks fails at once, naming the task and `geode image stage`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant, SystemTime};

use super::registry::{Registry, image_blobs, stored_base};

/// Core tasks whose Dockerfiles are `FROM python:3.11-slim-bookworm` and COPY steps: staged
/// here without the internet a RUN step's apt would need.
pub(super) const STAGED_TASKS: [&str; 3] = ["cron-next", "json-flatten", "semver-sort"];

/// Every path under `root` with its size and modification time (links not followed).
pub(super) fn tree_state(root: &Path) -> Vec<(PathBuf, u64, SystemTime)> {
    walkdir::WalkDir::new(root)
        .sort_by_file_name()
        .into_iter()
        .map(|e| {
            let e = e.unwrap();
            let m = e.path().symlink_metadata().unwrap();
            (e.path().to_path_buf(), m.len(), m.modified().unwrap())
        })
        .collect()
}

/// A read-only bind mount of a folder, unmounted on drop.
pub(super) struct ReadOnlyMount(pub PathBuf);

impl ReadOnlyMount {
    pub fn of(src: &Path, at: &Path) -> ReadOnlyMount {
        std::fs::create_dir_all(at).unwrap();
        for args in [
            vec!["--bind", src.to_str().unwrap(), at.to_str().unwrap()],
            vec!["-o", "remount,bind,ro", at.to_str().unwrap()],
        ] {
            let ok = Command::new("mount").args(&args).status().unwrap();
            assert!(ok.success(), "mount {args:?}");
        }
        let mount = ReadOnlyMount(at.to_path_buf());
        // Truly read-only: even root cannot write there.
        let err = std::fs::write(at.join("probe"), b"x").unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EROFS), "{err}");
        mount
    }
}

impl Drop for ReadOnlyMount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// A pack of [`STAGED_TASKS`] copied from the core pack.
pub(super) fn staged_pack(dir: &Path) -> PathBuf {
    let pack = dir.join("pack");
    for task in STAGED_TASKS {
        super::common::copy_tree(&super::slurm::core_pack().join(task), &pack.join(task));
    }
    pack
}

/// A registry serving the tasks' base under its Docker Hub name, and `$GEODE_HOME/config.toml`
/// in `home_dir` naming it as Docker Hub's mirror.
pub(super) async fn mirror_of_the_base(home_dir: &Path) -> Registry {
    let base = stored_base("python:3.11-slim-bookworm").await;
    let registry = Registry::start();
    image_blobs(&base)
        .push(&registry.addr, "library/python", "3.11-slim-bookworm")
        .await;
    let home = home_dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(
        home.join("config.toml"),
        format!(
            "[images]\nmirrors = {{ \"docker.io\" = \"http://{}\" }}\n",
            registry.addr
        ),
    )
    .unwrap();
    registry
}

/// `geode image stage PACK --store STORE --json` in `dir`: its exit code and one JSON object
/// per environment.
pub(super) fn stage(
    dir: &Path,
    pack: &Path,
    store: &Path,
) -> (i32, Vec<serde_json::Value>, String) {
    let out = super::common::geode_in(dir)
        .args(["image", "stage"])
        .arg(pack)
        .arg("--store")
        .arg(store)
        .arg("--json")
        .output()
        .unwrap();
    let lines = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (
        out.status.code().unwrap_or(-1),
        lines,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `geode run PACK --model oracle --json` in a network namespace of its own with nothing but
/// a loopback that is down: no network at all, on the read-only store at `store`.
fn run_offline(dir: &Path, pack: &Path, store: &Path, jobs: &Path) -> Output {
    let mut cmd = Command::new("unshare");
    cmd.arg("--net").arg("--").arg(env!("CARGO_BIN_EXE_geode"));
    cmd.current_dir(dir);
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("GEODE_") {
            cmd.env_remove(key);
        }
    }
    cmd.env("CLAUDE_CONFIG_DIR", "/nonexistent/geode-e2e/claude")
        .env("GEODE_HOME", dir.join("home"))
        .env("GEODE_IMAGES", store)
        .env("GEODE_IMAGES_READ_ONLY", "1")
        .arg("run")
        .arg(pack)
        .args(["--model", "oracle", "--json", "--jobs-dir"])
        .arg(jobs)
        .output()
        .unwrap()
}

#[tokio::test]
async fn a_staged_read_only_store_runs_a_pack_offline_and_is_never_written() {
    let dir = tempfile::tempdir().unwrap();
    let registry = mirror_of_the_base(dir.path()).await;
    let pack = staged_pack(dir.path());
    let store = dir.path().join("staged");

    let (code, staged, err) = stage(dir.path(), &pack, &store);
    assert_eq!(code, 0, "{err}");
    assert_eq!(staged.len(), STAGED_TASKS.len(), "{staged:?}");
    for s in &staged {
        assert!(s["error"].is_null(), "{s}");
        assert_eq!(s["role"]["kind"], "main", "{s}");
        assert!(
            s["source"]
                .as_str()
                .unwrap()
                .contains(&format!("pulled from http://{}", registry.addr)),
            "{s}"
        );
    }
    // The base's two layers are pulled once, for the first task (its Dockerfile makes no
    // layer); the other two build their COPY step.
    let new: Vec<u64> = staged
        .iter()
        .map(|s| s["new_layers"].as_u64().unwrap())
        .collect();
    assert_eq!(new, [2, 1, 1], "{staged:?}");
    // Staging again finds everything and writes nothing.
    let before = tree_state(&store);
    let (code, again, err) = stage(dir.path(), &pack, &store);
    assert_eq!(code, 0, "{err}");
    for s in &again {
        assert_eq!(s["new_layers"], 0, "{s}");
        assert_eq!(s["shifted"], 0, "{s}");
    }
    assert_eq!(
        tree_state(&store),
        before,
        "a second staging wrote to the store"
    );
    // Nothing can be fetched from here on.
    drop(registry);

    let ro = ReadOnlyMount::of(&store, &dir.path().join("ro"));
    // `geode tasks check` only reads the store: it finds each base there, on the read-only
    // mount.
    let out = super::common::geode_in(dir.path())
        .env("GEODE_IMAGES", &ro.0)
        .args(["tasks", "check"])
        .arg(&pack)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && said.contains("in the image store"),
        "{said}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let jobs = dir.path().join("jobs");
    let out = run_offline(dir.path(), &pack, &ro.0, &jobs);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        summary["summary"]["outcomes"]["passed"],
        STAGED_TASKS.len(),
        "{summary}"
    );
    assert_eq!(
        tree_state(&store),
        before,
        "the read-only run wrote to the store"
    );

    // A task the store lacks: its image (a base never staged) and a build step never built.
    let missing = dir.path().join("missing");
    super::common::copy_tree(&pack.join("cron-next"), &missing.join("cron-next"));
    super::common::copy_tree(&pack.join("cron-next"), &missing.join("json-flatten"));
    std::fs::write(
        missing.join("cron-next/environment/Dockerfile"),
        "FROM debian:trixie-slim\nWORKDIR /app\n",
    )
    .unwrap();
    let toml = missing.join("json-flatten/task.toml");
    let text = std::fs::read_to_string(&toml)
        .unwrap()
        .replace("cron-next", "unstaged-step");
    std::fs::write(&toml, text).unwrap();
    std::fs::write(
        missing.join("json-flatten/environment/Dockerfile"),
        "FROM python:3.11-slim-bookworm\nRUN apt-get update\n",
    )
    .unwrap();
    let started = Instant::now();
    let out = run_offline(dir.path(), &missing, &ro.0, &jobs);
    let took = started.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let summary: serde_json::Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("{e}: {stdout}\n{}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(
        summary["summary"]["outcomes"]["environment_setup_failed"], 2,
        "{summary}"
    );
    // At once: no pull, bootstrap or apt waits on a network that is not there.
    assert!(took < Duration::from_secs(60), "took {took:?}");
    let run_dir = PathBuf::from(summary["run_dir"].as_str().unwrap());
    let mut messages = Vec::new();
    for entry in std::fs::read_dir(&run_dir).unwrap().flatten() {
        let result = entry.path().join("result.json");
        if result.is_file() {
            messages.push(std::fs::read_to_string(result).unwrap());
        }
    }
    assert_eq!(messages.len(), 2, "{messages:?}");
    let named = |needles: &[&str]| {
        messages
            .iter()
            .any(|m| needles.iter().all(|n| m.contains(n)) && m.contains("geode image stage"))
    };
    assert!(
        named(&["debian:trixie-slim", "read-only image store"]),
        "{messages:?}"
    );
    assert!(
        named(&["RUN apt-get update", "read-only image store"]),
        "{messages:?}"
    );
    assert_eq!(
        tree_state(&store),
        before,
        "the failing run wrote to the store"
    );
}
