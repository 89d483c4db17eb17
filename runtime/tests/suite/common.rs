//! Shared set-up for the runtime's integration tests: a real temp directory as workspace, a
//! real SQLite timeline, a scripted model.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use geode_runtime::agent::{AgenticLoop, TurnOutcome};
use geode_runtime::hooks::HookRegistry;
use geode_runtime::hooks::command::{HookDialect, register_command_hooks};
use geode_runtime::model::Model;
use geode_runtime::model::embedded::ScriptedModel;
use geode_runtime::policy::{SafetyLevel, SessionMode, SessionPolicy};
use geode_runtime::session::{SessionConfig, create_session};
use geode_runtime::store::timeline::{
    CallOutcome, PipelineStep, SessionTimeline, TimelineEvent, TimelineRow,
};
use geode_runtime::tools::workspace::LocalWorkspace;
use serde_json::{Value, json};
use tempfile::TempDir;
use tokio_util::sync::CancellationToken;

pub struct Fixture {
    pub _dir: TempDir,
    /// The workspace root (canonical).
    pub root: PathBuf,
    /// A directory beside the workspace, outside it.
    pub outside: PathBuf,
    pub timeline: Arc<SessionTimeline>,
}

impl Fixture {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("ws");
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        let root = root.canonicalize().unwrap();
        let timeline = Arc::new(SessionTimeline::open(dir.path().join("timeline.db")).unwrap());
        Fixture {
            _dir: dir,
            root,
            outside: outside.canonicalize().unwrap(),
            timeline,
        }
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    pub fn config(&self, model: Arc<dyn Model>, policy: SessionPolicy) -> SessionConfig {
        let ws = Arc::new(LocalWorkspace::new(&self.root).unwrap());
        let mut cfg = SessionConfig::new(policy, ws, model);
        cfg.timeline = Some(self.timeline.clone());
        cfg.date = Some("2026-11-30".into());
        cfg
    }

    /// A headless session on a scripted model, allowing unattended calls up to `allow`.
    pub fn session(&self, script: Value, allow: SafetyLevel) -> AgenticLoop {
        self.session_with(script, allow, |_| {})
    }

    pub fn session_with(
        &self,
        script: Value,
        allow: SafetyLevel,
        edit: impl FnOnce(&mut SessionConfig),
    ) -> AgenticLoop {
        let model = Arc::new(ScriptedModel::from_json(script).unwrap());
        let mut cfg = self.config(model, headless(allow));
        edit(&mut cfg);
        create_session(cfg).unwrap()
    }

    pub fn hooks(&self, toml: &str) -> HookRegistry {
        let mut r = HookRegistry::new();
        register_command_hooks(
            &mut r,
            toml,
            "test-hooks.toml",
            HookDialect::Geode,
            &self.root,
        )
        .unwrap();
        r
    }

    pub fn rows(&self, session: &AgenticLoop) -> Vec<TimelineRow> {
        self.timeline.rows(session.session_id()).unwrap()
    }
}

pub fn headless(allow: SafetyLevel) -> SessionPolicy {
    let p = SessionPolicy::for_mode(SessionMode::Headless);
    if allow > SafetyLevel::Safe {
        p.grant_unattended(allow, "test")
    } else {
        p
    }
}

/// A script: one round of tool calls, then a final text.
pub fn calls_then_text(calls: Value, text: &str) -> Value {
    json!({"turns": [{"tool_calls": calls}, {"text": text}]})
}

pub async fn run(session: &mut AgenticLoop, prompt: &str) -> TurnOutcome {
    session.run_turn(prompt, &CancellationToken::new()).await
}

/// The outcome of every completed call in the timeline, by call id order of completion.
pub fn completed(rows: &[TimelineRow]) -> Vec<(String, CallOutcome)> {
    rows.iter()
        .filter_map(|r| match &r.event {
            TimelineEvent::ToolCompleted {
                call_id, outcome, ..
            } => Some((call_id.clone(), outcome.clone())),
            _ => None,
        })
        .collect()
}

/// The step that denied the only call of the session, or `None` when it was not denied.
pub fn denied_step(rows: &[TimelineRow]) -> Option<PipelineStep> {
    let all = completed(rows);
    assert_eq!(all.len(), 1, "expected exactly one call, got {all:?}");
    match &all[0].1 {
        CallOutcome::Denied { step, .. } => Some(*step),
        _ => None,
    }
}

/// The content of the tool_result the model received for `call_id`.
pub fn tool_result_for(session: &AgenticLoop, call_id: &str) -> (String, bool) {
    use geode_runtime::conversation::ContentBlock;
    for m in session.messages() {
        for b in &m.content {
            if let ContentBlock::ToolResult {
                tool_use_id,
                content,
                is_error,
            } = b
                && tool_use_id == call_id
            {
                return (content.clone(), *is_error);
            }
        }
    }
    panic!("no tool_result for {call_id}");
}

pub fn exists(p: &Path) -> bool {
    p.symlink_metadata().is_ok()
}

/// Gone or a zombie (a container's init may not reap orphans promptly).
pub fn process_gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
    }
}

pub async fn wait_gone(pid: i32) -> bool {
    for _ in 0..20 {
        if process_gone(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    process_gone(pid)
}
