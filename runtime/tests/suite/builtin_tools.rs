//! The built-in tools and `LocalWorkspace` against real files and real processes.

use super::common::{process_gone, wait_gone};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use geode_runtime::cognition::CognitiveState;
use geode_runtime::ids::{CorrelationId, SessionId};
use geode_runtime::policy::SafetyLevel;
use geode_runtime::tools::builtin::builtin_tools;
use geode_runtime::tools::plan::{ResourceKeyRule, ToolContext, ToolOutput};
use geode_runtime::tools::workspace::{ExecRequest, LocalWorkspace, Workspace, WorkspaceError};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

fn workspace() -> (tempfile::TempDir, Arc<LocalWorkspace>) {
    let dir = tempfile::tempdir().unwrap();
    let ws = Arc::new(LocalWorkspace::new(dir.path()).unwrap());
    (dir, ws)
}

fn context(ws: &Arc<LocalWorkspace>, cancel: CancellationToken) -> ToolContext {
    ToolContext {
        session_id: SessionId::new("x"),
        call_id: "call-1".to_string(),
        correlation_id: CorrelationId::new("x"),
        model_id: "test-model".to_string(),
        workspace: ws.clone(),
        resolved_paths: Vec::new(),
        deadline: Duration::from_secs(60),
        cancel,
        cognition: Arc::new(Mutex::new(CognitiveState::default())),
        output: Default::default(),
    }
}

/// Calls a built-in the way the pipeline does: path arguments resolved first.
async fn run_with(
    ws: &Arc<LocalWorkspace>,
    name: &str,
    input: Value,
    cancel: CancellationToken,
) -> ToolOutput {
    let tools = builtin_tools();
    let tool = tools.iter().find(|t| t.spec.name == name).unwrap();
    let mut ctx = context(ws, cancel);
    for arg in &tool.spec.path_args {
        if let Some(raw) = input.get(arg).and_then(Value::as_str) {
            match ws.resolve(raw) {
                Ok(path) => ctx.resolved_paths.push((arg.clone(), path)),
                Err(e) => return ToolOutput::error(e.to_string()),
            }
        }
    }
    tool.handler.call(&input, &ctx).await
}

async fn run(ws: &Arc<LocalWorkspace>, name: &str, input: Value) -> ToolOutput {
    run_with(ws, name, input, CancellationToken::new()).await
}

fn write(root: &Path, rel: &str, content: &[u8]) {
    let path = root.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, content).unwrap();
}

fn read_pid(root: &Path) -> i32 {
    std::fs::read_to_string(root.join("pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

fn exec_request(command: &str, timeout: Duration, output_cap: usize) -> ExecRequest {
    ExecRequest {
        command: command.to_string(),
        cwd: None,
        timeout,
        output_cap,
        env: Vec::new(),
    }
}

#[test]
fn new_rejects_missing_root_and_files() {
    let dir = tempfile::tempdir().unwrap();
    assert!(LocalWorkspace::new(dir.path().join("missing")).is_err());
    write(dir.path(), "file", b"x");
    assert!(LocalWorkspace::new(dir.path().join("file")).is_err());
    let ws = LocalWorkspace::new(dir.path().join(".")).unwrap();
    assert_eq!(ws.root(), dir.path().canonicalize().unwrap());
}

#[test]
fn resolve_refuses_escapes() {
    let (_dir, ws) = workspace();
    for bad in ["", "../x", "a/../../x", "./../x", "/etc/passwd", "/"] {
        let err = ws.resolve(bad).unwrap_err();
        assert_eq!(err.path, bad);
        assert!(!err.why.is_empty(), "{bad}: no reason given");
    }
    let root = ws.root().display().to_string();
    assert!(ws.resolve(&format!("{root}/../outside")).is_err());
}

#[test]
fn resolve_refuses_symlink_escapes() {
    let (dir, ws) = workspace();
    let outside = tempfile::tempdir().unwrap();
    write(outside.path(), "secret.txt", b"secret");
    std::os::unix::fs::symlink(outside.path(), dir.path().join("out")).unwrap();
    std::os::unix::fs::symlink(
        outside.path().join("secret.txt"),
        dir.path().join("secret-link"),
    )
    .unwrap();
    std::os::unix::fs::symlink(
        outside.path().join("not-there"),
        dir.path().join("dangling"),
    )
    .unwrap();
    for bad in [
        "out",
        "out/secret.txt",
        "out/new/nested.txt",
        "secret-link",
        "dangling",
        "dangling/x",
    ] {
        let err = ws.resolve(bad).unwrap_err();
        assert!(!err.why.is_empty(), "{bad}");
    }
}

#[test]
fn resolve_accepts_paths_inside_the_root() {
    let (dir, ws) = workspace();
    let root = dir.path().canonicalize().unwrap();
    assert_eq!(ws.resolve(".").unwrap(), root);
    assert_eq!(ws.resolve("a/b/new.txt").unwrap(), root.join("a/b/new.txt"));
    assert_eq!(ws.resolve("a/./b/../c").unwrap(), root.join("a/c"));
    let absolute = root.join("src/lib.rs");
    assert_eq!(ws.resolve(absolute.to_str().unwrap()).unwrap(), absolute);
    write(&root, "real/file.txt", b"x");
    std::os::unix::fs::symlink(root.join("real"), root.join("alias")).unwrap();
    assert_eq!(
        ws.resolve("alias/file.txt").unwrap(),
        root.join("real/file.txt")
    );
    assert_eq!(ws.resolve("alias/new").unwrap(), root.join("real/new"));
}

#[tokio::test(flavor = "multi_thread")]
async fn tools_resolve_paths_themselves_when_the_pipeline_did_not() {
    let (_dir, ws) = workspace();
    let ctx = context(&ws, CancellationToken::new());
    let tools = builtin_tools();
    let write_tool = tools.iter().find(|t| t.spec.name == "write_file").unwrap();
    let out = write_tool
        .handler
        .call(&json!({"path": "../escape.txt", "content": "x"}), &ctx)
        .await;
    assert!(out.is_error, "{}", out.content);
    assert!(
        out.content.contains("outside the workspace root"),
        "{}",
        out.content
    );
    let out = write_tool
        .handler
        .call(&json!({"path": "inside.txt", "content": "x"}), &ctx)
        .await;
    assert!(!out.is_error, "{}", out.content);
    assert!(ws.root().join("inside.txt").exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn exec_refuses_a_cwd_outside_the_root() {
    let (_dir, ws) = workspace();
    let mut req = exec_request("pwd", Duration::from_secs(5), 1000);
    req.cwd = Some("../".into());
    let err = ws.exec(req, CancellationToken::new()).await.unwrap_err();
    assert!(matches!(err, WorkspaceError::Scope(_)), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn bash_captures_stdout_stderr_and_exit_code() {
    let (dir, ws) = workspace();
    let out = run(
        &ws,
        "bash",
        json!({"command": "echo hello; echo oops >&2; pwd"}),
    )
    .await;
    assert!(!out.is_error, "{}", out.content);
    let root = dir.path().canonicalize().unwrap();
    let expected = format!("hello\n{}\n[stderr]\noops\n[exit code 0]\n", root.display());
    assert_eq!(out.content, expected);

    let out = run(&ws, "bash", json!({"command": "printf partial; exit 3"})).await;
    assert!(out.is_error);
    assert_eq!(out.content, "partial\n[exit code 3]\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn bash_timeout_kills_the_whole_process_group() {
    let (dir, ws) = workspace();
    let started = Instant::now();
    let out = run(
        &ws,
        "bash",
        json!({"command": "sleep 300 & echo $! > pid; wait", "timeout_sec": 1}),
    )
    .await;
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(out.is_error);
    assert!(
        out.content
            .contains("[timed out after 1s; the process group was killed]"),
        "{}",
        out.content
    );
    let pid = read_pid(dir.path());
    assert!(
        wait_gone(pid).await,
        "grandchild {pid} survived the timeout"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn background_processes_die_when_the_command_exits() {
    let (dir, ws) = workspace();
    assert!(!process_gone(std::process::id() as i32));
    let started = Instant::now();
    // The background sleep inherits stdout: without killing the group, reading would hang.
    let out = ws
        .exec(
            exec_request(
                "sleep 300 & echo $! > pid; echo started",
                Duration::from_secs(30),
                1000,
            ),
            CancellationToken::new(),
        )
        .await
        .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(out.exit_code, Some(0));
    assert_eq!(out.stdout, "started\n");
    assert!(!out.timed_out && !out.cancelled && !out.truncated);
    let pid = read_pid(dir.path());
    assert!(wait_gone(pid).await, "background {pid} outlived its call");
}

#[tokio::test(flavor = "multi_thread")]
async fn exec_gives_up_on_pipes_held_by_an_escaped_process() {
    let (dir, ws) = workspace();
    let started = Instant::now();
    let out = ws
        .exec(
            exec_request(
                // Waits until the sleep leads its own session, out of reach of the group kill.
                "setsid sleep 30 & p=$!; echo $p > pid; \
                 until [ \"$(cut -d' ' -f6 /proc/$p/stat)\" = $p ]; do sleep 0.01; done; echo bye",
                Duration::from_secs(30),
                1000,
            ),
            CancellationToken::new(),
        )
        .await
        .unwrap();
    let elapsed = started.elapsed();
    let pid = read_pid(dir.path());
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    );
    // Stopped reading after the grace period instead of waiting 30 s for the pipe to close.
    assert!(elapsed >= Duration::from_millis(1500), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(6), "{elapsed:?}");
    assert_eq!(out.exit_code, Some(0));
    assert_eq!(out.stdout, "bye\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn output_is_capped_with_a_marker() {
    let (_dir, ws) = workspace();
    let out = run(
        &ws,
        "bash",
        json!({"command": "head -c 5000000 /dev/zero | tr '\\0' a; echo err >&2"}),
    )
    .await;
    assert!(!out.is_error, "{}", &out.content[out.content.len() - 200..]);
    assert!(out.content.starts_with(&"a".repeat(30_000)));
    assert!(!out.content.contains(&"a".repeat(30_001)));
    assert!(
        out.content
            .contains("\n[... output truncated at 30000 bytes ...]\n[stderr]\nerr\n[exit code 0]")
    );

    let raw = ws
        .exec(
            exec_request("printf 'héllo wörld'", Duration::from_secs(5), 2),
            CancellationToken::new(),
        )
        .await
        .unwrap();
    assert!(raw.truncated);
    assert_eq!(raw.stdout, "h\n[... output truncated at 2 bytes ...]\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn cancellation_stops_a_long_command_quickly() {
    let (dir, ws) = workspace();
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        trigger.cancel();
    });
    let started = Instant::now();
    let out = run_with(
        &ws,
        "bash",
        json!({"command": "sleep 300 & echo $! > pid; sleep 300"}),
        cancel,
    )
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert!(out.is_error);
    assert!(
        out.content
            .contains("[cancelled; the process group was killed]"),
        "{}",
        out.content
    );
    assert!(wait_gone(read_pid(dir.path())).await);
}

#[tokio::test(flavor = "multi_thread")]
async fn edit_file_requires_exactly_one_match() {
    let (dir, ws) = workspace();
    let original = b"fn a() {}\nfn b() {}\nfn a() {}\n";
    write(dir.path(), "src/lib.rs", original);
    let file = dir.path().join("src/lib.rs");

    let none = run(
        &ws,
        "edit_file",
        json!({"path": "src/lib.rs", "old_string": "fn c()", "new_string": "fn d()"}),
    )
    .await;
    assert!(none.is_error);
    assert!(none.content.contains("0 matches"), "{}", none.content);
    assert_eq!(std::fs::read(&file).unwrap(), original);

    let two = run(
        &ws,
        "edit_file",
        json!({"path": "src/lib.rs", "old_string": "fn a()", "new_string": "fn z()"}),
    )
    .await;
    assert!(two.is_error);
    assert!(two.content.contains("2 times"), "{}", two.content);
    assert_eq!(std::fs::read(&file).unwrap(), original);

    for (old, new) in [("", "x"), ("fn b", "fn b")] {
        let out = run(
            &ws,
            "edit_file",
            json!({"path": "src/lib.rs", "old_string": old, "new_string": new}),
        )
        .await;
        assert!(out.is_error, "{old:?} -> {new:?}");
    }
    assert_eq!(std::fs::read(&file).unwrap(), original);

    let one = run(
        &ws,
        "edit_file",
        json!({"path": "src/lib.rs", "old_string": "fn b()", "new_string": "fn bee()"}),
    )
    .await;
    assert!(!one.is_error, "{}", one.content);
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "fn a() {}\nfn bee() {}\nfn a() {}\n"
    );

    let all = run(
        &ws,
        "edit_file",
        json!({"path": "src/lib.rs", "old_string": "fn a()", "new_string": "fn z()", "replace_all": true}),
    )
    .await;
    assert!(!all.is_error, "{}", all.content);
    assert_eq!(all.content, "replaced 2 occurrences in src/lib.rs");
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "fn z() {}\nfn bee() {}\nfn z() {}\n"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn write_file_creates_parent_directories() {
    let (dir, ws) = workspace();
    let out = run(
        &ws,
        "write_file",
        json!({"path": "deep/er/new.txt", "content": "hello"}),
    )
    .await;
    assert!(!out.is_error, "{}", out.content);
    assert_eq!(out.content, "wrote 5 bytes to deep/er/new.txt");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("deep/er/new.txt")).unwrap(),
        "hello"
    );
    let escape = run(&ws, "write_file", json!({"path": "../x", "content": "no"})).await;
    assert!(escape.is_error);
}

#[tokio::test(flavor = "multi_thread")]
async fn read_file_windows_and_errors() {
    let (dir, ws) = workspace();
    write(dir.path(), "lines.txt", b"one\ntwo\nthree\nfour\n");
    let all = run(&ws, "read_file", json!({"path": "lines.txt"})).await;
    assert_eq!(all.content, "one\ntwo\nthree\nfour\n");
    let window = run(
        &ws,
        "read_file",
        json!({"path": "lines.txt", "offset": 2, "limit": 2}),
    )
    .await;
    assert!(!window.is_error);
    assert_eq!(window.content, "two\nthree\n");
    let tail = run(&ws, "read_file", json!({"path": "lines.txt", "offset": 4})).await;
    assert_eq!(tail.content, "four\n");
    let past = run(&ws, "read_file", json!({"path": "lines.txt", "offset": 9})).await;
    assert!(past.is_error);
    let missing = run(&ws, "read_file", json!({"path": "nope/missing.txt"})).await;
    assert!(missing.is_error);
    assert!(
        missing.content.contains("nope/missing.txt"),
        "{}",
        missing.content
    );

    write(dir.path(), "big.txt", &vec![b'x'; 300 * 1024]);
    let big = run(&ws, "read_file", json!({"path": "big.txt"})).await;
    assert!(!big.is_error);
    assert!(big.content.starts_with(&"x".repeat(256 * 1024)));
    assert!(big.content.contains("[... cut at 262144 of 307200 bytes"));
}

#[tokio::test(flavor = "multi_thread")]
async fn list_dir_marks_directories() {
    let (dir, ws) = workspace();
    write(dir.path(), "b.txt", b"");
    write(dir.path(), "a/inner.txt", b"");
    let out = run(&ws, "list_dir", json!({})).await;
    assert_eq!(out.content, "a/\nb.txt\n");
    let inner = run(&ws, "list_dir", json!({"path": "a"})).await;
    assert_eq!(inner.content, "inner.txt\n");
    let missing = run(&ws, "list_dir", json!({"path": "zzz"})).await;
    assert!(missing.is_error);
}

#[tokio::test(flavor = "multi_thread")]
async fn glob_finds_planted_files_and_skips_git() {
    let (dir, ws) = workspace();
    for rel in [
        "src/main.rs",
        "src/util/mod.rs",
        "top.rs",
        "README.md",
        ".git/hooks/x.rs",
    ] {
        write(dir.path(), rel, b"");
    }
    let out = run(&ws, "glob", json!({"pattern": "**/*.rs"})).await;
    assert!(!out.is_error, "{}", out.content);
    assert_eq!(out.content, "src/main.rs\nsrc/util/mod.rs\ntop.rs");
    let shallow = run(&ws, "glob", json!({"pattern": "*.rs"})).await;
    assert_eq!(shallow.content, "top.rs");
    let under = run(&ws, "glob", json!({"pattern": "*.rs", "path": "src"})).await;
    assert_eq!(under.content, "src/main.rs");
    let none = run(&ws, "glob", json!({"pattern": "*.toml"})).await;
    assert!(!none.is_error);
    assert!(none.content.starts_with("no files match"));

    for i in 0..1005 {
        write(dir.path(), &format!("many/f{i:04}.txt"), b"");
    }
    let capped = run(&ws, "glob", json!({"pattern": "many/*.txt"})).await;
    assert_eq!(capped.content.lines().count(), 1001);
    assert!(capped.content.contains("[... 5 more matches not shown"));
}

#[tokio::test(flavor = "multi_thread")]
async fn grep_finds_matches_and_skips_git_and_binary() {
    let (dir, ws) = workspace();
    write(
        dir.path(),
        "src/a.rs",
        b"fn main() {\n    let needle = 1;\n}\n",
    );
    write(dir.path(), "notes.md", b"a needle in prose\n");
    write(dir.path(), ".git/config", b"needle\n");
    write(dir.path(), "blob.bin", b"needle\0\x01\x02");
    let out = run(&ws, "grep", json!({"pattern": "need(le)"})).await;
    assert!(!out.is_error, "{}", out.content);
    assert_eq!(
        out.content,
        "notes.md:1: a needle in prose\nsrc/a.rs:2:     let needle = 1;"
    );
    let filtered = run(&ws, "grep", json!({"pattern": "needle", "glob": "*.rs"})).await;
    assert_eq!(filtered.content, "src/a.rs:2:     let needle = 1;");
    let one_file = run(
        &ws,
        "grep",
        json!({"pattern": "needle", "path": "notes.md"}),
    )
    .await;
    assert_eq!(one_file.content, "notes.md:1: a needle in prose");
    let bad = run(&ws, "grep", json!({"pattern": "(unclosed"})).await;
    assert!(bad.is_error);
    assert!(bad.content.contains("invalid regex"));

    let many: String = (0..600).map(|i| format!("hit {i}\n")).collect();
    write(dir.path(), "many.txt", many.as_bytes());
    let capped = run(&ws, "grep", json!({"pattern": "^hit", "path": "many.txt"})).await;
    assert_eq!(capped.content.lines().count(), 501);
    assert!(capped.content.contains("[... stopped at 500 matches"));
}

#[test]
fn builtin_specs_are_closed_objects_with_the_expected_policy() {
    let tools = builtin_tools();
    let names: Vec<&str> = tools.iter().map(|t| t.spec.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "bash",
            "read_file",
            "write_file",
            "edit_file",
            "list_dir",
            "glob",
            "grep",
            "computer"
        ]
    );
    for tool in &tools {
        let schema = &tool.spec.input_schema;
        assert_eq!(tool.binding, format!("builtin:{}", tool.spec.name));
        assert_eq!(schema["type"], "object");
        assert_eq!(schema["additionalProperties"], false);
        assert!(schema["properties"].is_object());
        for required in schema["required"].as_array().unwrap() {
            assert!(
                schema["properties"]
                    .get(required.as_str().unwrap())
                    .is_some()
            );
        }
        for arg in &tool.spec.path_args {
            assert!(schema["properties"].get(arg).is_some());
        }
    }
    assert_eq!(tools[0].spec.resource_keys, ResourceKeyRule::Workspace);
    for dangerous in [&tools[0].spec, &tools[7].spec] {
        assert_eq!(dangerous.safety, SafetyLevel::Dangerous);
        assert!(dangerous.effectful && dangerous.path_args.is_empty());
    }
    for tool in &tools[1..7] {
        assert_eq!(tool.spec.resource_keys, ResourceKeyRule::PathArgs);
        assert_eq!(tool.spec.path_args, ["path"]);
        let writes = matches!(tool.spec.name.as_str(), "write_file" | "edit_file");
        assert_eq!(tool.spec.effectful, writes, "{}", tool.spec.name);
        let level = if writes {
            SafetyLevel::Write
        } else {
            SafetyLevel::Safe
        };
        assert_eq!(tool.spec.safety, level, "{}", tool.spec.name);
    }
}
