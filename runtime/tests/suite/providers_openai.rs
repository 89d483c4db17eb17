//! The OpenAI Responses adapter against a loopback server speaking its SSE.

use geode_runtime::conversation::{ContentBlock, Message, Role, Usage};
use geode_runtime::model::catalog::Catalog;
use geode_runtime::model::effort::Effort;
use geode_runtime::model::errors::ErrorClass;
use geode_runtime::model::model_from_route;
use serde_json::{Value, json};

use super::loopback::{Loopback, Part, Reply};
use super::providers::{Failing, KEY, Wire, ask, ask_hi, options, provider_matrix, text_reply};

pub struct OpenAi;

const MODEL: &str = "gpt-6-sol";

fn event(data: Value) -> Part {
    let name = data["type"].as_str().unwrap_or_default().to_string();
    Part::event(&name, &data)
}

fn created() -> Part {
    event(json!({"type": "response.created", "sequence_number": 0,
                 "response": {"id": "resp_1", "object": "response", "status": "in_progress",
                              "model": MODEL, "output": []}}))
}

fn completed() -> Part {
    event(json!({"type": "response.completed", "response": {
        "id": "resp_1", "object": "response", "status": "completed", "model": MODEL,
        "usage": {"input_tokens": 1000, "input_tokens_details": {"cached_tokens": 200},
                  "output_tokens": 80, "output_tokens_details": {"reasoning_tokens": 30},
                  "total_tokens": 1080}}}))
}

fn message_added(index: u64) -> Part {
    event(
        json!({"type": "response.output_item.added", "output_index": index,
                 "item": {"type": "message", "id": "msg_1", "status": "in_progress",
                          "role": "assistant", "content": []}}),
    )
}

fn text_delta_at(index: u64, text: &str) -> Part {
    event(
        json!({"type": "response.output_text.delta", "item_id": "msg_1",
                 "output_index": index, "content_index": 0, "delta": text}),
    )
}

fn message_done(index: u64, text: &str) -> Part {
    event(
        json!({"type": "response.output_item.done", "output_index": index,
                 "item": {"type": "message", "id": "msg_1", "status": "completed",
                          "role": "assistant",
                          "content": [{"type": "output_text", "text": text, "annotations": []}]}}),
    )
}

fn error_reply(status: u16, kind: &str, code: Option<&str>, message: &str) -> Reply {
    Reply::json(
        status,
        &json!({"error": {"message": message, "type": kind, "param": null, "code": code}}),
    )
}

impl Wire for OpenAi {
    fn route(&self, _: &Loopback) -> String {
        format!("openai:{MODEL}")
    }
    fn key_env(&self) -> &'static str {
        "OPENAI_API_KEY"
    }
    fn base_env(&self) -> Option<(&'static str, &'static str)> {
        Some(("OPENAI_BASE_URL", "/v1"))
    }
    fn path(&self) -> &'static str {
        "/v1/responses"
    }
    fn auth(&self) -> (&'static str, String) {
        ("authorization", format!("Bearer {KEY}"))
    }
    fn preamble(&self) -> Vec<Part> {
        vec![created(), message_added(0)]
    }
    fn text_delta(&self, text: &str) -> Part {
        text_delta_at(0, text)
    }
    fn text_end(&self) -> Vec<Part> {
        // The finished item repeats the text; the adapter must not double it.
        vec![completed()]
    }
    fn tool_calls(&self, calls: &[(&str, &str, Vec<&str>)]) -> Vec<Part> {
        let mut parts = vec![created()];
        for (i, (id, name, frags)) in calls.iter().enumerate() {
            let i = i as u64;
            let item_id = format!("fc_{i}");
            parts.push(event(
                json!({"type": "response.output_item.added", "output_index": i,
                "item": {"type": "function_call", "id": item_id, "call_id": id, "name": name,
                         "arguments": "", "status": "in_progress"}}),
            ));
            for f in frags {
                parts.push(event(
                    json!({"type": "response.function_call_arguments.delta",
                    "item_id": item_id, "output_index": i, "delta": f}),
                ));
            }
            let args: String = frags.concat();
            parts.push(event(
                json!({"type": "response.function_call_arguments.done",
                "item_id": item_id, "output_index": i, "arguments": args}),
            ));
            parts.push(event(
                json!({"type": "response.output_item.done", "output_index": i,
                "item": {"type": "function_call", "id": item_id, "call_id": id, "name": name,
                         "arguments": args, "status": "completed"}}),
            ));
        }
        parts.push(completed());
        parts
    }
    fn thinking(&self, thought: &[&str], text: &str) -> Vec<Part> {
        let mut parts = vec![
            created(),
            event(
                json!({"type": "response.output_item.added", "output_index": 0,
                "item": {"type": "reasoning", "id": "rs_1", "summary": []}}),
            ),
            event(
                json!({"type": "response.reasoning_summary_part.added", "item_id": "rs_1",
                "output_index": 0, "summary_index": 0,
                "part": {"type": "summary_text", "text": ""}}),
            ),
        ];
        for t in thought {
            parts.push(event(
                json!({"type": "response.reasoning_summary_text.delta",
                "item_id": "rs_1", "output_index": 0, "summary_index": 0, "delta": t}),
            ));
        }
        parts.push(event(
            json!({"type": "response.output_item.done", "output_index": 0,
            "item": {"type": "reasoning", "id": "rs_1",
                     "summary": [{"type": "summary_text", "text": thought.concat()}],
                     "encrypted_content": "gAAAAB-encrypted"}}),
        ));
        parts.push(message_added(1));
        parts.push(text_delta_at(1, text));
        parts.push(message_done(1, text));
        parts.push(completed());
        parts
    }
    fn signature(&self) -> Option<&'static str> {
        Some("gAAAAB-encrypted")
    }
    fn malformed(&self) -> Part {
        Part::text(
            "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\n\n",
        )
    }
    fn error(&self, failing: Failing) -> Reply {
        match failing {
            Failing::RateLimited => error_reply(
                429,
                "requests",
                Some("rate_limit_exceeded"),
                "Rate limit reached for gpt-6-sol on requests per min (RPM)",
            ),
            Failing::ServerError => error_reply(
                500,
                "server_error",
                None,
                "The server had an error while processing your request.",
            ),
            Failing::BadKey => error_reply(
                401,
                "invalid_request_error",
                Some("invalid_api_key"),
                "Incorrect API key provided: sk-test-****cdef.",
            ),
            Failing::ContextOverflow => error_reply(
                400,
                "invalid_request_error",
                Some("context_length_exceeded"),
                "Your input exceeds the context window of this model.",
            ),
        }
    }
    fn usage(&self) -> Usage {
        Usage {
            input_tokens: 1000,
            cached_input_tokens: 200,
            output_tokens: 50,
            reasoning_tokens: 30,
            cost_usd: 0.0,
        }
    }
    fn cost(&self) -> f64 {
        let p = Catalog::builtin().unwrap().model(MODEL).unwrap().prices;
        p.cost(&self.usage(), 0)
    }
    fn tool_result_ids(&self, body: &Value) -> Vec<String> {
        body["input"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|i| i["type"] == "function_call_output")
            .map(|i| i["call_id"].as_str().unwrap().to_string())
            .collect()
    }
}

provider_matrix!(OpenAi);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reasoning_is_replayed_encrypted_with_a_clamped_effort() {
    let server = Loopback::start(vec![text_reply(&OpenAi, &["ok"])]).await;
    let mut opts = options(&OpenAi, &server);
    opts.effort = Some(Effort::Max);
    let m = model_from_route("openai:gpt-5.4-mini", &opts).unwrap();
    let conversation = [
        Message::user_text("go"),
        Message {
            role: Role::Assistant,
            content: vec![
                ContentBlock::Thinking {
                    thinking: "plan".into(),
                    signature: Some("enc-1".into()),
                },
                ContentBlock::Text {
                    text: "Reading.".into(),
                },
                ContentBlock::ToolUse {
                    id: "call_9".into(),
                    name: "read_file".into(),
                    input: json!({"path": "a"}),
                },
            ],
        },
        Message {
            role: Role::User,
            content: vec![ContentBlock::ToolResult {
                tool_use_id: "call_9".into(),
                content: "A".into(),
                is_error: false,
            }],
        },
    ];
    ask(m.as_ref(), &conversation).await.unwrap();
    let body = &server.requests()[0].body;
    assert_eq!(
        body["reasoning"]["effort"], "high",
        "max clamps to the model's top"
    );
    assert_eq!(body["store"], false);
    assert_eq!(body["include"], json!(["reasoning.encrypted_content"]));
    assert_eq!(body["instructions"], "You are a test.");
    let input = body["input"].as_array().unwrap();
    assert_eq!(
        input[1],
        json!({"type": "reasoning", "encrypted_content": "enc-1",
               "summary": [{"type": "summary_text", "text": "plan"}]})
    );
    assert_eq!(input[2]["content"][0]["type"], "output_text");
    assert_eq!(
        input[3],
        json!({"type": "function_call", "call_id": "call_9", "name": "read_file",
               "arguments": "{\"path\":\"a\"}"})
    );
    assert_eq!(
        input[4],
        json!({"type": "function_call_output", "call_id": "call_9", "output": "A"})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arguments_assemble_from_fragments_without_a_done_item() {
    // Some gateways stream the deltas but never send output_item.done.
    let parts = vec![
        created(),
        event(
            json!({"type": "response.output_item.added", "output_index": 0,
            "item": {"type": "function_call", "id": "fc_0", "call_id": "call_x",
                     "name": "list_dir", "arguments": ""}}),
        ),
        event(
            json!({"type": "response.function_call_arguments.delta", "output_index": 0,
            "delta": "{\"pa"}),
        ),
        event(
            json!({"type": "response.function_call_arguments.delta", "output_index": 0,
            "delta": "th\":\".\"}"}),
        ),
        completed(),
    ];
    let server = Loopback::start(vec![Reply::sse(parts)]).await;
    let m = model_from_route(&OpenAi.route(&server), &options(&OpenAi, &server)).unwrap();
    let turn = ask_hi(m.as_ref()).await.unwrap();
    assert_eq!(turn.message.tool_calls()[0].input, json!({"path": "."}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quota_429_is_billing_not_a_rate_limit() {
    let server = Loopback::start(vec![error_reply(
        429,
        "insufficient_quota",
        Some("insufficient_quota"),
        "You exceeded your current quota, please check your plan and billing details.",
    )])
    .await;
    let m = model_from_route(&OpenAi.route(&server), &options(&OpenAi, &server)).unwrap();
    let err = ask_hi(m.as_ref()).await.unwrap_err();
    assert_eq!(err.class(), Some(ErrorClass::Billing));
    assert!(err.to_string().contains("platform.openai.com"), "{err}");
    assert_eq!(server.requests().len(), 1, "billing is not retried");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_response_event_is_classified() {
    let parts = vec![
        created(),
        event(
            json!({"type": "response.failed", "response": {"id": "resp_1", "status": "failed",
            "error": {"code": "context_length_exceeded",
                      "message": "Your input exceeds the context window of this model."}}}),
        ),
    ];
    let server = Loopback::start(vec![Reply::sse(parts)]).await;
    let m = model_from_route(&OpenAi.route(&server), &options(&OpenAi, &server)).unwrap();
    let err = ask_hi(m.as_ref()).await.unwrap_err();
    assert_eq!(err.class(), Some(ErrorClass::ContextOverflow), "{err}");
}
