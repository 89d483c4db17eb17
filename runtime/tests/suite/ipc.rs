//! The IPC session driver in-process: `serve_connection` over an in-memory pipe, a scripted
//! model, a real workspace. (The daemon binary's socket, timeout and drain are in tests/e2e.)

use std::sync::Arc;
use std::time::Duration;

use geode_runtime::ids::SessionId;
use geode_runtime::model::embedded::ScriptedModel;
use geode_runtime::policy::{SessionMode, SessionPolicy};
use geode_runtime::server::connection::serve_connection;
use geode_runtime::server::protocol::{ClientMessage, ServerMessage, SessionEntry, encode};
use geode_runtime::server::{ServerError, SessionFactory, Shared};
use geode_runtime::session::SessionConfig;
use geode_runtime::tools::workspace::LocalWorkspace;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, Lines, WriteHalf};

struct Factory {
    root: std::path::PathBuf,
    script: Value,
}

impl SessionFactory for Factory {
    fn new_session(&self) -> Result<SessionConfig, ServerError> {
        let model = ScriptedModel::from_json(self.script.clone())
            .map_err(|e| ServerError::Setup(e.to_string()))?;
        let ws = LocalWorkspace::new(&self.root).map_err(|e| ServerError::Setup(e.to_string()))?;
        Ok(SessionConfig::new(
            SessionPolicy::for_mode(SessionMode::Ipc),
            Arc::new(ws),
            Arc::new(model),
        ))
    }

    fn resume(&self, id: &SessionId) -> Result<SessionConfig, ServerError> {
        Err(ServerError::Setup(format!("{id}: not durable here")))
    }

    fn recent_sessions(&self, limit: usize) -> Option<Vec<SessionEntry>> {
        let entry = |id: &str, title: &str| SessionEntry {
            session_id: SessionId::new(id),
            title: title.into(),
            updated_at: "2026-03-02T12:00:00Z".into(),
            turns: 2,
            model: "scripted".into(),
            cost_usd: 0.0,
            cwd: "/work/project".into(),
        };
        let listed = [entry("newer-1", "the newer"), entry("older-2", "the older")];
        Some(listed.into_iter().take(limit).collect())
    }
}

type Reader = Lines<BufReader<tokio::io::ReadHalf<DuplexStream>>>;

struct Peer {
    rd: Reader,
    wr: WriteHalf<DuplexStream>,
}

impl Peer {
    async fn send(&mut self, m: ClientMessage) {
        self.wr.write_all(encode(&m).as_bytes()).await.unwrap();
    }

    async fn recv(&mut self) -> ServerMessage {
        let line = tokio::time::timeout(Duration::from_secs(10), self.rd.next_line())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        serde_json::from_str(&line).unwrap()
    }
}

fn start(
    dir: &std::path::Path,
    script: Value,
) -> (Peer, tokio::task::JoinHandle<Result<(), ServerError>>) {
    let factory = Arc::new(Factory {
        root: dir.to_path_buf(),
        script,
    });
    let shared = Arc::new(Shared::new(
        factory,
        2,
        Duration::from_secs(10),
        SessionMode::Ipc,
    ));
    let (client, server) = tokio::io::duplex(1 << 16);
    let task = tokio::spawn(serve_connection(server, shared));
    let (rd, wr) = tokio::io::split(client);
    let peer = Peer {
        rd: BufReader::new(rd).lines(),
        wr,
    };
    (peer, task)
}

fn two_writes() -> Value {
    json!({"turns": [
        {"text": "one", "tool_calls": [{"id": "c1", "name": "write_file",
            "input": {"path": "a.txt", "content": "a"}}]},
        {"text": "two", "tool_calls": [{"id": "c2", "name": "write_file",
            "input": {"path": "b.txt", "content": "b"}}]},
        {"text": "Both files are written, as asked."}
    ]})
}

#[tokio::test]
async fn always_is_remembered_for_the_rest_of_the_session() {
    let dir = tempfile::tempdir().unwrap();
    let (mut p, task) = start(dir.path(), two_writes());
    assert!(matches!(p.recv().await, ServerMessage::Session { .. }));
    p.send(ClientMessage::Prompt { text: "go".into() }).await;
    let mut approvals = 0;
    loop {
        match p.recv().await {
            ServerMessage::ApprovalRequest { approval_id, .. } => {
                approvals += 1;
                p.send(ClientMessage::ApprovalResponse {
                    approval_id,
                    decision: geode_runtime::tools::approval::ApprovalAnswer::Always,
                })
                .await;
            }
            ServerMessage::Result { tool_calls, .. } => {
                assert_eq!(tool_calls, 2);
                break;
            }
            _ => {}
        }
    }
    assert_eq!(approvals, 1, "the second write_file was not asked again");
    assert!(dir.path().join("a.txt").exists() && dir.path().join("b.txt").exists());
    p.send(ClientMessage::Exit).await;
    task.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_client_gone_during_an_approval_denies_and_ends_the_session() {
    let dir = tempfile::tempdir().unwrap();
    let (mut p, task) = start(dir.path(), two_writes());
    p.recv().await;
    p.send(ClientMessage::Prompt { text: "go".into() }).await;
    while !matches!(p.recv().await, ServerMessage::ApprovalRequest { .. }) {}
    drop(p);
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(!dir.path().join("a.txt").exists());
}

#[tokio::test]
async fn a_bad_line_is_an_error_not_a_disconnect() {
    let dir = tempfile::tempdir().unwrap();
    let (mut p, _task) = start(dir.path(), two_writes());
    p.recv().await;
    p.wr.write_all(b"{not json}\n").await.unwrap();
    assert!(matches!(p.recv().await, ServerMessage::Error { .. }));
    p.send(ClientMessage::Command {
        name: "help".into(),
        args: String::new(),
    })
    .await;
    assert!(matches!(
        p.recv().await,
        ServerMessage::CommandResult { .. }
    ));
}

#[tokio::test]
async fn compact_summarises_the_older_messages_on_request() {
    let dir = tempfile::tempdir().unwrap();
    let answer = json!({"text": "an answer long enough for the rule-based verifier"});
    let script = json!({"turns": vec![answer; 6]});
    let (mut p, task) = start(dir.path(), script);
    p.recv().await;
    assert!(
        command(&mut p, "compact")
            .await
            .starts_with("nothing compacted: 0 messages")
    );
    for i in 0..6 {
        p.send(ClientMessage::Prompt {
            text: format!("prompt {i}"),
        })
        .await;
        while !matches!(p.recv().await, ServerMessage::Result { .. }) {}
    }
    let text = command(&mut p, "compact").await;
    // Twelve messages; at least eight stay, from an assistant message on (pairs stay whole):
    // the first three become one summary.
    assert_eq!(
        text,
        "compacted: 12 messages -> 10 (a summary and the recent ones)"
    );
    let status = command(&mut p, "status").await;
    assert!(status.contains("messages 10"), "{status}");
    p.send(ClientMessage::Exit).await;
    task.await.unwrap().unwrap();
}

/// Send a slash command; the text of its result.
async fn command(p: &mut Peer, name: &str) -> String {
    command_with(p, name, "").await
}

/// Send a slash command with its arguments; the text of its result.
async fn command_with(p: &mut Peer, name: &str, args: &str) -> String {
    p.send(ClientMessage::Command {
        name: name.into(),
        args: args.into(),
    })
    .await;
    loop {
        if let ServerMessage::CommandResult { text, .. } = p.recv().await {
            return text;
        }
    }
}

/// A reply reaches the client in pieces first (thinking, then words), then whole; the result
/// carries the turn's usage.
#[tokio::test]
async fn deltas_come_before_the_whole_text_and_the_result_counts_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let script = json!({"turns": [{"thinking": "let me see", "text": "Three words here.",
        "usage": {"input_tokens": 40, "output_tokens": 7}}]});
    let (mut p, task) = start(dir.path(), script);
    p.recv().await;
    p.send(ClientMessage::Prompt { text: "go".into() }).await;
    let (mut thought, mut said) = (String::new(), String::new());
    let usage = loop {
        match p.recv().await {
            ServerMessage::ThinkingDelta { text } => {
                assert!(said.is_empty(), "thinking after text");
                thought.push_str(&text);
            }
            ServerMessage::TextDelta { text } => said.push_str(&text),
            ServerMessage::Stream { text } => {
                assert_eq!(said, text, "the whole text came after all of its pieces");
            }
            ServerMessage::Result { usage, .. } => break usage,
            _ => {}
        }
    };
    assert_eq!(thought, "let me see");
    assert_eq!(said, "Three words here.");
    assert_eq!((usage.input_tokens, usage.output_tokens), (40, 7));
    p.send(ClientMessage::Exit).await;
    task.await.unwrap().unwrap();
}

/// `/resume` without an id answers with the sessions as data, newest first; `/resume N`
/// resumes the Nth of them and `/resume PREFIX` the one whose id starts so.
#[tokio::test]
async fn resume_lists_the_sessions_and_takes_a_number_or_a_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let (mut p, _task) = start(dir.path(), json!({"turns": [{"text": "ok"}]}));
    assert!(matches!(p.recv().await, ServerMessage::Session { .. }));
    p.send(ClientMessage::Command {
        name: "resume".into(),
        args: String::new(),
    })
    .await;
    let ServerMessage::Sessions { sessions } = p.recv().await else {
        panic!("no sessions list")
    };
    let titles: Vec<&str> = sessions.iter().map(|e| e.title.as_str()).collect();
    assert_eq!(titles, ["the newer", "the older"]);
    // The factory refuses every resume, naming the id it was asked for.
    let text = command_with(&mut p, "resume", "2").await;
    assert_eq!(text, "error: older-2: not durable here");
    let text = command_with(&mut p, "resume", "new").await;
    assert_eq!(text, "error: newer-1: not durable here");
    let text = command_with(&mut p, "resume", "3").await;
    assert_eq!(text, "error: no session 3: /resume lists 1 to 2");
    p.send(ClientMessage::Exit).await;
}
