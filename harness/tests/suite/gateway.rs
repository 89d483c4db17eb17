//! The model gateway over real HTTP on loopback (and a unix socket): the runtime's own three
//! provider adapters as its clients, requests shaped like Claude Code's and Codex CLI's, a bad
//! token, used-up budgets, and the records and the ATIF trajectory built from them.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use geode_harness::gateway::records::{self, CallStatus, WireFormat};
use geode_harness::gateway::{self, Budgets, Gateway, GatewayConfig, Listen};
use geode_runtime::conversation::{AssistantTurn, ContentBlock, Message};
use geode_runtime::ids::{CorrelationId, PlanHash, StepSnapshot};
use geode_runtime::model::credentials::{ApiKey, Env};
use geode_runtime::model::embedded::ScriptedModel;
use geode_runtime::model::errors::RetryPolicy;
use geode_runtime::model::http::RouteOptions;
use geode_runtime::model::sse::parse_all;
use geode_runtime::model::{DeltaSink, Model, ModelDelta, ModelRequest, model_from_route};
use geode_runtime::policy::{PersonalDataClass, SafetyLevel};
use geode_runtime::tools::plan::{
    BoundTool, BoundToolPlan, ResourceKeyRule, ToolContext, ToolHandler, ToolOutput, ToolSpec,
};
use serde_json::{Value, json};

/// Two turns: thinking, text and two tool calls (one with the script's own id), then text.
fn script() -> Value {
    json!({"turns": [
        {"thinking": "Let me look first.", "text": "Listing the files.",
         "tool_calls": [
            {"id": "toolu_01", "name": "bash", "input": {"command": "ls -la", "timeout": 30}},
            {"name": "read_file", "input": {"path": "notes/a.txt"}}],
         "usage": {"input_tokens": 100, "output_tokens": 20}},
        {"text": "All done: two files.", "usage": {"input_tokens": 150, "output_tokens": 7}},
    ]})
}

struct Fixture {
    gateway: Gateway,
    dir: tempfile::TempDir,
}

impl Fixture {
    fn record_file(&self) -> std::path::PathBuf {
        self.dir.path().join(gateway::RECORD_FILE)
    }
}

async fn start(script: Value, budgets: Budgets, unix: bool) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let model = Arc::new(ScriptedModel::from_json(script).unwrap());
    let mut listen = Listen::loopback();
    if unix {
        listen.unix = Some(dir.path().join("gw.sock"));
    }
    let gateway = gateway::start(GatewayConfig {
        model,
        model_name: "geode-scripted".into(),
        budgets,
        record_file: dir.path().join(gateway::RECORD_FILE),
        listen,
        secrets: vec![],
    })
    .await
    .unwrap();
    Fixture { gateway, dir }
}

struct Unused;

#[async_trait]
impl ToolHandler for Unused {
    async fn call(&self, _: &Value, _: &ToolContext) -> ToolOutput {
        ToolOutput::error("not run in these tests")
    }
}

fn tool(name: &str, schema: Value) -> BoundTool {
    BoundTool {
        spec: ToolSpec {
            name: name.into(),
            description: format!("the {name} tool"),
            input_schema: schema,
            safety: SafetyLevel::Dangerous,
            personal_data: PersonalDataClass::None,
            resource_keys: ResourceKeyRule::None,
            path_args: vec![],
            effectful: true,
            command_arg: None,
            deadline_arg: None,
        },
        binding: format!("test:{name}"),
        handler: Arc::new(Unused),
    }
}

fn plan() -> BoundToolPlan {
    BoundToolPlan::new(
        0,
        vec![
            tool(
                "bash",
                json!({"type": "object", "properties": {"command": {"type": "string"},
                       "timeout": {"type": "integer"}}, "required": ["command"]}),
            ),
            tool(
                "read_file",
                json!({"type": "object", "properties": {"path": {"type": "string"}},
                       "required": ["path"]}),
            ),
        ],
    )
}

fn snapshot() -> StepSnapshot {
    StepSnapshot {
        model_id: "test".into(),
        plan_generation: 0,
        plan_hash: PlanHash::new("0"),
        correlation_id: CorrelationId::new("c"),
        round: 1,
    }
}

/// Ask `model` with `messages`; the reply and the text deltas it streamed.
async fn ask(model: &dyn Model, messages: &[Message]) -> (AssistantTurn, String) {
    let plan = plan();
    let snapshot = snapshot();
    let seen = Arc::new(Mutex::new(String::new()));
    let sink = {
        let seen = seen.clone();
        DeltaSink::new(move |d| {
            if let ModelDelta::Text(t) = d {
                seen.lock().unwrap().push_str(&t);
            }
        })
    };
    let turn = model
        .complete(&ModelRequest {
            system: "You are a test agent.",
            messages,
            plan: &plan,
            snapshot: &snapshot,
            force_text: false,
            deltas: sink,
        })
        .await
        .unwrap();
    let text = seen.lock().unwrap().clone();
    (turn, text)
}

fn options(base_url: String, token: &str) -> RouteOptions {
    let mut opts = RouteOptions::with_env(Env::empty());
    opts.base_url = Some(base_url);
    opts.api_key = Some(ApiKey::new(token));
    opts.http.retry = RetryPolicy {
        max_retries: 0,
        ..RetryPolicy::default()
    };
    opts.http.idle_timeout = Duration::from_secs(20);
    opts
}

/// The conversation after the first reply: the task, the reply, the tool results.
fn second_round(first: &AssistantTurn) -> Vec<Message> {
    let results = first
        .message
        .tool_calls()
        .into_iter()
        .map(|c| ContentBlock::ToolResult {
            tool_use_id: c.id,
            content: format!("output of {}", c.name),
            is_error: false,
        })
        .collect();
    vec![
        Message::user_text("List the files."),
        first.message.clone(),
        Message {
            role: geode_runtime::conversation::Role::User,
            content: results,
        },
    ]
}

/// Each of the runtime's adapters, pointed at the gateway with the per-trial token, gets back
/// exactly the turns the scripted model behind it plays (as the same script played directly
/// gives them), streamed as text deltas, with the script's token counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runtimes_adapters_get_the_scripts_turns_through_the_gateway() {
    let direct = ScriptedModel::from_json(script()).unwrap();
    let task = [Message::user_text("List the files.")];
    let (want_1, _) = ask(&direct, &task).await;
    let (want_2, _) = ask(&direct, &second_round(&want_1)).await;
    for (format, route) in [
        (
            WireFormat::AnthropicMessages,
            "anthropic:claude-sonnet-4-5-20250929",
        ),
        (WireFormat::OpenaiResponses, "openai:gpt-5.5"),
        (WireFormat::ChatCompletions, "compat"),
    ] {
        let f = start(script(), Budgets::default(), false).await;
        let url = f.gateway.url().unwrap();
        let (route, base) = match format {
            WireFormat::AnthropicMessages => (route.to_string(), url.clone()),
            WireFormat::OpenaiResponses => (route.to_string(), format!("{url}/v1")),
            WireFormat::ChatCompletions => (format!("compat:{url}/v1:gw-model"), url.clone()),
        };
        let model = model_from_route(&route, &options(base, f.gateway.token())).unwrap();
        let (got_1, streamed_1) = ask(&*model, &task).await;
        assert_eq!(got_1.message, want_1.message, "{format}");
        assert_eq!(got_1.stop_reason, want_1.stop_reason, "{format}");
        assert_eq!(streamed_1, "Listing the files.", "{format}");
        assert_eq!(got_1.usage.input_tokens, 100, "{format}");
        assert_eq!(got_1.usage.output_tokens, 20, "{format}");
        let (got_2, _) = ask(&*model, &second_round(&got_1)).await;
        assert_eq!(got_2.message, want_2.message, "{format}");
        assert_eq!(got_2.usage.output_tokens, 7, "{format}");

        let records = f.gateway.finish().await.unwrap();
        assert_eq!(records.len(), 2, "{format}");
        for r in &records {
            assert_eq!(
                (r.format, r.stream, r.status),
                (format, true, CallStatus::Ok)
            );
        }
        // The second request carried the agent's tool results back, as typed blocks.
        let second = records[1].request.as_ref().unwrap();
        let results: Vec<&ContentBlock> = second.messages[2].content.iter().collect();
        assert!(
            matches!(results[0], ContentBlock::ToolResult { tool_use_id, .. } if tool_use_id == "toolu_01"),
            "{format}: {results:?}"
        );
        assert_eq!(second.system, "You are a test agent.", "{format}");
        let names: Vec<&str> = second.tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["bash", "read_file"], "{format}");
    }
}

async fn post(url: &str, headers: &[(&str, &str)], body: &Value) -> (u16, String) {
    let client = reqwest::Client::new();
    let mut req = client.post(url).json(body);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.text().await.unwrap())
}

fn events(body: &str) -> Vec<(String, Value)> {
    parse_all(body.as_bytes())
        .unwrap()
        .into_iter()
        .map(|e| {
            let v = serde_json::from_str(&e.data).unwrap_or(Value::String(e.data.clone()));
            (e.event, v)
        })
        .collect()
}

/// Claude Code's first request of a session, as it sends it: `?beta=true`, `x-api-key`, the
/// beta header, a system of text blocks with cache markers, its tools with JSON schemas.
fn claude_code_request(messages: Value) -> Value {
    json!({
        "model": "claude-sonnet-4-5-20250929",
        "max_tokens": 32000,
        "stream": true,
        "system": [
            {"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude."},
            {"type": "text", "text": "Work in /app.", "cache_control": {"type": "ephemeral"}},
        ],
        "messages": messages,
        "tools": [
            {"name": "Bash", "description": "Run a command",
             "input_schema": {"type": "object", "properties": {"command": {"type": "string"},
                              "timeout": {"type": "number"}}, "required": ["command"],
                              "additionalProperties": false,
                              "$schema": "http://json-schema.org/draft-07/schema#"}},
            {"name": "Read", "description": "Read a file",
             "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"}},
                              "required": ["file_path"]}},
            {"name": "Write", "description": "Write a file",
             "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"},
                              "content": {"type": "string"}}, "required": ["file_path", "content"]}},
            {"name": "Edit", "description": "Edit a file",
             "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"},
                              "old_string": {"type": "string"}, "new_string": {"type": "string"}},
                              "required": ["file_path", "old_string", "new_string"]}},
            {"type": "web_search_20250305", "name": "web_search", "max_uses": 5},
        ],
        "metadata": {"user_id": "user_abc_account__session_1"},
    })
}

fn claude_code_headers(token: &str) -> Vec<(&'static str, String)> {
    vec![
        ("x-api-key", token.to_string()),
        ("anthropic-version", "2023-06-01".into()),
        (
            "anthropic-beta",
            "claude-code-20250219,interleaved-thinking-2025-05-14".into(),
        ),
        ("user-agent", "claude-cli/2.0.0 (external, cli)".into()),
    ]
}

/// A session of two calls shaped like Claude Code's: the first streams back thinking, text and
/// two `tool_use` blocks whose input arrives as `input_json_delta`s; the second, carrying the
/// tool results, ends the turn. The records hold both calls and the trajectory built from them
/// alone has the task, the tool calls with their observations and the final answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claude_code_shaped_session_streams_its_events_and_records_a_trajectory() {
    let f = start(script(), Budgets::default(), false).await;
    let url = format!("{}/v1/messages?beta=true", f.gateway.url().unwrap());
    let headers = claude_code_headers(f.gateway.token());
    let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let task = json!([{"role": "user", "content": [{"type": "text", "text": "List the files."}]}]);
    let (status, body) = post(&url, &headers, &claude_code_request(task.clone())).await;
    assert_eq!(status, 200, "{body}");
    let evs = events(&body);
    let names: Vec<&str> = evs.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names.first(), Some(&"message_start"));
    assert_eq!(names.last(), Some(&"message_stop"));
    let starts: Vec<&str> = evs
        .iter()
        .filter(|(n, _)| n == "content_block_start")
        .map(|(_, v)| v["content_block"]["type"].as_str().unwrap())
        .collect();
    assert_eq!(starts, ["thinking", "text", "tool_use", "tool_use"]);
    let delta_kinds: std::collections::BTreeSet<&str> = evs
        .iter()
        .filter(|(n, _)| n == "content_block_delta")
        .map(|(_, v)| v["delta"]["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        delta_kinds.into_iter().collect::<Vec<_>>(),
        ["input_json_delta", "text_delta", "thinking_delta"]
    );
    let json_of = |index: u64| -> Value {
        let text: String = evs
            .iter()
            .filter(|(n, v)| n == "content_block_delta" && v["index"] == index)
            .map(|(_, v)| v["delta"]["partial_json"].as_str().unwrap_or_default())
            .collect();
        serde_json::from_str(&text).unwrap()
    };
    assert_eq!(json_of(2), json!({"command": "ls -la", "timeout": 30}));
    assert_eq!(json_of(3), json!({"path": "notes/a.txt"}));
    let delta = evs.iter().find(|(n, _)| n == "message_delta").unwrap();
    assert_eq!(delta.1["delta"]["stop_reason"], "tool_use");
    assert_eq!(delta.1["usage"]["output_tokens"], 20);
    let ids: Vec<&str> = evs
        .iter()
        .filter(|(n, _)| n == "content_block_start")
        .filter_map(|(_, v)| v["content_block"]["id"].as_str())
        .collect();
    assert_eq!(ids, ["toolu_01", "call_1_1"]);

    // The second call: the conversation so far, the reply echoed, the tool results.
    let messages = json!([
        task[0],
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "Let me look first.", "signature": ""},
            {"type": "text", "text": "Listing the files."},
            {"type": "tool_use", "id": "toolu_01", "name": "bash",
             "input": {"command": "ls -la", "timeout": 30}},
            {"type": "tool_use", "id": "call_1_1", "name": "read_file",
             "input": {"path": "notes/a.txt"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_01", "content": "a.txt\nb.txt"},
            {"type": "tool_result", "tool_use_id": "call_1_1",
             "content": [{"type": "text", "text": "hello"}], "is_error": false,
             "cache_control": {"type": "ephemeral"}}]},
    ]);
    let (status, body) = post(&url, &headers, &claude_code_request(messages)).await;
    assert_eq!(status, 200, "{body}");
    let text: String = events(&body)
        .iter()
        .filter_map(|(_, v)| v["delta"]["text"].as_str().map(str::to_string))
        .collect();
    assert_eq!(text, "All done: two files.");

    let record_file = f.record_file();
    let records = f.gateway.finish().await.unwrap();
    assert_eq!(records::read(&record_file).unwrap(), records);
    assert_eq!(records.len(), 2);
    let first = &records[0];
    assert_eq!(first.route_model, "scripted");
    let request = first.request.as_ref().unwrap();
    assert_eq!(
        request.system,
        "You are Claude Code, Anthropic's official CLI for Claude.\n\nWork in /app."
    );
    // The server tool has no schema: not offered to the route's model.
    let names: Vec<&str> = request.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["Bash", "Read", "Write", "Edit"]);
    assert_eq!(first.usage.input_tokens, 100);
    assert!(first.latency_ms >= first.first_byte_ms && first.first_byte_ms > 0.0);

    let doc = gateway::trajectory::trajectory("claude-code", "trial-1", &records);
    assert_eq!(doc["schema_version"], "ATIF-v1.7");
    assert_eq!(doc["agent"]["name"], "claude-code");
    assert_eq!(doc["agent"]["model_name"], "claude-sonnet-4-5-20250929");
    assert_eq!(
        doc["agent"]["tool_definitions"].as_array().unwrap().len(),
        4
    );
    let steps = doc["steps"].as_array().unwrap();
    let sources: Vec<&str> = steps
        .iter()
        .map(|s| s["source"].as_str().unwrap())
        .collect();
    assert_eq!(sources, ["user", "agent", "agent"], "{doc:#}");
    assert_eq!(steps[0]["message"], "List the files.");
    assert_eq!(steps[1]["reasoning_content"], "Let me look first.");
    assert_eq!(steps[1]["tool_calls"][0]["function_name"], "bash");
    assert_eq!(
        steps[1]["tool_calls"][0]["arguments"],
        json!({"command": "ls -la", "timeout": 30})
    );
    let results = &steps[1]["observation"]["results"];
    assert_eq!(results[0]["source_call_id"], "toolu_01");
    assert_eq!(results[0]["content"], "a.txt\nb.txt");
    assert_eq!(results[1]["content"], "hello");
    assert_eq!(steps[2]["message"], "All done: two files.");
    assert_eq!(doc["final_metrics"]["total_prompt_tokens"], 250);
    assert_eq!(doc["final_metrics"]["total_completion_tokens"], 27);
}

/// Codex CLI's request shape (Responses, `stream: true`, `store: false`, a `shell` function
/// tool and a hosted one), then the same request without a stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_codex_shaped_request_streams_the_responses_events() {
    let f = start(script(), Budgets::default(), false).await;
    let url = format!("{}/v1/responses", f.gateway.url().unwrap());
    let bearer = format!("Bearer {}", f.gateway.token());
    let headers = [
        ("authorization", bearer.as_str()),
        ("originator", "codex_cli_rs"),
        ("openai-beta", "responses=experimental"),
    ];
    let mut request = json!({
        "model": "gpt-5.3-codex",
        "instructions": "You are Codex, a coding agent.",
        "input": [
            {"type": "message", "role": "developer",
             "content": [{"type": "input_text", "text": "<permissions>sandboxed</permissions>"}]},
            {"type": "message", "role": "user",
             "content": [{"type": "input_text", "text": "List the files."}]},
        ],
        "tools": [
            {"type": "function", "name": "shell", "description": "Runs a shell command",
             "strict": false,
             "parameters": {"type": "object", "properties": {
                 "command": {"type": "array", "items": {"type": "string"}},
                 "workdir": {"type": "string"}}, "required": ["command"],
                 "additionalProperties": false}},
            {"type": "web_search"},
        ],
        "tool_choice": "auto",
        "parallel_tool_calls": false,
        "reasoning": {"effort": "medium", "summary": "auto"},
        "store": false,
        "stream": true,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "session-1",
    });
    let (status, body) = post(&url, &headers, &request).await;
    assert_eq!(status, 200, "{body}");
    let evs = events(&body);
    let names: Vec<&str> = evs.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(&names[..2], ["response.created", "response.in_progress"]);
    assert_eq!(names.last(), Some(&"response.completed"));
    for kind in [
        "response.output_item.added",
        "response.output_text.delta",
        "response.function_call_arguments.delta",
        "response.output_item.done",
        "response.reasoning_summary_text.delta",
    ] {
        assert!(names.contains(&kind), "{kind} missing from {names:?}");
    }
    let seqs: Vec<u64> = evs
        .iter()
        .map(|(_, v)| v["sequence_number"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, (0..seqs.len() as u64).collect::<Vec<_>>());
    let done: Vec<&Value> = evs
        .iter()
        .filter(|(n, _)| n == "response.output_item.done")
        .map(|(_, v)| &v["item"])
        .collect();
    let kinds: Vec<&str> = done.iter().map(|i| i["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        ["reasoning", "message", "function_call", "function_call"]
    );
    assert_eq!(done[2]["call_id"], "toolu_01");
    let args: Value = serde_json::from_str(done[2]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(args, json!({"command": "ls -la", "timeout": 30}));
    let completed = &evs.last().unwrap().1["response"];
    assert_eq!(completed["status"], "completed");
    assert_eq!(completed["output"].as_array().unwrap().len(), 4);
    assert_eq!(completed["usage"]["input_tokens"], 100);

    request["stream"] = json!(false);
    let (status, body) = post(&url, &headers, &request).await;
    assert_eq!(status, 200, "{body}");
    let whole: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(whole["object"], "response");
    assert_eq!(
        whole["output"][0]["content"][0]["text"],
        "All done: two files."
    );

    let records = f.gateway.finish().await.unwrap();
    let request = records[0].request.as_ref().unwrap();
    assert_eq!(
        request.system,
        "You are Codex, a coding agent.\n\n<permissions>sandboxed</permissions>"
    );
    assert_eq!(request.tools.len(), 1, "the hosted tool is not offered");
    assert_eq!((records[0].stream, records[1].stream), (true, false));
}

/// Chat Completions without a stream, then with one and `include_usage`: the tool calls, the
/// finish reason, the usage chunk and `[DONE]`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_completions_answer_whole_and_streamed() {
    let f = start(script(), Budgets::default(), false).await;
    let url = format!("{}/v1/chat/completions", f.gateway.url().unwrap());
    let bearer = format!("Bearer {}", f.gateway.token());
    let headers = [("authorization", bearer.as_str())];
    let mut request = json!({
        "model": "gw-model",
        "messages": [{"role": "system", "content": "You are mini-swe-agent."},
                     {"role": "user", "content": "List the files."}],
        "tools": [{"type": "function", "function": {"name": "bash", "parameters":
                   {"type": "object", "properties": {"command": {"type": "string"}}}}}],
    });
    let (status, body) = post(&url, &headers, &request).await;
    assert_eq!(status, 200, "{body}");
    let whole: Value = serde_json::from_str(&body).unwrap();
    let choice = &whole["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls");
    assert_eq!(choice["message"]["content"], "Listing the files.");
    assert_eq!(choice["message"]["reasoning_content"], "Let me look first.");
    assert_eq!(choice["message"]["tool_calls"][0]["id"], "toolu_01");
    assert_eq!(
        choice["message"]["tool_calls"][1]["function"]["arguments"],
        "{\"path\":\"notes/a.txt\"}"
    );
    assert_eq!(whole["usage"]["prompt_tokens"], 100);

    request["stream"] = json!(true);
    request["stream_options"] = json!({"include_usage": true});
    let (status, body) = post(&url, &headers, &request).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.ends_with("data: [DONE]\n\n"), "{body}");
    let chunks: Vec<Value> = events(&body)
        .into_iter()
        .map(|(_, v)| v)
        .filter(|v| v.is_object())
        .collect();
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, "All done: two files.");
    let finish: Vec<&str> = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["finish_reason"].as_str())
        .collect();
    assert_eq!(finish, ["stop"]);
    let last = chunks.last().unwrap();
    assert_eq!(last["choices"], json!([]));
    assert_eq!(last["usage"]["completion_tokens"], 7);
    f.gateway.finish().await.unwrap();
}

/// A wrong or missing token is refused in each format's own error shape, recorded as
/// `unauthorized`, and the model is not asked: the next good call still gets the first turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_token_is_refused_in_each_formats_shape() {
    let f = start(script(), Budgets::default(), false).await;
    let base = f.gateway.url().unwrap();
    let chat = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
    let (status, body) = post(
        &format!("{base}/v1/messages"),
        &[("x-api-key", "sk-ant-real-looking-key")],
        &json!({"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(status, 401);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["type"], "error");
    assert_eq!(v["error"]["type"], "authentication_error");
    let (status, body) = post(
        &format!("{base}/v1/chat/completions"),
        &[("authorization", "Bearer nope")],
        &chat,
    )
    .await;
    assert_eq!(status, 401);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["error"]["code"], "invalid_api_key");
    let (status, _) = post(
        &format!("{base}/v1/responses"),
        &[],
        &json!({"model": "m", "input": "hi"}),
    )
    .await;
    assert_eq!(status, 401);
    let models = reqwest::Client::new()
        .get(format!("{base}/v1/models"))
        .send()
        .await
        .unwrap();
    assert_eq!(models.status().as_u16(), 401);
    // The token in the other header works too, and the models list names the route.
    let models: Value = reqwest::Client::new()
        .get(format!("{base}/v1/models"))
        .header("x-api-key", f.gateway.token())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(models["data"][0]["id"], "geode-scripted");

    let bearer = format!("Bearer {}", f.gateway.token());
    let (status, body) = post(
        &format!("{base}/v1/chat/completions"),
        &[("authorization", &bearer)],
        &chat,
    )
    .await;
    assert_eq!(status, 200);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], "Listing the files.");

    let records = f.gateway.finish().await.unwrap();
    let statuses: Vec<CallStatus> = records.iter().map(|r| r.status).collect();
    assert_eq!(
        statuses,
        [
            CallStatus::Unauthorized,
            CallStatus::Unauthorized,
            CallStatus::Unauthorized,
            CallStatus::Ok
        ]
    );
    assert!(
        records[0].request.is_none(),
        "an unauthorized body is not read"
    );
}

/// The call budget: the second call is refused as `billing_error` (402) in Anthropic's shape
/// and `insufficient_quota` (429) in OpenAI's, recorded as `budget_exhausted` with the reason.
/// The token budget: a call is refused once ended calls used it up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn used_up_budgets_refuse_calls_and_the_records_say_why() {
    let calls = Budgets {
        max_calls: Some(1),
        ..Budgets::default()
    };
    let f = start(script(), calls, false).await;
    let base = f.gateway.url().unwrap();
    let key = [("x-api-key", f.gateway.token())];
    let msg =
        json!({"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]});
    assert_eq!(
        post(&format!("{base}/v1/messages"), &key, &msg).await.0,
        200
    );
    let (status, body) = post(&format!("{base}/v1/messages"), &key, &msg).await;
    assert_eq!(status, 402, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["error"]["type"], "billing_error");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("call budget"),
        "{v}"
    );
    let chat =
        json!({"model": "m", "stream": true, "messages": [{"role": "user", "content": "hi"}]});
    let (status, body) = post(&format!("{base}/v1/chat/completions"), &key, &chat).await;
    assert_eq!(status, 429, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["error"]["code"], "insufficient_quota");
    let records = f.gateway.finish().await.unwrap();
    assert_eq!(records[1].status, CallStatus::BudgetExhausted);
    assert_eq!(
        records[1].error.as_deref(),
        Some("the trial's call budget is used up (1 calls)")
    );
    assert!(records[1].request.is_some(), "the refused request is kept");

    let tokens = Budgets {
        max_tokens: Some(120),
        ..Budgets::default()
    };
    let f = start(script(), tokens, false).await;
    let base = f.gateway.url().unwrap();
    let key = [("x-api-key", f.gateway.token())];
    // 100 + 20 tokens: the first call ends exactly at the budget; the next is refused.
    assert_eq!(
        post(&format!("{base}/v1/messages"), &key, &msg).await.0,
        200
    );
    let (status, _) = post(&format!("{base}/v1/messages"), &key, &msg).await;
    assert_eq!(status, 402);
    let records = f.gateway.finish().await.unwrap();
    assert_eq!(
        records[1].error.as_deref(),
        Some("the trial's token budget is used up (120 of 120 tokens)")
    );
}

/// A sandbox without network reaches the gateway through a bind-mounted unix socket: plain
/// HTTP/1.1 over it gets the same answer, and the socket is gone after `finish`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_answers_on_its_unix_socket() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let f = start(script(), Budgets::default(), true).await;
    let socket = f.gateway.socket().unwrap().to_path_buf();
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&socket).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600);
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).to_string();
    let request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer {}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        f.gateway.token(),
        body.len()
    );
    let mut stream = tokio::net::UnixStream::connect(&socket).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("Listing the files."), "{answer}");
    f.gateway.finish().await.unwrap();
    assert!(!socket.exists());
}

/// Writes "Hello " at once, then waits for the test before writing "world".
struct Gated {
    gate: Arc<tokio::sync::Notify>,
}

#[async_trait]
impl Model for Gated {
    fn id(&self) -> &str {
        "gated"
    }

    async fn complete(
        &self,
        request: &ModelRequest<'_>,
    ) -> Result<AssistantTurn, geode_runtime::model::ModelError> {
        request.deltas.send(ModelDelta::Text("Hello ".into()));
        self.gate.notified().await;
        request.deltas.send(ModelDelta::Text("world".into()));
        Ok(AssistantTurn {
            message: Message {
                role: geode_runtime::conversation::Role::Assistant,
                content: vec![ContentBlock::Text {
                    text: "Hello world".into(),
                }],
            },
            usage: Default::default(),
            stop_reason: geode_runtime::conversation::StopReason::EndTurn,
        })
    }
}

/// The model's text reaches the agent while the model is still writing: the first delta
/// arrives before the model may go on, and the whole reply is still one text block.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_streams_to_the_agent_as_the_model_writes_it() {
    let dir = tempfile::tempdir().unwrap();
    let gate = Arc::new(tokio::sync::Notify::new());
    let gateway = gateway::start(GatewayConfig {
        model: Arc::new(Gated { gate: gate.clone() }),
        model_name: "gated".into(),
        budgets: Budgets::default(),
        record_file: dir.path().join("gateway.jsonl"),
        listen: Listen::loopback(),
        secrets: vec![],
    })
    .await
    .unwrap();
    let mut resp = reqwest::Client::new()
        .post(format!("{}/v1/messages", gateway.url().unwrap()))
        .header("x-api-key", gateway.token())
        .json(&json!({"model": "m", "max_tokens": 10, "stream": true,
                      "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    let mut body = String::new();
    let first = tokio::time::timeout(Duration::from_secs(10), async {
        while !body.contains("\"text\":\"Hello \"") {
            let chunk = resp.chunk().await.unwrap().expect("the stream ended early");
            body.push_str(&String::from_utf8_lossy(&chunk));
        }
    })
    .await;
    assert!(first.is_ok(), "no text before the model finished: {body}");
    assert!(!body.contains("world"), "{body}");
    gate.notify_one();
    while let Some(chunk) = resp.chunk().await.unwrap() {
        body.push_str(&String::from_utf8_lossy(&chunk));
    }
    let evs = events(&body);
    let text: String = evs
        .iter()
        .filter_map(|(_, v)| v["delta"]["text"].as_str())
        .collect();
    assert_eq!(text, "Hello world");
    let blocks = evs
        .iter()
        .filter(|(n, _)| n == "content_block_start")
        .count();
    assert_eq!(blocks, 1);
    gateway.finish().await.unwrap();
}

/// Fails with a message that quotes the route's key, as a careless upstream might.
struct Leaky;

#[async_trait]
impl Model for Leaky {
    fn id(&self) -> &str {
        "leaky"
    }

    async fn complete(
        &self,
        _: &ModelRequest<'_>,
    ) -> Result<AssistantTurn, geode_runtime::model::ModelError> {
        Err(geode_runtime::model::ModelError::Fatal {
            model: "leaky".into(),
            message: "upstream refused key sk-real-123456".into(),
        })
    }
}

/// The route's real key stays on the host. A provider route behind the gateway (the runtime's
/// Anthropic adapter, its "provider" a second gateway whose token plays the real key) answers
/// the agent, who only ever sent its own token, and nothing the agent receives or the records
/// hold names the real key; a failure that quotes it reaches the agent and the record cut.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_routes_real_key_never_reaches_the_agent() {
    let upstream = start(script(), Budgets::default(), false).await;
    let real_key = upstream.gateway.token().to_string();
    let dir = tempfile::tempdir().unwrap();
    let provider = model_from_route(
        "anthropic:claude-sonnet-4-5-20250929",
        &options(upstream.gateway.url().unwrap(), &real_key),
    )
    .unwrap();
    let front = gateway::start(GatewayConfig {
        model: provider,
        model_name: "claude-sonnet-4-5-20250929".into(),
        budgets: Budgets::default(),
        record_file: dir.path().join("front.jsonl"),
        listen: Listen::loopback(),
        secrets: vec![real_key.clone()],
    })
    .await
    .unwrap();
    assert_ne!(front.token(), real_key);
    let chat = json!({"model": "m", "stream": true,
                      "messages": [{"role": "user", "content": "List the files."}]});
    let bearer = format!("Bearer {}", front.token());
    let (status, body) = post(
        &format!("{}/v1/chat/completions", front.url().unwrap()),
        &[("authorization", &bearer)],
        &chat,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let text: String = events(&body)
        .iter()
        .filter_map(|(_, v)| {
            v["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_string)
        })
        .collect();
    assert_eq!(text, "Listing the files.");
    assert!(!body.contains(&real_key));
    let records = front.finish().await.unwrap();
    assert_eq!(
        records[0].route_model,
        "anthropic:claude-sonnet-4-5-20250929"
    );
    assert!(
        records[0].usage.cost_usd > 0.0,
        "a provider route is priced"
    );
    assert!(
        !std::fs::read_to_string(dir.path().join("front.jsonl"))
            .unwrap()
            .contains(&real_key)
    );
    let upstream_records = upstream.gateway.finish().await.unwrap();
    assert_eq!(upstream_records.len(), 1);
    assert_eq!(upstream_records[0].status, CallStatus::Ok);

    let leaky = gateway::start(GatewayConfig {
        model: Arc::new(Leaky),
        model_name: "leaky".into(),
        budgets: Budgets::default(),
        record_file: dir.path().join("leaky.jsonl"),
        listen: Listen::loopback(),
        secrets: vec!["sk-real-123456".into()],
    })
    .await
    .unwrap();
    let (status, body) = post(
        &format!("{}/v1/messages", leaky.url().unwrap()),
        &[("x-api-key", leaky.token())],
        &json!({"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(status, 500, "{body}");
    assert!(body.contains("upstream refused key [redacted]"), "{body}");
    assert!(!body.contains("sk-real-123456"));
    let records = leaky.finish().await.unwrap();
    assert_eq!(records[0].status, CallStatus::ModelError);
    assert!(
        !std::fs::read_to_string(dir.path().join("leaky.jsonl"))
            .unwrap()
            .contains("sk-real")
    );
}

/// Thinks, then writes, both as deltas, and signs its thinking as a provider does.
struct Signed;

#[async_trait]
impl Model for Signed {
    fn id(&self) -> &str {
        "signed"
    }

    async fn complete(
        &self,
        request: &ModelRequest<'_>,
    ) -> Result<AssistantTurn, geode_runtime::model::ModelError> {
        request.deltas.send(ModelDelta::Thinking("Plan it.".into()));
        request.deltas.send(ModelDelta::Text("Done.".into()));
        Ok(AssistantTurn {
            message: Message {
                role: geode_runtime::conversation::Role::Assistant,
                content: vec![
                    ContentBlock::Thinking {
                        thinking: "Plan it.".into(),
                        signature: Some("sig-abc".into()),
                    },
                    ContentBlock::Text {
                        text: "Done.".into(),
                    },
                ],
            },
            usage: Default::default(),
            stop_reason: geode_runtime::conversation::StopReason::EndTurn,
        })
    }
}

/// Thinking streamed before its signature existed reaches the agent unsigned; when the agent
/// sends it back, the route gets it with the signature from the record of the reply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamed_thinking_gets_its_signature_back_from_the_records() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway::start(GatewayConfig {
        model: Arc::new(Signed),
        model_name: "signed".into(),
        budgets: Budgets::default(),
        record_file: dir.path().join("gateway.jsonl"),
        listen: Listen::loopback(),
        secrets: vec![],
    })
    .await
    .unwrap();
    let url = format!("{}/v1/messages", gw.url().unwrap());
    let key = [("x-api-key", gw.token())];
    let first = json!({"model": "m", "max_tokens": 10, "stream": true,
                       "messages": [{"role": "user", "content": "hi"}]});
    let (status, body) = post(&url, &key, &first).await;
    assert_eq!(status, 200, "{body}");
    let thinking: String = events(&body)
        .iter()
        .filter_map(|(_, v)| v["delta"]["thinking"].as_str().map(str::to_string))
        .collect();
    assert_eq!(thinking, "Plan it.");
    let second = json!({"model": "m", "max_tokens": 10, "stream": true, "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "Plan it.", "signature": ""},
            {"type": "text", "text": "Done."}]},
        {"role": "user", "content": "again"},
    ]});
    assert_eq!(post(&url, &key, &second).await.0, 200);
    let records = gw.finish().await.unwrap();
    let echoed = &records[1].request.as_ref().unwrap().messages[1].content[0];
    assert_eq!(
        echoed,
        &ContentBlock::Thinking {
            thinking: "Plan it.".into(),
            signature: Some("sig-abc".into()),
        }
    );
}

/// An agent that hangs up midway does not lose the call's record: `finish` waits for the
/// model to end and hands back the record with the whole reply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finish_waits_for_a_call_whose_agent_hung_up() {
    let dir = tempfile::tempdir().unwrap();
    let gate = Arc::new(tokio::sync::Notify::new());
    let gw = gateway::start(GatewayConfig {
        model: Arc::new(Gated { gate: gate.clone() }),
        model_name: "gated".into(),
        budgets: Budgets::default(),
        record_file: dir.path().join("gateway.jsonl"),
        listen: Listen::loopback(),
        secrets: vec![],
    })
    .await
    .unwrap();
    let mut resp = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", gw.url().unwrap()))
        .header("authorization", format!("Bearer {}", gw.token()))
        .json(&json!({"model": "m", "stream": true,
                      "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    resp.chunk().await.unwrap().unwrap();
    drop(resp);
    let release = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        gate.notify_one();
    });
    let records = gw.finish().await.unwrap();
    release.await.unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].status, CallStatus::Ok);
    assert_eq!(
        records[0].reply.as_ref().unwrap().message.text(),
        "Hello world"
    );
}
