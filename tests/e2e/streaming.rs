//! The REPL shows a reply as it streams: a loopback Anthropic peer sends the reply's first
//! chunk and holds the rest until the test has seen that chunk's text on the pseudo-terminal.
//! A client that waits for the whole reply never shows it, and the test fails.

use std::io::Write;
use std::net::TcpListener;
use std::sync::mpsc;
use std::time::Duration;

use serde_json::json;

use super::providers::{KEY, read_request, read_request_and_body, sse};
use super::repl::in_terminal;

/// The first reply in two chunks: thinking and the first words, then (after `go`) the rest
/// and the end of the message. Later requests get a whole short reply at once.
fn serve(first_sent: mpsc::Sender<()>, go: mpsc::Receiver<()>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let first = sse(&[
        json!({"type": "message_start", "message": {"id": "msg_1", "type": "message",
            "role": "assistant", "content": [], "model": "claude-sonnet-5",
            "usage": {"input_tokens": 120, "output_tokens": 1}}}),
        json!({"type": "content_block_start", "index": 0,
            "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
        json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "thinking_delta", "thinking": "pondering the question"}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "content_block_start", "index": 1,
            "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": 1,
            "delta": {"type": "text_delta", "text": "Streaming first words. "}}),
    ]);
    let rest = |text: &str| {
        sse(&[
            json!({"type": "content_block_delta", "index": 1,
                "delta": {"type": "text_delta", "text": text}}),
            json!({"type": "content_block_stop", "index": 1}),
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                "usage": {"output_tokens": 30}}),
            json!({"type": "message_stop"}),
        ])
    };
    std::thread::spawn(move || {
        for (n, stream) in listener.incoming().enumerate() {
            let Ok(mut stream) = stream else { return };
            read_request(&stream);
            // No content-length: the body ends when the connection closes, as a stream does.
            let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
                        connection: close\r\n\r\n";
            let _ = stream.write_all(head.as_bytes());
            if n == 0 {
                let _ = stream.write_all(first.as_bytes());
                let _ = stream.flush();
                let _ = first_sent.send(());
                // Held until the test saw the first words (or gave up on them).
                let _ = go.recv_timeout(Duration::from_secs(60));
                let _ = stream.write_all(rest("And the rest.").as_bytes());
            } else {
                let _ = stream.write_all(first.as_bytes());
                let _ = stream.write_all(rest("Again.").as_bytes());
            }
        }
    });
    url
}

#[test]
fn the_repl_shows_streamed_text_before_the_last_chunk() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (first_tx, first_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel();
    let url = serve(first_tx, go_rx);
    let mut cmd = super::common::geode_bin();
    cmd.args(["--local", "--model", "anthropic:claude-sonnet-5"])
        .current_dir(d)
        .env("GEODE_HOME", d.join("home"))
        .env("HOME", d.join("home"))
        .env("ANTHROPIC_BASE_URL", &url)
        .env("ANTHROPIC_API_KEY", KEY)
        .env_remove("GEODE_MODEL")
        .env_remove("OPENAI_API_KEY");
    let (mut child, mut master, mut screen) = in_terminal(cmd);
    screen.wait_for("geode> ");
    screen.clear();
    master.write_all(b"say something\r").unwrap();
    first_rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the peer got no request");
    // The peer holds the rest of the reply: these words can only come from the first chunk.
    screen.wait_for("Streaming first words.");
    // Thinking comes first, dimmed.
    assert!(
        screen.text.contains("\x1b[2mpondering the question"),
        "{:?}",
        screen.text
    );
    go_tx.send(()).unwrap();
    screen.wait_for("120 tokens in, 30 out");
    let reply = "Streaming first words. And the rest.";
    assert!(screen.text.contains(reply), "{:?}", screen.text);
    // The whole text that follows the deltas is not shown a second time.
    assert_eq!(
        screen.text.matches("Streaming first words.").count(),
        1,
        "{:?}",
        screen.text
    );
    screen.wait_for("geode> ");
    master.write_all(b"/quit\r").unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(s) = child.0.try_wait().unwrap() {
            break s;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the REPL did not quit"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success());
}

/// `geode exec` on a terminal shows the reply as it streams, Markdown rendered, and does not
/// print it again at the end.
#[test]
fn exec_on_a_terminal_streams_the_reply_once() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("script.toml"),
        "[[turns]]\ntext = \"The answer is `forty-two`, as computed just now.\"\n",
    )
    .unwrap();
    let mut cmd = super::common::geode_bin();
    cmd.args(["exec", "--model", "scripted:script.toml", "--no-timeline"])
        .arg("what is it?")
        .current_dir(d)
        .env("GEODE_HOME", d.join("home"))
        .env("HOME", d.join("home"))
        .env_remove("GEODE_MODEL");
    let (mut child, _master, mut screen) = in_terminal(cmd);
    screen.wait_for("tool calls,");
    assert!(child.0.wait().unwrap().success(), "{:?}", screen.text);
    // Inline code in colour, backticks dropped: rendered, not the raw text.
    assert!(
        screen
            .text
            .contains("The answer is \x1b[36mforty-two\x1b[39m, as computed just now."),
        "{:?}",
        screen.text
    );
    assert_eq!(
        screen.text.matches("The answer is").count(),
        1,
        "{:?}",
        screen.text
    );
}

/// A loopback Anthropic peer that hands the test every request's body. With `hold_first`, the
/// first reply stops after its first words and never ends (the person interrupts it); every
/// other reply is "Fresh answer." at once.
fn peer(hold_first: bool) -> (String, mpsc::Receiver<Vec<u8>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (bodies_tx, bodies) = mpsc::channel();
    std::thread::spawn(move || {
        let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
                    connection: close\r\n\r\n";
        let start = json!({"type": "message_start", "message": {"id": "msg_1",
            "type": "message", "role": "assistant", "content": [], "model": "claude-sonnet-5",
            "usage": {"input_tokens": 120, "output_tokens": 1}}});
        let text_block = json!({"type": "content_block_start", "index": 0,
            "content_block": {"type": "text", "text": ""}});
        let delta = |text: &str| {
            json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "text_delta", "text": text}})
        };
        let mut held = Vec::new();
        for (n, stream) in listener.incoming().enumerate() {
            let Ok(mut stream) = stream else { return };
            let (_, body) = read_request_and_body(&stream);
            let _ = bodies_tx.send(body);
            let _ = stream.write_all(head.as_bytes());
            if n == 0 && hold_first {
                let first = sse(&[start.clone(), text_block.clone(), delta("Half a thought")]);
                let _ = stream.write_all(first.as_bytes());
                let _ = stream.flush();
                held.push(stream);
                continue;
            }
            let whole = sse(&[
                start.clone(),
                text_block.clone(),
                delta("Fresh answer."),
                json!({"type": "content_block_stop", "index": 0}),
                json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                    "usage": {"output_tokens": 3}}),
                json!({"type": "message_stop"}),
            ]);
            let _ = stream.write_all(whole.as_bytes());
        }
    });
    (url, bodies)
}

/// The REPL in `d` on the Anthropic peer at `url`.
fn repl_on(url: &str, d: &std::path::Path) -> std::process::Command {
    let mut cmd = super::common::geode_bin();
    cmd.args(["--local", "--model", "anthropic:claude-sonnet-5"])
        .current_dir(d)
        .env("GEODE_HOME", d.join("home"))
        .env("HOME", d.join("home"))
        .env("ANTHROPIC_BASE_URL", url)
        .env("ANTHROPIC_API_KEY", KEY)
        .env_remove("GEODE_MODEL")
        .env_remove("OPENAI_API_KEY");
    cmd
}

fn next_body(bodies: &mpsc::Receiver<Vec<u8>>) -> serde_json::Value {
    let body = bodies
        .recv_timeout(Duration::from_secs(30))
        .expect("the peer got no request");
    serde_json::from_slice(&body).unwrap()
}

/// Ctrl-C while a reply streams: the words shown stay in the conversation as the assistant's
/// (partial) message, a note tells the model it was interrupted, and the next prompt is a
/// message of its own, not glued to the interrupted one.
#[test]
fn an_interrupted_reply_stays_in_the_conversation_with_a_note() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (url, bodies) = peer(true);
    let (child, mut master, mut screen) = in_terminal(repl_on(&url, d));
    screen.wait_for("geode> ");
    master.write_all(b"first question\r").unwrap();
    screen.wait_for("Half a thought");
    // What the terminal sends for Ctrl-C while no line is edited (the pty is not the child's
    // controlling terminal, so the key itself would raise no signal).
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.0.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    screen.wait_for("user_cancelled");
    screen.wait_for("geode> ");
    master.write_all(b"second question\r").unwrap();
    next_body(&bodies);
    let body = next_body(&bodies);
    let messages = body["messages"].as_array().unwrap();
    let text_of = |m: &serde_json::Value| -> Vec<String> {
        m["content"]
            .as_array()
            .map(|blocks| {
                blocks
                    .iter()
                    .filter_map(|b| b["text"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_else(|| vec![m["content"].as_str().unwrap_or("").to_string()])
    };
    let said: Vec<(String, Vec<String>)> = messages
        .iter()
        .map(|m| (m["role"].as_str().unwrap().to_string(), text_of(m)))
        .collect();
    let user = |texts: &[&str]| {
        (
            "user".to_string(),
            texts.iter().map(|t| t.to_string()).collect(),
        )
    };
    let expected = vec![
        user(&["first question"]),
        ("assistant".to_string(), vec!["Half a thought".to_string()]),
        // The note and the next prompt are two messages, sent as one turn of the person's.
        user(&["[the person interrupted this reply]", "second question"]),
    ];
    assert_eq!(said, expected, "{}", body["messages"]);
    screen.wait_for("Fresh answer.");
    master.write_all(b"/quit\r").unwrap();
}

/// Without a display (`$DISPLAY` unset) the model is not offered the computer tool, which
/// could only fail there.
#[test]
fn no_computer_tool_without_a_display() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (url, bodies) = peer(false);
    let mut cmd = repl_on(&url, d);
    cmd.env_remove("DISPLAY");
    let (_child, mut master, mut screen) = in_terminal(cmd);
    screen.wait_for("geode> ");
    master.write_all(b"look at the screen\r").unwrap();
    let body = next_body(&bodies);
    let tools: Vec<&str> = body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(tools.contains(&"bash"), "{tools:?}");
    assert!(!tools.contains(&"computer"), "{tools:?}");
    screen.wait_for("Fresh answer.");
    master.write_all(b"/quit\r").unwrap();
}
