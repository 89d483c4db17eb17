//! `geode exec` as a user runs it: a real child process, real files, a real timeline.

use std::path::Path;
use std::process::Output;

use geode_runtime::ids::SessionId;
use geode_runtime::store::timeline::SessionTimeline;

pub(super) fn geode(dir: &Path, args: &[&str]) -> Output {
    super::common::geode_bin()
        .args(args)
        .current_dir(dir)
        .env("GEODE_HOME", dir.join(".geode-home"))
        .env_remove("GEODE_MODEL")
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The `--json` events of an exec run.
pub(super) fn json_events(o: &Output) -> Vec<serde_json::Value> {
    stdout(o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

pub(super) fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn solve_sh(dir: &Path) {
    std::fs::write(
        dir.join("solve.sh"),
        "echo solved > answer.txt\necho done\n",
    )
    .unwrap();
}

#[test]
fn oracle_runs_the_solution_and_prints_only_the_answer() {
    let dir = tempfile::tempdir().unwrap();
    solve_sh(dir.path());
    let out = geode(
        dir.path(),
        &[
            "exec",
            "--model",
            "oracle:solve.sh",
            "--allow",
            "dangerous",
            "solve",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("answer.txt")).unwrap(),
        "solved\n"
    );
    let text = stdout(&out);
    assert_eq!(
        text.lines().count(),
        1,
        "stdout holds only the final text: {text:?}"
    );
    assert!(text.contains("reference solution finished"), "{text}");
    assert!(stderr(&out).contains("geode: session "));
}

#[test]
fn headless_exec_denies_the_shell_unless_allowed() {
    let dir = tempfile::tempdir().unwrap();
    solve_sh(dir.path());
    let out = geode(dir.path(), &["exec", "--model", "oracle:solve.sh", "solve"]);
    assert!(!dir.path().join("answer.txt").exists());
    assert!(
        stdout(&out).contains("probably not solved"),
        "{}",
        stdout(&out)
    );
    assert!(stderr(&out).contains("Denied"), "{}", stderr(&out));
}

#[test]
fn json_mode_prints_one_event_per_line() {
    let dir = tempfile::tempdir().unwrap();
    // A model that never answers fails verification after the repair budget: exit code 5.
    std::fs::write(
        dir.path().join("silent.toml"),
        "[[turns]]\ntext = \"\"\n[[turns]]\ntext = \"\"\n[[turns]]\ntext = \"\"\n",
    )
    .unwrap();
    let out = geode(
        dir.path(),
        &["exec", "--model", "scripted:silent.toml", "--json", "hello"],
    );
    assert_eq!(out.status.code(), Some(5), "{}", stderr(&out));
    let events = json_events(&out);
    assert_eq!(events[0]["type"], "turn_started");
    let last = events.last().unwrap();
    assert_eq!(last["type"], "turn_ended");
    assert_eq!(last["termination"], "natural");
    assert_eq!(last["verdict"]["verdict"], "failed");
    assert_eq!(
        events
            .iter()
            .filter(|e| e["type"] == "verification")
            .count(),
        3
    );
}

#[test]
fn json_events_carry_time_model_and_what_each_tool_gave() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("tools.toml"),
        r#"
[[turns]]
[[turns.tool_calls]]
name = "list_dir"
input = { path = "missing-folder" }

[[turns]]
text = "The folder is missing; nothing to list."
"#,
    )
    .unwrap();
    let out = geode(
        dir.path(),
        &[
            "exec",
            "--model",
            "scripted:tools.toml",
            "--json",
            "list it",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let events = json_events(&out);
    for e in &events {
        let at = e["at"].as_str().unwrap_or_else(|| panic!("no time: {e}"));
        assert!(chrono::DateTime::parse_from_rfc3339(at).is_ok(), "{e}");
    }
    assert_eq!(events[0]["model"], "scripted", "{}", events[0]);
    let ended = events.iter().find(|e| e["type"] == "tool_ended").unwrap();
    assert_eq!(ended["is_error"], true, "{ended}");
    assert!(ended["duration_ms"].is_u64(), "{ended}");
    let error = ended["error"].as_str().unwrap();
    assert!(error.contains("missing-folder"), "{ended}");
    assert!(ended["output"].as_str().unwrap().contains(error), "{ended}");
}

/// The system prompt hash a session's checkpoint recorded.
fn prompt_hash_of(dir: &Path, session: &str) -> String {
    let state = dir
        .join(".geode-home/sessions")
        .join(session)
        .join("state.json");
    let state: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&state).unwrap()).unwrap();
    state["system_prompt_hash"].as_str().unwrap().to_string()
}

#[test]
fn exec_reads_the_configuration_and_the_project_files_as_the_repl_does() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join(".geode")).unwrap();
    std::fs::write(
        d.join(".geode/config.toml"),
        "model = \"scripted:tools.toml\"\nmax_rounds = 1\n",
    )
    .unwrap();
    std::fs::write(
        d.join("tools.toml"),
        "[[turns]]\n[[turns.tool_calls]]\nname = \"list_dir\"\ninput = {}\n\n\
         [[turns]]\ntext = \"Listed.\"\n",
    )
    .unwrap();
    // No --model: the project's; its max_rounds = 1 ends the turn after the tool round.
    let out = geode(d, &["exec", "--json", "list"]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let first: serde_json::Value =
        serde_json::from_str(stdout(&out).lines().next().unwrap()).unwrap();
    assert_eq!(first["model"], "scripted", "{first}");
    assert!(
        stdout(&out).contains("\"termination\":\"max_rounds\""),
        "{}",
        stdout(&out)
    );

    // AGENTS.md joins the system prompt, unless a scaffold file says what the prompt is.
    std::fs::write(d.join("answer.toml"), "[[turns]]\ntext = \"Fine.\"\n").unwrap();
    std::fs::write(d.join("plain.toml"), "").unwrap();
    let run = |session: &str, extra: &[&str]| {
        let mut args = vec![
            "exec",
            "--model",
            "scripted:answer.toml",
            "--session-id",
            session,
        ];
        args.extend(extra);
        args.push("hello");
        let out = geode(d, &args);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        prompt_hash_of(d, session)
    };
    let without = run("s-without", &[]);
    std::fs::write(d.join("AGENTS.md"), "Always answer in one word.\n").unwrap();
    let with = run("s-with", &[]);
    assert_ne!(without, with);
    assert_eq!(run("s-again", &[]), with);
    let scaffolded = run("s-scaffold", &["--scaffold", "plain.toml"]);
    std::fs::remove_file(d.join("AGENTS.md")).unwrap();
    assert_eq!(
        run("s-scaffold-without", &["--scaffold", "plain.toml"]),
        scaffolded
    );
}

#[test]
fn a_short_direct_answer_is_accepted_at_the_first_call() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("four.toml"), "[[turns]]\ntext = \"4\"\n").unwrap();
    let out = geode(
        dir.path(),
        &[
            "exec",
            "--model",
            "scripted:four.toml",
            "--json",
            "what is 2+2?",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let events = json_events(&out);
    let last = events.last().unwrap();
    assert_eq!(last["verdict"]["verdict"], "passed", "{last}");
    assert_eq!(last["rounds"], 1, "{last}");
}

#[test]
fn a_transient_model_failure_is_retried_and_reported_as_an_event() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("flaky.toml"),
        "[[turns]]\nerror = \"overloaded, try again\"\n[[turns]]\ntext = \"4\"\n",
    )
    .unwrap();
    let out = geode(
        dir.path(),
        &[
            "exec",
            "--model",
            "scripted:flaky.toml",
            "--json",
            "what is 2+2?",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let events = json_events(&out);
    let retries: Vec<_> = events
        .iter()
        .filter(|e| e["type"] == "model_retry")
        .collect();
    assert_eq!(retries.len(), 1, "{events:?}");
    assert_eq!(retries[0]["attempt"], 1, "{}", retries[0]);
    assert!(
        retries[0]["error"]
            .as_str()
            .unwrap()
            .contains("overloaded, try again"),
        "{}",
        retries[0]
    );
    assert!(
        retries[0]["wait_ms"].as_u64().unwrap() > 0,
        "{}",
        retries[0]
    );
    assert_eq!(events.last().unwrap()["text"], "4");
}

#[test]
fn a_hook_answering_invalid_json_is_warned_about_and_the_call_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("script.toml"),
        "[[turns]]\n[[turns.tool_calls]]\nname = \"list_dir\"\ninput = {}\n\
         [[turns]]\ntext = \"Listed.\"\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("hooks.toml"),
        "[[hooks.PreToolUse]]\n[[hooks.PreToolUse.hooks]]\ntype = \"command\"\n\
         command = \"echo '{\\\"decision\\\": '\"\n",
    )
    .unwrap();
    let out = geode(
        dir.path(),
        &[
            "exec",
            "--model",
            "scripted:script.toml",
            "--hooks",
            "hooks.toml",
            "--json",
            "list",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("PreToolUse") && err.contains("not valid JSON"),
        "{err}"
    );
    let events = json_events(&out);
    let ended = events.iter().find(|e| e["type"] == "tool_ended").unwrap();
    assert_eq!(ended["is_error"], false, "{ended}");
}

#[test]
fn a_script_and_hooks_from_files_with_a_timeline() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("script.toml"),
        r#"
[[turns]]
[[turns.tool_calls]]
name = "write_file"
input = { path = "blocked.txt", content = "x" }
[[turns.tool_calls]]
name = "write_file"
input = { path = "allowed.txt", content = "y" }
[[turns]]
text = "One write was blocked by a hook, the other went through."
"#,
    )
    .unwrap();
    std::fs::write(
        dir.path().join("hooks.toml"),
        r#"
[[hooks.PreToolUse]]
matcher = "write_file"
[[hooks.PreToolUse.hooks]]
type = "command"
command = "grep -q blocked.txt && { echo 'not that file' >&2; exit 2; } || exit 0"
"#,
    )
    .unwrap();
    let out = geode(
        dir.path(),
        &[
            "exec",
            "--model",
            "scripted:script.toml",
            "--allow",
            "write",
            "--hooks",
            "hooks.toml",
            "--timeline",
            "tl.db",
            "--session-id",
            "e2e-1",
            "write two files",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(!dir.path().join("blocked.txt").exists());
    assert!(dir.path().join("allowed.txt").exists());
    let tl = SessionTimeline::open(dir.path().join("tl.db")).unwrap();
    let kinds: Vec<String> = tl
        .rows(&SessionId::new("e2e-1"))
        .unwrap()
        .into_iter()
        .map(|r| r.kind)
        .collect();
    assert_eq!(kinds.first().map(String::as_str), Some("session.started"));
    assert_eq!(kinds.last().map(String::as_str), Some("session.ended"));
    assert_eq!(kinds.iter().filter(|k| *k == "tool.called").count(), 2);
    assert_eq!(kinds.iter().filter(|k| *k == "tool.completed").count(), 2);
}

#[test]
fn bad_input_gets_a_clear_error_and_exit_code() {
    let dir = tempfile::tempdir().unwrap();
    let out = geode(dir.path(), &["exec", "--model", "gpt-banana", "hi"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "a flag that does not parse is a usage error"
    );
    assert!(stderr(&out).contains("gpt-banana"), "{}", stderr(&out));

    std::fs::write(dir.path().join("bad.json"), "{\"turns\": [{\"txet\": 1}]}").unwrap();
    let out = geode(dir.path(), &["exec", "--model", "scripted:bad.json", "hi"]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("bad.json") && err.contains("txet"), "{err}");

    let out = geode(
        dir.path(),
        &["exec", "--model", "nop", "--allow", "root", "hi"],
    );
    assert_eq!(
        out.status.code(),
        Some(2),
        "clap usage error: {}",
        stderr(&out)
    );
}

#[test]
fn a_guard_stop_exits_3() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("loop.json"),
        r#"{"repeat_last": true, "turns": [{"tool_calls": [{"name": "list_dir", "input": {}}]}]}"#,
    )
    .unwrap();
    let out = geode(
        dir.path(),
        &[
            "exec",
            "--model",
            "scripted:loop.json",
            "--max-rounds",
            "2",
            "--no-timeline",
            "go",
        ],
    );
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(stderr(&out).contains("max_rounds"));
}
