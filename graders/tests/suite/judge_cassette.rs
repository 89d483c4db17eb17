//! The judge through the provider stack, offline: record a local OpenAI-compatible server's
//! answers with `record_dir`, then grade again from `cassette:DIR` with no server at all.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;

use geode_graders::{AgentEnd, Evidence, GradeInput, Grader, JudgeGrader, TrialOutcome, Votes};
use geode_runtime::model::credentials::Env;
use geode_runtime::model::http::RouteOptions;
use serde_json::json;

/// An SSE chat-completions reply whose text is `text`.
fn sse(text: &str) -> String {
    let chunk = |delta: serde_json::Value, finish: Option<&str>| {
        let doc = json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
                         "model": "local", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
        format!("data: {doc}\n\n")
    };
    let usage = json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [],
                       "usage": {"prompt_tokens": 50, "completion_tokens": 20, "total_tokens": 70}});
    format!(
        "{}{}{}data: {usage}\n\ndata: [DONE]\n\n",
        chunk(json!({"role": "assistant", "content": ""}), None),
        chunk(json!({"content": text}), None),
        chunk(json!({}), Some("stop")),
    )
}

/// Answer one request per reply, one connection each, then stop.
fn serve(replies: Vec<String>) -> (u16, std::thread::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let handle = std::thread::spawn(move || {
        for body in replies {
            let (stream, _) = listener.accept().unwrap();
            let mut reader = BufReader::new(stream);
            let mut length = 0usize;
            loop {
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                if line == "\r\n" || line.is_empty() {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap();
                }
            }
            let mut request = vec![0u8; length];
            reader.read_exact(&mut request).unwrap();
            let mut stream = reader.into_inner();
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            stream.write_all(head.as_bytes()).unwrap();
            stream.write_all(body.as_bytes()).unwrap();
        }
    });
    (port, handle)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recorded_judge_replays_from_a_cassette() {
    let trial = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(trial.path().join("agent")).unwrap();
    let doc = json!({"steps": [{"source": "agent", "message": "West: 1520.75"}]});
    std::fs::write(trial.path().join("agent/trajectory.json"), doc.to_string()).unwrap();
    let input = GradeInput::from_trial_dir(trial.path(), None);

    let pass = r#"{"verdict": "pass", "score": 1, "reason": "correct"}"#;
    let (port, server) = serve(vec![sse(pass), sse("not json"), sse(pass)]);
    let cassette = tempfile::tempdir().unwrap();
    let mut opts = RouteOptions::with_env(Env::empty());
    opts.record_dir = Some(cassette.path().to_path_buf());
    let live = JudgeGrader::from_route(
        &format!("compat:http://127.0.0.1:{port}/v1:local"),
        Votes::new(3).unwrap(),
        &opts,
    )
    .unwrap();
    let recorded = live.grade(&input, None).await;
    server.join().unwrap();
    assert_eq!(
        recorded.outcome(AgentEnd::Finished),
        TrialOutcome::Passed,
        "{recorded:?}"
    );

    let route = format!("cassette:{}", cassette.path().display());
    let replay = JudgeGrader::from_route(
        &route,
        Votes::new(3).unwrap(),
        &RouteOptions::with_env(Env::empty()),
    )
    .unwrap();
    let replayed = replay.grade(&input, None).await;
    assert_eq!(replayed.checks(), recorded.checks());
    assert_eq!(replayed.primary(), Some(1.0));
    assert!(
        replayed
            .evidence()
            .iter()
            .any(|e| matches!(e, Evidence::JudgeRoute { route: r, .. } if *r == route))
    );
}
