//! Typed tool inputs: each built-in's schema comes from its input type, a bad input is refused
//! naming the field, and the pipeline reads a command or a deadline only from the arguments a
//! tool's spec declares.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use geode_runtime::cognition::CognitiveState;
use geode_runtime::conversation::ToolCall;
use geode_runtime::hooks::HookRegistry;
use geode_runtime::ids::{CorrelationId, PlanHash, SessionId, StepSnapshot};
use geode_runtime::policy::{PersonalDataClass, SafetyLevel, SessionPolicy};
use geode_runtime::store::timeline::{CallOutcome, PipelineStep};
use geode_runtime::tools::approval::NoHuman;
use geode_runtime::tools::builtin::builtin_tools;
use geode_runtime::tools::cognitive::cognitive_tools;
use geode_runtime::tools::executor::{
    CallRecord, ExecutorConfig, ExecutorParts, StepContext, ToolExecutor,
};
use geode_runtime::tools::plan::{
    BoundTool, BoundToolPlan, ResourceKeyRule, ToolContext, ToolHandler, ToolOutput, ToolSpec,
};
use geode_runtime::tools::workspace::LocalWorkspace;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::common::headless;

fn names(list: &Value) -> Vec<&str> {
    let mut names: Vec<&str> = match list {
        Value::Object(map) => map.keys().map(String::as_str).collect(),
        Value::Array(items) => items.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    names.sort_unstable();
    names
}

/// The computer tool's arguments, sorted: one flat object, only `action` required.
const COMPUTER_FIELDS: [&str; 7] = [
    "action",
    "coordinate",
    "duration_ms",
    "scroll_amount",
    "scroll_direction",
    "start_coordinate",
    "text",
];

#[test]
fn each_tool_schema_has_its_properties_required_fields_and_types() {
    let expected: BTreeMap<&str, (Vec<&str>, Vec<&str>)> = [
        (
            "bash",
            (vec!["command", "escalate", "timeout_sec"], vec!["command"]),
        ),
        ("read_file", (vec!["limit", "offset", "path"], vec!["path"])),
        (
            "write_file",
            (vec!["content", "path"], vec!["content", "path"]),
        ),
        (
            "edit_file",
            (
                vec!["new_string", "old_string", "path", "replace_all"],
                vec!["new_string", "old_string", "path"],
            ),
        ),
        ("list_dir", (vec!["path"], vec![])),
        ("glob", (vec!["path", "pattern"], vec!["pattern"])),
        ("grep", (vec!["glob", "path", "pattern"], vec!["pattern"])),
        ("computer", (COMPUTER_FIELDS.to_vec(), vec!["action"])),
        (
            "update_plan",
            (
                vec!["objective", "reason", "steps"],
                vec!["objective", "steps"],
            ),
        ),
        (
            "record_reflection",
            (vec!["hypotheses", "next_action"], vec!["hypotheses"]),
        ),
    ]
    .into_iter()
    .collect();
    let mut tools = builtin_tools();
    tools.extend(cognitive_tools());
    assert_eq!(tools.len(), expected.len());
    for tool in &tools {
        let schema = &tool.spec.input_schema;
        let (properties, required) = &expected[tool.spec.name.as_str()];
        assert_eq!(
            &names(&schema["properties"]),
            properties,
            "{}",
            tool.spec.name
        );
        assert_eq!(&names(&schema["required"]), required, "{}", tool.spec.name);
        assert_eq!(schema["type"], "object");
        assert_eq!(schema["additionalProperties"], false);
        assert!(schema.get("$schema").is_none() && schema.get("title").is_none());
        // A declared command or deadline argument is one the model can actually send.
        for arg in [&tool.spec.command_arg, &tool.spec.deadline_arg]
            .into_iter()
            .flatten()
        {
            assert!(
                schema["properties"].get(arg).is_some(),
                "{}: {arg}",
                tool.spec.name
            );
        }
        // Every property has a plain type, never schemars' `["T", "null"]` for an Option.
        for (name, property) in schema["properties"].as_object().unwrap() {
            assert!(property["type"].is_string(), "{}.{name}", tool.spec.name);
            assert!(
                property.get("format").is_none(),
                "{}.{name}",
                tool.spec.name
            );
        }
    }
    let bash = &tools[0].spec;
    assert_eq!(
        bash.input_schema["properties"]["timeout_sec"]["maximum"],
        3600
    );
    assert_eq!(bash.command_arg.as_deref(), Some("command"));
    assert_eq!(bash.deadline_arg.as_deref(), Some("timeout_sec"));
    for tool in &tools[1..] {
        assert_eq!(
            (&tool.spec.command_arg, &tool.spec.deadline_arg),
            (&None, &None)
        );
    }
    let plan = tools.iter().find(|t| t.spec.name == "update_plan").unwrap();
    let status = &plan.spec.input_schema["properties"]["steps"]["items"]["properties"]["status"];
    assert_eq!(
        status["enum"],
        json!(["pending", "in_progress", "completed", "abandoned"])
    );
}

fn context(ws: Arc<LocalWorkspace>) -> ToolContext {
    ToolContext {
        session_id: SessionId::new("x"),
        call_id: "call-1".to_string(),
        correlation_id: CorrelationId::new("x"),
        model_id: "test-model".to_string(),
        workspace: ws,
        resolved_paths: Vec::new(),
        deadline: Duration::from_secs(60),
        cancel: CancellationToken::new(),
        cognition: Arc::new(Mutex::new(CognitiveState::default())),
        output: Default::default(),
    }
}

#[tokio::test]
async fn a_bad_input_is_refused_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("marker"), "kept").unwrap();
    let ctx = context(Arc::new(LocalWorkspace::new(dir.path()).unwrap()));
    let mut tools = builtin_tools();
    tools.extend(cognitive_tools());
    let call = |name: &str, input: Value| {
        let tool = tools.iter().find(|t| t.spec.name == name).unwrap();
        let ctx = ctx.clone();
        let handler = tool.handler.clone();
        async move { handler.call(&input, &ctx).await }
    };
    let out = call(
        "bash",
        json!({"command": "rm marker", "timeout_sec": "soon"}),
    )
    .await;
    assert!(out.is_error);
    assert!(
        out.content
            .starts_with("invalid input at `timeout_sec`: invalid type"),
        "{}",
        out.content
    );
    let out = call(
        "write_file",
        json!({"path": "marker", "content": "x", "mode": 644}),
    )
    .await;
    assert!(
        out.is_error && out.content.contains("unknown field `mode`"),
        "{}",
        out.content
    );
    let out = call("edit_file", json!({"path": "marker", "new_string": "x"})).await;
    assert_eq!(out.content, "invalid input: missing field `old_string`");
    // Nothing ran: the bash call and the write were refused before their handlers did anything.
    assert_eq!(
        std::fs::read_to_string(dir.path().join("marker")).unwrap(),
        "kept"
    );
    let plan = json!({"objective": "o", "steps": [{"description": "d", "status": "done"}]});
    let out = call("update_plan", plan).await;
    assert!(
        out.content
            .starts_with("invalid plan: invalid input at `steps[0].status`"),
        "{}",
        out.content
    );
    let reflection =
        json!({"hypotheses": [{"statement": "s", "confidence": 0.5, "contradictions": 9}]});
    let out = call("record_reflection", reflection).await;
    assert!(
        out.is_error && out.content.contains("unknown field `contradictions`"),
        "{}",
        out.content
    );
}

/// Reports the deadline it was given, so a test can see which argument the executor read.
struct ShowDeadline;

#[async_trait]
impl ToolHandler for ShowDeadline {
    async fn call(&self, _: &Value, ctx: &ToolContext) -> ToolOutput {
        ToolOutput::ok(format!("deadline {}s", ctx.deadline.as_secs()))
    }
}

/// A dangerous tool whose input has `command` and `timeout_sec` fields, declared or not.
fn shell_like(declared: bool) -> BoundTool {
    let arg = |name: &str| declared.then(|| name.to_string());
    BoundTool {
        spec: ToolSpec {
            name: "shell".into(),
            description: "A test tool.".into(),
            input_schema: json!({"type": "object", "properties": {
                "command": {"type": "string"}, "timeout_sec": {"type": "integer"}}}),
            safety: SafetyLevel::Dangerous,
            personal_data: PersonalDataClass::None,
            resource_keys: ResourceKeyRule::None,
            path_args: vec![],
            effectful: false,
            command_arg: arg("command"),
            deadline_arg: arg("timeout_sec"),
        },
        binding: "test:shell".into(),
        handler: Arc::new(ShowDeadline),
    }
}

/// An executor over `dir` whose plan is the one `tool`, with no hooks, human or timeline.
fn executor_over(
    dir: &Path,
    session: &str,
    tool: BoundTool,
    policy: SessionPolicy,
) -> ToolExecutor {
    ToolExecutor::new(ExecutorParts {
        session_id: SessionId::new(session),
        plan: BoundToolPlan::new(1, vec![tool]),
        policy,
        workspace: Arc::new(LocalWorkspace::new(dir).unwrap()),
        hooks: Arc::new(HookRegistry::new()),
        approver: Arc::new(NoHuman),
        middleware: vec![],
        timeline: None,
        cognition: Arc::new(Mutex::new(CognitiveState::default())),
        config: ExecutorConfig::default(),
    })
    .unwrap()
}

async fn call_shell(declared: bool, input: Value) -> CallRecord {
    let dir = tempfile::tempdir().unwrap();
    let executor = executor_over(
        dir.path(),
        "inputs",
        shell_like(declared),
        headless(SafetyLevel::Dangerous),
    );
    let step = StepContext {
        turn: 1,
        snapshot: StepSnapshot {
            model_id: "test".into(),
            plan_generation: 1,
            plan_hash: PlanHash::new("x"),
            correlation_id: CorrelationId::new("inputs:1:1"),
            round: 1,
        },
        cancel: CancellationToken::new(),
        output: Default::default(),
        by_person: false,
    };
    let call = ToolCall {
        id: "c".into(),
        name: "shell".into(),
        input,
    };
    executor.execute(call, &step).await
}

#[tokio::test]
async fn the_executor_reads_only_the_declared_command_and_deadline() {
    let input = json!({"command": "mkfs.ext4 /dev/sda", "timeout_sec": 7});
    let declared = call_shell(true, input.clone()).await;
    assert!(
        matches!(
            &declared.outcome,
            CallOutcome::Denied {
                step: PipelineStep::Policy,
                ..
            }
        ),
        "{:?}",
        declared.outcome
    );
    let undeclared = call_shell(false, input).await;
    assert_eq!(undeclared.outcome, CallOutcome::Succeeded);
    assert_eq!(undeclared.result.content, "deadline 120s");
    let asked = call_shell(true, json!({"command": "ls", "timeout_sec": 7})).await;
    assert_eq!(asked.result.content, "deadline 7s");
}

/// `shell_like` under another name (a tool that arrives after the session started).
fn named(name: &str) -> BoundTool {
    let mut t = shell_like(true);
    t.spec.name = name.into();
    t
}

#[test]
fn late_tools_join_as_a_new_generation_and_only_when_new_and_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let mut policy = headless(SafetyLevel::Dangerous);
    policy.deny_list.insert("denied".into());
    let mut executor = executor_over(dir.path(), "late", named("shell"), policy);
    let (generation, hash) = (executor.plan().generation(), executor.plan().hash().clone());

    // Nothing new: the plan and its hash stay.
    assert!(executor.add_tools(vec![named("shell")]).unwrap().is_empty());
    assert_eq!(executor.plan().generation(), generation);
    assert_eq!(executor.plan().hash(), &hash);

    let added = executor
        .add_tools(vec![
            named("late"),
            named("denied"),
            named("shell"),
            named("late"),
        ])
        .unwrap();
    assert_eq!(added, vec!["late".to_string()]);
    assert_eq!(executor.plan().generation(), generation + 1);
    assert_ne!(executor.plan().hash(), &hash);
    assert!(executor.plan().get("late").is_some());
    assert!(executor.plan().get("denied").is_none());

    // A schema that does not compile changes nothing.
    let mut bad = named("broken");
    bad.spec.input_schema = json!({"type": 12});
    assert!(executor.add_tools(vec![bad]).is_err());
    assert!(executor.plan().get("broken").is_none());
    assert_eq!(executor.plan().generation(), generation + 1);
}
