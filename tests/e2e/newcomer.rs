//! A newcomer's first hour, as it was tried: the REPL with no key (in a terminal) and with no
//! model at all (on a pipe), an error page from a wrong base URL, exit codes a script can tell
//! apart, every subcommand with nobody reading its output, errors that are one clear sentence.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::common::geode_in;
use super::providers::read_request;
use super::repl::in_terminal;

fn text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The process's status once it ends, killing it (and failing) past `limit`.
fn wait_within(
    child: &mut std::process::Child,
    limit: Duration,
    what: &str,
) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not end within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_repl_whose_key_is_missing_says_so_once_and_stays_usable() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("script.toml"),
        "[[turns]]\ntext = \"scripted reply after the switch\"\n",
    )
    .unwrap();
    let mut cmd = geode_in(d);
    cmd.args(["--local", "--model", "anthropic:claude-sonnet-5"])
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("RUST_LOG");
    let (mut repl, mut keys, mut screen) = in_terminal(cmd);
    screen.wait_for("ANTHROPIC_API_KEY");
    screen.wait_for("geode> ");
    keys.write_all(b"hello\r").unwrap();
    screen.wait_for("llm_error");
    let said = screen.text.matches("cannot answer").count();
    assert_eq!(
        said, 2,
        "once at the start, once for the prompt:\n{}",
        screen.text
    );
    assert!(
        !screen.text.contains("WARN") && !screen.text.contains("geode_runtime::"),
        "a sentence, not a log line:\n{}",
        screen.text
    );
    screen.clear();
    keys.write_all(b"/model scripted:script.toml\r").unwrap();
    screen.wait_for("switched");
    screen.clear();
    keys.write_all(b"say something\r").unwrap();
    screen.wait_for("scripted reply after the switch");
    screen.wait_for("geode> ");
    // Ctrl-D at the prompt leaves. The prompt is drawn a moment before the line editor takes
    // the terminal (and flushes what was typed meanwhile), as a person would never notice:
    // pressed again each second, as a person would, until it ends.
    let deadline = Instant::now() + Duration::from_secs(15);
    let status = loop {
        keys.write_all(b"\x04").unwrap();
        if let Ok(Some(status)) = repl.0.try_wait() {
            break status;
        }
        std::thread::sleep(Duration::from_secs(1));
        if let Some(status) = repl.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the REPL did not end after Ctrl-D:\n{}",
            screen.text
        );
    };
    assert!(status.success(), "{status:?}\n{}", screen.text);
}

#[test]
fn a_first_run_with_no_model_shows_how_to_set_one_up() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // On a pipe: what a person typed, then the input's end.
    let mut child = geode_in(d)
        .arg("--local")
        .env_remove("ANTHROPIC_API_KEY")
        .env("OPENAI_API_KEY", "sk-newcomer")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"hello\n").unwrap();
    let status = wait_within(&mut child, Duration::from_secs(20), "the REPL on a pipe");
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    assert!(status.success(), "{status:?}\n{out}");
    for needle in [
        "export ANTHROPIC_API_KEY=...",
        "geode login openai",
        "config.toml",
        // The key this machine has is named with the route that uses it.
        "OPENAI_API_KEY is set here: `/model openai:gpt-6-sol`",
        // The prompt is answered with the one sentence, not "Nothing to do.".
        "No model is configured, so nothing can answer",
    ] {
        assert!(out.contains(needle), "{needle:?} missing:\n{out}");
    }
    assert!(!out.contains("Nothing to do."), "{out}");

    // Headless, there is no one to show the screen to: an error saying where a model is given.
    let exec = geode_in(d).args(["exec", "hi"]).output().unwrap();
    assert_eq!(exec.status.code(), Some(1), "{}", text(&exec));
    assert!(
        text(&exec).contains("no model is configured: give --model ROUTE"),
        "{}",
        text(&exec)
    );
}

/// A server on loopback answering every request with `status` and an HTML page; the number of
/// requests it got.
fn error_page_server(status: u16) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = hits.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let _ = read_request(&stream);
            counted.fetch_add(1, Ordering::SeqCst);
            let page = format!(
                "<!DOCTYPE HTML>\n<html><head><title>Error response</title></head><body>\n\
                 <h1>Error response</h1><p>Error code: {status}</p>\n\
                 <p>Message: Unsupported method ('POST').</p>\n{}</body></html>\n",
                "<p>The server does not support the functionality required.</p>\n".repeat(40)
            );
            let mut s = stream;
            let _ = write!(
                s,
                "HTTP/1.1 {status} Error\r\nContent-Type: text/html\r\nContent-Length: {}\r\n\
                 Connection: close\r\n\r\n{page}",
                page.len()
            );
        }
    });
    (format!("http://{addr}/v1"), hits)
}

#[test]
fn a_501_page_is_one_line_and_not_retried() {
    let dir = tempfile::tempdir().unwrap();
    let (base, hits) = error_page_server(501);
    let out = geode_in(dir.path())
        .args([
            "exec",
            "--model",
            &format!("compat:{base}:some-model"),
            "hi",
        ])
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(
        hits.load(Ordering::SeqCst),
        1,
        "a 501 cannot pass on retry:\n{err}"
    );
    assert!(err.contains("HTTP 501: Error response"), "{err}");
    assert!(!err.contains("<html") && !err.contains("<p>"), "{err}");
    assert!(
        err.lines().all(|l| l.len() < 400),
        "no page on the screen:\n{err}"
    );
    assert!(
        !err.contains("WARN") && !err.contains("geode_runtime::"),
        "people read sentences, not log lines:\n{err}"
    );
    assert!(err.contains("geode: error: "), "{err}");
}

#[test]
fn the_shell_s_denial_says_what_allows_it() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("script.toml"),
        "[[turns]]\ntext = \"running it\"\n[[turns.tool_calls]]\nname = \"bash\"\n\
         input = { command = \"true\" }\n\n[[turns]]\ntext = \"done\"\n",
    )
    .unwrap();
    let out = geode_in(d)
        .args(["exec", "--json", "--model", "scripted:script.toml", "go"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let ended = stdout
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|e| e["type"] == "tool_ended")
        .unwrap_or_else(|| panic!("no tool_ended:\n{}", text(&out)));
    let error = ended["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("not allowed in headless sessions")
            && error.contains("`geode exec --allow dangerous` allows the shell"),
        "{ended}"
    );
}

#[test]
fn exit_codes_tell_a_decision_from_a_failure_to_decide() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // Could not decide: no campaign there.
    let out = geode_in(d)
        .args(["crucible", "decide", "no-such-campaign"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        err.matches("No such file or directory").count(),
        1,
        "each cause said once: {err}"
    );
    // Bad arguments are 2, whatever the command: a route that does not parse included.
    for args in [
        &["--model", "gpt-banana"][..],
        &["exec", "--model", "gpt-banana", "hi"],
    ] {
        let out = geode_in(d)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out));
    }
    // A check that found problems is 10, one that could not check is 1.
    std::fs::write(d.join("a.toml"), "[guards]\nmax_rounds = 3\n").unwrap();
    std::fs::write(d.join("b.toml"), "[guards]\nmax_rounds = 4\n").unwrap();
    let out = geode_in(d)
        .args(["scaffold", "diff", "a.toml", "b.toml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(10), "{}", text(&out));
    let out = geode_in(d)
        .args(["scaffold", "diff", "a.toml", "none.toml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
}

#[test]
fn slurm_without_its_clients_stops_before_anything_is_made() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let empty = d.join("empty-path");
    std::fs::create_dir_all(&empty).unwrap();
    let pack = concat!(env!("CARGO_MANIFEST_DIR"), "/../tasks/geode-core");
    let out = geode_in(d)
        .args([
            "run",
            pack,
            "--model",
            "oracle",
            "--executor",
            "slurm",
            "--jobs-dir",
            "jobs",
        ])
        .env("PATH", &empty)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--executor slurm needs Slurm's sbatch, squeue and scancel on PATH")
            && err.contains("sbatch, squeue, scancel is not there"),
        "{err}"
    );
    assert!(!d.join("jobs").exists(), "nothing is made before the check");
}

#[test]
fn control_characters_from_outside_never_reach_the_terminal_raw() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let out = geode_in(d)
        .args(["tasks", "list", "pack-\u{1b}[2J-\u{7}"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains('\u{1b}') && !err.contains('\u{7}'), "{err:?}");
    assert!(err.contains("pack-\\u{1b}[2J-\\u{7}"), "{err}");
}

/// Runs `cmd` with stdout and stderr on one pipe whose reader is gone, as `2>&1 | true` does,
/// stdin empty; kills it past `limit` (a server). Its status, or `None` when it had to be
/// killed.
fn with_nobody_reading(mut cmd: Command, limit: Duration) -> Option<std::process::ExitStatus> {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(writer.try_clone().unwrap())
        .stderr(writer)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The subcommand paths `geode` lists in its help, depth first (`crucible run`, ...).
fn subcommands(d: &Path, path: &[String], found: &mut Vec<Vec<String>>) {
    let out = geode_in(d).args(path).arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout).into_owned();
    let Some(listed) = help.split("\nCommands:\n").nth(1) else {
        return;
    };
    for line in listed.lines().take_while(|l| l.starts_with("  ")) {
        let Some(name) = line.split_whitespace().next() else {
            continue;
        };
        if name == "help" {
            continue;
        }
        let mut sub = path.to_vec();
        sub.push(name.to_string());
        found.push(sub.clone());
        subcommands(d, &sub, found);
    }
}

#[test]
fn every_subcommand_survives_nobody_reading_its_output() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut paths = vec![Vec::new()];
    subcommands(d, &[], &mut paths);
    assert!(paths.len() > 40, "the walk found the tree: {paths:?}");
    for path in &paths {
        // Its help, to a stdout nobody reads: quiet (clap drops a help nobody reads and ends
        // with 0; geode's own output ends with a SIGPIPE's 141).
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let help = geode_in(d)
            .args(path)
            .arg("--help")
            .stdout(writer)
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&help.stderr);
        assert!(
            matches!(help.status.code(), Some(0 | 141)) && err.is_empty(),
            "geode {} --help: {:?} {err}",
            path.join(" "),
            help.status
        );
        // Run bare (a usage error, or the command's own work), with stdout and stderr both
        // gone: never a panic (101) or a signal, whatever it ends with.
        let mut bare = geode_in(d);
        bare.args(path);
        if let Some(status) = with_nobody_reading(bare, Duration::from_secs(15)) {
            assert!(
                status.code().is_some() && status.code() != Some(101),
                "geode {}: {status:?}",
                path.join(" ")
            );
        }
    }
    // Commands that do real work and print as they go: the work is done all the same.
    let pack = concat!(env!("CARGO_MANIFEST_DIR"), "/../tasks/geode-core");
    let cases: [(&[&str], &str); 3] = [
        (
            &[
                "dataset",
                "split",
                pack,
                "--seed",
                "7",
                "--out",
                "splits.json",
            ],
            "splits.json",
        ),
        (
            &[
                "dataset",
                "release",
                pack,
                "--name",
                "core",
                "--version",
                "1",
                "--out",
                "release",
            ],
            "release",
        ),
        (&["tasks", "hash", pack], ""),
    ];
    for (args, made) in cases {
        let mut cmd = geode_in(d);
        cmd.args(args);
        let status = with_nobody_reading(cmd, Duration::from_secs(60)).expect("it ends");
        assert!(
            matches!(status.code(), Some(0 | 141)),
            "geode {}: {status:?}",
            args.join(" ")
        );
        if !made.is_empty() {
            assert!(
                d.join(made).exists(),
                "geode {} made {made}",
                args.join(" ")
            );
        }
    }
}
