//! The command sandbox of a person's session, with real commands: the workspace is writable
//! and nothing else is, `/tmp` is private, hidden folders are empty, the host's network is out
//! of reach (a loopback of its own still works), nothing can be remounted writable even by
//! root, and an escalated call runs outside.

use std::time::Duration;

use geode_runtime::tools::workspace::{
    CommandSandbox, ExecOutput, ExecRequest, LocalWorkspace, SandboxPolicy, Workspace,
};
use tokio_util::sync::CancellationToken;

fn confined(root: &std::path::Path, policy: SandboxPolicy) -> LocalWorkspace {
    LocalWorkspace::new(root)
        .unwrap()
        .with_sandbox(CommandSandbox::WorkspaceWrite(policy))
}

async fn sh(ws: &LocalWorkspace, command: &str) -> ExecOutput {
    ws.exec(
        ExecRequest {
            command: command.to_string(),
            cwd: None,
            timeout: Duration::from_secs(20),
            output_cap: 1 << 16,
            env: Vec::new(),
        },
        CancellationToken::new(),
    )
    .await
    .unwrap()
}

/// A folder outside /tmp (which the sandbox replaces), as a user's other projects are: in
/// /var/tmp, since a fresh clone's target folder may itself lie under /tmp.
fn outside() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("geode-sandbox-outside")
        .tempdir_in("/var/tmp")
        .unwrap()
}

#[tokio::test]
async fn the_workspace_is_writable_and_nothing_else_is() {
    let ws_dir = tempfile::tempdir().unwrap();
    let other = outside();
    let ws = confined(ws_dir.path(), SandboxPolicy::default());
    let target = other.path().join("escaped");
    let out = sh(
        &ws,
        &format!(
            "echo in > inside && mkdir -p sub/deeper && echo x > sub/deeper/f && \
             (echo out > {0}; echo rc=$?) ; (touch /var/tmp/geode-sandbox-probe; echo rc=$?)",
            target.display()
        ),
    )
    .await;
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    assert_eq!(
        std::fs::read_to_string(ws_dir.path().join("inside")).unwrap(),
        "in\n"
    );
    assert!(ws_dir.path().join("sub/deeper/f").is_file());
    assert!(!target.exists(), "{out:?}");
    assert!(!std::path::Path::new("/var/tmp/geode-sandbox-probe").exists());
    assert_eq!(out.stdout.matches("rc=1").count(), 2, "{out:?}");
    assert!(out.stderr.contains("Read-only file system"), "{out:?}");

    // Unconfined, the same workspace writes where it likes: the test can fail.
    let open = LocalWorkspace::new(ws_dir.path()).unwrap();
    let escaped = sh(&open, &format!("echo out > {}", target.display())).await;
    assert_eq!(escaped.exit_code, Some(0), "{escaped:?}");
    assert!(target.exists());
}

#[tokio::test]
async fn tmp_is_private_and_hidden_files_are_empty() {
    let ws_dir = tempfile::tempdir().unwrap();
    let home = outside();
    std::fs::write(home.path().join("secret"), "kept").unwrap();
    let socket = std::os::unix::net::UnixListener::bind(home.path().join("cli.sock")).unwrap();
    let ws = confined(
        ws_dir.path(),
        SandboxPolicy {
            network: false,
            hidden: vec![home.path().join("secret"), home.path().join("cli.sock")],
        },
    );
    let marker = format!("geode-sandbox-tmp-{}", std::process::id());
    let out = sh(
        &ws,
        &format!(
            "echo t > /tmp/{marker} && cat /tmp/{marker} && wc -c < {0}/secret && \
             ls -A /run | wc -l && python3 -c 'import socket; s = socket.socket(socket.AF_UNIX); \
             s.connect(\"{0}/cli.sock\")' 2>/dev/null; echo connect=$?",
            home.path().display()
        ),
    )
    .await;
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    assert_eq!(out.stdout, "t\n0\n0\nconnect=1\n", "{out:?}");
    // Outside, the socket answers: the test can fail.
    assert!(std::os::unix::net::UnixStream::connect(home.path().join("cli.sock")).is_ok());
    drop(socket);
    assert!(!std::path::Path::new("/tmp").join(&marker).exists());
}

#[tokio::test]
async fn no_network_but_a_loopback_of_its_own() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let ws_dir = tempfile::tempdir().unwrap();
    let ws = confined(ws_dir.path(), SandboxPolicy::default());
    let reach = format!("(exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null; echo host=$?");
    let own = "python3 -c 'import socket; s=socket.socket(); s.bind((\"127.0.0.1\", 0)); \
               s.listen(); c=socket.create_connection(s.getsockname()); print(\"own=ok\")'";
    let out = sh(&ws, &format!("{reach}; {own}")).await;
    assert!(out.stdout.contains("host=1"), "{out:?}");
    assert!(out.stdout.contains("own=ok"), "{out:?}");
    // Allowed, the host's listener answers.
    let open = confined(
        ws_dir.path(),
        SandboxPolicy {
            network: true,
            hidden: Vec::new(),
        },
    );
    let out = sh(&open, &reach).await;
    assert!(out.stdout.contains("host=0"), "{out:?}");
}

#[tokio::test]
async fn nothing_can_be_remounted_writable() {
    let ws_dir = tempfile::tempdir().unwrap();
    let ws = confined(ws_dir.path(), SandboxPolicy::default());
    let out = sh(
        &ws,
        "mount -o remount,rw / 2>&1; echo rc=$?; umount -l /tmp 2>&1; echo rc=$?; \
         touch /etc/geode-sandbox-probe 2>&1; echo rc=$?",
    )
    .await;
    assert_eq!(out.stdout.matches("rc=0").count(), 0, "{out:?}");
    assert!(!std::path::Path::new("/etc/geode-sandbox-probe").exists());
}

#[tokio::test]
async fn an_escalated_command_runs_outside() {
    let ws_dir = tempfile::tempdir().unwrap();
    let other = outside();
    let ws = confined(ws_dir.path(), SandboxPolicy::default());
    assert!(ws.confines_commands());
    let target = other.path().join("approved");
    let out = ws
        .exec_escalated(
            ExecRequest {
                command: format!("echo yes > {}", target.display()),
                cwd: None,
                timeout: Duration::from_secs(20),
                output_cap: 1 << 16,
                env: Vec::new(),
            },
            CancellationToken::new(),
            Default::default(),
        )
        .await
        .unwrap();
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    assert!(target.exists());
}
