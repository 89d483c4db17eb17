//! `delegate_task`: a child loop with its own session id, a narrower plan and its own budget,
//! announced by SubagentStart / SubagentStop; absent where the mode denies delegation.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use geode_runtime::hooks::{HookDecision, HookEnvelope, HookEvent, HookEventKind, HookHandler};
use geode_runtime::ids::SessionId;
use geode_runtime::policy::{SafetyLevel, SessionMode, SessionPolicy};
use geode_runtime::session::create_session;
use geode_runtime::store::timeline::TimelineEvent;
use geode_runtime::tools::approval::{ApprovalAnswer, ApprovalRequest, Approver};
use serde_json::json;

use super::common::{Fixture, completed, run, tool_result_for};

struct Yes;

#[async_trait]
impl Approver for Yes {
    async fn ask(&self, _: &ApprovalRequest) -> ApprovalAnswer {
        ApprovalAnswer::Yes
    }
}

/// Records the sub-agent events it sees.
#[derive(Default)]
struct SubagentLog(Mutex<Vec<String>>);

#[async_trait]
impl HookHandler for SubagentLog {
    fn name(&self) -> String {
        "in-process: subagent log".into()
    }

    async fn handle(&self, envelope: &HookEnvelope) -> Result<HookDecision, String> {
        let line = match &envelope.event {
            HookEvent::SubagentStart {
                subagent_session_id,
            } => format!("start {subagent_session_id}"),
            HookEvent::SubagentStop {
                subagent_session_id,
            } => format!("stop {subagent_session_id}"),
            _ => return Ok(HookDecision::Continue),
        };
        self.0.lock().unwrap().push(line);
        Ok(HookDecision::Continue)
    }
}

/// Parent round 1 delegates; the child (rounds 2-4 of the shared scripted model) writes a
/// file, tries the shell and a nested delegation, then answers; parent round 5 answers.
fn delegation_script() -> serde_json::Value {
    json!({"turns": [
        {"tool_calls": [{"name": "delegate_task", "input": {
            "task": "write note.txt", "tools": ["write_file", "read_file"], "max_rounds": 5}}]},
        {"tool_calls": [{"name": "write_file", "input": {"path": "note.txt", "content": "hi"}}]},
        {"tool_calls": [
            {"name": "bash", "input": {"command": "touch shell.txt"}},
            {"name": "delegate_task", "input": {"task": "recurse"}}]},
        {"text": "Wrote note.txt; the shell and a nested delegation could not run."},
        {"text": "The sub-agent wrote the note."}
    ]})
}

#[tokio::test(flavor = "multi_thread")]
async fn a_child_runs_with_its_own_id_a_narrower_plan_and_subagent_hooks() {
    let f = Fixture::new();
    let log = Arc::new(SubagentLog::default());
    let model = Arc::new(
        geode_runtime::model::embedded::ScriptedModel::from_json(delegation_script()).unwrap(),
    );
    let mut cfg = f.config(model, SessionPolicy::for_mode(SessionMode::Repl));
    cfg.approver = Arc::new(Yes);
    for kind in [HookEventKind::SubagentStart, HookEventKind::SubagentStop] {
        cfg.hooks
            .register(
                kind,
                None,
                0,
                std::time::Duration::from_secs(5),
                log.clone(),
            )
            .unwrap();
    }
    let mut parent = create_session(cfg).unwrap();
    assert!(parent.tool_plan().get("delegate_task").is_some());
    let outcome = run(&mut parent, "delegate the note").await;
    let (content, _) = tool_result_for(&parent, "call_1_0");
    assert_eq!(
        outcome.text, "The sub-agent wrote the note.",
        "{outcome:?} {content}"
    );

    let (content, is_error) = tool_result_for(&parent, "call_1_0");
    assert!(!is_error, "{content}");
    let child_id = format!("{}.sub1", parent.session_id());
    assert!(
        content.starts_with("Wrote note.txt; the shell"),
        "{content}"
    );
    assert!(
        content.contains(&format!("[sub-agent {child_id}: natural, 3 rounds")),
        "{content}"
    );
    assert_eq!(std::fs::read_to_string(f.path("note.txt")).unwrap(), "hi");
    assert!(
        !f.path("shell.txt").exists(),
        "the child ran a tool it was not given"
    );

    // The child's calls are rows of its own session; the two outside its plan were refused.
    f.timeline.flush().unwrap();
    let child_rows = f.timeline.rows(&SessionId::new(child_id.clone())).unwrap();
    let outcomes = completed(&child_rows);
    assert_eq!(outcomes.len(), 3, "{outcomes:?}");
    assert!(outcomes[0].1.dispatched());
    assert!(!outcomes[1].1.dispatched() && !outcomes[2].1.dispatched());
    let started = child_rows.iter().find_map(|r| match &r.event {
        TimelineEvent::SessionStarted { plan_hash, .. } => Some(plan_hash.clone()),
        _ => None,
    });
    let parent_plan = parent.tool_plan().hash().to_string();
    assert!(started.is_some_and(|h| h != parent_plan));
    // The parent's own rows hold only the delegation call.
    let parent_calls = completed(&f.rows(&parent));
    assert_eq!(parent_calls.len(), 1);

    assert_eq!(
        *log.0.lock().unwrap(),
        vec![format!("start {child_id}"), format!("stop {child_id}")]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_child_may_not_ask_for_tools_its_parent_lacks() {
    let f = Fixture::new();
    let script = json!({"turns": [
        {"tool_calls": [{"name": "delegate_task", "input": {"task": "x", "tools": ["teleport"]}}]},
        {"text": "It could not."}
    ]});
    let model = Arc::new(geode_runtime::model::embedded::ScriptedModel::from_json(script).unwrap());
    let mut cfg = f.config(model, SessionPolicy::for_mode(SessionMode::Repl));
    cfg.approver = Arc::new(Yes);
    let mut parent = create_session(cfg).unwrap();
    run(&mut parent, "go").await;
    let (content, is_error) = tool_result_for(&parent, "call_1_0");
    assert!(is_error);
    assert!(
        content.contains("\"teleport\" is not available"),
        "{content}"
    );
}

#[test]
fn modes_without_a_human_have_no_delegation() {
    let f = Fixture::new();
    for mode in [SessionMode::Headless, SessionMode::Daemon] {
        let policy = SessionPolicy::for_mode(mode).grant_unattended(SafetyLevel::Dangerous, "t");
        let model = Arc::new(geode_runtime::model::embedded::NopModel);
        let s = create_session(f.config(model, policy)).unwrap();
        assert!(s.tool_plan().get("delegate_task").is_none(), "{mode:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_model_switch_moves_the_sub_agents_too() {
    use geode_runtime::agent::ModelSwitch;
    use geode_runtime::model::embedded::ScriptedModel;
    let f = Fixture::new();
    let first = json!({"turns": [{"text": "the first model never answers a sub-agent"}]});
    let second = json!({"turns": [
        {"tool_calls": [{"name": "delegate_task", "input": {"task": "look", "tools": ["list_dir"]}}]},
        {"text": "The second model answered the sub-agent's task."},
        {"text": "Delegated to the second model."}
    ]});
    let mut cfg = f.config(
        Arc::new(ScriptedModel::from_json(first).unwrap()),
        SessionPolicy::for_mode(SessionMode::Repl),
    );
    cfg.approver = Arc::new(Yes);
    let mut parent = create_session(cfg).unwrap();
    parent
        .switch_model(ModelSwitch {
            model: Arc::new(ScriptedModel::from_json(second).unwrap()),
            route: "scripted:second".into(),
            provider: "embedded".into(),
            effort: None,
        })
        .unwrap();
    let outcome = run(&mut parent, "delegate").await;
    assert_eq!(outcome.text, "Delegated to the second model.");
    let (content, is_error) = tool_result_for(&parent, "call_1_0");
    assert!(!is_error, "{content}");
    assert!(
        content.starts_with("The second model answered"),
        "{content}"
    );
}

/// A safe tool that answers who it is: one that joins after the session started.
struct LateNote;

#[async_trait]
impl geode_runtime::tools::plan::ToolHandler for LateNote {
    async fn call(
        &self,
        _: &serde_json::Value,
        _: &geode_runtime::tools::plan::ToolContext,
    ) -> geode_runtime::tools::plan::ToolOutput {
        geode_runtime::tools::plan::ToolOutput::ok("the late tool answered")
    }
}

fn late_note() -> geode_runtime::tools::plan::BoundTool {
    use geode_runtime::tools::plan::{BoundTool, ResourceKeyRule, ToolSpec};
    BoundTool {
        spec: ToolSpec {
            name: "late_note".into(),
            description: "A tool that connected late.".into(),
            input_schema: json!({"type": "object"}),
            safety: SafetyLevel::Safe,
            personal_data: geode_runtime::policy::PersonalDataClass::None,
            resource_keys: ResourceKeyRule::None,
            path_args: vec![],
            effectful: false,
            command_arg: None,
            deadline_arg: None,
        },
        binding: "test:late_note".into(),
        handler: Arc::new(LateNote),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_child_may_name_a_tool_that_joined_after_its_parent_started() {
    let f = Fixture::new();
    let script = json!({"turns": [
        {"tool_calls": [{"name": "delegate_task", "input": {"task": "note", "tools": ["late_note"]}}]},
        {"tool_calls": [{"name": "late_note", "input": {}}]},
        {"text": "The late tool answered."},
        {"text": "Delegated."}
    ]});
    let model = Arc::new(geode_runtime::model::embedded::ScriptedModel::from_json(script).unwrap());
    let mut cfg = f.config(model, SessionPolicy::for_mode(SessionMode::Repl));
    cfg.approver = Arc::new(Yes);
    let arrived = Arc::new(Mutex::new(Vec::new()));
    let source = arrived.clone();
    cfg.late_tools = Some(Arc::new(move || source.lock().unwrap().clone()));
    let mut parent = create_session(cfg).unwrap();
    // The tool connects after the parent was built; no driver hands it to the parent's plan.
    arrived.lock().unwrap().push(late_note());
    let outcome = run(&mut parent, "delegate").await;
    assert_eq!(outcome.text, "Delegated.", "{outcome:?}");
    assert!(parent.tool_plan().get("late_note").is_none());
    let (content, is_error) = tool_result_for(&parent, "call_1_0");
    assert!(!is_error, "{content}");
    f.timeline.flush().unwrap();
    let child = SessionId::new(format!("{}.sub1", parent.session_id()));
    let outcomes = completed(&f.timeline.rows(&child).unwrap());
    assert_eq!(outcomes.len(), 1, "{outcomes:?}");
    assert!(outcomes[0].1.dispatched(), "{outcomes:?}");
}
