//! Every denial path of the tool pipeline, each with its side effect checked on disk.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use geode_runtime::policy::{
    Classification, PersonalDataClass, SafetyLevel, SessionMode, SessionPolicy,
};
use geode_runtime::store::timeline::{CallOutcome, PipelineStep, TimelineEvent};
use geode_runtime::tools::approval::{ApprovalAnswer, ApprovalRequest, Approver};
use geode_runtime::tools::executor::{ToolRequest, ToolRequestMiddleware};
use serde_json::json;

use super::common::*;

fn write(path: &str) -> serde_json::Value {
    json!([{"name": "write_file", "input": {"path": path, "content": "x"}}])
}

#[tokio::test(flavor = "multi_thread")]
async fn granted_write_runs_and_is_recorded() {
    let f = Fixture::new();
    let mut s = f.session(
        calls_then_text(write("out.txt"), "Wrote out.txt."),
        SafetyLevel::Write,
    );
    run(&mut s, "write").await;
    assert_eq!(std::fs::read_to_string(f.path("out.txt")).unwrap(), "x");
    assert_eq!(denied_step(&f.rows(&s)), None);
}

#[tokio::test(flavor = "multi_thread")]
async fn headless_approval_denies_an_ungranted_write() {
    let f = Fixture::new();
    let mut s = f.session(
        calls_then_text(write("out.txt"), "Could not write."),
        SafetyLevel::Safe,
    );
    run(&mut s, "write").await;
    assert!(!exists(&f.path("out.txt")));
    assert_eq!(denied_step(&f.rows(&s)), Some(PipelineStep::Approval));
    let (content, is_error) = tool_result_for(&s, "call_1_0");
    assert!(
        is_error && content.contains("denied at approval"),
        "{content}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn unknown_and_deny_listed_tools_are_denied_at_scope() {
    let f = Fixture::new();
    let calls = json!([
        {"name": "no_such_tool", "input": {}},
        {"name": "bash", "input": {"command": "touch made-by-bash"}}
    ]);
    // Write granted, shell not: bash stays on the headless deny list.
    let mut s = f.session(
        calls_then_text(calls, "Denied, as expected."),
        SafetyLevel::Write,
    );
    run(&mut s, "go").await;
    assert!(!exists(&f.path("made-by-bash")));
    let all = completed(&f.rows(&s));
    assert_eq!(all.len(), 2);
    for (_, outcome) in all {
        assert!(
            matches!(outcome, CallOutcome::Denied { ref step, .. } if *step == PipelineStep::Scope),
            "{outcome:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn path_escapes_are_denied_at_scope() {
    let f = Fixture::new();
    std::os::unix::fs::symlink(&f.outside, f.path("link")).unwrap();
    let escape_abs = f.outside.join("abs.txt");
    let calls = json!([
        {"name": "write_file", "input": {"path": "../outside/dotdot.txt", "content": "x"}},
        {"name": "write_file", "input": {"path": escape_abs.to_str().unwrap(), "content": "x"}},
        {"name": "write_file", "input": {"path": "link/via-symlink.txt", "content": "x"}},
        {"name": "read_file", "input": {"path": "link/../../outside/abs.txt"}}
    ]);
    let mut s = f.session(calls_then_text(calls, "All denied."), SafetyLevel::Write);
    run(&mut s, "escape").await;
    for name in ["dotdot.txt", "abs.txt", "via-symlink.txt"] {
        assert!(
            !exists(&f.outside.join(name)),
            "{name} was written outside the workspace"
        );
    }
    let all = completed(&f.rows(&s));
    assert_eq!(all.len(), 4);
    assert!(
        all.iter().all(
            |(_, o)| matches!(o, CallOutcome::Denied { step, .. } if *step == PipelineStep::Scope)
        ),
        "{all:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn forbidden_command_is_denied_at_policy() {
    let f = Fixture::new();
    // If the policy step failed, the marker would be written (mkfs on a missing path is harmless).
    let calls = json!([{"name": "bash", "input": {"command": "touch marker; mkfs.ext4 /nonexistent/geode-test"}}]);
    let mut s = f.session(
        calls_then_text(calls, "Refused by policy."),
        SafetyLevel::Dangerous,
    );
    run(&mut s, "format").await;
    assert!(!exists(&f.path("marker")));
    assert_eq!(denied_step(&f.rows(&s)), Some(PipelineStep::Policy));
}

#[tokio::test(flavor = "multi_thread")]
async fn invalid_input_is_denied_at_schema() {
    let f = Fixture::new();
    let calls = json!([{"name": "write_file", "input": {"path": "out.txt"}}]);
    let mut s = f.session(
        calls_then_text(calls, "Schema error reported."),
        SafetyLevel::Write,
    );
    run(&mut s, "write").await;
    assert!(!exists(&f.path("out.txt")));
    assert_eq!(denied_step(&f.rows(&s)), Some(PipelineStep::Schema));
    let (content, _) = tool_result_for(&s, "call_1_0");
    assert!(
        content.contains("content"),
        "the error names the missing field: {content}"
    );
}

/// Rewrites every call into one of `target`, declaring `declared` as its classification.
struct RewriteTo {
    target: &'static str,
    input: serde_json::Value,
    declared: Classification,
}

impl ToolRequestMiddleware for RewriteTo {
    fn name(&self) -> &str {
        "rewrite-to"
    }
    fn rewrite(&self, _: &ToolRequest) -> Option<ToolRequest> {
        Some(ToolRequest {
            name: self.target.into(),
            input: self.input.clone(),
            classification: self.declared,
        })
    }
}

fn class(safety: SafetyLevel, personal_data: PersonalDataClass) -> Classification {
    Classification {
        safety,
        personal_data,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rewrite_lowering_the_safety_level_is_refused() {
    let f = Fixture::new();
    std::fs::write(f.path("notes.txt"), "n").unwrap();
    let calls = json!([{"name": "bash", "input": {"command": "touch marker"}}]);
    let mut s = f.session_with(
        calls_then_text(calls, "Refused."),
        SafetyLevel::Dangerous,
        |c| {
            c.middleware.push(Arc::new(RewriteTo {
                target: "read_file",
                input: json!({"path": "notes.txt"}),
                declared: class(SafetyLevel::Safe, PersonalDataClass::None),
            }));
        },
    );
    run(&mut s, "go").await;
    assert!(!exists(&f.path("marker")));
    assert_eq!(denied_step(&f.rows(&s)), Some(PipelineStep::Rewrite));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rewrite_lowering_the_personal_data_class_is_refused_and_raising_is_kept() {
    let f = Fixture::new();
    let calls = json!([{"name": "write_file", "input": {"path": "a.txt", "content": "x"}}]);
    // The middleware marks the call as carrying personal data: allowed (raising), and then the
    // session's ceiling (Personal) still admits it.
    let mut s = f.session_with(
        calls_then_text(calls.clone(), "Done."),
        SafetyLevel::Write,
        |c| {
            c.middleware.push(Arc::new(RewriteTo {
                target: "write_file",
                input: json!({"path": "b.txt", "content": "y"}),
                declared: class(SafetyLevel::Write, PersonalDataClass::Personal),
            }));
        },
    );
    run(&mut s, "go").await;
    assert!(exists(&f.path("b.txt")) && !exists(&f.path("a.txt")));

    // A second middleware then tries to declare the data away: refused.
    let f = Fixture::new();
    let mut s = f.session_with(
        calls_then_text(calls, "Refused."),
        SafetyLevel::Write,
        |c| {
            c.middleware.push(Arc::new(RewriteTo {
                target: "write_file",
                input: json!({"path": "b.txt", "content": "y"}),
                declared: class(SafetyLevel::Write, PersonalDataClass::Special),
            }));
            c.middleware.push(Arc::new(RewriteTo {
                target: "write_file",
                input: json!({"path": "c.txt", "content": "z"}),
                declared: class(SafetyLevel::Write, PersonalDataClass::None),
            }));
        },
    );
    run(&mut s, "go").await;
    let rows = f.rows(&s);
    assert_eq!(denied_step(&rows), Some(PipelineStep::Rewrite));
    for n in ["a.txt", "b.txt", "c.txt"] {
        assert!(!exists(&f.path(n)), "{n}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_command_hook_exiting_2_blocks_with_its_stderr() {
    let f = Fixture::new();
    let hooks = f.hooks(
        r#"
[[hooks.PreToolUse]]
matcher = "write_file"
[[hooks.PreToolUse.hooks]]
type = "command"
command = "cat > hook-input.json; echo 'writes are frozen' >&2; exit 2"
"#,
    );
    let mut s = f.session_with(
        calls_then_text(write("out.txt"), "Blocked by hook."),
        SafetyLevel::Write,
        |c| c.hooks = hooks,
    );
    run(&mut s, "write").await;
    assert!(!exists(&f.path("out.txt")));
    assert_eq!(denied_step(&f.rows(&s)), Some(PipelineStep::PreToolUse));
    let (content, _) = tool_result_for(&s, "call_1_0");
    assert!(content.contains("writes are frozen"), "{content}");
    // The hook saw the event in Claude Code's shape.
    let input: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(f.path("hook-input.json")).unwrap()).unwrap();
    assert_eq!(input["hook_event_name"], "PreToolUse");
    assert_eq!(input["tool_name"], "write_file");
    assert_eq!(input["tool_input"]["path"], "out.txt");
    assert_eq!(input["session_id"], s.session_id().as_str());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_claude_code_hooks_file_matches_by_its_own_tool_names() {
    let f = Fixture::new();
    // As copied from a Claude Code settings file: `Write`, not `write_file`.
    let hooks = f.hooks(
        r#"
[[hooks.PreToolUse]]
matcher = "Edit|Write"
[[hooks.PreToolUse.hooks]]
type = "command"
command = "echo 'no writes today' >&2; exit 2"
"#,
    );
    let mut s = f.session_with(
        calls_then_text(write("out.txt"), "Blocked by hook."),
        SafetyLevel::Write,
        |c| c.hooks = hooks,
    );
    run(&mut s, "write").await;
    assert!(!exists(&f.path("out.txt")));
    assert_eq!(denied_step(&f.rows(&s)), Some(PipelineStep::PreToolUse));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hook_rewrite_is_checked_again_and_denied_by_schema() {
    let f = Fixture::new();
    let hooks = f.hooks(
        r#"
[[hooks.PreToolUse]]
[[hooks.PreToolUse.hooks]]
type = "command"
command = "echo '{\"hookSpecificOutput\":{\"updatedInput\":{\"path\":\"rewritten.txt\"}}}'"
"#,
    );
    let mut s = f.session_with(
        calls_then_text(write("out.txt"), "Denied."),
        SafetyLevel::Write,
        |c| c.hooks = hooks,
    );
    run(&mut s, "write").await;
    assert!(!exists(&f.path("out.txt")) && !exists(&f.path("rewritten.txt")));
    assert_eq!(denied_step(&f.rows(&s)), Some(PipelineStep::Schema));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hook_rewrite_escaping_the_workspace_is_denied_at_scope() {
    let f = Fixture::new();
    let hooks = f.hooks(
        r#"
[[hooks.PreToolUse]]
[[hooks.PreToolUse.hooks]]
type = "command"
command = "echo '{\"hookSpecificOutput\":{\"updatedInput\":{\"path\":\"../outside/hooked.txt\",\"content\":\"x\"}}}'"
"#,
    );
    let mut s = f.session_with(
        calls_then_text(write("out.txt"), "Denied."),
        SafetyLevel::Write,
        |c| c.hooks = hooks,
    );
    run(&mut s, "write").await;
    assert!(!exists(&f.outside.join("hooked.txt")) && !exists(&f.path("out.txt")));
    assert_eq!(denied_step(&f.rows(&s)), Some(PipelineStep::Scope));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_valid_hook_rewrite_runs_the_rewritten_call() {
    let f = Fixture::new();
    let hooks = f.hooks(
        r#"
[[hooks.PreToolUse]]
[[hooks.PreToolUse.hooks]]
type = "command"
command = "echo '{\"hookSpecificOutput\":{\"updatedInput\":{\"path\":\"rewritten.txt\",\"content\":\"r\"}}}'"
"#,
    );
    let mut s = f.session_with(
        calls_then_text(write("out.txt"), "Wrote."),
        SafetyLevel::Write,
        |c| c.hooks = hooks,
    );
    run(&mut s, "write").await;
    assert!(!exists(&f.path("out.txt")));
    assert_eq!(
        std::fs::read_to_string(f.path("rewritten.txt")).unwrap(),
        "r"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hook_asking_permission_in_headless_mode_is_denied() {
    let f = Fixture::new();
    let hooks = f.hooks(
        r#"
[[hooks.PreToolUse]]
[[hooks.PreToolUse.hooks]]
type = "command"
command = "echo '{\"hookSpecificOutput\":{\"permissionDecision\":\"ask\",\"permissionDecisionReason\":\"check with a human\"}}'"
"#,
    );
    let mut s = f.session_with(
        calls_then_text(write("out.txt"), "Denied."),
        SafetyLevel::Write,
        |c| c.hooks = hooks,
    );
    run(&mut s, "write").await;
    assert!(!exists(&f.path("out.txt")));
    assert_eq!(denied_step(&f.rows(&s)), Some(PipelineStep::Approval));
}

/// A PreToolUse hook answering Claude Code's `permissionDecision: "allow"`.
const ALLOW_HOOK: &str = r#"
[[hooks.PreToolUse]]
[[hooks.PreToolUse.hooks]]
type = "command"
command = "echo '{\"hookSpecificOutput\":{\"hookEventName\":\"PreToolUse\",\"permissionDecision\":\"allow\"}}'"
"#;

/// A REPL session on `script` with the allow hook and a person who refuses everything.
fn allowed_by_hook(
    f: &Fixture,
    script: serde_json::Value,
    edit: impl FnOnce(&mut geode_runtime::session::SessionConfig),
) -> (geode_runtime::agent::AgenticLoop, Arc<CountingApprover>) {
    let refuser = Arc::new(CountingApprover {
        asked: AtomicUsize::new(0),
        answer: ApprovalAnswer::No,
    });
    let model = Arc::new(geode_runtime::model::embedded::ScriptedModel::from_json(script).unwrap());
    let mut cfg = f.config(model, SessionPolicy::for_mode(SessionMode::Repl));
    cfg.approver = refuser.clone();
    cfg.hooks = f.hooks(ALLOW_HOOK);
    edit(&mut cfg);
    (
        geode_runtime::session::create_session(cfg).unwrap(),
        refuser,
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hook_allowing_a_call_means_no_one_is_asked() {
    let f = Fixture::new();
    let (mut s, refuser) = allowed_by_hook(&f, calls_then_text(write("out.txt"), "Wrote."), |_| {});
    run(&mut s, "write").await;
    assert_eq!(denied_step(&f.rows(&s)), None);
    assert!(exists(&f.path("out.txt")));
    assert_eq!(refuser.asked.load(Ordering::SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hook_allowing_a_call_does_not_let_it_leave_the_sandbox_unasked() {
    use geode_runtime::tools::workspace::{CommandSandbox, LocalWorkspace, SandboxPolicy};
    let f = Fixture::new();
    let marker = f.outside.join("escaped");
    let command = format!("touch {}", marker.display());
    let calls = json!([{"name": "bash",
        "input": {"command": command, "escalate": "needs the folder beside"}}]);
    let root = f.root.clone();
    let (mut s, refuser) = allowed_by_hook(&f, calls_then_text(calls, "Refused."), |c| {
        c.workspace = Arc::new(
            LocalWorkspace::new(&root)
                .unwrap()
                .with_sandbox(CommandSandbox::WorkspaceWrite(SandboxPolicy::default())),
        );
    });
    run(&mut s, "escape").await;
    assert_eq!(denied_step(&f.rows(&s)), Some(PipelineStep::Approval));
    assert_eq!(refuser.asked.load(Ordering::SeqCst), 1);
    assert!(!exists(&marker));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failing_hook_is_recorded_and_the_call_proceeds() {
    let f = Fixture::new();
    let hooks = f.hooks(
        r#"
[[hooks.PreToolUse]]
[[hooks.PreToolUse.hooks]]
type = "command"
command = "echo broken >&2; exit 1"
[[hooks.PreToolUse.hooks]]
type = "command"
command = "sleep 5"
timeout = 1
"#,
    );
    let mut s = f.session_with(
        calls_then_text(write("out.txt"), "Wrote."),
        SafetyLevel::Write,
        |c| c.hooks = hooks,
    );
    run(&mut s, "write").await;
    assert!(exists(&f.path("out.txt")));
    let failures: Vec<String> = f
        .rows(&s)
        .into_iter()
        .filter_map(|r| match r.event {
            TimelineEvent::HookFailed { error, .. } => Some(error),
            _ => None,
        })
        .collect();
    assert_eq!(failures.len(), 2, "{failures:?}");
    assert!(
        failures[0].contains("broken") && failures[1].contains("timed out"),
        "{failures:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn post_tool_use_block_withholds_a_result_that_already_ran() {
    let f = Fixture::new();
    let hooks = f.hooks(
        r#"
[[hooks.PostToolUse]]
[[hooks.PostToolUse.hooks]]
type = "command"
command = "echo '{\"decision\":\"block\",\"reason\":\"contains secrets\"}'"
"#,
    );
    std::fs::write(f.path("secret.txt"), "hunter2").unwrap();
    let calls = json!([{"name": "read_file", "input": {"path": "secret.txt"}}]);
    let mut s = f.session_with(
        calls_then_text(calls, "Result withheld."),
        SafetyLevel::Safe,
        |c| c.hooks = hooks,
    );
    run(&mut s, "read").await;
    let (content, is_error) = tool_result_for(&s, "call_1_0");
    assert!(
        is_error && !content.contains("hunter2") && content.contains("contains secrets"),
        "{content}"
    );
    let all = completed(&f.rows(&s));
    assert!(matches!(all[0].1, CallOutcome::Withheld { .. }));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_timed_out_bash_call_leaves_no_grandchild() {
    let f = Fixture::new();
    let calls = json!([{"name": "bash", "input": {"command": "sleep 300 & echo $! > pid; wait", "timeout_sec": 1}}]);
    let mut s = f.session(
        calls_then_text(calls, "The command timed out."),
        SafetyLevel::Dangerous,
    );
    let started = std::time::Instant::now();
    run(&mut s, "sleep").await;
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
    let (content, is_error) = tool_result_for(&s, "call_1_0");
    assert!(is_error && content.contains("timed out"), "{content}");
    let pid: i32 = std::fs::read_to_string(f.path("pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        wait_gone(pid).await,
        "grandchild {pid} survived the timeout"
    );
}

struct CountingApprover {
    asked: AtomicUsize,
    answer: ApprovalAnswer,
}

#[async_trait]
impl Approver for CountingApprover {
    async fn ask(&self, _: &ApprovalRequest) -> ApprovalAnswer {
        self.asked.fetch_add(1, Ordering::SeqCst);
        self.answer.clone()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn repl_approval_prompts_and_always_is_remembered() {
    let f = Fixture::new();
    let approver = Arc::new(CountingApprover {
        asked: AtomicUsize::new(0),
        answer: ApprovalAnswer::Always,
    });
    let calls = json!([
        {"name": "write_file", "input": {"path": "a.txt", "content": "x"}},
        {"name": "write_file", "input": {"path": "b.txt", "content": "x"}}
    ]);
    let script = calls_then_text(calls, "Both written.");
    let model = Arc::new(geode_runtime::model::embedded::ScriptedModel::from_json(script).unwrap());
    let mut cfg = f.config(model, SessionPolicy::for_mode(SessionMode::Repl));
    cfg.approver = approver.clone();
    let mut s = geode_runtime::session::create_session(cfg).unwrap();
    run(&mut s, "write").await;
    assert!(exists(&f.path("a.txt")) && exists(&f.path("b.txt")));
    assert_eq!(approver.asked.load(Ordering::SeqCst), 1);

    let f = Fixture::new();
    let refuser = Arc::new(CountingApprover {
        asked: AtomicUsize::new(0),
        answer: ApprovalAnswer::No,
    });
    let script = calls_then_text(
        json!([{"name": "write_file", "input": {"path": "a.txt", "content": "x"}}]),
        "Refused.",
    );
    let model = Arc::new(geode_runtime::model::embedded::ScriptedModel::from_json(script).unwrap());
    let mut cfg = f.config(model, SessionPolicy::for_mode(SessionMode::Repl));
    cfg.approver = refuser;
    let mut s = geode_runtime::session::create_session(cfg).unwrap();
    run(&mut s, "write").await;
    assert!(!exists(&f.path("a.txt")));
    assert_eq!(denied_step(&f.rows(&s)), Some(PipelineStep::Approval));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_timeline_holds_every_call_including_denials() {
    let f = Fixture::new();
    std::fs::write(f.path("r.txt"), "r").unwrap();
    let calls = json!([
        {"name": "read_file", "input": {"path": "r.txt"}},
        {"name": "write_file", "input": {"path": "w.txt", "content": "w"}},
        {"name": "write_file", "input": {"path": "../x.txt", "content": "w"}},
        {"name": "write_file", "input": {"path": "w2.txt"}},
        {"name": "bash", "input": {"command": "true"}}
    ]);
    let mut s = f.session(
        calls_then_text(calls, "Some were denied."),
        SafetyLevel::Write,
    );
    run(&mut s, "many").await;
    let rows = f.rows(&s);
    let called: Vec<&str> = rows
        .iter()
        .filter(|r| r.kind == "tool.called")
        .filter_map(|r| r.call_id.as_deref())
        .collect();
    let done: Vec<&str> = rows
        .iter()
        .filter(|r| r.kind == "tool.completed")
        .filter_map(|r| r.call_id.as_deref())
        .collect();
    let expected: Vec<String> = (0..5).map(|i| format!("call_1_{i}")).collect();
    assert_eq!(called, expected);
    let mut done_sorted = done.clone();
    done_sorted.sort();
    assert_eq!(done_sorted, expected);
    let steps: Vec<String> = completed(&rows)
        .into_iter()
        .map(|(id, o)| match o {
            CallOutcome::Denied { step, .. } => format!("{id}:{step}"),
            other => format!("{id}:{other:?}"),
        })
        .collect();
    assert_eq!(
        steps,
        [
            "call_1_0:Succeeded",
            "call_1_1:Succeeded",
            "call_1_2:scope",
            "call_1_3:schema",
            "call_1_4:scope"
        ]
    );
    // Each tool.called comes before its tool.completed.
    for id in expected {
        let c = rows
            .iter()
            .position(|r| r.kind == "tool.called" && r.call_id.as_deref() == Some(&id))
            .unwrap();
        let d = rows
            .iter()
            .position(|r| r.kind == "tool.completed" && r.call_id.as_deref() == Some(&id))
            .unwrap();
        assert!(c < d);
    }
}
