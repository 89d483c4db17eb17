//! Harbor's own pydantic models (harbor 0.25 from PyPI) over GEODE's files: every `task.toml` of
//! the built-in pack loads with `TaskConfig`, and every `agent/trajectory.json` of a run loads
//! with `Trajectory` (`scripts/harbor_check.py`). The models are installed once per machine in a
//! virtual environment beside the test image store; PyPI must be reachable the first time.
//! Harbor's result models need Python 3.12+ and are not checked here (issue 16).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The virtual environment with harbor installed, made under an exclusive lock so parallel
/// test binaries install it once.
fn harbor_python() -> PathBuf {
    let venv = super::registry::shared_store()
        .parent()
        .unwrap()
        .join("harbor-venv");
    let python = venv.join("bin/python");
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(venv.with_extension("lock"))
        .unwrap();
    let _held = nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusive).unwrap();
    let ready = |p: &Path| {
        Command::new(p)
            .args([
                "-c",
                "import harbor.models.task.config, harbor.models.trajectories",
            ])
            .status()
            .is_ok_and(|s| s.success())
    };
    if !ready(&python) {
        let _ = std::fs::remove_dir_all(&venv);
        let made = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status()
            .unwrap();
        assert!(
            made.success(),
            "python3 -m venv failed (Debian: python3-venv)"
        );
        let installed = Command::new(venv.join("bin/pip"))
            .args([
                "install",
                "--quiet",
                "--ignore-requires-python",
                "harbor==0.25.*",
            ])
            .status()
            .unwrap();
        assert!(installed.success(), "pip install harbor failed");
        assert!(ready(&python), "harbor's models do not import");
    }
    python
}

#[test]
fn harbor_models_accept_the_built_in_pack_and_our_trajectories() {
    let python = harbor_python();
    let d = tempfile::tempdir().unwrap();
    let jobs = d.path().join("jobs");
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let pack = repo.join("tasks/geode-core");
    super::common::run_oracle_with(
        super::common::geode_in(d.path()),
        &pack,
        &jobs,
        &["--tasks", "geode/c*", "-k", "1"],
    );
    let out = Command::new(&python)
        .arg(repo.join("scripts/harbor_check.py"))
        .arg(&pack)
        .arg(&jobs)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("28 of 28 task.toml valid"), "{stdout}");
    assert!(stdout.contains("trajectory.json valid"), "{stdout}");
}
