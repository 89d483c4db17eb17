//! `geode exec` against a provider on loopback: the Anthropic adapter reached through
//! `ANTHROPIC_BASE_URL`, a recording made with `--record`, and its offline replay with
//! `--model cassette:DIR`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::Output;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

pub(super) const KEY: &str = "sk-ant-e2e-0123456789";

pub(super) fn sse(events: &[Value]) -> String {
    events
        .iter()
        .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap()))
        .collect()
}

/// Reads one request off `stream` (head and body, so the reply goes to a complete request);
/// returns its head.
pub(super) fn read_request(stream: &TcpStream) -> String {
    read_request_and_body(stream).0
}

/// Reads one request off `stream`: its head and its body.
pub(super) fn read_request_and_body(stream: &TcpStream) -> (String, Vec<u8>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut head = String::new();
    let mut len = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
            break;
        }
        if let Some(v) = line.to_lowercase().strip_prefix("content-length:") {
            len = v.trim().parse().unwrap_or(0);
        }
        head.push_str(&line);
    }
    let mut body = vec![0u8; len];
    reader.read_exact(&mut body).unwrap();
    (head, body)
}

fn reply(blocks: Vec<Value>, deltas: Vec<Value>, stop: &str) -> String {
    let mut events = vec![json!({"type": "message_start", "message": {
        "id": "msg_1", "type": "message", "role": "assistant", "content": [],
        "model": "claude-sonnet-5", "usage": {"input_tokens": 120, "output_tokens": 1}}})];
    for (i, b) in blocks.into_iter().enumerate() {
        events.push(json!({"type": "content_block_start", "index": i, "content_block": b}));
        events.push(json!({"type": "content_block_delta", "index": i, "delta": deltas[i]}));
        events.push(json!({"type": "content_block_stop", "index": i}));
    }
    events.push(
        json!({"type": "message_delta", "delta": {"stop_reason": stop},
                       "usage": {"output_tokens": 30}}),
    );
    events.push(json!({"type": "message_stop"}));
    sse(&events)
}

/// Serves `bodies` as SSE replies, one per request, on a thread; returns the base URL and the
/// headers of each request seen.
fn serve(bodies: Vec<String>) -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        let mut bodies = bodies.into_iter();
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            // One request per connection: answer with `connection: close`.
            log.lock().unwrap().push(read_request(&stream));
            let body = bodies.next().unwrap_or_default();
            let response = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(response.as_bytes());
        }
    });
    (url, seen)
}

fn geode(ws: &Path, home: &Path, model: &str, env: &[(&str, &str)], extra: &[&str]) -> Output {
    let mut cmd = super::common::geode_bin();
    cmd.arg("exec")
        .args([
            "--model",
            model,
            "--no-timeline",
            "--allow",
            "write",
            "--cwd",
        ])
        .arg(ws)
        .args(extra)
        .arg("Create hello.txt saying hi.")
        .env("GEODE_HOME", home)
        .env("HOME", home);
    for var in [
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_BASE_URL",
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "GEODE_MODEL",
    ] {
        cmd.env_remove(var);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

#[test]
fn exec_runs_on_anthropic_over_loopback_and_replays_the_recording() {
    let dir = tempfile::tempdir().unwrap();
    let (ws, home, rec) = (
        dir.path().join("ws"),
        dir.path().join("home"),
        dir.path().join("rec"),
    );
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::create_dir_all(&home).unwrap();
    let call = reply(
        vec![json!({"type": "tool_use", "id": "toolu_1", "name": "write_file", "input": {}})],
        vec![json!({"type": "input_json_delta",
                    "partial_json": "{\"path\": \"hello.txt\", \"content\": \"hi\"}"})],
        "tool_use",
    );
    let answer = reply(
        vec![json!({"type": "text", "text": ""})],
        vec![json!({"type": "text_delta", "text": "Created hello.txt with the text hi."})],
        "end_turn",
    );
    let (url, seen) = serve(vec![call, answer]);

    let rec_arg = rec.to_str().unwrap();
    let out = geode(
        &ws,
        &home,
        "anthropic:claude-sonnet-5",
        &[("ANTHROPIC_BASE_URL", &url), ("ANTHROPIC_API_KEY", KEY)],
        &["--record", rec_arg],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stderr: {stderr}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "Created hello.txt with the text hi."
    );
    assert_eq!(std::fs::read_to_string(ws.join("hello.txt")).unwrap(), "hi");
    let heads = seen.lock().unwrap().clone();
    assert_eq!(heads.len(), 2);
    assert!(heads[0].starts_with("POST /v1/messages "), "{}", heads[0]);
    assert!(heads[0].contains(KEY), "the key is sent to the provider");
    assert!(!stderr.contains(KEY), "the key never reaches the logs");
    let recorded: Vec<_> = std::fs::read_dir(&rec).unwrap().collect();
    assert_eq!(recorded.len(), 2);
    for f in recorded {
        let text = std::fs::read_to_string(f.unwrap().path()).unwrap();
        assert!(!text.contains(KEY), "a recording holds the key");
        // The system prompt says where the session runs: cwd, OS and the checkout's state.
        let system =
            serde_json::from_str::<Value>(&text).unwrap()["request"]["body"]["system"].to_string();
        for line in [
            format!("cwd: {}", ws.display()),
            format!("os: {}", std::env::consts::OS),
            "git: not a repository".to_string(),
        ] {
            assert!(system.contains(&line), "{line:?} not in {system}");
        }
    }

    // Offline: no key, no server; the same session replays from the recording.
    std::fs::remove_file(ws.join("hello.txt")).unwrap();
    let cassette = format!("cassette:{rec_arg}");
    let out = geode(&ws, &home, &cassette, &[], &[]);
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "Created hello.txt with the text hi."
    );
    assert_eq!(std::fs::read_to_string(ws.join("hello.txt")).unwrap(), "hi");
    assert_eq!(seen.lock().unwrap().len(), 2, "the replay made no request");
}

#[test]
fn exec_refuses_subscription_routes_and_unknown_ids() {
    let dir = tempfile::tempdir().unwrap();
    // No sign-in is a set-up error (1); an id the catalog does not list is a route that does
    // not parse, a usage error (2) like any bad flag value.
    for (route, says, code) in [
        ("openai-codex:gpt-6-sol", "geode login openai", 1),
        ("anthropic:claude-sonnet-9", "claude-sonnet-5", 2),
    ] {
        let out = geode(dir.path(), dir.path(), route, &[], &[]);
        assert_eq!(out.status.code(), Some(code), "{route}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(says), "{route}: {stderr}");
    }
}
