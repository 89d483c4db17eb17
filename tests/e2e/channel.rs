//! Messaging channels: `geode serve --channels FILE --webhook 127.0.0.1:0` as a real child
//! process, driven over real loopback HTTP (a raw HTTP/1.1 client on a TcpStream).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::Duration;

use geode_runtime::agent::restore::load_checkpoint;
use geode_runtime::conversation::ContentBlock;
use geode_runtime::ids::SessionId;
use geode_runtime::server::channel::thread_session_id;
use serde_json::{Value, json};

pub(super) const TOKEN: &str = "s3cret-ops";

fn channels_toml(extra: &str) -> String {
    format!(
        "[channels.ops]\ntoken = \"{TOKEN}\"\ntools = [\"read_file\", \"list_dir\"]\n\
         time_budget_secs = 120\n{extra}"
    )
}

/// A daemon with a channels file; its stderr lines arrive on `stderr`.
pub(super) struct ChannelDaemon {
    child: Child,
    addr: String,
    stderr: Receiver<String>,
}

fn home(dir: &Path) -> PathBuf {
    dir.join("home")
}

fn spawn(
    dir: &Path,
    script: &str,
    channels: &str,
    mode: u32,
    env: &[(&str, &str)],
) -> (Child, Receiver<String>) {
    std::fs::create_dir_all(home(dir)).unwrap();
    std::fs::write(dir.join("script.toml"), script).unwrap();
    let file = dir.join("channels.toml");
    std::fs::write(&file, channels).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).unwrap();
    let mut child = super::common::geode_bin()
        .current_dir(dir)
        .env("GEODE_HOME", home(dir))
        .env("GEODE_MODEL", "scripted:script.toml")
        .env_remove("GEODE_SOCKET")
        .envs(env.iter().copied())
        .args([
            "serve",
            "--channels",
            "channels.toml",
            "--webhook",
            "127.0.0.1:0",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = channel();
    let err = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    (child, rx)
}

impl ChannelDaemon {
    fn start(dir: &Path, script: &str, channels: &str) -> ChannelDaemon {
        Self::start_with(dir, script, channels, &[])
    }

    /// A daemon with extra environment variables (the computer tests' `DISPLAY`).
    pub(super) fn start_with(
        dir: &Path,
        script: &str,
        channels: &str,
        env: &[(&str, &str)],
    ) -> ChannelDaemon {
        let (child, stderr) = spawn(dir, script, channels, 0o600, env);
        let mut seen = Vec::new();
        let addr = loop {
            let line = stderr
                .recv_timeout(Duration::from_secs(20))
                .unwrap_or_else(|_| panic!("no webhook address; stderr: {seen:?}"));
            if let Some(a) = line.strip_prefix("geode: webhook on http://") {
                break a.to_string();
            }
            seen.push(line);
        };
        ChannelDaemon {
            child,
            addr,
            stderr,
        }
    }

    fn post(&self, channel: &str, token: Option<&str>, body: &str) -> (u16, Value) {
        post(&self.addr, channel, token, body)
    }

    pub(super) fn send(&self, thread: &str, text: &str) -> Value {
        send(&self.addr, thread, text)
    }
}

/// POST a JSON body to a channel; returns the status and the JSON body.
fn post(addr: &str, channel: &str, token: Option<&str>, body: &str) -> (u16, Value) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    write!(
            s,
            "POST /channels/{channel}/messages HTTP/1.1\r\nHost: {}\r\n{auth}\
             Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            addr,
            body.len()
        )
        .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let status: u16 = raw
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {raw:?}"));
    let body = raw.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    let json = serde_json::from_str(body).unwrap_or(Value::Null);
    (status, json)
}

/// Send `text` on `thread` of channel ops; the reply of a 200.
fn send(addr: &str, thread: &str, text: &str) -> Value {
    let body = json!({"thread": thread, "text": text, "sender": "ana"}).to_string();
    let (status, reply) = post(addr, "ops", Some(TOKEN), &body);
    assert_eq!(status, 200, "{reply}");
    reply
}

impl ChannelDaemon {
    pub(super) fn term(mut self) {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        let status = self.child.wait().unwrap();
        assert!(status.success(), "{status:?}");
        // Drained: nothing for Drop to kill.
        while self.stderr.try_recv().is_ok() {}
    }
}

impl Drop for ChannelDaemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Session directories under `$GEODE_HOME/sessions`.
fn sessions(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(home(dir).join("sessions")) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

pub(super) fn messages(dir: &Path, id: &str) -> Vec<geode_runtime::conversation::Message> {
    load_checkpoint(&home(dir).join("sessions"), &SessionId::new(id))
        .unwrap()
        .messages
}

/// Long enough for the verifier to accept it without tool use.
const ACK_TEXT: &str = "Acknowledged: I have read your message and there is nothing more to do.";
const ACK: &str = "repeat_last = true\n[[turns]]\ntext = \"Acknowledged: I have read your message and there is nothing more to do.\"\n";

#[test]
fn unbound_channels_and_bad_tokens_create_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let daemon = ChannelDaemon::start(d, ACK, &channels_toml(""));
    let body = json!({"thread": "t1", "text": "hello"}).to_string();

    let (status, reply) = daemon.post("nope", Some(TOKEN), &body);
    assert_eq!(status, 404, "{reply}");
    assert!(reply["error"].as_str().unwrap().contains("nope"), "{reply}");
    let (status, _) = daemon.post("ops", Some("wrong"), &body);
    assert_eq!(status, 401);
    let (status, _) = daemon.post("ops", None, &body);
    assert_eq!(status, 401);
    let (status, reply) = daemon.post("ops", Some(TOKEN), r#"{"thread": 7, "text": "x"}"#);
    assert_eq!(status, 400, "{reply}");
    assert!(
        reply["error"].as_str().unwrap().contains("field `thread`"),
        "{reply}"
    );
    assert_eq!(sessions(d), Vec::<String>::new());
    let timeline = home(d).join("timeline.db");
    if timeline.exists() {
        let t = geode_runtime::store::timeline::SessionTimeline::open(&timeline).unwrap();
        for (ch, token_ok) in [("nope", true), ("ops", false)] {
            let id = thread_session_id(ch, "t1");
            assert!(
                t.rows(&id).unwrap().is_empty(),
                "{ch} ({token_ok}) left rows"
            );
        }
    }

    // The control: the same message, properly addressed, does create its session.
    let reply = daemon.send("t1", "hello");
    assert_eq!(reply["text"], ACK_TEXT);
    assert_eq!(
        sessions(d),
        vec![thread_session_id("ops", "t1").to_string()]
    );
    daemon.term();
}

#[test]
fn a_thread_keeps_one_session_and_one_checkpoint_chain_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let daemon = ChannelDaemon::start(d, ACK, &channels_toml(""));
    let a1 = daemon.send("A", "first message of A");
    let a2 = daemon.send("A", "second message of A");
    let b1 = daemon.send("B", "first message of B");
    let (a, b) = (
        a1["session_id"].as_str().unwrap(),
        b1["session_id"].as_str().unwrap(),
    );
    assert_eq!(a, a2["session_id"].as_str().unwrap());
    assert_ne!(a, b);
    assert_eq!(a, thread_session_id("ops", "A").as_str());
    let mut both = vec![a.to_string(), b.to_string()];
    both.sort();
    assert_eq!(sessions(d), both);
    for r in [&a1, &a2, &b1] {
        assert_eq!(r["termination_reason"], "natural", "{r}");
    }
    // The second turn of A continued the first: user, assistant, user, assistant.
    let ms = messages(d, a);
    assert_eq!(ms.len(), 4, "{:#?}", ms);
    assert_eq!(messages(d, b).len(), 2);
    daemon.term();

    // A new daemon resumes the same chain by the thread's id.
    let daemon = ChannelDaemon::start(d, ACK, &channels_toml(""));
    let a3 = daemon.send("A", "third message of A");
    assert_eq!(a3["session_id"].as_str().unwrap(), a);
    let texts: Vec<String> = messages(d, a)
        .iter()
        .flat_map(|m| m.content.iter())
        .filter_map(|b| match b {
            ContentBlock::Text { text } => Some(text.clone()),
            _ => None,
        })
        .collect();
    let users: Vec<&String> = texts
        .iter()
        .filter(|t| t.contains("message of A"))
        .collect();
    assert_eq!(users.len(), 3, "{texts:?}");
    assert_eq!(sessions(d).len(), 2);
    daemon.term();
}

#[test]
fn a_tool_outside_the_channel_allow_list_is_denied_and_does_not_run() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let script = r#"
[[turns]]
text = "Writing."
[[turns.tool_calls]]
id = "w1"
name = "write_file"
input = { path = "out.txt", content = "pwned" }
[[turns]]
text = "The write could not run: the channel does not allow write_file."
"#;
    // Writes allowed: only the allow-list stands between the call and the file.
    let daemon = ChannelDaemon::start(d, script, &channels_toml("allow_writes = true\n"));
    let reply = daemon.send("t", "write out.txt");
    assert_eq!(reply["tool_calls"], 1, "{reply}");
    assert!(!d.join("out.txt").exists());
    let id = reply["session_id"].as_str().unwrap();
    let result = messages(d, id)
        .iter()
        .flat_map(|m| m.content.iter())
        .find_map(|b| match b {
            ContentBlock::ToolResult {
                tool_use_id,
                content,
                is_error,
            } if tool_use_id == "w1" => Some((content.clone(), *is_error)),
            _ => None,
        })
        .expect("a tool_result for w1");
    assert!(result.1, "{result:?}");
    assert!(
        result.0.contains("denied at scope") && result.0.contains("allow-list"),
        "{result:?}"
    );
    daemon.term();
}

#[test]
fn a_channels_file_others_can_read_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (mut child, stderr) = spawn(d, ACK, &channels_toml(""), 0o644, &[]);
    let status = child.wait().unwrap();
    assert!(!status.success());
    let lines: Vec<String> = stderr.iter().collect();
    let text = lines.join("\n");
    assert!(
        text.contains("channels.toml") && text.contains("644"),
        "{text}"
    );
    // Refused before the socket was bound.
    assert!(!home(d).join("cli.sock").exists());
}

#[test]
fn one_threads_messages_run_serially_and_threads_run_concurrently() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let slow = format!("repeat_last = true\n[[turns]]\ndelay_ms = 1500\ntext = \"{ACK_TEXT}\"\n");
    let daemon = ChannelDaemon::start(d, &slow, &channels_toml(""));
    let send_all = |threads: &[&'static str]| {
        let started = std::time::Instant::now();
        let handles: Vec<_> = threads
            .iter()
            .map(|&t| {
                let addr = daemon.addr.clone();
                std::thread::spawn(move || send(&addr, t, &format!("a message on {t}")))
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        started.elapsed()
    };
    // Two messages of one thread at once: the second waits for the first, and both land in
    // the one checkpoint chain (run side by side, one would have overwritten the other).
    let serial = send_all(&["A", "A"]);
    assert!(serial >= Duration::from_millis(3000), "{serial:?}");
    assert_eq!(messages(d, thread_session_id("ops", "A").as_str()).len(), 4);
    // Two threads at once share no lane: together well under two model delays.
    let parallel = send_all(&["B", "C"]);
    assert!(parallel < Duration::from_millis(2900), "{parallel:?}");
    daemon.term();
}

#[test]
fn sigterm_lets_a_running_channel_turn_finish_and_answer() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let slow = format!("repeat_last = true\n[[turns]]\ndelay_ms = 1500\ntext = \"{ACK_TEXT}\"\n");
    let daemon = ChannelDaemon::start(d, &slow, &channels_toml(""));
    let addr = daemon.addr.clone();
    let running = std::thread::spawn(move || send(&addr, "A", "a slow message"));
    std::thread::sleep(Duration::from_millis(500));
    // `term` asserts a clean exit: the drain waited for the turn instead of cutting it.
    daemon.term();
    let reply = running.join().unwrap();
    assert_eq!(reply["text"], ACK_TEXT);
    assert_eq!(messages(d, reply["session_id"].as_str().unwrap()).len(), 2);
}
