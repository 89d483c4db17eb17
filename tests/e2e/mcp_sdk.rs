//! GEODE against the official MCP Python SDK, both ways, with real processes: the SDK's
//! default client (`mode="auto"`: `server/discover` first, the 2026-07-28 revision's
//! per-request envelope, no session) and its legacy client (`initialize`, a session closed
//! with `DELETE`) drive `geode mcp` over stdio and streamable HTTP; `geode exec` calls the tools
//! of a server written with the SDK's `MCPServer`, over stdio and HTTP. The scripts are
//! tests/e2e/fixtures/mcp_sdk/. The SDK is installed once per machine, from PyPI, into a
//! virtual environment beside the test image store (PyPI must be reachable the first time).

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::mcp::{HELLO, completed, geode, lines, stderr};
use super::mcp_server::HttpServer;

/// The SDK release these tests hold GEODE to: the newest on PyPI when they were written.
/// Its default client speaks 2026-07-28 (`MODERN`), its legacy one 2025-11-25 (`HANDSHAKE`).
const SDK: &str = "mcp==2.3.0";
const MODERN: &str = "2026-07-28";
const HANDSHAKE: &str = "2025-11-25";

/// One of the scripts that run the SDK (tests/e2e/fixtures/mcp_sdk/).
fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/e2e/fixtures/mcp_sdk")
        .join(name)
}

/// The Python of a virtual environment with the SDK installed, made under an exclusive lock so
/// parallel test binaries install it once.
fn sdk_python() -> PathBuf {
    let venv = super::registry::shared_store()
        .parent()
        .unwrap()
        .join("mcp-sdk-venv-2.3.0");
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
                "import importlib.metadata as m, mcp.client.client, mcp.server.mcpserver, uvicorn; \
                 assert m.version('mcp') == '2.3.0'",
            ])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if !ready(&python) {
        let _ = std::fs::remove_dir_all(&venv);
        // The SDK needs Python 3.10+; Debian's python3 with python3-venv (scripts/test).
        let made = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status()
            .unwrap();
        assert!(
            made.success(),
            "python3 -m venv failed (python3-venv missing?)"
        );
        let installed = Command::new(venv.join("bin/pip"))
            .args(["install", "--quiet", SDK])
            .status()
            .unwrap();
        assert!(installed.success(), "pip install {SDK} failed");
        assert!(ready(&python), "the SDK does not import");
    }
    python
}

/// What client.py printed: the negotiated version, the tools, the call's result, the SDK's
/// warnings.
fn sdk_client(dir: &Path, args: &[&str]) -> Value {
    let out = Command::new(sdk_python())
        .arg(script("client.py"))
        .args(args)
        .current_dir(dir)
        .env("GEODE_HOME", dir.join("home"))
        .env_remove("GEODE_MODEL")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "client.py {args:?} failed:\n{text}\n{}",
        stderr(&out)
    );
    serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// `run_agent` answered the scripted hello, at protocol `version`, with nothing logged amiss.
fn assert_hello_at(answer: &Value, version: &str) {
    assert_eq!(answer["protocol_version"], version, "{answer}");
    assert_eq!(answer["server_name"], "geode", "{answer}");
    assert_eq!(
        answer["tools"],
        serde_json::json!(["run_agent"]),
        "{answer}"
    );
    assert_eq!(answer["is_error"], false, "{answer}");
    let result = &answer["structured"];
    assert_eq!(result["text"], "Hello from the scripted model.", "{answer}");
    assert_eq!(result["termination_reason"], "natural", "{answer}");
    assert_eq!(answer["warnings"], serde_json::json!([]), "{answer}");
}

// --- The SDK's clients against `geode mcp` -----------------------------------------------

#[test]
fn the_sdk_default_client_calls_run_agent_over_stdio() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("script.toml"), HELLO).unwrap();
    let geode_bin = env!("CARGO_BIN_EXE_geode");
    let mcp = ["mcp", "--model", "scripted:script.toml"];
    // The default client probes with server/discover, which an initialize-only server cannot
    // survive; then every request carries the 2026-07-28 envelope.
    let mut args = vec!["--mode", "auto", "--", geode_bin];
    args.extend(mcp);
    assert_hello_at(&sdk_client(dir.path(), &args), MODERN);
    // The legacy client still gets the initialize handshake.
    let mut args = vec!["--mode", "legacy", "--", geode_bin];
    args.extend(mcp);
    assert_hello_at(&sdk_client(dir.path(), &args), HANDSHAKE);
}

#[test]
fn the_sdk_clients_call_run_agent_over_http_and_close_their_sessions() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("script.toml"), HELLO).unwrap();
    let server = HttpServer::start(dir.path(), &["127.0.0.1:0"]);
    let url = server.url.as_str();
    // The default client: stateless 2026-07-28 requests, no session to close.
    assert_hello_at(
        &sdk_client(dir.path(), &["--mode", "auto", "--http", url]),
        MODERN,
    );
    // The legacy client opens a session and ends it with DELETE; a status other than 200 or
    // 204 is a warning the SDK logs ("Session termination failed: 202").
    assert_hello_at(
        &sdk_client(dir.path(), &["--mode", "legacy", "--http", url]),
        HANDSHAKE,
    );
    // The same, on the wire: the session's DELETE is answered 204.
    let session = raw_initialize_session(url);
    let status = raw_request(url, "DELETE", &[("Mcp-Session-Id", &session)], "");
    assert!(status.starts_with("HTTP/1.1 204"), "{status}");
    // A closed session is gone.
    let status = raw_request(
        url,
        "POST",
        &[("Mcp-Session-Id", &session)],
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#,
    );
    assert!(status.starts_with("HTTP/1.1 404"), "{status}");
}

/// One HTTP request on a fresh connection to `url`'s server; the whole response.
fn raw_request(url: &str, method: &str, headers: &[(&str, &str)], body: &str) -> String {
    let rest = url.strip_prefix("http://").unwrap();
    let (hostport, path) = rest.split_once('/').unwrap();
    let mut request = format!(
        "{method} /{path} HTTP/1.1\r\nHost: {hostport}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: {HANDSHAKE}\r\n\
         Content-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    let mut s = std::net::TcpStream::connect(hostport).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut response = String::new();
    // An SSE answer may stay open after its event; what arrived by the timeout is enough.
    let _ = s.read_to_string(&mut response);
    response
}

/// A legacy session opened with `initialize` (and `notifications/initialized`); its id.
fn raw_initialize_session(url: &str) -> String {
    let init = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"initialize","params":{{"protocolVersion":"{HANDSHAKE}","capabilities":{{}},"clientInfo":{{"name":"raw","version":"0"}}}}}}"#
    );
    let response = raw_request(url, "POST", &[], &init);
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    let session = response
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("mcp-session-id")
                .then(|| value.trim().to_string())
        })
        .unwrap_or_else(|| panic!("no session id in\n{response}"));
    let initialized = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    let response = raw_request(url, "POST", &[("Mcp-Session-Id", &session)], initialized);
    assert!(response.starts_with("HTTP/1.1 202"), "{response}");
    session
}

// --- GEODE as a client of an SDK server --------------------------------------------------

const CALLS_SDK: &str = r#"
[[turns]]
text = "Calling the SDK server."
[[turns.tool_calls]]
id = "e1"
name = "mcp__sdk__echo"
input = { text = "hi from geode" }
[[turns.tool_calls]]
id = "a1"
name = "mcp__sdk__add"
input = { a = 1, b = 2 }
[[turns]]
text = "Both answered."
"#;

/// `geode exec` in `d` with `server` (a `[mcp.servers.sdk]` table's transport lines) as the
/// user's one MCP server; what each tool call returned.
fn exec_against(d: &Path, server: &str) -> Vec<(String, bool, String)> {
    std::fs::create_dir_all(d.join("home")).unwrap();
    std::fs::write(
        d.join("home/config.toml"),
        format!("[mcp.servers.sdk]\n{server}\n[mcp.servers.sdk.policy]\nsafety = \"safe\"\n"),
    )
    .unwrap();
    std::fs::write(d.join("script.toml"), CALLS_SDK).unwrap();
    let out: Output = geode(d)
        .args(["exec", "--model", "scripted:script.toml"])
        .args(["--timeline", "tl.db", "--session-id", "sdk", "call the sdk"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "Both answered."
    );
    completed(&d.join("tl.db"), "sdk")
}

/// Both calls answered, and the server served each at the 2026-07-28 revision.
fn assert_both_answered_modern(d: &Path, rows: &[(String, bool, String)]) {
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!(
        rows[0],
        ("mcp__sdk__echo".into(), false, "hi from geode".into())
    );
    assert_eq!(rows[1], ("mcp__sdk__add".into(), false, "3.0".into()));
    let calls = lines(&d.join("calls.log"));
    assert_eq!(
        calls,
        [
            format!("echo hi from geode {MODERN}"),
            format!("add 1.0 2.0 {MODERN}")
        ],
        "the server's record of the calls"
    );
}

#[test]
fn geode_calls_an_sdk_server_over_stdio_at_the_current_revision() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let server = format!(
        "command = {:?}\nargs = [{:?}, \"stdio\"]\nenv = {{ FIXTURE_CALLS = {:?} }}",
        sdk_python().display().to_string(),
        script("server.py").display().to_string(),
        d.join("calls.log").display().to_string(),
    );
    let rows = exec_against(d, &server);
    assert_both_answered_modern(d, &rows);
}

/// server.py serving streamable HTTP on a free loopback port, killed on drop.
struct SdkHttpServer {
    child: Child,
    url: String,
}

impl SdkHttpServer {
    fn start(calls: &Path) -> SdkHttpServer {
        let mut child = Command::new(sdk_python())
            .arg(script("server.py"))
            .arg("http")
            .env("FIXTURE_CALLS", calls)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut line = String::new();
        let url = loop {
            assert!(Instant::now() < deadline, "server.py printed no address");
            line.clear();
            assert!(out.read_line(&mut line).unwrap() > 0, "server.py exited");
            if let Some(url) = line.trim().strip_prefix("listening on ") {
                break url.to_string();
            }
        };
        SdkHttpServer { child, url }
    }
}

impl Drop for SdkHttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn geode_calls_an_sdk_server_over_http_at_the_current_revision() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let server = SdkHttpServer::start(&d.join("calls.log"));
    let rows = exec_against(d, &format!("url = {:?}", server.url));
    assert_both_answered_modern(d, &rows);
}

#[test]
fn geode_falls_back_to_initialize_for_a_server_that_breaks_on_the_probe() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let server = format!(
        "command = \"python3\"\nargs = [{:?}]\nenv = {{ FIXTURE_STARTED = {:?} }}",
        script("initialize_only_server.py").display().to_string(),
        d.join("started.log").display().to_string(),
    );
    std::fs::create_dir_all(d.join("home")).unwrap();
    std::fs::write(
        d.join("home/config.toml"),
        format!("[mcp.servers.old]\n{server}\n[mcp.servers.old.policy]\nsafety = \"safe\"\n"),
    )
    .unwrap();
    std::fs::write(
        d.join("script.toml"),
        "[[turns]]\n[[turns.tool_calls]]\nid = \"e1\"\nname = \"mcp__old__echo\"\n\
         input = { text = \"hi\" }\n[[turns]]\ntext = \"It answered.\"\n",
    )
    .unwrap();
    let out = geode(d)
        .args(["exec", "--model", "scripted:script.toml"])
        .args(["--timeline", "tl.db", "--session-id", "old", "call it"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let rows = completed(&d.join("tl.db"), "old");
    assert_eq!(rows, [("mcp__old__echo".into(), false, "hi".into())]);
    // The probe ended the first process; a second one was asked initialize alone.
    assert_eq!(
        lines(&d.join("started.log")),
        ["server/discover", "initialize"]
    );
}
