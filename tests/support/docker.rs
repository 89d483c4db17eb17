//! A docker engine for the docker backend's tests: Debian's `dockerd` (the `docker.io`
//! package, which `scripts/test` installs), started by the tests on a socket of their own when
//! none answers there, its state in `/var/cache/geode-test/docker` so images and build cache
//! last between runs on one machine. Docker Hub is out of reach, so the Debian-based images
//! the tasks name come from the machine-wide test store, pushed to a loopback registry and
//! pulled from there.

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::registry::{Registry, image_blobs, stored_base};

const SOCKET: &str = "/run/geode-test-docker.sock";

/// The images the built-in pack and the tests' tasks start from.
pub const BASES: [&str; 2] = ["debian:bookworm-slim", "python:3.11-slim-bookworm"];

/// One docker test at a time: they share the engine and its images. The mutex orders the
/// tests of one binary; the file lock orders test processes (two checkouts testing at once,
/// or a runner that starts one process per test), which share the socket and the state folder.
static ENGINE_LOCK: Mutex<()> = Mutex::new(());
const MACHINE_LOCK: &str = "/run/geode-test-docker.lock";

/// The engine, for as long as one test holds it; the engine the tests started stops with it.
pub struct Engine {
    dockerd: Option<Child>,
    _lock: MutexGuard<'static, ()>,
    _machine_lock: nix::fcntl::Flock<std::fs::File>,
}

impl Engine {
    /// `DOCKER_HOST` for the CLI and for `geode --env docker`.
    pub fn host(&self) -> String {
        format!("unix://{SOCKET}")
    }

    /// `docker ARGS` against this engine.
    pub fn docker(&self) -> Command {
        let mut c = Command::new("docker");
        c.env("DOCKER_HOST", self.host());
        c
    }

    fn answers(&self) -> bool {
        self.docker()
            .args(["version", "--format", "{{.Server.Version}}"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// The engine, started when none answers on the test socket, with [`BASES`] in it.
    pub async fn start() -> Engine {
        let lock = ENGINE_LOCK.lock().unwrap_or_else(|p| p.into_inner());
        // Released when the file closes, so a killed test process frees it too.
        let machine_lock = nix::fcntl::Flock::lock(
            std::fs::File::create(MACHINE_LOCK).unwrap(),
            nix::fcntl::FlockArg::LockExclusive,
        )
        .map_err(|(_, e)| e)
        .unwrap();
        let mut engine = Engine {
            dockerd: None,
            _lock: lock,
            _machine_lock: machine_lock,
        };
        if !engine.answers() {
            assert!(
                std::path::Path::new("/usr/sbin/dockerd").exists(),
                "/usr/sbin/dockerd is missing: `apt-get install docker.io` (scripts/test installs it)"
            );
            let state = PathBuf::from("/var/cache/geode-test/docker");
            std::fs::create_dir_all(&state).unwrap();
            let log = std::fs::File::create(state.join("dockerd.log")).unwrap();
            let child = Command::new("/usr/sbin/dockerd")
                .arg("--data-root")
                .arg(state.join("root"))
                .args(["--exec-root", "/run/geode-test-docker"])
                .args(["--pidfile", "/run/geode-test-docker.pid"])
                .arg(format!("--host=unix://{SOCKET}"))
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .unwrap();
            engine.dockerd = Some(child);
            let deadline = Instant::now() + Duration::from_secs(60);
            while !engine.answers() {
                assert!(
                    Instant::now() < deadline,
                    "dockerd did not answer in 60 s (see {})",
                    state.join("dockerd.log").display()
                );
                std::thread::sleep(Duration::from_millis(200));
            }
        }
        engine.remove_leftover_containers();
        engine.import_bases().await;
        engine
    }

    /// The engine's state outlives a test run killed half-way (a machine shut down under CI
    /// leaves its trials' containers behind, GEODE's and Harbor's), and only one test holds the
    /// engine at a time: any container found now belongs to no one.
    fn remove_leftover_containers(&self) {
        let listed = self.output(&["ps", "--all", "--quiet"]);
        let ids: Vec<&str> = listed.split_whitespace().collect();
        if !ids.is_empty() {
            self.output(&[&["rm", "--force", "--volumes"][..], &ids].concat());
        }
    }

    /// The ids of the engine's GEODE trial containers under `dir`, running or not.
    pub fn trial_containers(&self, dir: &std::path::Path) -> Vec<String> {
        let listed = self.output(&[
            "ps",
            "--all",
            "--filter",
            "label=geode.trial",
            "--format",
            "{{.ID}} {{.Label \"geode.trial\"}}",
        ]);
        listed
            .lines()
            .filter_map(|line| line.split_once(' '))
            .filter(|(_, trial)| std::path::Path::new(trial).starts_with(dir))
            .map(|(id, _)| id.to_string())
            .collect()
    }

    /// What `docker ARGS` printed; a failure fails the test.
    fn output(&self, args: &[&str]) -> String {
        let out = self.docker().args(args).output().unwrap();
        assert!(
            out.status.success(),
            "docker {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Each base the engine lacks: from the test store (bootstrapped there on first use),
    /// through a loopback registry, pulled and tagged with its Docker Hub name.
    async fn import_bases(&self) {
        let missing: Vec<&str> = BASES
            .iter()
            .copied()
            .filter(|base| {
                !self
                    .docker()
                    .args(["image", "inspect", base])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success())
            })
            .collect();
        if missing.is_empty() {
            return;
        }
        let registry = Registry::start();
        for base in missing {
            let stored = stored_base(base).await;
            let (repo, tag) = base.split_once(':').unwrap();
            image_blobs(&stored)
                .push(&registry.addr, &format!("library/{repo}"), tag)
                .await;
            let served = format!("{}/library/{base}", registry.addr);
            for args in [
                vec!["pull", "--quiet", &served],
                vec!["tag", &served, base],
                vec!["rmi", &served],
            ] {
                self.output(&args);
            }
        }
    }
}

/// Debian's `docker-compose` (Compose v2, a Go program that runs on bookworm), which Harbor
/// calls as `docker compose`: bookworm has only v1, and `harbor lint` needs a Compose newer than
/// trixie's 2.26 (`config --no-env-resolution`), so it comes from testing's index.
const COMPOSE_INDEX: &str =
    "http://deb.debian.org/debian/dists/forky/main/binary-amd64/Packages.gz";
const DEBIAN: &str = "http://deb.debian.org/debian";

impl Engine {
    /// A `DOCKER_CONFIG` folder whose `cli-plugins/` holds Compose v2, fetched from the Debian
    /// archive once per machine (checked against the SHA-256 of the archive's index).
    pub async fn compose_config(&self) -> PathBuf {
        use sha2::Digest;
        use std::io::Read;
        let config = PathBuf::from("/var/cache/geode-test/compose");
        let plugin = config.join("cli-plugins/docker-compose");
        if plugin.is_file() {
            return config;
        }
        std::fs::create_dir_all(plugin.parent().unwrap()).unwrap();
        let get = |url: String| async move {
            reqwest::get(&url)
                .await
                .unwrap()
                .error_for_status()
                .unwrap_or_else(|e| panic!("{url}: {e}"))
                .bytes()
                .await
                .unwrap()
        };
        let gz = get(COMPOSE_INDEX.to_string()).await;
        let mut index = String::new();
        flate2::read::GzDecoder::new(&gz[..])
            .read_to_string(&mut index)
            .unwrap();
        let stanza = index
            .split("\n\n")
            .find(|s| s.starts_with("Package: docker-compose\n"))
            .expect("docker-compose in the index");
        let field = |name: &str| {
            stanza
                .lines()
                .find_map(|l| l.strip_prefix(&format!("{name}: ")))
                .unwrap()
                .to_string()
        };
        let deb = get(format!("{DEBIAN}/{}", field("Filename"))).await;
        assert_eq!(hex::encode(sha2::Sha256::digest(&deb)), field("SHA256"));
        let scratch = tempfile::tempdir().unwrap();
        std::fs::write(scratch.path().join("compose.deb"), &deb).unwrap();
        let unpacked = Command::new("dpkg-deb")
            .arg("--extract")
            .arg(scratch.path().join("compose.deb"))
            .arg(scratch.path().join("root"))
            .status()
            .unwrap();
        assert!(unpacked.success());
        let partial = plugin.with_extension("partial");
        std::fs::copy(
            scratch
                .path()
                .join("root/usr/libexec/docker/cli-plugins/docker-compose"),
            &partial,
        )
        .unwrap();
        std::fs::rename(&partial, &plugin).unwrap();
        config
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        if let Some(mut dockerd) = self.dockerd.take() {
            // dockerd stops its containerd and containers on SIGTERM.
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(dockerd.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
            let deadline = Instant::now() + Duration::from_secs(30);
            while dockerd.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = dockerd.kill();
            let _ = dockerd.wait();
        }
    }
}
