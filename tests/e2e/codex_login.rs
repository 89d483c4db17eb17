//! `geode login openai --device` and `geode logout openai` against the loopback sign-in server
//! of the runtime's tests (shared by path): the binary shows the code, polls, stores the
//! tokens 0600 under GEODE_HOME without printing them, `geode exec` answers over
//! `openai-codex:gpt-6-sol` with them, and logout removes them.

use std::os::unix::fs::PermissionsExt;

#[path = "../../runtime/tests/suite/codex_server.rs"]
#[allow(dead_code)]
mod codex_server;
#[path = "../../runtime/tests/suite/loopback.rs"]
#[allow(dead_code)]
mod loopback;

use codex_server::CodexServer;
use loopback::{Part, Reply};
use serde_json::json;

/// A plain text answer as the Responses stream sends it.
fn answer(text: &str) -> Reply {
    let events = [
        json!({"type": "response.output_item.added", "output_index": 0,
               "item": {"type": "message", "id": "msg_1", "role": "assistant", "content": []}}),
        json!({"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0,
               "content_index": 0, "delta": text}),
        json!({"type": "response.completed", "response": {"id": "resp_1", "status": "completed",
               "usage": {"input_tokens": 100, "output_tokens": 5}}}),
    ];
    Reply::sse(
        events
            .iter()
            .map(|e| Part::event(e["type"].as_str().unwrap(), e))
            .collect(),
    )
}

async fn geode(dir: &std::path::Path, issuer: &str, args: &[&str]) -> std::process::Output {
    let mut cmd = super::common::geode_in(dir);
    cmd.args(args).env("GEODE_OPENAI_AUTH_ISSUER", issuer);
    tokio::process::Command::from(cmd).output().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_openai_device_then_logout() {
    let server = CodexServer::start(vec![answer("hello from the plan")]).await;
    let dir = tempfile::tempdir().unwrap();
    let out = geode(dir.path(), &server.url(), &["login", "openai", "--device"]).await;
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(out.status.success(), "stderr: {stderr}");
    assert!(stderr.contains("WXYZ-1234"), "{stderr}");
    assert!(
        stderr.contains(&format!("{}/codex/device", server.url())),
        "{stderr}"
    );
    assert!(stdout.contains("signed in"), "{stdout}");
    let file = dir.path().join("home/openai-auth.json");
    let mode = std::fs::metadata(&file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let stored = std::fs::read_to_string(&file).unwrap();
    let secrets = server.state.lock().unwrap().secrets.clone();
    assert_eq!(
        secrets.len(),
        2,
        "one access and one refresh token were issued"
    );
    for s in &secrets {
        assert!(
            stored.contains(s.as_str()),
            "the file holds the issued tokens"
        );
        assert!(!stdout.contains(s.as_str()) && !stderr.contains(s.as_str()));
    }

    let mut exec = super::common::geode_in(dir.path());
    exec.args([
        "exec",
        "--model",
        "openai-codex:gpt-6-sol",
        "--no-timeline",
        "say hello",
    ])
    .env("GEODE_OPENAI_AUTH_ISSUER", server.url())
    .env("GEODE_OPENAI_CODEX_BASE_URL", server.url());
    let out = tokio::process::Command::from(exec).output().await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stderr: {stderr}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "hello from the plan"
    );
    assert_eq!(server.state.lock().unwrap().responses.len(), 1);

    let out = geode(dir.path(), &server.url(), &["logout", "openai"]).await;
    assert!(out.status.success());
    assert!(!file.exists());
    let out = geode(dir.path(), &server.url(), &["logout", "openai"]).await;
    assert!(String::from_utf8_lossy(&out.stdout).contains("not signed in"));
}
