//! The policy of messaging-channel (DAEMON) sessions: a tool allow-list enforced by the
//! pipeline, and computer use only with the operator's separate switch, only in DAEMON mode.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use geode_runtime::model::embedded::ScriptedModel;
use geode_runtime::policy::{
    COMPUTER_TOOL, PersonalDataClass, SafetyLevel, SessionMode, SessionPolicy,
};
use geode_runtime::session::create_session;
use geode_runtime::store::timeline::PipelineStep;
use geode_runtime::tools::plan::{
    BoundTool, ResourceKeyRule, ToolContext, ToolHandler, ToolOutput, ToolSpec,
};
use serde_json::{Value, json};

use super::common::*;

/// A stand-in `computer` tool that counts its dispatches.
struct CountingComputer(Arc<AtomicUsize>);

#[async_trait]
impl ToolHandler for CountingComputer {
    async fn call(&self, _: &Value, _: &ToolContext) -> ToolOutput {
        self.0.fetch_add(1, Ordering::SeqCst);
        ToolOutput::ok("clicked")
    }
}

fn computer_tool(count: Arc<AtomicUsize>) -> BoundTool {
    BoundTool {
        spec: ToolSpec {
            name: COMPUTER_TOOL.into(),
            description: "Test computer use.".into(),
            input_schema: json!({"type": "object", "properties": {"action": {"type": "string"}}}),
            safety: SafetyLevel::Dangerous,
            personal_data: PersonalDataClass::None,
            resource_keys: ResourceKeyRule::None,
            path_args: vec![],
            effectful: false,
            command_arg: None,
            deadline_arg: None,
        },
        binding: "test:computer".into(),
        handler: Arc::new(CountingComputer(count)),
    }
}

/// Run a one-call script under `policy` with the counting computer tool bound; returns the
/// dispatch count and the step that denied the call (None: it ran).
async fn run_computer(policy: SessionPolicy) -> (usize, Option<PipelineStep>, String) {
    let f = Fixture::new();
    let count = Arc::new(AtomicUsize::new(0));
    let script = calls_then_text(
        json!([{"name": "computer", "input": {"action": "click"}}]),
        "Done.",
    );
    let model = Arc::new(ScriptedModel::from_json(script).unwrap());
    let mut cfg = f.config(model, policy);
    cfg.extra_tools.push(computer_tool(count.clone()));
    let mut s = create_session(cfg).unwrap();
    run(&mut s, "click").await;
    let step = denied_step(&f.rows(&s));
    let (content, _) = tool_result_for(&s, "call_1_0");
    (count.load(Ordering::SeqCst), step, content)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tool_outside_the_allow_list_is_denied_at_scope_and_hidden_from_the_model() {
    let f = Fixture::new();
    // Writes granted: only the allow-list stands between the call and the file.
    let policy = SessionPolicy::for_mode(SessionMode::Daemon)
        .grant_unattended(SafetyLevel::Write, "test")
        .with_tool_allow_list(["read_file".to_string(), "list_dir".to_string()]);
    let script = calls_then_text(
        json!([{"name": "write_file", "input": {"path": "out.txt", "content": "x"}}]),
        "Could not write.",
    );
    let mut s = f.session_with(script, SafetyLevel::Safe, |cfg| cfg.policy = policy);
    let names: Vec<&str> = s
        .tool_plan()
        .tools()
        .iter()
        .map(|t| t.spec.name.as_str())
        .collect();
    assert_eq!(names, ["list_dir", "read_file"]);
    run(&mut s, "write").await;
    assert!(!exists(&f.path("out.txt")));
    assert_eq!(denied_step(&f.rows(&s)), Some(PipelineStep::Scope));
    let (content, is_error) = tool_result_for(&s, "call_1_0");
    assert!(is_error, "{content}");
    assert!(
        content.contains("not on this session's tool allow-list (list_dir, read_file)"),
        "{content}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_allowed_tool_still_runs_under_the_allow_list() {
    let f = Fixture::new();
    std::fs::write(f.path("notes.txt"), "remember the milk").unwrap();
    let policy = SessionPolicy::for_mode(SessionMode::Daemon)
        .with_tool_allow_list(["read_file".to_string()]);
    let script = calls_then_text(
        json!([{"name": "read_file", "input": {"path": "notes.txt"}}]),
        "Read it.",
    );
    let mut s = f.session_with(script, SafetyLevel::Safe, |cfg| cfg.policy = policy);
    run(&mut s, "read").await;
    assert_eq!(denied_step(&f.rows(&s)), None);
    let (content, is_error) = tool_result_for(&s, "call_1_0");
    assert!(
        !is_error && content.contains("remember the milk"),
        "{content}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn computer_use_is_refused_in_daemon_mode_without_the_operator_switch() {
    let (count, step, content) = run_computer(SessionPolicy::for_mode(SessionMode::Daemon)).await;
    assert_eq!(count, 0);
    assert_eq!(step, Some(PipelineStep::Scope), "{content}");
}

#[tokio::test(flavor = "multi_thread")]
async fn computer_use_runs_unattended_in_daemon_mode_with_the_operator_switch() {
    let policy = SessionPolicy::for_mode(SessionMode::Daemon).enable_operator_computer_use();
    let (count, step, content) = run_computer(policy).await;
    assert_eq!(step, None, "{content}");
    assert_eq!(count, 1);
    assert_eq!(content, "clicked");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_operator_switch_has_no_effect_in_headless_mode() {
    // Through the method: nothing changes, the deny list still refuses at scope.
    let policy = SessionPolicy::for_mode(SessionMode::Headless).enable_operator_computer_use();
    let (count, step, _) = run_computer(policy).await;
    assert_eq!((count, step), (0, Some(PipelineStep::Scope)));
    // Even forced by hand past the deny list, the approval gate does not honour it.
    let mut forced = SessionPolicy::for_mode(SessionMode::Headless);
    forced.deny_list.remove(COMPUTER_TOOL);
    forced.operator_computer_use = true;
    let (count, step, content) = run_computer(forced).await;
    assert_eq!(count, 0);
    assert_eq!(step, Some(PipelineStep::Approval), "{content}");
}
