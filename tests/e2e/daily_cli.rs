//! The daily CLI without a daemon: the local REPL on pipes (route checks, `/clear`, hooks and
//! project trust), `geode sessions`, `geode config explain`, and closed pipes. Apart from
//! daily.rs, which starts `geode serve` and talks to it, because none of these needs one.

use std::io::Write;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;

use super::common::geode_in as geode;

/// `geode --local ARGS` (the REPL on pipes) in `dir`, with `typed` as everything typed.
fn repl_typed(dir: &Path, args: &[&str], typed: &[u8]) -> std::process::Output {
    let mut child = geode(dir)
        .arg("--local")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A REPL that refuses its options exits before reading: a closed pipe is its answer.
    let _ = child.stdin.take().unwrap().write_all(typed);
    child.wait_with_output().unwrap()
}

/// A checkpointed `geode exec` session `id` on `answer.toml`, a little older than the next.
pub(super) fn exec_session(dir: &Path, id: &str, prompt: &str) {
    let out = geode(dir)
        .args([
            "exec",
            "--model",
            "scripted:answer.toml",
            "--session-id",
            id,
            prompt,
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::thread::sleep(Duration::from_millis(20));
}

/// The user's configuration in `dir/home`: `hooks` as its hooks file, after `settings`.
fn user_hooks(dir: &Path, hooks: &str, settings: &str) {
    std::fs::create_dir_all(dir.join("home")).unwrap();
    std::fs::write(dir.join("home/hooks.toml"), hooks).unwrap();
    std::fs::write(
        dir.join("home/config.toml"),
        format!("{settings}hooks = \"hooks.toml\"\n"),
    )
    .unwrap();
}

/// A UserPromptSubmit hook that keeps each prompt the session got, a JSON line each.
const KEEP_PROMPTS: &str = "[[hooks.UserPromptSubmit]]\n[[hooks.UserPromptSubmit.hooks]]\n\
     type = \"command\"\ncommand = \"cat >> prompts.jsonl; echo >> prompts.jsonl\"\n";

/// The prompts `KEEP_PROMPTS` kept in `dir`.
fn kept_prompts(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("prompts.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn a_bad_model_route_or_effort_stops_the_repl_before_it_starts() {
    let dir = tempfile::tempdir().unwrap();
    for (args, says) in [
        (["--model", "bogus"], "unknown model route \"bogus\""),
        (
            ["--effort", "turbo"],
            "invalid value 'turbo' for '--effort <EFFORT>'",
        ),
    ] {
        // Were a session to start, `/exit` would end it cleanly.
        let out = repl_typed(dir.path(), &args, b"/exit\n");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert!(
            !String::from_utf8_lossy(&out.stdout).contains("session"),
            "{args:?}: a session started"
        );
    }
}

#[test]
fn after_clear_the_next_prompt_gets_its_own_answer() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("script.toml"),
        "[[turns]]\ntext = \"the answer to the prompt after /clear\"\n",
    )
    .unwrap();
    // Typed ahead: each line is read only once the previous one has its answer.
    let out = repl_typed(
        dir.path(),
        &["--model", "scripted:script.toml"],
        b"/clear\nwhat now?\n/exit\n",
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    let answer = stdout
        .find("the answer to the prompt after /clear")
        .unwrap_or_else(|| panic!("the prompt's answer never came:\n{stdout}"));
    let cleared = stdout.find("new session").unwrap();
    assert!(cleared < answer, "{stdout}");
}

#[test]
fn the_repl_runs_hooks_from_the_configuration_and_a_project_s_only_once_trusted() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("home")).unwrap();
    // As copied from Claude Code: the matcher names `Write`.
    std::fs::write(
        d.join("home/no-writes.toml"),
        "[[hooks.PreToolUse]]\nmatcher = \"Write\"\n[[hooks.PreToolUse.hooks]]\n\
         type = \"command\"\ncommand = \"echo 'no writes here' >&2; exit 2\"\n",
    )
    .unwrap();
    std::fs::write(
        d.join("home/config.toml"),
        "hitl = \"auto\"\nhooks = \"no-writes.toml\"\n",
    )
    .unwrap();
    std::fs::write(
        d.join("script.toml"),
        "[[turns]]\n[[turns.tool_calls]]\nname = \"write_file\"\n\
         input = { path = \"out.txt\", content = \"x\" }\n[[turns]]\ntext = \"Tried.\"\n",
    )
    .unwrap();
    let repl = |d: &Path| {
        repl_typed(
            d,
            &["--model", "scripted:script.toml"],
            b"write it\n/hooks\n/exit\n",
        )
    };
    let out = repl(d);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!d.join("out.txt").exists(), "the user's hook did not run");
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        shown.contains("PreToolUse write_file: command: echo 'no writes here'"),
        "{shown}"
    );

    // A project's hooks file replaces the user's, but runs only once the project is trusted.
    std::fs::create_dir_all(d.join(".geode")).unwrap();
    std::fs::write(
        d.join(".geode/config.toml"),
        "hooks = \"project-hooks.toml\"\n",
    )
    .unwrap();
    std::fs::write(d.join("project-hooks.toml"), "").unwrap();
    let out = repl(d);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("hooks (project-hooks.toml) are not loaded"),
        "{stderr}"
    );
    assert!(d.join("out.txt").exists(), "{stderr}");
}

#[test]
fn a_hook_matcher_that_matches_no_tool_is_warned_about() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // `Shell` is no tool's name, here or in Claude Code; `Bash` maps to bash.
    user_hooks(
        d,
        "[[hooks.PreToolUse]]\nmatcher = \"Shell\"\n[[hooks.PreToolUse.hooks]]\n\
         type = \"command\"\ncommand = \"exit 2\"\n\
         [[hooks.PreToolUse]]\nmatcher = \"Bash\"\n[[hooks.PreToolUse.hooks]]\n\
         type = \"command\"\ncommand = \"exit 0\"\n",
        "",
    );
    let out = repl_typed(d, &["--model", "nop"], b"/exit\n");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let warnings: Vec<&str> = stderr.lines().filter(|l| l.contains("warning")).collect();
    assert_eq!(warnings.len(), 1, "{stderr}");
    assert!(
        warnings[0].contains("hooks.toml: PreToolUse matcher \"Shell\"")
            && warnings[0].contains("matches no tool (tools: bash, read_file"),
        "{stderr}"
    );
}

#[test]
fn continue_resumes_the_most_recent_session_or_says_there_is_none() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let out = repl_typed(d, &["--model", "nop", "--continue"], b"/exit\n");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("--continue: no session under"), "{stderr}");

    std::fs::write(d.join("answer.toml"), "[[turns]]\ntext = \"Fine.\"\n").unwrap();
    for id in ["older-one", "newer-one"] {
        exec_session(d, id, &format!("prompt of {id}"));
    }
    let out = repl_typed(d, &["--model", "nop", "-c"], b"/exit\n");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("resumed newer-one ("), "{stdout}");
    assert!(!stdout.contains("older-one"), "{stdout}");
}

/// Sessions belong to the folder they ran in (issue 39): `/resume` lists this folder's, each
/// with its folder; a resumed session goes on in its own folder; a start left at once (an
/// empty session) is listed nowhere and is not what `-c` continues.
#[test]
fn sessions_are_listed_per_folder_and_resume_where_they_ran() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().canonicalize().unwrap();
    for sub in ["a", "b", "home"] {
        std::fs::create_dir_all(d.join(sub)).unwrap();
    }
    std::fs::write(d.join("home/config.toml"), "hitl = \"auto\"\n").unwrap();
    // The sessions' route is relative: resumed from b, it is read there.
    for at in [d.clone(), d.join("b")] {
        std::fs::write(at.join("answer.toml"), "[[turns]]\ntext = \"Fine.\"\n").unwrap();
    }
    for (id, sub) in [("in-a", "a"), ("in-b", "b")] {
        let out = geode(&d)
            .args([
                "exec",
                "--model",
                "scripted:answer.toml",
                "--session-id",
                id,
            ])
            .args(["--cwd", sub, &format!("prompt in {sub}")])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let in_b = |typed: &[u8], args: &[&str]| {
        let mut child = geode(&d)
            .current_dir(d.join("b"))
            .args(["--local", "--model", "nop"])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let _ = child.stdin.take().unwrap().write_all(typed);
        child.wait_with_output().unwrap()
    };
    // A start left at once.
    assert!(in_b(b"/exit\n", &[]).status.success());

    let listed = geode(&d).args(["sessions"]).output().unwrap();
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert!(listed.contains("\tFOLDER\t"), "{listed}");
    assert_eq!(
        listed.lines().count(),
        3,
        "a header and two sessions:\n{listed}"
    );
    assert!(!listed.contains("unreadable"), "{listed}");
    assert!(
        listed.contains(&format!("{}\tprompt in a", d.join("a").display())),
        "{listed}"
    );

    let out = in_b(b"/resume\n/resume in-a\n!pwd\n/exit\n", &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    let listing = &stdout[..stdout.find("resumed in-a").unwrap_or(stdout.len())];
    assert!(
        listing.contains("prompt in b") && listing.contains(&d.join("b").display().to_string()),
        "{stdout}"
    );
    assert!(
        !listing.contains("prompt in a"),
        "only this folder's sessions: {stdout}"
    );
    let after = &stdout[stdout.find("resumed in-a").expect("resumed")..];
    assert!(
        after.contains(&format!("{}\n", d.join("a").display())),
        "the session's own folder: {stdout}"
    );

    let out = in_b(b"/exit\n", &["-c"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("resumed in-b ("), "{stdout}");
}

/// `/compact` summarises the older messages, the first prompt among them; the session keeps
/// the title a person knows it by.
#[test]
fn a_compacted_session_keeps_its_title() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let turns = "[[turns]]\ntext = \"Noted.\"\n".repeat(6);
    std::fs::write(d.join("script.toml"), turns).unwrap();
    let typed = b"the very first prompt\ntwo\nthree\nfour\nfive\nsix\n/compact\n/exit\n";
    let out = repl_typed(d, &["--model", "scripted:script.toml"], typed);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("compacted:"), "{stdout}");
    let listed = geode(d).args(["sessions"]).output().unwrap();
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert!(listed.contains("\tthe very first prompt"), "{listed}");
}

/// `@path` attaches the file to the prompt the model (and every UserPromptSubmit hook) gets.
#[test]
fn an_at_path_attaches_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    user_hooks(d, KEEP_PROMPTS, "");
    std::fs::write(d.join("notes.txt"), "secret-sauce-42\n").unwrap();
    std::fs::write(d.join("script.toml"), "[[turns]]\ntext = \"Read.\"\n").unwrap();
    let out = repl_typed(
        d,
        &["--model", "scripted:script.toml"],
        b"summarise @notes.txt please\n/exit\n",
    );
    assert!(out.status.success(), "{out:?}");
    let prompts = kept_prompts(d);
    let prompt = prompts[0]["prompt"].as_str().unwrap();
    assert!(
        prompt.starts_with(
            "summarise @notes.txt please\n\n<file path=\"notes.txt\">\nsecret-sauce-42"
        ),
        "{prompt}"
    );
}

#[test]
fn a_line_ending_in_a_backslash_continues_the_message() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    user_hooks(d, KEEP_PROMPTS, "");
    std::fs::write(d.join("script.toml"), "[[turns]]\ntext = \"Read.\"\n").unwrap();
    let out = repl_typed(
        d,
        &["--model", "scripted:script.toml"],
        b"first line\\\nsecond line\n/exit\n",
    );
    assert!(out.status.success(), "{out:?}");
    let prompts = kept_prompts(d);
    assert_eq!(prompts.len(), 1, "{prompts:?}");
    assert_eq!(prompts[0]["prompt"], "first line\nsecond line");
}

#[test]
fn a_bang_command_runs_through_the_pipeline_and_reaches_the_next_prompt() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // A PreToolUse hook sees the person's command as it sees the model's calls.
    let hooks = format!(
        "{KEEP_PROMPTS}[[hooks.PreToolUse]]\nmatcher = \"Bash\"\n\
         [[hooks.PreToolUse.hooks]]\ntype = \"command\"\ncommand = \"cat > bash-call.json\"\n"
    );
    user_hooks(d, &hooks, "hitl = \"auto\"\n");
    std::fs::write(d.join("script.toml"), "[[turns]]\ntext = \"Seen.\"\n").unwrap();
    let out = repl_typed(
        d,
        &["--model", "scripted:script.toml"],
        b"!echo made > made.txt; echo the-output\nwhat happened?\n/exit\n",
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert_eq!(
        std::fs::read_to_string(d.join("made.txt")).unwrap(),
        "made\n"
    );
    assert!(stdout.contains("the-output"), "{stdout}");
    let call: Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("bash-call.json")).unwrap()).unwrap();
    assert_eq!(call["tool_name"], "bash", "{call}");
    let prompts = kept_prompts(d);
    assert_eq!(prompts.len(), 1, "{prompts:?}");
    let prompt = prompts[0]["prompt"].as_str().unwrap();
    assert!(
        prompt.starts_with("The user ran `echo made > made.txt; echo the-output`")
            && prompt.contains("the-output")
            && prompt.ends_with("what happened?"),
        "{prompt}"
    );
}

#[test]
fn sessions_are_listed_newest_first_with_their_first_prompt_and_cost() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("answer.toml"), "[[turns]]\ntext = \"Fine.\"\n").unwrap();
    for (id, prompt) in [
        ("first-one", "fix the flaky test in ci\nwith details"),
        ("second-one", "write the release notes"),
    ] {
        exec_session(d, id, prompt);
    }
    let out = geode(d).arg("sessions").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(lines[1].starts_with("second-one\t"), "{text}");
    assert!(lines[1].ends_with("\twrite the release notes"), "{text}");
    assert!(lines[2].ends_with("\tfix the flaky test in ci"), "{text}");
    assert!(lines[2].contains("\tscripted\t$0.0000\t"), "{text}");
    let out = geode(d)
        .args(["sessions", "--json", "--limit", "1"])
        .output()
        .unwrap();
    let rows: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["session_id"], "second-one");
    assert_eq!(rows[0]["title"], "write the release notes");
    let mut cmd = geode(d);
    cmd.arg("sessions");
    super::common::ends_quietly_on_a_closed_pipe(cmd);
    // In the REPL on a pipe, /resume without an id lists the recent ones, numbered for
    // `/resume N`.
    let out = repl_typed(
        d,
        &["--model", "scripted:answer.toml"],
        b"/resume\n/resume 2\n/model\n/exit\n",
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("\n 1. write the release notes "), "{text}");
    assert!(text.contains("\n 2. fix the flaky test in ci "), "{text}");
    assert!(
        text.contains("/resume N or /resume ID continues one"),
        "{text}"
    );
    assert!(text.contains("resumed first-one ("), "{text}");
    // /model names the routes one may switch to, from the catalog.
    assert!(
        text.contains("routes (/model ROUTE):\n  anthropic:"),
        "{text}"
    );
}

#[test]
fn config_explain_names_the_source_of_each_value() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join(".geode")).unwrap();
    std::fs::create_dir_all(d.join("home")).unwrap();
    std::fs::write(
        d.join(".geode/config.toml"),
        "hitl = \"auto\"\nmax_rounds = 7\n",
    )
    .unwrap();
    std::fs::write(
        d.join("home/config.toml"),
        "max_rounds = 3\neffort = \"low\"\n",
    )
    .unwrap();
    let out = geode(d)
        .args(["--model", "nop", "config", "explain"])
        .env("GEODE_GLOBAL_LANES", "9")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let line = |k: &str| {
        text.lines()
            .find(|l| l.starts_with(&format!("{k} ")))
            .unwrap_or_else(|| panic!("no {k} in {text}"))
            .to_string()
    };
    assert!(line("model").contains("(flag --model)"), "{text}");
    assert!(
        line("global_lanes").contains("\"9\"  (env GEODE_GLOBAL_LANES)"),
        "{text}"
    );
    assert!(line("hitl").contains("(project ") && line("hitl").contains("\"auto\""));
    assert!(
        line("max_rounds").contains("\"7\"  (project "),
        "project beats user: {text}"
    );
    assert!(line("effort").contains("\"low\"  (user "), "{text}");
    assert!(
        line("approval_timeout_secs").contains("(default)"),
        "{text}"
    );
}

/// `geode ... | head` does not panic: with its standard output closed before it writes, each
/// subcommand ends with the SIGPIPE status 141 and no panic message.
#[test]
fn a_closed_pipe_ends_a_subcommand_quietly() {
    let d = tempfile::tempdir().unwrap();
    let pack = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tasks/geode-core");
    let pack = pack.to_str().unwrap();
    for args in [
        vec!["scaffold", "show"],
        vec!["tasks", "list", pack],
        vec!["tasks", "hash", pack],
        vec![
            "crucible",
            "power",
            "--baseline-rate",
            "0.5",
            "--effect",
            "0.1",
            "--tasks",
            "20",
            "--trials",
            "3",
            "--simulations",
            "5",
        ],
        vec!["config", "explain"],
        vec!["dataset", "scan", pack],
        vec!["dataset", "split", pack, "--seed", "1"],
        vec!["crucible", "audit", "--commitments", "."],
        vec!["scaffold", "hash"],
        vec!["receipts", "list"],
        vec!["image", "ls"],
    ] {
        let mut cmd = geode(d.path());
        cmd.args(&args);
        super::common::ends_quietly_on_a_closed_pipe(cmd);
    }
}

/// A Claude Code-shaped hooks file: matcher `Bash`, a command that answers with Claude Code's
/// `permissionDecision: deny` JSON when the shell command starts with `rm`.
pub(super) const NO_RM_HOOKS: &str = r#"[[hooks.PreToolUse]]
matcher = "Bash"
[[hooks.PreToolUse.hooks]]
type = "command"
command = '''grep -q '"command":"rm ' && echo '{"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny", "permissionDecisionReason": "no rm here"}}' || true'''
"#;

/// A model that runs `rm keep.txt`, then `touch made.txt` (which the hook lets through).
pub(super) const RM_THEN_TOUCH: &str = r#"
[[turns]]
text = "Cleaning up."
[[turns.tool_calls]]
id = "b1"
name = "bash"
input = { command = "rm keep.txt" }
[[turns.tool_calls]]
id = "b2"
name = "bash"
input = { command = "touch made.txt" }
[[turns]]
text = "The rm was refused; made.txt is made."
"#;

#[test]
fn a_claude_code_bash_hook_blocks_rm_in_the_repl() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    user_hooks(d, NO_RM_HOOKS, "hitl = \"auto\"\n");
    std::fs::write(d.join("keep.txt"), "kept").unwrap();
    std::fs::write(d.join("script.toml"), RM_THEN_TOUCH).unwrap();
    let out = repl_typed(
        d,
        &["--model", "scripted:script.toml"],
        b"clean up\n/exit\n",
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains("The rm was refused; made.txt is made."),
        "{stdout}"
    );
    assert!(d.join("keep.txt").exists(), "rm ran: {stdout}");
    assert!(d.join("made.txt").exists(), "the shell never ran: {stdout}");
    assert!(
        stdout.contains("no rm here"),
        "the refusal is not shown: {stdout}"
    );
    assert!(
        stdout.contains("! PreToolUse hook command: ") && stdout.contains(" on bash: deny: "),
        "which hook refused is not shown: {stdout}"
    );
}

#[test]
fn clear_then_resume_then_status_answers_status() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("answer.toml"), "[[turns]]\ntext = \"Fine.\"\n").unwrap();
    exec_session(d, "older", "an earlier task");
    // Typed ahead: were any answer one command behind, /exit would leave before /status's.
    let out = repl_typed(
        d,
        &["--model", "scripted:answer.toml"],
        b"/clear\n/resume older\n/status\n/exit\n",
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    let cleared = stdout.find("new session").expect(&stdout);
    let resumed = stdout.find("resumed older").expect(&stdout);
    let status = stdout.find("session older\nmodel ").expect(&stdout);
    assert!(cleared < resumed && resumed < status, "{stdout}");
    assert!(stdout[status..].contains("system prompt "), "{stdout}");
}
