//! The tool pipeline's own overhead per call: a trivial in-process tool, no hooks, the timeline
//! on (a real SQLite file in WAL mode), headless policy.
//!
//! - `executor/one_call`: one call through every step (scope .. timeline rows), alone.
//! - `executor/one_call_no_timeline`: the same without the timeline.
//! - `loop/100_calls_per_turn`: a whole turn on a scripted model proposing 100 such calls in
//!   one batch, then a text answer, including session set-up and the timeline flush (every
//!   row committed); divide by 100 for an upper bound of the per-call cost inside the loop.
//!
//! The timeline commits on its own writer thread, so `executor/one_call` measures what the
//! pipeline costs the caller; the loop bench includes the commits.

#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use criterion::{Criterion, criterion_group, criterion_main};
use geode_runtime::cognition::CognitiveState;
use geode_runtime::conversation::ToolCall;
use geode_runtime::hooks::HookRegistry;
use geode_runtime::ids::{CorrelationId, PlanHash, SessionId, StepSnapshot};
use geode_runtime::model::embedded::ScriptedModel;
use geode_runtime::policy::{PersonalDataClass, SafetyLevel, SessionMode, SessionPolicy};
use geode_runtime::session::{SessionConfig, create_session};
use geode_runtime::store::timeline::SessionTimeline;
use geode_runtime::tools::approval::NoHuman;
use geode_runtime::tools::executor::{ExecutorConfig, ExecutorParts, StepContext, ToolExecutor};
use geode_runtime::tools::plan::{
    BoundTool, BoundToolPlan, ResourceKeyRule, ToolContext, ToolHandler, ToolOutput, ToolSpec,
};
use geode_runtime::tools::workspace::LocalWorkspace;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

struct Echo;

#[async_trait]
impl ToolHandler for Echo {
    async fn call(&self, input: &Value, _: &ToolContext) -> ToolOutput {
        ToolOutput::ok(input["text"].as_str().unwrap_or_default().to_string())
    }
}

fn echo_tool() -> BoundTool {
    BoundTool {
        spec: ToolSpec {
            name: "echo".into(),
            description: "Echo the text.".into(),
            input_schema: json!({
                "type": "object",
                "properties": {"text": {"type": "string"}},
                "required": ["text"],
                "additionalProperties": false
            }),
            safety: SafetyLevel::Safe,
            personal_data: PersonalDataClass::None,
            resource_keys: ResourceKeyRule::Fixed("echo".into()),
            path_args: vec![],
            effectful: false,
            command_arg: None,
            deadline_arg: None,
        },
        binding: "bench:echo".into(),
        handler: Arc::new(Echo),
    }
}

fn bench_pipeline(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let timeline = Arc::new(SessionTimeline::open(dir.path().join("timeline.db")).unwrap());
    let workspace = Arc::new(LocalWorkspace::new(dir.path()).unwrap());

    let executor = |timeline: Option<Arc<SessionTimeline>>| {
        ToolExecutor::new(ExecutorParts {
            session_id: SessionId::new("bench"),
            plan: BoundToolPlan::new(1, vec![echo_tool()]),
            policy: SessionPolicy::for_mode(SessionMode::Headless),
            workspace: workspace.clone(),
            hooks: Arc::new(HookRegistry::new()),
            approver: Arc::new(NoHuman),
            middleware: vec![],
            timeline,
            cognition: Arc::new(Mutex::new(CognitiveState::default())),
            config: ExecutorConfig::default(),
        })
        .unwrap()
    };
    let with_timeline = executor(Some(timeline.clone()));
    let without_timeline = executor(None);
    let step = StepContext {
        turn: 1,
        snapshot: StepSnapshot {
            model_id: "bench".into(),
            plan_generation: 1,
            plan_hash: PlanHash::new("x"),
            correlation_id: CorrelationId::new("bench:1:1"),
            round: 1,
        },
        cancel: CancellationToken::new(),
        output: Default::default(),
        by_person: false,
    };
    let call = ToolCall {
        id: "c".into(),
        name: "echo".into(),
        input: json!({"text": "hello"}),
    };
    c.bench_function("executor/one_call", |b| {
        b.to_async(&rt)
            .iter(|| async { with_timeline.execute(call.clone(), &step).await })
    });
    // The same without the timeline, to see what the two SQLite rows cost.
    c.bench_function("executor/one_call_no_timeline", |b| {
        b.to_async(&rt)
            .iter(|| async { without_timeline.execute(call.clone(), &step).await })
    });

    let calls: Vec<Value> = (0..100)
        .map(|i| json!({"name": "echo", "input": {"text": format!("t{i}")}}))
        .collect();
    let script = json!({"turns": [{"tool_calls": calls}, {"text": "Echoed one hundred texts."}]});
    c.bench_function("loop/100_calls_per_turn", |b| {
        b.to_async(&rt).iter(|| async {
            let model = Arc::new(ScriptedModel::from_json(script.clone()).unwrap());
            let mut cfg = SessionConfig::new(
                SessionPolicy::for_mode(SessionMode::Headless),
                workspace.clone(),
                model,
            );
            cfg.timeline = Some(timeline.clone());
            cfg.extra_tools = vec![echo_tool()];
            let mut session = create_session(cfg).unwrap();
            let out = session.run_turn("echo", &CancellationToken::new()).await;
            // Count the commits too: every row of the turn is in the file before the next one.
            timeline.flush().unwrap();
            out
        })
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(5));
    targets = bench_pipeline
}
criterion_main!(benches);
