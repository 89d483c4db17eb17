//! The sandbox backend with real processes, namespaces and mounts, on a real image (Debian's
//! Python over a Debian base bootstrapped from the archive into the machine-wide test image
//! store, once per machine). Needs root (CI runs as root); as another user every test returns
//! early with a message.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use geode_harness::env::{
    Backend, EnvError, EnvironmentSpec, ImageRoot, NetworkPolicy, PreparedImage, Sandbox,
    SandboxBackend, SandboxConfig, SandboxHandle,
};
use geode_runtime::tools::workspace::{ExecOutput, ExecRequest, Workspace, WorkspaceError};
use tempfile::TempDir;
use tokio_util::sync::CancellationToken;

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
        super::registry::shared_store(),
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
        network: NetworkPolicy::Off,
        cpus: None,
        memory_mb: None,
        pids_max: None,
        storage_mb: None,
        build_timeout: Duration::from_secs(900),
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

#[tokio::test]
async fn exec_runs_in_the_workdir_with_env_exit_codes_and_caps() {
    if !privileged() {
        return;
    }
    let f = fixture();
    let sb = f.start("exec").await;
    let out = sh(
        &sb,
        "pwd; echo $IMAGE_ENV $TASK_ENV; hostname; echo err >&2; exit 3",
    )
    .await;
    assert_eq!(out.exit_code, Some(3), "{out:?}");
    assert_eq!(out.stdout.lines().next(), Some("/app"));
    assert!(out.stdout.contains("from-image from-spec"), "{out:?}");
    assert!(out.stdout.contains("geode-"), "hostname: {out:?}");
    assert_eq!(out.stderr, "err\n");

    let mut r = req("echo $EXTRA; pwd");
    r.env = vec![("EXTRA".into(), "x1".into())];
    r.cwd = Some(PathBuf::from("/tmp"));
    let out = sb.exec(r, CancellationToken::new()).await.unwrap();
    assert_eq!(out.stdout, "x1\n/tmp\n");

    let mut r = req("head -c 100000 /dev/zero | tr '\\0' a");
    r.output_cap = 1000;
    let out = sb.exec(r, CancellationToken::new()).await.unwrap();
    assert!(out.truncated);
    assert!(
        out.stdout
            .contains("[... output truncated at 1000 bytes ...]"),
        "{}",
        out.stdout.len()
    );

    // The timeout kills the whole group, the background sleep included.
    let mut r = req("sleep 30 & echo started; sleep 30");
    r.timeout = Duration::from_millis(500);
    let started = Instant::now();
    let out = sb.exec(r, CancellationToken::new()).await.unwrap();
    assert!(out.timed_out && out.exit_code.is_none(), "{out:?}");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(out.stdout, "started\n");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(processes_of(&sb).len(), BASELINE);

    let token = CancellationToken::new();
    let cancel = token.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        cancel.cancel();
    });
    let out = sb.exec(req("sleep 20"), token).await.unwrap();
    assert!(out.cancelled && out.exit_code.is_none(), "{out:?}");
    Box::new(sb).teardown().await.unwrap();
}

#[tokio::test]
async fn no_trial_reaches_the_host_and_network_on_goes_out_through_its_own_namespace() {
    if !privileged() {
        return;
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            drop(conn);
        }
    });
    // The host's loopback, directly and through slirp's gateway address (the host loopback
    // that --disable-host-loopback closes).
    let connect = |host: &str| {
        format!(
            "python3 -c 'import socket; socket.create_connection((\"{host}\", {port}), timeout=3); print(\"connected\")'"
        )
    };
    let f = fixture();
    let off = f.start("net-off").await;
    let out = sh(&off, &connect("127.0.0.1")).await;
    assert_ne!(
        out.exit_code,
        Some(0),
        "reached the host with network off: {out:?}"
    );
    // lo is up inside: a server of the sandbox's own is reachable.
    let own = sh(
        &off,
        "python3 -c 'import socket; s=socket.socket(); s.bind((\"127.0.0.1\",0)); s.listen(); \
         c=socket.create_connection(s.getsockname()); print(\"loopback ok\")'",
    )
    .await;
    assert_eq!(
        own.stdout.trim(),
        "loopback ok",
        "{own:?} notes: {:?}",
        off.notes()
    );
    Box::new(off).teardown().await.unwrap();

    let mut with_net = spec(f.trials.path());
    with_net.network = NetworkPolicy::Public;
    let on = f.start_with(&with_net, "net-on").await;
    for host in ["127.0.0.1", "10.0.2.2"] {
        let out = sh(&on, &connect(host)).await;
        assert_ne!(
            out.stdout.trim(),
            "connected",
            "reached the host at {host}: {out:?}"
        );
    }
    // Out to the Debian archive (the one outside host every machine of this project reaches),
    // by name, through the namespace's own resolver.
    let out = sh(
        &on,
        "python3 -c 'import urllib.request; print(urllib.request.urlopen(\"http://deb.debian.org/debian/dists/bookworm/Release\", timeout=20).status)'",
    )
    .await;
    assert_eq!(out.stdout.trim(), "200", "{out:?}");
    let ns = |pid: u32| std::fs::read_link(format!("/proc/{pid}/ns/net")).unwrap();
    assert_ne!(
        ns(on.init_pid()),
        ns(std::process::id()),
        "the trial shares the host's network namespace"
    );
    Box::new(on).teardown().await.unwrap();
}

#[tokio::test]
async fn an_allowlist_reaches_its_hosts_by_name_and_nothing_else() {
    if !privileged() {
        return;
    }
    // A server on the host's own outward address, which slirp carries a public trial to: what
    // an allowlist without it must stop.
    let host_ip = {
        let probe = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
        probe.connect("192.0.2.1:9").unwrap();
        probe.local_addr().unwrap().ip()
    };
    let listener = std::net::TcpListener::bind((host_ip, 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            drop(conn);
        }
    });
    let to_host = format!(
        "python3 -c 'import socket; socket.create_connection((\"{host_ip}\", {port}), timeout=5); print(\"connected\")'"
    );
    let f = fixture();
    let mut public = spec(f.trials.path());
    public.network = NetworkPolicy::Public;
    let open = f.start_with(&public, "allow-public").await;
    let out = sh(&open, &to_host).await;
    assert_eq!(out.stdout.trim(), "connected", "{out:?}");
    Box::new(open).teardown().await.unwrap();

    let mut listed = spec(f.trials.path());
    listed.network = NetworkPolicy::Allowlist(vec!["deb.debian.org".into(), "192.0.2.77".into()]);
    let sb = f.start_with(&listed, "allow-listed").await;
    assert_eq!(sb.network_attempts().await, 0);
    // The listed name, pinned in /etc/hosts, with no resolver to ask.
    let out = sh(
        &sb,
        "python3 -c 'import urllib.request; print(urllib.request.urlopen(\"http://deb.debian.org/debian/dists/bookworm/Release\", timeout=20).status)'",
    )
    .await;
    assert_eq!(out.stdout.trim(), "200", "{out:?} notes: {:?}", sb.notes());
    let started = Instant::now();
    let out = sh(&sb, &to_host).await;
    assert!(
        out.exit_code != Some(0) && out.stderr.contains("Network is unreachable"),
        "reached an address outside the allowlist: {out:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "refused, not timed out"
    );
    // No name leaves through slirp's resolver, and no raw socket can hand slirp a frame.
    let out = sh(
        &sb,
        "python3 -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b\"x\", (\"10.0.2.3\", 53))'; \
         getent hosts example.org || echo unresolved; \
         python3 -c 'import socket; socket.socket(socket.AF_PACKET, socket.SOCK_RAW)' 2>&1 | tail -1",
    )
    .await;
    assert!(out.stderr.contains("Network is unreachable"), "{out:?}");
    assert!(out.stdout.contains("unresolved"), "{out:?}");
    assert!(out.stdout.contains("PermissionError"), "{out:?}");
    // Routes: the listed addresses only, no default.
    let routes = sh(&sb, "tail -n +2 /proc/net/route").await.stdout;
    assert!(
        routes
            .lines()
            .all(|l| l.split_whitespace().nth(1) != Some("00000000")),
        "{routes}"
    );
    assert!(
        routes.contains("4D0200C0"),
        "192.0.2.77 has no route: {routes}"
    );
    assert!(sb.network_attempts().await >= 2);
    Box::new(sb).teardown().await.unwrap();
}

#[tokio::test]
async fn container_root_is_an_unprivileged_host_uid() {
    if !privileged() {
        return;
    }
    let f = fixture();
    let sb = f.start("userns").await;
    let out = sh(
        &sb,
        "id -u; cat /proc/self/uid_map | tr -s ' ' | sed 's/^ //'; \
         mkdir -p /srv/made && stat -c '%u %U' /srv/made /etc/passwd /app; \
         python3 -m http.server 80 --bind 127.0.0.1 > /dev/null 2>&1 & \
         for i in $(seq 50); do python3 -c 'import urllib.request as u; \
           print(u.urlopen(\"http://127.0.0.1:80/\").status)' 2> /dev/null && break; sleep 0.1; done; \
         setsid sleep 30 > /dev/null 2>&1 < /dev/null & sleep 0.3; echo started",
    )
    .await;
    assert_eq!(
        out.stdout,
        "0\n0 100000 65536\n0 root\n0 root\n0 root\n200\nstarted\n",
        "{out:?} notes: {:?}",
        sb.notes()
    );
    // On the host, the agent's processes belong to an unprivileged uid.
    let uids: Vec<String> = processes_of(&sb)
        .iter()
        .filter_map(|pid| {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
            let name = status.lines().next()?.to_string();
            let uid = status.lines().find(|l| l.starts_with("Uid:"))?.to_string();
            Some(format!("{name} {uid}"))
        })
        .collect();
    let sleeper = uids.iter().find(|l| l.contains("sleep")).cloned();
    assert!(
        sleeper
            .as_deref()
            .is_some_and(|l| l.split_whitespace().nth(3) == Some("100000")),
        "{uids:?}"
    );
    Box::new(sb).teardown().await.unwrap();
}

#[tokio::test]
async fn writes_outside_the_workdir_never_reach_the_host() {
    if !privileged() {
        return;
    }
    let f = fixture();
    let sb = f.start("scope").await;
    let ws: Arc<dyn Workspace> = sb.workspace();
    assert_eq!(ws.root(), Path::new("/app"));
    assert!(ws.resolve("/etc/geode-escape").is_err());
    assert!(ws.resolve("../etc/geode-escape").is_err());
    let inside = ws.resolve("notes/a.txt").unwrap();
    ws.write_file(&inside, b"hello").await.unwrap();
    assert_eq!(ws.read_file(&inside).await.unwrap(), b"hello");
    let listing = ws.list_dir(Path::new("/app/notes")).await.unwrap();
    assert_eq!(listing[0].name, "a.txt");

    // A symlink planted by a command does not lead the file tools out.
    let out = sh(
        &sb,
        "ln -s /etc /app/link && echo x > /etc/geode-escape-test && cat /etc/geode-escape-test",
    )
    .await;
    assert_eq!(out.stdout, "x\n", "{out:?}");
    let through = ws.resolve("link/passwd").unwrap();
    assert!(matches!(
        ws.read_file(&through).await,
        Err(WorkspaceError::Scope(_))
    ));
    assert!(matches!(
        ws.write_file(&through, b"x").await,
        Err(WorkspaceError::Scope(_))
    ));
    assert!(
        !Path::new("/etc/geode-escape-test").exists(),
        "the write reached the host"
    );
    // Root inside cannot mount, nor make a device node for the host's disk.
    let out = sh(
        &sb,
        "mount -t tmpfs none /mnt 2>&1; echo rc=$?; mknod /app/disk b 254 0 2>&1; echo rc=$?",
    )
    .await;
    assert_eq!(
        out.stdout.matches("rc=0").count(),
        0,
        "{out:?} notes {:?}",
        sb.notes()
    );
    let mounts = sh(&sb, "grep -c ' /mnt ' /proc/self/mountinfo").await;
    assert_eq!(mounts.stdout, "0\n");
    assert!(!Path::new("/app/notes").exists());

    // The workspace's exec runs in the root and refuses a cwd outside it.
    let mut r = req("pwd");
    r.cwd = Some(PathBuf::from("notes"));
    let out = ws.exec(r, CancellationToken::new()).await.unwrap();
    assert_eq!(out.stdout, "/app/notes\n");
    let mut r = req("pwd");
    r.cwd = Some(PathBuf::from("/etc"));
    assert!(ws.exec(r, CancellationToken::new()).await.is_err());
    Box::new(sb).teardown().await.unwrap();
}

#[tokio::test]
async fn escaped_background_processes_die_with_kill_all_and_teardown() {
    if !privileged() {
        return;
    }
    let f = fixture();
    let sb = f.start("bg").await;
    let ns = sb.pid_namespace().to_string();
    // The pause lets setsid leave the group before the call ends and the group is killed.
    let escape = "setsid nohup sleep 300 > /dev/null 2>&1 < /dev/null & sleep 0.3; echo ok";
    assert_eq!(sh(&sb, escape).await.stdout, "ok\n");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(processes_of(&sb).len(), BASELINE + 1, "the sleep lives on");
    assert_eq!(sb.kill_all_processes().await.unwrap(), 1);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(processes_of(&sb).len(), BASELINE);
    assert!(processes_of(&sb).contains(&sb.init_pid()));

    assert_eq!(sh(&sb, escape).await.stdout, "ok\n");
    let all = processes_of(&sb);
    let scratch = sb.scratch_dir().to_path_buf();
    let report = Box::new(sb).teardown().await.unwrap();
    assert_eq!(report.killed_processes, 1);
    let alive: Vec<u32> = all
        .into_iter()
        .filter(|pid| Path::new(&format!("/proc/{pid}")).exists())
        .collect();
    assert!(
        processes_in(&ns).is_empty() && alive.is_empty(),
        "left behind: {:?} {alive:?}",
        processes_in(&ns)
    );
    assert!(!scratch.exists());
}

#[tokio::test]
async fn memory_and_pids_limits_hold() {
    if !privileged() {
        return;
    }
    let f = fixture();
    let mut limited = spec(f.trials.path());
    limited.memory_mb = Some(64);
    limited.pids_max = Some(16);
    let sb = f.start_with(&limited, "limits").await;
    let out = sh(&sb, "python3 -c 'a = bytearray(256 * 1024 * 1024); a[::4096] = b\"x\" * len(a[::4096]); print(\"allocated\")'").await;
    assert_ne!(
        out.exit_code,
        Some(0),
        "256 MB under a 64 MB limit: {out:?}"
    );
    assert!(!out.stdout.contains("allocated"));
    let fork = "python3 -c '
import os, time
n = 0
try:
    for i in range(64):
        if os.fork() == 0:
            time.sleep(3); os._exit(0)
        n += 1
    print(\"forked\", n)
except OSError as e:
    print(\"fork failed after\", n)
'";
    let out = sh(&sb, fork).await;
    assert!(
        out.stdout.contains("fork failed"),
        "{out:?} notes: {:?}",
        sb.notes()
    );
    Box::new(sb).teardown().await.unwrap();
    let name_dirs: Vec<_> = std::fs::read_dir("/sys/fs/cgroup/memory/geode")
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    for dir in name_dirs {
        // Other tests' groups may be alive; ours (this test's) must be gone: all our groups
        // are empty after their teardown, so none may hold a process of a dead namespace.
        let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
        for pid in procs.lines() {
            assert!(Path::new(&format!("/proc/{pid}")).exists());
        }
    }
}

#[tokio::test]
async fn concurrent_trials_cannot_see_each_other() {
    if !privileged() {
        return;
    }
    let f = fixture();
    let (a, b) = tokio::join!(f.start("a"), f.start("b"));
    assert_eq!(
        sh(
            &a,
            "echo TOPSECRET-A > /app/secret.txt && echo TMPVAL-A > /tmp/t && echo ok"
        )
        .await
        .stdout,
        "ok\n"
    );
    let out = sh(&b, "cat /app/secret.txt /tmp/t 2>&1; echo; echo done").await;
    assert!(
        !out.stdout.contains("TOPSECRET") && !out.stdout.contains("TMPVAL"),
        "{out:?}"
    );
    // Nor through the host root that both see below: the scratch and cache are hidden.
    let scratch = f.backend.config().scratch_dir.display().to_string();
    let out = sh(
        &b,
        &format!("ls -A {scratch} | wc -l; grep -rs TOPSECRET {scratch} | wc -l"),
    )
    .await;
    assert_eq!(out.stdout, "0\n0\n", "{out:?}");
    Box::new(a).teardown().await.unwrap();
    Box::new(b).teardown().await.unwrap();
}

#[tokio::test]
async fn copy_in_and_logs_reach_the_right_places() {
    if !privileged() {
        return;
    }
    let f = fixture();
    let sb = f.start("copy").await;
    let src = f.trials.path().join("tests-src");
    std::fs::create_dir_all(src.join("sub")).unwrap();
    std::fs::write(src.join("test.sh"), "#!/bin/bash\necho from-test\n").unwrap();
    std::fs::write(src.join("sub/a.txt"), "A").unwrap();
    sb.copy_in(&src, "/tests").await.unwrap();
    sh(&sb, "chmod +x /tests/test.sh").await;
    let out = sh(&sb, "/tests/test.sh; cat /tests/sub/a.txt").await;
    assert_eq!(out.stdout, "from-test\nA");
    // Replacing: a second copy_in leaves no stale files.
    std::fs::remove_file(src.join("sub/a.txt")).unwrap();
    sb.copy_in(&src, "/tests").await.unwrap();
    assert_eq!(sh(&sb, "ls /tests/sub | wc -l").await.stdout, "0\n");
    sb.copy_in(&src.join("test.sh"), "/solution/solve.sh")
        .await
        .unwrap();
    assert_eq!(
        sh(&sb, "bash /solution/solve.sh").await.stdout,
        "from-test\n"
    );

    sh(
        &sb,
        "echo 1 > /logs/verifier/reward.txt; echo a > /logs/agent/x; echo b > /logs/artifacts/y",
    )
    .await;
    let trial = f.trials.path().join("copy");
    assert!(trial.join("agent/x").exists() && trial.join("artifacts/y").exists());
    // What the agent writes at /logs/verifier lands in a decoy, never in the trial's folder.
    assert!(!trial.join("verifier/reward.txt").exists());
    let decoy = sb.verifier_decoy().unwrap();
    assert_eq!(
        std::fs::read_to_string(decoy.join("reward.txt")).unwrap(),
        "1\n"
    );
    Box::new(sb).teardown().await.unwrap();
}

#[tokio::test]
async fn the_trial_disk_is_a_hard_quota() {
    if !privileged() {
        return;
    }
    let f = fixture();
    let mut small = spec(f.trials.path());
    small.storage_mb = Some(64);
    let sb = f.start_with(&small, "disk").await;
    let out = sh(
        &sb,
        "fallocate -l 20G /app/huge 2>&1; echo rc=$?; rm -f /app/huge; \
         dd if=/dev/zero of=/app/fill bs=1M count=200 2>&1 | grep -v records; \
         df -m /app | tail -1 | awk '{print $2}'",
    )
    .await;
    assert_eq!(
        out.stdout.matches("No space left on device").count(),
        2,
        "{out:?}"
    );
    assert!(out.stdout.contains("rc=1"), "{out:?}");
    let size: u64 = out.stdout.lines().last().unwrap().trim().parse().unwrap();
    assert!((40..=64).contains(&size), "df shows {size} MB: {out:?}");
    // On the host the trial's disk is one file that cannot grow past the quota.
    use std::os::unix::fs::MetadataExt;
    let disk = std::fs::metadata(sb.scratch_dir().join("disk.img")).unwrap();
    assert!(
        disk.blocks() * 512 <= 64 << 20,
        "{} bytes",
        disk.blocks() * 512
    );
    // Evidence still reads the layer on that disk.
    sh(
        &sb,
        "echo 'import os' > /usr/lib/python3/dist-packages/zz.pth",
    )
    .await;
    let changed = sb.changed_verifier_inputs("/app").await;
    assert!(changed.iter().any(|p| p.ends_with("zz.pth")), "{changed:?}");
    Box::new(sb).teardown().await.unwrap();
}

#[tokio::test]
async fn services_outlive_the_agent_but_cannot_reach_the_verifier() {
    if !privileged() {
        return;
    }
    let f = fixture();
    let sb = f.start("views").await;
    // A service the agent leaves behind, which keeps trying to forge the reward: at
    // /logs/verifier, through every /proc/PID/root it can see, and in the inbox.
    let forger = "setsid bash -c 'while true; do echo 1 > /logs/verifier/reward.txt; \
        for p in /proc/[0-9]*; do echo 1 > $p/root/logs/verifier/reward.txt; \
        cp /bin/true $p/root/tests/test.sh; done; ls /.geode-inbox > /tmp/inbox-seen; \
        sleep 0.02; done' > /dev/null 2>&1 < /dev/null & sleep 0.3; echo started";
    assert_eq!(sh(&sb, forger).await.stdout, "started\n");
    let tests = f.trials.path().join("views-tests");
    std::fs::create_dir_all(&tests).unwrap();
    std::fs::write(
        tests.join("test.sh"),
        "grep -qs 'while [t]rue' /proc/[0-9]*/cmdline && echo service-alive\n\
         echo 0 > /logs/verifier/reward.txt\n\
         echo written > /tests/scratch\n\
         sleep 1\n\
         cat /logs/verifier/reward.txt /tests/scratch\n",
    )
    .unwrap();
    let out = sb
        .run_verifier(&tests, req("bash /tests/test.sh"))
        .await
        .unwrap();
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    assert_eq!(out.stdout, "service-alive\n0\nwritten\n", "{out:?}");
    let trial = f.trials.path().join("views");
    assert_eq!(
        std::fs::read_to_string(trial.join("verifier/reward.txt")).unwrap(),
        "0\n"
    );
    // The service is still alive after the verifier, and it never saw the staged tests.
    let seen = sh(
        &sb,
        "grep -qs 'while [t]rue' /proc/[0-9]*/cmdline && echo alive; cat /tmp/inbox-seen",
    )
    .await;
    assert_eq!(seen.stdout, "alive\n", "{seen:?}");
    // `kill -9 -1` in the agent's view ends the agent's processes and nothing else.
    sh(&sb, "kill -9 -1").await;
    assert_eq!(
        sh(
            &sb,
            "grep -qs 'while [t]rue' /proc/[0-9]*/cmdline || echo gone"
        )
        .await
        .stdout,
        "gone\n"
    );
    Box::new(sb).teardown().await.unwrap();
}

/// Loop devices whose backing file is under `dir`.
fn loops_backed_by(dir: &Path) -> Vec<String> {
    let dir = dir.display().to_string();
    std::fs::read_dir("/sys/block")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let backing = std::fs::read_to_string(e.path().join("loop/backing_file")).ok()?;
            backing
                .starts_with(&dir)
                .then(|| e.file_name().to_string_lossy().into_owned())
        })
        .collect()
}

#[tokio::test]
async fn teardown_leaves_no_mounts_layers_or_groups() {
    if !privileged() {
        return;
    }
    let f = fixture();
    let mut limited = spec(f.trials.path());
    limited.memory_mb = Some(128);
    let sb = f.start_with(&limited, "clean").await;
    let scratch = sb.scratch_dir().to_path_buf();
    let scratch_text = scratch.display().to_string();
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !mounts.contains(&scratch_text),
        "a sandbox mount leaked into the host's table"
    );
    sh(&sb, "echo x > /app/file; mkdir -p /var/lib/thing").await;
    // The writable layer is on the trial's own disk, attached to one loop device.
    assert!(!scratch.join("upper/app/file").exists());
    assert_eq!(loops_backed_by(&scratch).len(), 1);
    let name = scratch.file_name().unwrap().to_string_lossy().into_owned();
    let group = &name[name.len() - 12..];
    let cg = Path::new("/sys/fs/cgroup/memory/geode").join(group);
    let had_group = cg.exists();
    Box::new(sb).teardown().await.unwrap();
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mounts.contains(&scratch_text));
    assert!(!scratch.exists(), "the trial layer was not removed");
    let deadline = Instant::now() + Duration::from_secs(2);
    while !loops_backed_by(&scratch).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(loops_backed_by(&scratch), Vec::<String>::new());
    if had_group {
        assert!(!cg.exists(), "cgroup {} left behind", cg.display());
    }
}

#[tokio::test]
async fn dockerfile_builds_caches_and_reports_failures() {
    if !privileged() {
        return;
    }
    let f = fixture();
    let env_dir = f.trials.path().join("environment");
    std::fs::create_dir_all(&env_dir).unwrap();
    // The store outlives the test: a fresh ARG value makes this run's steps its own.
    let nonce = uuid::Uuid::new_v4().simple().to_string();
    let dockerfile = |last: &str| {
        format!(
            "FROM python:3.11-slim\nARG NONCE={nonce}\nARG GREETING=built\nWORKDIR /app\nENV MODE=test \\\n    LEVEL=2\n\
             COPY data.txt /app/\nRUN echo $GREETING > /built.txt && sleep 1\n\
             RUN python3 -c 'import sqlite3; print(sqlite3.sqlite_version)' > /app/sqlite.txt\n\
             RUN echo tmpfile > /tmp/kept\nENV PATH=/opt/tool/bin:$PATH\nCMD [\"bash\"]\n{last}"
        )
    };
    std::fs::write(
        env_dir.join("Dockerfile"),
        dockerfile("RUN echo one > /last.txt\n"),
    )
    .unwrap();
    std::fs::write(env_dir.join("data.txt"), "payload\n").unwrap();
    let spec = spec(&env_dir);
    let base = layers(&base_image(&f.backend).await);
    let started = Instant::now();
    let image = f.backend.prepare(&spec).await.unwrap();
    let first = started.elapsed();
    assert!(!image.cache_hit);
    assert_eq!(image.workdir, "/app");
    assert!(
        image.env.contains(&("LEVEL".into(), "2".into())),
        "{:?}",
        image.env
    );
    // CMD is kept for what runs the image (a compose sidecar), not ignored.
    assert_eq!(image.cmd, ["bash"]);
    assert!(
        !image.notes.iter().any(|n| n.contains("CMD")),
        "{:?}",
        image.notes
    );
    // The base image's layers, then one per RUN and COPY.
    let built = layers(&image);
    assert_eq!(&built[..base.len()], &base[..]);
    assert_eq!(built.len(), base.len() + 5, "{built:?}");
    let started = Instant::now();
    let again = f.backend.prepare(&spec).await.unwrap();
    let cached = started.elapsed();
    assert!(again.cache_hit);
    assert_eq!(layers(&again), built);
    eprintln!("build: first {first:?}, cached {cached:?}");
    assert!(cached * 5 < first, "first {first:?} cached {cached:?}");

    // A changed last step rebuilds that step only.
    std::fs::write(
        env_dir.join("Dockerfile"),
        dockerfile("RUN echo two > /last.txt\n"),
    )
    .unwrap();
    let started = Instant::now();
    let changed = f.backend.prepare(&spec).await.unwrap();
    let rebuilt = started.elapsed();
    let changed_layers = layers(&changed);
    assert!(!changed.cache_hit);
    assert_eq!(changed_layers.len(), built.len());
    assert_eq!(changed_layers[..built.len() - 1], built[..built.len() - 1]);
    assert_ne!(changed_layers.last(), built.last());
    eprintln!("build: last step changed, rebuilt in {rebuilt:?}");
    // A changed COPY input rebuilds from the COPY on.
    std::fs::write(env_dir.join("data.txt"), "payload 2\n").unwrap();
    let recopied = layers(&f.backend.prepare(&spec).await.unwrap());
    assert_eq!(recopied[..base.len()], built[..base.len()]);
    assert_ne!(recopied[base.len()], built[base.len()]);
    std::fs::write(env_dir.join("data.txt"), "payload\n").unwrap();

    let sb = f
        .backend
        .start_sandbox(&spec, &changed, &f.trials.path().join("t"))
        .await
        .unwrap();
    let out = sh(&sb, "pwd; cat /built.txt /app/data.txt /tmp/kept /last.txt; echo $MODE $LEVEL; test -s /app/sqlite.txt && echo sqlite; echo $PATH").await;
    assert_eq!(
        out.stdout,
        "/app\nbuilt\npayload\ntmpfile\ntwo\ntest 2\nsqlite\n/opt/tool/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n",
        "{out:?}"
    );
    // The trial writes into its own layer, never into the cached image.
    sh(&sb, "echo changed > /built.txt").await;
    Box::new(sb).teardown().await.unwrap();
    let holder = built
        .iter()
        .find(|l| l.join("built.txt").exists())
        .expect("a layer holds /built.txt");
    assert_eq!(
        std::fs::read_to_string(holder.join("built.txt")).unwrap(),
        "built\n"
    );

    std::fs::write(
        env_dir.join("Dockerfile"),
        format!(
            "FROM python:3.11-slim\nARG NONCE={nonce}\nRUN echo before\nRUN echo boom && exit 7\n"
        ),
    )
    .unwrap();
    match f.backend.prepare(&spec).await {
        Err(EnvError::SetupFailed { step, message }) => {
            assert!(
                step.contains("line 4") && step.contains("RUN echo boom"),
                "{step}"
            );
            assert!(
                message.contains("exit code 7") && message.contains("boom"),
                "{message}"
            );
        }
        other => panic!("expected SetupFailed, got {other:?}"),
    }

    std::fs::write(
        env_dir.join("Dockerfile"),
        "FROM python:3.11-slim\nRUN sleep 30\n",
    )
    .unwrap();
    let mut quick = spec.clone();
    quick.build_timeout = Duration::from_secs(2);
    assert!(matches!(
        f.backend.prepare(&quick).await,
        Err(EnvError::SetupFailed { .. })
    ));
}

#[tokio::test]
async fn an_image_config_sets_env_workdir_and_user() {
    if !privileged() {
        return;
    }
    use geode_harness::env::image::{ImageSource, ImageStore, Reference};
    let f = fixture();
    base_image(&f.backend).await;
    let store = ImageStore::open(super::registry::shared_store()).unwrap();
    let base = store
        .get(&Reference::parse("python:3.11-slim").unwrap())
        .unwrap()
        .unwrap();
    let mut config = base.config.clone();
    config.env.push(("IMAGE_MARK".into(), "configured".into()));
    config.working_dir = Some("/srv/site".into());
    config.user = Some("nobody".into());
    let reference = Reference::parse("geode-test/config-probe:1").unwrap();
    store
        .tag_local(&reference, base.layers.clone(), config, ImageSource::Built)
        .unwrap();
    let mut spec = spec(Path::new("/nonexistent"));
    spec.docker_image = Some(reference.to_string());
    let image = f.backend.prepare(&spec).await.unwrap();
    let sb = f
        .backend
        .start_sandbox(&spec, &image, &f.trials.path().join("cfg"))
        .await
        .unwrap();
    let out = sh(&sb, "pwd; id -un; echo $IMAGE_MARK").await;
    assert_eq!(out.stdout, "/srv/site\nnobody\nconfigured\n", "{out:?}");
    Box::new(sb).teardown().await.unwrap();
}

/// What a compose sidecar runs: the image's ENTRYPOINT and CMD as the Dockerfile leaves them
/// (a stage's ENTRYPOINT drops only an inherited CMD), as its USER with that user's
/// supplementary groups (a database reading a key its group may read).
#[tokio::test]
async fn an_image_keeps_its_command_and_its_user_gets_supplementary_groups() {
    if !privileged() {
        return;
    }
    let f = fixture();
    let env_dir = environment(
        &f,
        "FROM python:3.11-slim AS base\nCMD [\"inherited\"]\n\
         FROM base\nRUN groupadd -g 4242 keys && useradd -u 4343 -G keys worker \\\n\
         && install -d -m 0710 -g keys /srv/keys && echo secret > /srv/keys/k \\\n\
         && chgrp keys /srv/keys/k && chmod 0640 /srv/keys/k\n\
         CMD serve --port 1\nENTRYPOINT [\"/usr/bin/env\"]\nUSER worker\n",
    );
    let spec = spec(&env_dir);
    let image = f.backend.prepare(&spec).await.unwrap();
    assert_eq!(image.entrypoint, ["/usr/bin/env"]);
    assert_eq!(image.cmd, ["/bin/sh", "-c", "serve --port 1"]);
    let sb = f
        .backend
        .start_sandbox(&spec, &image, &f.trials.path().join("groups"))
        .await
        .unwrap();
    let out = sh(&sb, "id -un; id -G; cat /srv/keys/k").await;
    assert_eq!(out.stdout, "worker\n4343 4242\nsecret\n", "{out:?}");
    Box::new(sb).teardown().await.unwrap();

    std::fs::write(
        env_dir.join("Dockerfile"),
        "FROM python:3.11-slim AS base\nCMD [\"inherited\"]\nFROM base\nENTRYPOINT [\"/run\"]\n",
    )
    .unwrap();
    let image = f.backend.prepare(&spec).await.unwrap();
    assert_eq!(
        (image.entrypoint, image.cmd),
        (vec!["/run".to_string()], vec![])
    );
}

#[tokio::test]
async fn multi_stage_builds_copy_from_an_earlier_stage() {
    if !privileged() {
        return;
    }
    let f = fixture();
    let env_dir = environment(
        &f,
        "ARG BASE=python:3.11-slim\nFROM $BASE AS build\nARG FLAVOUR=plain\n\
         RUN mkdir -p /out/bin && echo \"built $FLAVOUR\" > /out/bin/tool && echo junk > /junk\n\
         FROM debian:bookworm-slim AS unused\nRUN exit 1\n\
         FROM $BASE\nWORKDIR /app\nCOPY --from=build --chown=1000:1000 /out/bin/tool /app/tool\n\
         USER nobody\n",
    );
    let mut spec = spec(&env_dir);
    spec.build_args = vec![("FLAVOUR".into(), "special".into())];
    spec.build_log = Some(f.trials.path().join("build.log"));
    let image = f.backend.prepare(&spec).await.unwrap();
    let sb = f
        .backend
        .start_sandbox(&spec, &image, &f.trials.path().join("m"))
        .await
        .unwrap();
    let out = sh(
        &sb,
        "cat /app/tool; stat -c %u:%g /app/tool; test -e /junk || echo no-junk",
    )
    .await;
    assert_eq!(out.stdout, "built special\n1000:1000\nno-junk\n", "{out:?}");
    Box::new(sb).teardown().await.unwrap();
}

/// Set-up plus teardown of a trivial sandbox, median of 20, without and with an image layer:
/// `cargo test -p geode-harness --test sandbox -- --ignored --nocapture overhead`.
#[tokio::test]
#[ignore = "measurement"]
async fn overhead() {
    if !privileged() {
        return;
    }
    let f = fixture();
    let env_dir = environment(&f, "FROM python:3.11-slim\nWORKDIR /app\nRUN echo x > /x\n");
    let spec = spec(&env_dir);
    let layered = f.backend.prepare(&spec).await.unwrap();
    for (label, image) in [
        ("base image", base_image(&f.backend).await),
        ("built image", layered),
    ] {
        let mut times = Vec::new();
        for i in 0..20 {
            let trial = f.trials.path().join(format!("o{i}"));
            let started = Instant::now();
            let sb = f
                .backend
                .start_sandbox(&spec, &image, &trial)
                .await
                .unwrap();
            let up = started.elapsed();
            sh(&sb, "true").await;
            let ran = started.elapsed();
            Box::new(sb).teardown().await.unwrap();
            times.push((up, ran - up, started.elapsed() - ran));
        }
        let median = |mut v: Vec<Duration>| {
            v.sort();
            v[v.len() / 2]
        };
        eprintln!(
            "sandbox overhead ({label}), median of 20: start {:?}, exec(true) {:?}, teardown {:?}",
            median(times.iter().map(|t| t.0).collect()),
            median(times.iter().map(|t| t.1).collect()),
            median(times.iter().map(|t| t.2).collect()),
        );
    }
}
