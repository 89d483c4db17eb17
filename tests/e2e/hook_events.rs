//! Hook decisions as `geode exec --json` reports them: a Claude Code-shaped hooks file whose
//! `Bash` hook denies `rm` and rewrites another command, and a UserPromptSubmit hook that adds
//! context. A person reading the events must see which hook decided what, and why, before the
//! call's `tool_ended`.

use serde_json::Value;

use super::exec::{geode, json_events, stderr};

const SCRIPT: &str = r#"
[[turns]]
[[turns.tool_calls]]
name = "bash"
input = { command = "rm -f keep.txt" }
[[turns.tool_calls]]
name = "bash"
input = { command = "echo hello > out.txt" }
[[turns.tool_calls]]
name = "bash"
input = { command = "echo untouched > plain.txt" }
[[turns]]
text = "One command was refused, one rewritten, one ran as asked."
"#;

/// The PreToolUse hook reads the event on stdin as Claude Code's hooks do; it has no opinion
/// on the third command.
const PRE_TOOL_USE: &str = r#"input=$(cat)
case "$input" in
  *'"command":"rm '*)
    echo '{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"rm is not allowed here"}}' ;;
  *'echo hello'*)
    echo '{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"allow","permissionDecisionReason":"say goodbye instead","updatedInput":{"command":"echo goodbye > out.txt"}}}' ;;
esac
"#;

const HOOKS: &str = r#"
[[hooks.PreToolUse]]
matcher = "Bash"
[[hooks.PreToolUse.hooks]]
type = "command"
command = "sh pre_tool_use.sh"

[[hooks.UserPromptSubmit]]
[[hooks.UserPromptSubmit.hooks]]
type = "command"
command = "echo 'The user prefers short answers.'"
"#;

fn events_of_type<'e>(events: &'e [Value], kind: &str) -> Vec<&'e Value> {
    events.iter().filter(|e| e["type"] == kind).collect()
}

/// Where the event of `kind` for `call_id` stands in the stream.
fn position(events: &[Value], kind: &str, call_id: &Value) -> usize {
    events
        .iter()
        .position(|e| e["type"] == kind && &e["call_id"] == call_id)
        .unwrap_or_else(|| panic!("no {kind} for {call_id}"))
}

#[test]
fn hook_decisions_are_events_before_the_calls_they_decided() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::write(root.join("script.toml"), SCRIPT).unwrap();
    std::fs::write(root.join("hooks.toml"), HOOKS).unwrap();
    std::fs::write(root.join("pre_tool_use.sh"), PRE_TOOL_USE).unwrap();
    std::fs::write(root.join("keep.txt"), "still here").unwrap();
    let out = geode(
        root,
        &[
            "exec",
            "--model",
            "scripted:script.toml",
            "--allow",
            "dangerous",
            "--hooks",
            "hooks.toml",
            "--json",
            "tidy up",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(root.join("keep.txt").exists(), "the denied rm ran");
    assert_eq!(
        std::fs::read_to_string(root.join("out.txt")).unwrap(),
        "goodbye\n",
        "the rewritten command did not run as rewritten"
    );
    assert!(root.join("plain.txt").exists());

    let events = json_events(&out);
    let decisions = events_of_type(&events, "hook_decision");
    assert_eq!(decisions.len(), 3, "{decisions:#?}");
    for d in &decisions {
        assert!(d["at"].is_string(), "{d}");
        assert_eq!(
            d["hook"].as_str().unwrap().split(' ').next(),
            Some("command:")
        );
    }

    let prompt = decisions[0];
    assert_eq!(prompt["event"], "UserPromptSubmit", "{prompt}");
    assert_eq!(prompt["decision"], "add_context", "{prompt}");
    assert_eq!(
        prompt["reason"], "The user prefers short answers.",
        "{prompt}"
    );
    assert!(
        prompt["tool"].is_null() && prompt["call_id"].is_null(),
        "{prompt}"
    );

    let started = events_of_type(&events, "tool_started");
    assert_eq!(started.len(), 3);
    let (rm, hello, plain) = (
        &started[0]["call_id"],
        &started[1]["call_id"],
        &started[2]["call_id"],
    );

    let deny = decisions[1];
    assert_eq!(&deny["call_id"], rm, "{deny}");
    assert_eq!(deny["event"], "PreToolUse", "{deny}");
    assert_eq!(deny["tool"], "bash", "{deny}");
    assert_eq!(deny["decision"], "deny", "{deny}");
    assert_eq!(deny["reason"], "rm is not allowed here", "{deny}");
    assert!(
        position(&events, "hook_decision", rm) < position(&events, "tool_ended", rm),
        "the deny comes after the call's end"
    );
    let rm_ended = &events[position(&events, "tool_ended", rm)];
    assert_eq!(rm_ended["is_error"], true, "{rm_ended}");

    let rewrite = decisions[2];
    assert_eq!(&rewrite["call_id"], hello, "{rewrite}");
    assert_eq!(rewrite["decision"], "rewrite", "{rewrite}");
    assert_eq!(rewrite["reason"], "say goodbye instead", "{rewrite}");
    assert_eq!(rewrite["input"]["command"], "echo goodbye > out.txt");
    assert!(
        position(&events, "hook_decision", hello) < position(&events, "tool_ended", hello),
        "the rewrite comes after the call's end"
    );

    // A hook with no opinion decided nothing.
    assert!(
        !decisions.iter().any(|d| &d["call_id"] == plain),
        "{decisions:#?}"
    );
}
