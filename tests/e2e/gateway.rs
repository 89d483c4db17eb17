//! The model gateway's trajectories against Harbor's own `Trajectory` model (harbor 0.25, the
//! virtual environment `harbor.rs` makes): for each wire format, a two-call session of the
//! runtime's adapter through a gateway with a scripted route (the task, a reply with tool
//! calls, their results, the final answer) is recorded, and the ATIF built from the records
//! alone must validate; a broken copy must not, so the check itself can fail.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use async_trait::async_trait;
use geode_harness::gateway::{self, Budgets, GatewayConfig, Listen};
use geode_runtime::conversation::{AssistantTurn, ContentBlock, Message, Role};
use geode_runtime::ids::{CorrelationId, PlanHash, StepSnapshot};
use geode_runtime::model::credentials::{ApiKey, Env};
use geode_runtime::model::embedded::ScriptedModel;
use geode_runtime::model::http::RouteOptions;
use geode_runtime::model::{DeltaSink, Model, ModelRequest, model_from_route};
use geode_runtime::policy::{PersonalDataClass, SafetyLevel};
use geode_runtime::tools::plan::{
    BoundTool, BoundToolPlan, ResourceKeyRule, ToolContext, ToolHandler, ToolOutput, ToolSpec,
};
use serde_json::{Value, json};

struct Unused;

#[async_trait]
impl ToolHandler for Unused {
    async fn call(&self, _: &Value, _: &ToolContext) -> ToolOutput {
        ToolOutput::error("not run")
    }
}

fn plan() -> BoundToolPlan {
    let bash = BoundTool {
        spec: ToolSpec {
            name: "bash".into(),
            description: "Run a command".into(),
            input_schema: json!({"type": "object", "properties": {"command": {"type": "string"}},
                                 "required": ["command"]}),
            safety: SafetyLevel::Dangerous,
            personal_data: PersonalDataClass::None,
            resource_keys: ResourceKeyRule::None,
            path_args: vec![],
            effectful: true,
            command_arg: None,
            deadline_arg: None,
        },
        binding: "test:bash".into(),
        handler: Arc::new(Unused),
    };
    BoundToolPlan::new(0, vec![bash])
}

async fn ask(model: &dyn Model, messages: &[Message]) -> AssistantTurn {
    let plan = plan();
    let snapshot = StepSnapshot {
        model_id: "t".into(),
        plan_generation: 0,
        plan_hash: PlanHash::new("0"),
        correlation_id: CorrelationId::new("c"),
        round: 1,
    };
    model
        .complete(&ModelRequest {
            system: "You are an agent under test.",
            messages,
            plan: &plan,
            snapshot: &snapshot,
            force_text: false,
            deltas: DeltaSink::default(),
        })
        .await
        .unwrap()
}

/// One recorded session per format; returns the trajectory written under `dir`.
async fn session(dir: &Path, format: &str) -> std::path::PathBuf {
    let script = json!({"turns": [
        {"thinking": "Look first.", "text": "Listing.",
         "tool_calls": [{"name": "bash", "input": {"command": "ls"}}],
         "usage": {"input_tokens": 50, "output_tokens": 9}},
        {"text": "Two files.", "usage": {"input_tokens": 70, "output_tokens": 3}},
    ]});
    let trial = dir.join(format);
    let gw = gateway::start(GatewayConfig {
        model: Arc::new(ScriptedModel::from_json(script).unwrap()),
        model_name: "scripted".into(),
        budgets: Budgets::default(),
        record_file: trial.join(gateway::RECORD_FILE),
        listen: Listen::loopback(),
        secrets: vec![],
    })
    .await
    .unwrap();
    let url = gw.url().unwrap();
    let (route, base) = match format {
        "anthropic" => (
            "anthropic:claude-sonnet-4-5-20250929".to_string(),
            url.clone(),
        ),
        "responses" => ("openai:gpt-5.5".to_string(), format!("{url}/v1")),
        _ => (format!("compat:{url}/v1:gw-model"), url.clone()),
    };
    let mut opts = RouteOptions::with_env(Env::empty());
    opts.base_url = Some(base);
    opts.api_key = Some(ApiKey::new(gw.token()));
    let model = model_from_route(&route, &opts).unwrap();
    let task = Message::user_text("List the files.");
    let first = ask(&*model, std::slice::from_ref(&task)).await;
    let results = first
        .message
        .tool_calls()
        .into_iter()
        .map(|c| ContentBlock::ToolResult {
            tool_use_id: c.id,
            content: "a.txt\nb.txt".into(),
            is_error: false,
        })
        .collect();
    let conversation = vec![
        task,
        first.message.clone(),
        Message {
            role: Role::User,
            content: results,
        },
    ];
    ask(&*model, &conversation).await;
    let records = gw.finish().await.unwrap();
    let doc = gateway::trajectory::trajectory(format, &format!("trial-{format}"), &records);
    assert_eq!(doc["steps"].as_array().unwrap().len(), 3, "{doc:#}");
    assert_eq!(
        doc["steps"][1]["observation"]["results"][0]["content"], "a.txt\nb.txt",
        "{doc:#}"
    );
    let path = trial.join("agent/trajectory.json");
    std::fs::write(&path, serde_json::to_vec_pretty(&doc).unwrap()).unwrap();
    path
}

fn harbor_validates(python: &Path, files: &[std::path::PathBuf]) -> (bool, String) {
    let out = Command::new(python)
        .args([
            "-c",
            "import json, sys\n\
             from harbor.models.trajectories.trajectory import Trajectory\n\
             for p in sys.argv[1:]:\n    Trajectory.model_validate(json.load(open(p)))\n\
             print('valid:', len(sys.argv) - 1)",
        ])
        .args(files)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn gateway_trajectories_of_every_format_validate_with_harbors_model() {
    let python = super::harbor::harbor_python();
    let d = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let files: Vec<_> = ["anthropic", "responses", "chat"]
        .iter()
        .map(|f| rt.block_on(session(d.path(), f)))
        .collect();
    let (ok, report) = harbor_validates(&python, &files);
    assert!(ok, "{report}");
    assert!(report.contains("valid: 3"), "{report}");

    let mut broken: Value = serde_json::from_slice(&std::fs::read(&files[0]).unwrap()).unwrap();
    broken["steps"][1]["tool_calls"][0]["arguments"] = json!("not an object");
    let bad = d.path().join("broken.json");
    std::fs::write(&bad, broken.to_string()).unwrap();
    let (ok, report) = harbor_validates(&python, &[bad]);
    assert!(!ok, "Harbor accepted a broken trajectory: {report}");
}
