//! GEODE as an MCP server, with real processes: an rmcp client drives `geode mcp` over stdio
//! and over streamable HTTP on loopback (tokens, DNS-rebinding checks). Apart from mcp.rs,
//! where geode is the client, because these tests need the HTTP server handle and raw
//! requests and nothing of the fixture server.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use geode_runtime::store::timeline::SessionTimeline;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::RunningService;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};

use super::mcp::{ASKS_FOR_BASH, HELLO, completed, geode, stderr};

async fn call_run_agent(
    client: &RunningService<RoleClient, ()>,
    args: Value,
) -> (CallToolResult, Value) {
    let Value::Object(arguments) = args else {
        panic!("arguments must be an object")
    };
    let mut params = CallToolRequestParams::new("run_agent");
    params.arguments = Some(arguments);
    let result = client.peer().call_tool(params).await.unwrap();
    let text = &result.content[0].as_text().unwrap().text;
    let value: Value = serde_json::from_str(text).unwrap();
    (result, value)
}

async fn stdio_client(dir: &Path) -> RunningService<RoleClient, ()> {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_geode"));
    cmd.args(["mcp", "--model", "scripted:script.toml"])
        .current_dir(dir)
        .env("GEODE_HOME", dir.join("home"))
        .env_remove("GEODE_MODEL")
        .kill_on_drop(true);
    let (transport, _) = TokioChildProcess::builder(cmd)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    ().serve(transport).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_run_agent_answers_with_text_rounds_and_termination() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("script.toml"), HELLO).unwrap();
    let client = stdio_client(dir.path()).await;
    let tools = client.peer().list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(names, ["run_agent"]);
    let (result, value) = call_run_agent(&client, json!({"prompt": "say hello"})).await;
    assert_eq!(result.is_error, Some(false), "{value}");
    assert_eq!(value["text"], "Hello from the scripted model.");
    assert_eq!(value["rounds"], 1);
    assert_eq!(value["termination_reason"], "natural");
    assert_eq!(value["error"], Value::Null);
    // The time budget reaches the turn's guards: under the wrap-up margin the one round is
    // forced to text.
    let (_, value) =
        call_run_agent(&client, json!({"prompt": "say hello", "time_budget_s": 5})).await;
    assert_eq!(value["termination_reason"], "forced_text", "{value}");
    assert_eq!(value["text"], "Hello from the scripted model.");
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_run_agent_has_no_shell_and_no_computer() {
    let dir = tempfile::tempdir().unwrap();
    // The shell, then the computer tool: run_agent's deny list removes both, and the
    // DAEMON operator's computer-use exception does not exist there.
    let script = ASKS_FOR_BASH.replace(
        "[[turns]]\ntext = \"No shell",
        "[[turns]]\n[[turns.tool_calls]]\nid = \"c1\"\nname = \"computer\"\n\
         input = { action = \"screenshot\" }\n[[turns]]\ntext = \"No shell",
    );
    assert!(script.contains("computer"), "{script}");
    std::fs::write(dir.path().join("script.toml"), script).unwrap();
    let client = stdio_client(dir.path()).await;
    let (_, value) = call_run_agent(&client, json!({"prompt": "run a shell"})).await;
    client.cancel().await.unwrap();
    assert_eq!(
        value["text"], "No shell here: bash could not run.",
        "{value}"
    );
    assert_eq!(value["rounds"], 3);
    assert!(!dir.path().join("pwned.txt").exists(), "bash ran");
    // The timeline of the run_agent session shows the call refused at the scope step.
    let tl = SessionTimeline::open(dir.path().join("home").join("timeline.db")).unwrap();
    let session = tl.latest_session().unwrap().unwrap();
    let rows = completed(
        &dir.path().join("home").join("timeline.db"),
        session.as_str(),
    );
    assert_eq!(rows.len(), 2, "{rows:?}");
    for ((tool, is_error, content), expected) in rows.iter().zip(["bash", "computer"]) {
        assert_eq!(tool, expected);
        assert!(*is_error);
        assert!(
            content.contains("denied at scope") && content.contains(expected),
            "{content}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_run_agent_runs_the_configured_hooks() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("home")).unwrap();
    // A Claude Code-shaped hooks file in the user's configuration: it keeps what it was shown
    // and refuses every read.
    std::fs::write(
        d.join("home/hooks.toml"),
        "[[hooks.PreToolUse]]\nmatcher = \"Read\"\n[[hooks.PreToolUse.hooks]]\n\
         type = \"command\"\n\
         command = \"cat > seen.json; echo 'reads are off' >&2; exit 2\"\n",
    )
    .unwrap();
    std::fs::write(d.join("home/config.toml"), "hooks = \"hooks.toml\"\n").unwrap();
    std::fs::write(d.join("notes.txt"), "private").unwrap();
    std::fs::write(
        d.join("script.toml"),
        "[[turns]]\n[[turns.tool_calls]]\nname = \"read_file\"\n\
         input = { path = \"notes.txt\" }\n[[turns]]\ntext = \"Could not read.\"\n",
    )
    .unwrap();
    let client = stdio_client(d).await;
    let (_, value) = call_run_agent(&client, json!({"prompt": "read the notes"})).await;
    client.cancel().await.unwrap();
    assert_eq!(value["text"], "Could not read.", "{value}");
    let seen = std::fs::read_to_string(d.join("seen.json")).expect("the hook did not run");
    let seen: Value = serde_json::from_str(&seen).unwrap();
    assert_eq!(seen["tool_name"], "read_file", "{seen}");
    assert_eq!(seen["tool_input"]["path"], "notes.txt", "{seen}");
    let tl = SessionTimeline::open(d.join("home/timeline.db")).unwrap();
    let session = tl.latest_session().unwrap().unwrap();
    let rows = completed(&d.join("home/timeline.db"), session.as_str());
    assert_eq!(rows.len(), 1, "{rows:?}");
    let (tool, is_error, content) = &rows[0];
    assert_eq!(tool, "read_file");
    assert!(*is_error && content.contains("reads are off"), "{content}");
    assert!(!content.contains("private"), "{content}");
}

/// `geode mcp --http ADDR ...` started; the URL it printed on stderr.
pub(super) struct HttpServer {
    child: Child,
    pub(super) url: String,
}

impl HttpServer {
    pub(super) fn start(dir: &Path, args: &[&str]) -> HttpServer {
        let mut child = geode(dir)
            .args(["mcp", "--model", "scripted:script.toml", "--http"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut err = BufReader::new(child.stderr.take().unwrap());
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut line = String::new();
        let url = loop {
            assert!(Instant::now() < deadline, "no address printed");
            line.clear();
            assert!(err.read_line(&mut line).unwrap() > 0, "geode mcp exited");
            if let Some(rest) = line.split("on http://").nth(1) {
                break format!("http://{}", rest.split(',').next().unwrap().trim());
            }
        };
        // Keep draining stderr so the server never blocks on a full pipe.
        std::thread::spawn(move || {
            let mut sink = String::new();
            let _ = err.read_to_string(&mut sink);
        });
        HttpServer { child, url }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Status line of a raw `initialize` POST, with or without a bearer token.
fn raw_post_status(url: &str, bearer: Option<&str>) -> String {
    let port = url.rsplit_once(':').unwrap().1.trim_end_matches("/mcp");
    raw_post_as(url, bearer, &format!("127.0.0.1:{port}"), None)
}

/// [`raw_post_status`] with the `Host` and `Origin` a browser would send.
fn raw_post_as(url: &str, bearer: Option<&str>, host: &str, origin: Option<&str>) -> String {
    let mut status = String::new();
    BufReader::new(raw_post(url, bearer, host, origin))
        .read_line(&mut status)
        .unwrap();
    status.trim().to_string()
}

/// The whole response to a raw `initialize` POST the server refuses (and so closes).
fn refused_post(url: &str, host: &str, origin: Option<&str>) -> String {
    let mut response = String::new();
    raw_post(url, None, host, origin)
        .read_to_string(&mut response)
        .unwrap();
    response
}

/// A raw `initialize` POST sent; the connection, to read the answer from.
fn raw_post(
    url: &str,
    bearer: Option<&str>,
    host: &str,
    origin: Option<&str>,
) -> std::net::TcpStream {
    let rest = url.strip_prefix("http://").unwrap();
    let (hostport, path) = rest.split_once('/').unwrap();
    let port = hostport.rsplit_once(':').unwrap().1;
    let origin = origin.map_or(String::new(), |o| format!("Origin: {o}\r\n"));
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-03-26", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"}}})
    .to_string();
    let auth = bearer.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    let request = format!(
        "POST /{path} HTTP/1.1\r\nHost: {host}\r\n{origin}Content-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\n{auth}Content-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    );
    let mut s = std::net::TcpStream::connect(format!("127.0.0.1:{port}")).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_run_agent_on_loopback() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("script.toml"), HELLO).unwrap();
    let server = HttpServer::start(dir.path(), &["127.0.0.1:0"]);
    assert!(
        server.url.starts_with("http://127.0.0.1:"),
        "{}",
        server.url
    );
    assert!(server.url.ends_with("/mcp"), "{}", server.url);
    geode_runtime::mcp::client::install_tls_provider();
    let transport = StreamableHttpClientTransport::from_uri(server.url.as_str());
    let client = ().serve(transport).await.unwrap();
    let tools = client.peer().list_all_tools().await.unwrap();
    assert_eq!(tools.len(), 1);
    assert_eq!(tools[0].name, "run_agent");
    let (_, value) = call_run_agent(&client, json!({"prompt": "say hello"})).await;
    assert_eq!(value["text"], "Hello from the scripted model.");
    assert_eq!(value["rounds"], 1);
    assert_eq!(value["termination_reason"], "natural");
    assert_eq!(value["error"], Value::Null);
    client.cancel().await.unwrap();
    // DNS rebinding: a rebound name, or a page of another site, is refused.
    let port = server
        .url
        .rsplit_once(':')
        .unwrap()
        .1
        .trim_end_matches("/mcp");
    let own = format!("127.0.0.1:{port}");
    let status = raw_post_as(&server.url, None, &format!("evil.example:{port}"), None);
    assert!(status.contains(" 403"), "{status}");
    let status = raw_post_as(&server.url, None, &own, Some("http://evil.example"));
    assert!(status.contains(" 403"), "{status}");
    // An opaque origin (a sandboxed frame, a file: page, a data URL) is no page of this
    // server either, and the refusal says what was refused.
    let response = refused_post(&server.url, &own, Some("null"));
    assert!(response.starts_with("HTTP/1.1 403"), "{response}");
    assert!(response.contains("Origin null"), "{response}");
    let response = refused_post(&server.url, &own, Some("http://evil.example"));
    assert!(
        response.contains("Origin http://evil.example is another site"),
        "{response}"
    );
    let status = raw_post_as(
        &server.url,
        None,
        &own,
        Some(&format!("http://localhost:{port}")),
    );
    assert!(status.contains(" 200"), "{status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_off_loopback_needs_a_token_and_checks_it() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("script.toml"), HELLO).unwrap();
    // No token: refused at start, with a clear error.
    let out = geode(dir.path())
        .args([
            "mcp",
            "--model",
            "scripted:script.toml",
            "--http",
            "0.0.0.0:0",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("not a loopback address") && err.contains("--token"),
        "{err}"
    );
    // With a token: a request without it (or with a wrong one) is 401, with it the MCP client works.
    let server = HttpServer::start(dir.path(), &["0.0.0.0:0", "--token", "s3cret"]);
    let port = server
        .url
        .rsplit(':')
        .next()
        .unwrap()
        .trim_end_matches("/mcp");
    let url = format!("http://127.0.0.1:{port}/mcp");
    let status = raw_post_status(&url, None);
    assert!(status.contains(" 401"), "{status}");
    let status = raw_post_status(&url, Some("wrong"));
    assert!(status.contains(" 401"), "{status}");
    let status = raw_post_status(&url, Some("s3cret"));
    assert!(status.contains(" 200"), "{status}");
    geode_runtime::mcp::client::install_tls_provider();
    let config = StreamableHttpClientTransportConfig::with_uri(url.as_str()).auth_header("s3cret");
    let client = ().serve(StreamableHttpClientTransport::from_config(config)).await.unwrap();
    let tools = client.peer().list_all_tools().await.unwrap();
    assert_eq!(tools[0].name, "run_agent");
    client.cancel().await.unwrap();
}
