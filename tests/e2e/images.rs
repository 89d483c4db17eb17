//! Real task images end to end: a base image served by Debian's `docker-registry` on loopback
//! is pulled and the trial runs in it (its os-release, Env, WorkingDir; nothing of the host),
//! a tampered blob is refused, a `docker save` tarball loads offline, registry mirrors serve
//! Docker Hub references, and a Terminal-Bench-1-style task (base WORKDIR /app) and a
//! python-style task (`pip install` in a RUN step) pass with the oracle.

use std::path::{Path, PathBuf};
use std::process::Command;

use geode_harness::env::image::StoredImage;

use super::common::trial_result;
use super::registry::{Registry, image_blobs, stored_base};

/// `python:3.11-slim` from the machine-wide test store (bootstrapped there on first use).
async fn python_base() -> StoredImage {
    stored_base("python:3.11-slim").await
}

/// `base` with its config changed.
fn with_config(
    base: &StoredImage,
    env: Vec<(String, String)>,
    working_dir: Option<&str>,
) -> StoredImage {
    let mut image = base.clone();
    image.config.env = env;
    image.config.working_dir = working_dir.map(str::to_string);
    image
}

/// `geode` with a private home and image store (so every pull really happens).
fn geode(home: &Path) -> Command {
    let mut c = super::common::geode_in(home);
    c.env("GEODE_IMAGES", home.join("images"));
    c
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// A Harbor task whose solution writes `probe` into /logs/artifacts/probe.txt and whose test
/// passes when `check` (a shell condition) holds.
fn task(pack: &Path, name: &str, dockerfile: &str, solve: &str, check: &str) {
    let dir = pack.join(name);
    write(
        &dir.join("task.toml"),
        &format!("[task]\nname = \"test/{name}\"\n[environment]\nnetwork_mode = \"no-network\"\n"),
    );
    write(&dir.join("instruction.md"), "Probe the image.\n");
    write(&dir.join("environment/Dockerfile"), dockerfile);
    write(
        &dir.join("solution/solve.sh"),
        &format!("#!/bin/bash\nset -e\n{solve}\n"),
    );
    write(
        &dir.join("tests/test.sh"),
        &format!(
            "#!/bin/bash\nif {check}; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n"
        ),
    );
}

fn run_oracle(home: &Path, pack: &Path) -> (serde_json::Value, PathBuf) {
    super::common::run_oracle_with(geode(home), pack, &home.join("jobs"), &[])
}

#[tokio::test]
async fn a_registry_image_is_pulled_and_the_trial_sees_it_and_not_the_host() {
    let base = python_base().await;
    let registry = Registry::start();
    let mut env = base.config.env.clone();
    env.push(("GEODE_IMAGE_MARK".into(), "from-registry".into()));
    let blobs = image_blobs(&with_config(&base, env.clone(), Some("/srv/work")));
    blobs.push(&registry.addr, "geode-test/probe", "1").await;

    let home = tempfile::tempdir().unwrap();
    // Files only the host has: one made for this test, and the pack's own hidden tests.
    let host_only = tempfile::NamedTempFile::new_in("/var/tmp").unwrap();
    let pack = home.path().join("pack");
    let hidden = pack.join("probe/tests/test.sh");
    task(
        &pack,
        "probe",
        &format!("FROM {}/geode-test/probe:1\n", registry.addr),
        &format!(
            "{{ grep VERSION_CODENAME /etc/os-release; echo \"PWD=$(pwd)\"; echo \"PATH=$PATH\"; \
             echo \"MARK=$GEODE_IMAGE_MARK\"; echo \"PY=$PYTHON_VERSION\"; \
             test -e {host} && echo host-file-visible || echo host-file-hidden; \
             test -e {hidden} && echo pack-visible || echo pack-hidden; \
             test -e {exe} && echo harness-visible || echo harness-hidden; \
             readlink /proc/1/exe >/dev/null 2>&1 && echo init-exe-visible || echo init-exe-hidden; \
             readlink /proc/$PPID/exe >/dev/null 2>&1 && echo agent-exe-visible || echo agent-exe-hidden; \
             }} > /logs/artifacts/probe.txt\necho done > answer.txt",
            host = host_only.path().display(),
            hidden = hidden.display(),
            exe = env!("CARGO_BIN_EXE_geode"),
        ),
        "[ \"$(cat /srv/work/answer.txt)\" = done ]",
    );
    let (summary, run_dir) = run_oracle(home.path(), &pack);
    assert_eq!(summary["summary"]["outcomes"]["passed"], 1, "{summary}");
    let probe = std::fs::read_to_string(run_dir.join("test-probe__0/artifacts/probe.txt")).unwrap();
    let path = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.clone())
        .unwrap();
    for line in [
        "VERSION_CODENAME=bookworm",
        "PWD=/srv/work",
        &format!("PATH={path}"),
        "MARK=from-registry",
        "host-file-hidden",
        "pack-hidden",
        "harness-hidden",
        "init-exe-hidden",
        "agent-exe-hidden",
    ] {
        assert!(
            probe.lines().any(|l| l == line),
            "{line:?} not in:\n{probe}"
        );
    }
    assert!(!probe.contains("PY=\n"), "PYTHON_VERSION unset:\n{probe}");
    let result = trial_result(&run_dir, "test-probe__0");
    let source = result["image"]["source"].as_str().unwrap();
    assert!(
        source.starts_with(&format!("pulled from http://{}", registry.addr)),
        "{result}"
    );
    assert!(
        result["image"]["digest"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );
}

#[tokio::test]
async fn a_tampered_blob_is_refused_with_a_digest_error() {
    let base = python_base().await;
    let registry = Registry::start();
    let mut one_layer = base.clone();
    one_layer.layers.truncate(1);
    let blobs = image_blobs(&one_layer);
    blobs.push(&registry.addr, "geode-test/tampered", "1").await;
    let (layer_digest, _, _) = &blobs.layers[0];
    let file = registry.blob_file(layer_digest);
    let mut bytes = std::fs::read(&file).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&file, bytes).unwrap();

    let home = tempfile::tempdir().unwrap();
    let out = geode(home.path())
        .args([
            "image",
            "pull",
            &format!("{}/geode-test/tampered:1", registry.addr),
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a tampered layer was accepted");
    assert!(
        stderr.contains("digest mismatch") && stderr.contains(layer_digest.as_str()),
        "{stderr}"
    );
    let ls = geode(home.path()).args(["image", "ls"]).output().unwrap();
    assert!(
        !String::from_utf8_lossy(&ls.stdout).contains("tampered"),
        "the tampered image was recorded"
    );
}

#[tokio::test]
async fn a_docker_save_tarball_loads_and_runs_offline() {
    let base = python_base().await;
    let image = with_config(&base, base.config.env.clone(), Some("/opt/loaded"));
    let home = tempfile::tempdir().unwrap();
    let tarball = home.path().join("saved.tar");
    geode_harness::env::image::save(&image, "geode-test/loaded:1", &tarball).unwrap();
    let out = geode(home.path())
        .args(["image", "load"])
        .arg(&tarball)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_no_host_privilege_in(&home.path().join("images"));
    let ls = geode(home.path()).args(["image", "ls"]).output().unwrap();
    let listing = String::from_utf8_lossy(&ls.stdout);
    assert!(
        listing.contains("docker.io/geode-test/loaded:1") && listing.contains("loaded from"),
        "{listing}"
    );
    let pack = home.path().join("pack");
    task(
        &pack,
        "loaded",
        "FROM geode-test/loaded:1\n",
        "pwd > where.txt",
        "[ \"$(cat /opt/loaded/where.txt)\" = /opt/loaded ]",
    );
    let (summary, run_dir) = run_oracle(home.path(), &pack);
    assert_eq!(summary["summary"]["outcomes"]["passed"], 1, "{summary}");
    let result = trial_result(&run_dir, "test-loaded__0");
    assert!(
        result["image"]["source"]
            .as_str()
            .unwrap()
            .starts_with("loaded from"),
        "{result}"
    );
}

#[tokio::test]
async fn mirrors_serve_docker_hub_names_for_tb1_and_python_style_tasks() {
    let base = python_base().await;
    let registry = Registry::start();
    // A Terminal-Bench-1-style base (its images set WORKDIR /app) and a python image, both
    // under Docker Hub names that only the mirror has.
    let tb = image_blobs(&with_config(&base, base.config.env.clone(), Some("/app")));
    tb.push(&registry.addr, "geode-test/t-bench-python", "3.11")
        .await;
    let py = image_blobs(&with_config(&base, base.config.env.clone(), None));
    py.push(&registry.addr, "library/python", "3.11-slim").await;

    let home = tempfile::tempdir().unwrap();
    write(
        &home.path().join("home/config.toml"),
        &format!(
            "[images]\nmirrors = {{ \"docker.io\" = \"http://{}\" }}\n",
            registry.addr
        ),
    );
    let pack = home.path().join("pack");
    task(
        &pack,
        "tb1-style",
        "FROM geode-test/t-bench-python:3.11\n",
        "printf 'hello\\n' > greeting.txt",
        // run-tests.sh of Terminal-Bench 1 refuses to run from /.
        "[ \"$PWD\" != / ] && [ \"$(cat /app/greeting.txt)\" = hello ]",
    );
    task(
        &pack,
        "pip-install",
        "FROM python:3.11-slim\nWORKDIR /app\nCOPY pkg /tmp/pkg\n\
         RUN pip install --no-index --no-build-isolation /tmp/pkg && rm -rf /tmp/pkg\n",
        "python -c 'import geodepkg; print(geodepkg.VALUE)' > value.txt && pip --version > pip.txt",
        "[ \"$(cat /app/value.txt)\" = 42 ] && grep -q 'python 3.11' /app/pip.txt",
    );
    let pkg = pack.join("pip-install/environment/pkg");
    write(&pkg.join("geodepkg/__init__.py"), "VALUE = 42\n");
    write(
        &pkg.join("setup.py"),
        "from setuptools import setup\nsetup(name='geodepkg', version='1.0', packages=['geodepkg'])\n",
    );
    let (summary, run_dir) = run_oracle(home.path(), &pack);
    assert_eq!(summary["summary"]["outcomes"]["passed"], 2, "{summary}");
    for trial in ["test-tb1-style__0", "test-pip-install__0"] {
        let result = trial_result(&run_dir, trial);
        assert!(
            result["image"]["source"]
                .as_str()
                .unwrap()
                .starts_with(&format!("pulled from http://{}", registry.addr)),
            "{result}"
        );
    }
}

#[tokio::test]
async fn an_image_that_cannot_be_had_is_environment_unsupported_with_the_fix() {
    let home = tempfile::tempdir().unwrap();
    let pack = home.path().join("pack");
    task(&pack, "ubuntu", "FROM ubuntu:24.04\n", "true", "true");
    let out = geode(home.path())
        .args(["run"])
        .arg(&pack)
        .args(["--model", "oracle", "--json", "--jobs-dir"])
        .arg(home.path().join("jobs"))
        .output()
        .unwrap();
    // No trial reached its agent: the run measured nothing, which its exit code says.
    assert_eq!(out.status.code(), Some(8), "{out:?}");
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let run_dir = PathBuf::from(summary["run_dir"].as_str().unwrap());
    let result = trial_result(&run_dir, "test-ubuntu__0");
    let text = result.to_string();
    assert!(text.contains("environment_unsupported"), "{text}");
    assert!(
        text.contains("ubuntu:24.04") && text.contains("geode image load"),
        "{text}"
    );
}

/// A Terminal-Bench 1 task on its own base, imported and run. ghcr.io is out of reach here, so
/// `ghcr.io/laude-institute/t-bench/python-3-13` is Debian trixie's Python 3.13 with tmux and
/// asciinema, bootstrapped once per machine into the test store; its glibc (2.41) is not the
/// host's (bookworm's 2.36), which the sandbox's own processes must never load.
#[test]
fn a_terminal_bench_1_task_on_its_python_base_imports_and_passes() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("tb1/hello");
    write(
        &src.join("task.yaml"),
        "instruction: Write hello to /app/hello.txt.\nparser_name: pytest\n\
         max_agent_timeout_sec: 120\nmax_test_timeout_sec: 60\n",
    );
    write(
        &src.join("Dockerfile"),
        "FROM ghcr.io/laude-institute/t-bench/python-3-13:20250620\nWORKDIR /app\n",
    );
    write(
        &src.join("docker-compose.yaml"),
        "services:\n  client:\n    build: .\n    command: [\"sh\", \"-c\", \"sleep infinity\"]\n",
    );
    write(&src.join("solution.sh"), "echo hello > /app/hello.txt\n");
    write(
        &src.join("run-tests.sh"),
        "python3 --version\ncommand -v tmux asciinema\n\
         python3 -c \"assert open('/app/hello.txt').read().strip() == 'hello'; print('1 passed')\"\n",
    );
    let imported = super::common::geode_in(dir.path())
        .args(["tasks", "import-tb1"])
        .arg(dir.path().join("tb1"))
        .arg(dir.path().join("pack"))
        .output()
        .unwrap();
    assert!(
        imported.status.success(),
        "{}",
        String::from_utf8_lossy(&imported.stderr)
    );
    // A Harbor task on the same base with no WORKDIR of its own works in /app, as it does on
    // the real image.
    task(
        &dir.path().join("pack"),
        "in-app",
        "FROM ghcr.io/laude-institute/t-bench/python-3-13:20250620\n",
        "pwd > where.txt",
        "[ \"$(cat /app/where.txt)\" = /app ]",
    );
    let (summary, run_dir) = super::common::run_oracle_with(
        super::common::geode_in(dir.path()),
        &dir.path().join("pack"),
        &dir.path().join("jobs"),
        &[],
    );
    assert_eq!(summary["summary"]["outcomes"]["passed"], 2, "{summary}");
    let trial = run_dir.join("tb1-hello__0");
    let log = std::fs::read_to_string(trial.join("verifier/run-tests.log")).unwrap();
    assert!(log.contains("Python 3.13."), "{log}");
    assert!(log.contains("/usr/bin/tmux"), "{log}");
    let result = trial_result(&run_dir, "tb1-hello__0");
    assert!(
        result["notes"]
            .to_string()
            .contains("laude-institute/t-bench/python-3-13:20250620: bootstrapped"),
        "{result}"
    );
}

/// A store as a loaded image leaves it, before any sandbox used it: closed to other users, and
/// no file in it that host root owns with a set-id bit or a file capability (the base has
/// set-uid-root `su`, `passwd` and `mount`, which used to arrive as host root's).
fn assert_no_host_privilege_in(store: &Path) {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let mode = std::fs::metadata(store).unwrap().permissions().mode();
    assert_eq!(mode & 0o077, 0, "the store is open to others: {mode:o}");
    let mut setid = 0;
    for entry in walkdir::WalkDir::new(store.join("layers")).follow_links(false) {
        let entry = entry.unwrap();
        let meta = entry.path().symlink_metadata().unwrap();
        if meta.file_type().is_symlink()
            || !entry.path().components().any(|c| c.as_os_str() == "fs")
        {
            continue;
        }
        if meta.permissions().mode() & 0o6000 != 0 {
            setid += 1;
        }
        assert!(
            meta.uid() >= geode_harness::env::ids::HOST_BASE,
            "{} is host uid {}",
            entry.path().display(),
            meta.uid()
        );
        assert!(
            xattr::get(entry.path(), "security.capability")
                .unwrap()
                .is_none(),
            "{} keeps a file capability",
            entry.path().display()
        );
    }
    assert!(setid > 0, "the base has set-id files; none seen");
}
