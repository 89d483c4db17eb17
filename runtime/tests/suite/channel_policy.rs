//! The policy of messaging-channel (DAEMON) sessions: a tool allow-list enforced by the
//! pipeline, and computer use only with the operator's separate switch, only in DAEMON mode.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use geode_runtime::conversation::{ContentBlock, ImageMediaType};
use geode_runtime::model::embedded::ScriptedModel;
use geode_runtime::policy::{COMPUTER_TOOL, SafetyLevel, SessionMode, SessionPolicy};
use geode_runtime::session::create_session;
use geode_runtime::store::timeline::PipelineStep;
use geode_runtime::tools::computer::screenshot::encode_png;
use geode_runtime::tools::computer::{ComputerAction, ComputerError, Screenshot};
use geode_runtime::tools::workspace::{
    DirEntryInfo, ExecOutput, ExecRequest, LocalWorkspace, ScopeViolation, Workspace,
    WorkspaceError,
};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::common::*;

/// A local workspace whose display is a counter: the real `computer` tool runs through the
/// whole pipeline, and only the X server is left out (the e2e tests drive a real one).
#[derive(Debug)]
struct CountingDisplay {
    files: LocalWorkspace,
    actions: Arc<AtomicUsize>,
}

#[async_trait]
impl Workspace for CountingDisplay {
    fn root(&self) -> &Path {
        self.files.root()
    }
    fn resolve(&self, path: &str) -> Result<PathBuf, ScopeViolation> {
        self.files.resolve(path)
    }
    async fn read_file(&self, path: &Path) -> Result<Vec<u8>, WorkspaceError> {
        self.files.read_file(path).await
    }
    async fn write_file(&self, path: &Path, bytes: &[u8]) -> Result<(), WorkspaceError> {
        self.files.write_file(path, bytes).await
    }
    async fn list_dir(&self, path: &Path) -> Result<Vec<DirEntryInfo>, WorkspaceError> {
        self.files.list_dir(path).await
    }
    async fn exec(
        &self,
        req: ExecRequest,
        cancel: CancellationToken,
    ) -> Result<ExecOutput, WorkspaceError> {
        self.files.exec(req, cancel).await
    }
    async fn computer(&self, _: &ComputerAction) -> Result<Screenshot, ComputerError> {
        self.actions.fetch_add(1, Ordering::SeqCst);
        Ok(Screenshot {
            png: encode_png(&[255, 255, 255], 1, 1)?,
            width: 1,
            height: 1,
            screen_width: 1,
            screen_height: 1,
        })
    }
}

/// Run a one-call script of the real `computer` tool under `policy`; returns how many actions
/// reached the display, the step that denied the call (None: it ran) and the result's text.
async fn run_computer(policy: SessionPolicy) -> (usize, Option<PipelineStep>, String) {
    let f = Fixture::new();
    let actions = Arc::new(AtomicUsize::new(0));
    let script = calls_then_text(
        json!([{"name": "computer", "input": {"action": "screenshot"}}]),
        "Done.",
    );
    let model = Arc::new(ScriptedModel::from_json(script).unwrap());
    let mut cfg = f.config(model, policy);
    cfg.workspace = Arc::new(CountingDisplay {
        files: LocalWorkspace::new(&f.root).unwrap(),
        actions: actions.clone(),
    });
    let mut s = create_session(cfg).unwrap();
    run(&mut s, "look at the screen").await;
    let step = denied_step(&f.rows(&s));
    let (content, _) = tool_result_for(&s, "call_1_0");
    // A screenshot that ran reaches the conversation as an image right after its result.
    let images = s
        .messages()
        .iter()
        .flat_map(|m| &m.content)
        .filter(|b| matches!(b, ContentBlock::Image(i) if i.media_type == ImageMediaType::Png))
        .count();
    assert_eq!(images, actions.load(Ordering::SeqCst), "{content}");
    (actions.load(Ordering::SeqCst), step, content)
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
    assert!(content.starts_with("screenshot 1x1"), "{content}");
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
