//! The sandbox backend with real processes, namespaces and mounts, on a real image (Debian's
//! Python over a Debian base bootstrapped from the archive into the machine-wide test image
//! store, once per machine). Needs root (CI runs as root); as another user every test returns
//! early with a message.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use geode_harness::env::{
    Backend, EnvError, EnvironmentSpec, ImageRoot, Judgment, NetworkPolicy, PreparedImage, Sandbox,
    SandboxBackend, SandboxConfig, SandboxHandle,
};
use geode_runtime::tools::workspace::{ExecOutput, ExecRequest, Workspace, WorkspaceError};
use tempfile::TempDir;
use tokio_util::sync::CancellationToken;

mod commands;
mod images;
mod isolation;
mod network;
mod teardown;

fn privileged() -> bool {
    let root = nix::unistd::geteuid().is_root();
    if !root {
        eprintln!("skipped: the sandbox tests need root");
    }
    root
}

struct Fixture {
    _state: TempDir,
    trials: TempDir,
    backend: SandboxBackend,
}

fn fixture() -> Fixture {
    // On the work disk, beside where real runs keep their state (not a tmpfs).
    let state = tempfile::Builder::new()
        .prefix("geode-sandbox-test-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    let config = SandboxConfig::new(
        env!("CARGO_BIN_EXE_geode"),
        state.path(),
        crate::suite::registry::shared_store(),
    );
    let backend = SandboxBackend::new(config).unwrap();
    Fixture {
        _state: state,
        trials: tempfile::tempdir().unwrap(),
        backend,
    }
}

fn spec(env_dir: &Path) -> EnvironmentSpec {
    EnvironmentSpec {
        task_name: "test/sandbox".into(),
        environment_dir: env_dir.to_path_buf(),
        build: None,
        network: NetworkPolicy::Off,
        cpus: None,
        memory_mb: None,
        pids_max: None,
        storage_mb: None,
        build_timeout: Duration::from_secs(900),
        time_limits: None,
        env: vec![("TASK_ENV".into(), "from-spec".into())],
        docker_image: None,
        build_args: Vec::new(),
        build_log: None,
        group: Default::default(),
    }
}

/// The image most tests run in: `python:3.11-slim` as the store has it (pulled, loaded, or
/// bootstrapped on the first run), with a work directory of /app.
async fn base_image(backend: &SandboxBackend) -> PreparedImage {
    let mut spec = spec(Path::new("/nonexistent"));
    spec.docker_image = Some("python:3.11-slim".into());
    let mut image = backend.prepare(&spec).await.unwrap();
    image.workdir = "/app".into();
    image.env.push(("IMAGE_ENV".into(), "from-image".into()));
    image
}

fn layers(image: &PreparedImage) -> Vec<PathBuf> {
    match &image.root {
        ImageRoot::Layers(layers) => layers.clone(),
        other => panic!("not an image root: {other:?}"),
    }
}

impl Fixture {
    async fn start_with(&self, spec: &EnvironmentSpec, name: &str) -> SandboxHandle {
        let trial = self.trials.path().join(name);
        let image = base_image(&self.backend).await;
        self.backend
            .start_sandbox(spec, &image, &trial)
            .await
            .unwrap()
    }

    async fn start(&self, name: &str) -> SandboxHandle {
        self.start_with(&spec(self.trials.path()), name).await
    }
}

fn req(command: &str) -> ExecRequest {
    ExecRequest {
        command: command.into(),
        cwd: None,
        timeout: Duration::from_secs(30),
        output_cap: 64 * 1024,
        env: Vec::new(),
    }
}

/// The fixture's `environment/` folder with `dockerfile` as its Dockerfile.
fn environment(f: &Fixture, dockerfile: &str) -> PathBuf {
    let env_dir = f.trials.path().join("environment");
    std::fs::create_dir_all(&env_dir).unwrap();
    std::fs::write(env_dir.join("Dockerfile"), dockerfile).unwrap();
    env_dir
}

async fn sh(sandbox: &SandboxHandle, command: &str) -> ExecOutput {
    sandbox
        .exec(req(command), CancellationToken::new())
        .await
        .unwrap()
}

/// Processes of a sandbox that has run a command: its init, the agent that serves requests,
/// and the init of the agent's own pid namespace below.
const BASELINE: usize = 3;

/// Host pids below the sandbox's server (its init, agent and everything they started, in the
/// sandbox's pid namespace or the tool view's below it).
fn processes_of(sb: &SandboxHandle) -> Vec<u32> {
    let server = sb.server_pid().unwrap();
    let parents: Vec<(u32, u32)> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let pid = e.file_name().to_str()?.parse::<u32>().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            let (_, rest) = stat.rsplit_once(')')?;
            let fields: Vec<&str> = rest.split_whitespace().collect();
            // Zombies are already dead.
            (fields.first() != Some(&"Z")).then_some(())?;
            Some((pid, fields.get(1)?.parse().ok()?))
        })
        .collect();
    let mut found = vec![server];
    let mut i = 0;
    while i < found.len() {
        let parent = found[i];
        found.extend(
            parents
                .iter()
                .filter(|(_, pp)| *pp == parent)
                .map(|(p, _)| *p),
        );
        i += 1;
    }
    found.remove(0);
    found
}

/// Host pids whose pid namespace is `ns` (the sandbox's init included).
fn processes_in(ns: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_link(format!("/proc/{pid}/ns/pid"))
                .is_ok_and(|l| l.to_string_lossy() == ns)
        })
        .collect()
}
