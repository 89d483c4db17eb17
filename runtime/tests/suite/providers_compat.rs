//! The Chat Completions adapter against loopback servers: Z.ai GLM (at its v4 base path),
//! OpenRouter, and a local OpenAI-compatible server through a `compat:` route.

use geode_runtime::conversation::{ContentBlock, Message, Role, Usage};
use geode_runtime::model::catalog::Catalog;
use geode_runtime::model::effort::Effort;
use geode_runtime::model::model_from_route;
use serde_json::{Value, json};

use super::loopback::{Loopback, Part, Reply};
use super::providers::{Failing, KEY, Wire, ask, ask_hi, options, text_reply};

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Chat {
    Glm,
    OpenRouter,
    Local,
}

/// What OpenRouter reports as the cost of every call.
const OPENROUTER_COST: f64 = 0.00421;

fn chunk(delta: Value, finish: Option<&str>) -> Part {
    Part::data(&json!({
        "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1_760_000_000,
        "model": "m", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }))
}

impl Chat {
    fn model(self) -> &'static str {
        match self {
            Chat::Glm => "glm-5.3",
            Chat::OpenRouter => "openrouter/auto",
            Chat::Local => "qwen3:8b",
        }
    }

    fn finish(self, reason: &str) -> Vec<Part> {
        let mut usage = json!({
            "prompt_tokens": 1000, "completion_tokens": 80, "total_tokens": 1080,
            "prompt_tokens_details": {"cached_tokens": 200},
            "completion_tokens_details": {"reasoning_tokens": 30},
        });
        if self == Chat::OpenRouter {
            usage["cost"] = json!(OPENROUTER_COST);
        }
        vec![
            chunk(json!({}), Some(reason)),
            Part::data(
                &json!({"id": "chatcmpl-1", "object": "chat.completion.chunk",
                               "choices": [], "usage": usage}),
            ),
            Part::text("data: [DONE]\n\n"),
        ]
    }

    fn error_reply(self, status: u16, code: &str, message: &str) -> Reply {
        let body = match self {
            Chat::Glm => json!({"error": {"code": code, "message": message}}),
            _ => json!({"error": {"message": message, "type": "error", "code": status}}),
        };
        Reply::json(status, &body)
    }
}

impl Wire for Chat {
    fn route(&self, server: &Loopback) -> String {
        match self {
            Chat::Local => format!("compat:{}/v1:{}", server.url(), self.model()),
            Chat::Glm => format!("glm:{}", self.model()),
            Chat::OpenRouter => format!("openrouter:{}", self.model()),
        }
    }
    fn key_env(&self) -> &'static str {
        match self {
            Chat::Glm => "ZAI_API_KEY",
            Chat::OpenRouter => "OPENROUTER_API_KEY",
            Chat::Local => "GEODE_COMPAT_API_KEY",
        }
    }
    fn base_env(&self) -> Option<(&'static str, &'static str)> {
        match self {
            Chat::Glm => Some(("ZAI_BASE_URL", "/api/paas/v4")),
            Chat::OpenRouter => Some(("OPENROUTER_BASE_URL", "/api/v1")),
            Chat::Local => None,
        }
    }
    fn path(&self) -> &'static str {
        match self {
            Chat::Glm => "/api/paas/v4/chat/completions",
            Chat::OpenRouter => "/api/v1/chat/completions",
            Chat::Local => "/v1/chat/completions",
        }
    }
    fn auth(&self) -> (&'static str, String) {
        ("authorization", format!("Bearer {KEY}"))
    }
    fn preamble(&self) -> Vec<Part> {
        vec![
            Part::text(": OPENROUTER PROCESSING\n\n"),
            chunk(json!({"role": "assistant", "content": ""}), None),
        ]
    }
    fn text_delta(&self, text: &str) -> Part {
        chunk(json!({"content": text}), None)
    }
    fn text_end(&self) -> Vec<Part> {
        self.finish("stop")
    }
    fn tool_calls(&self, calls: &[(&str, &str, Vec<&str>)]) -> Vec<Part> {
        let mut parts = self.preamble();
        for (i, (id, name, frags)) in calls.iter().enumerate() {
            parts.push(chunk(
                json!({"tool_calls": [{"index": i, "id": id, "type": "function",
                                       "function": {"name": name, "arguments": ""}}]}),
                None,
            ));
            for f in frags {
                parts.push(chunk(
                    json!({"tool_calls": [{"index": i, "function": {"arguments": f}}]}),
                    None,
                ));
            }
        }
        parts.extend(self.finish("tool_calls"));
        parts
    }
    fn thinking(&self, thought: &[&str], text: &str) -> Vec<Part> {
        // OpenRouter calls the field `reasoning`; GLM, vLLM and llama.cpp `reasoning_content`.
        let field = if *self == Chat::OpenRouter {
            "reasoning"
        } else {
            "reasoning_content"
        };
        let mut parts = self.preamble();
        for t in thought {
            parts.push(chunk(json!({ field: t }), None));
        }
        parts.push(self.text_delta(text));
        parts.extend(self.finish("stop"));
        parts
    }
    fn signature(&self) -> Option<&'static str> {
        None
    }
    fn malformed(&self) -> Part {
        Part::text("data: {\"id\":\"chatcmpl-1\",\"choices\":[{\"delta\":{\"content\":\"x\"\n\n")
    }
    fn error(&self, failing: Failing) -> Reply {
        match (failing, self) {
            (Failing::RateLimited, Chat::Glm) => self.error_reply(429, "1302", "rate limited"),
            (Failing::RateLimited, _) => self.error_reply(429, "429", "Rate limit exceeded"),
            (Failing::ServerError, _) => self.error_reply(500, "500", "Internal server error"),
            (Failing::BadKey, Chat::Glm) => self.error_reply(401, "1000", "Authentication failed"),
            (Failing::BadKey, _) => self.error_reply(401, "401", "No auth credentials found"),
            (Failing::ContextOverflow, Chat::Glm) => {
                self.error_reply(400, "1261", "Prompt exceeds max length")
            }
            (Failing::ContextOverflow, _) => self.error_reply(
                400,
                "400",
                "This model's maximum context length is 32768 tokens. However, you requested 40000 tokens.",
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
        match self {
            Chat::Glm => {
                let p = Catalog::builtin().unwrap().model("glm-5.3").unwrap().prices;
                p.cost(&self.usage(), 0)
            }
            Chat::OpenRouter => OPENROUTER_COST,
            Chat::Local => 0.0,
        }
    }
    fn tool_result_ids(&self, body: &Value) -> Vec<String> {
        body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] == "tool")
            .map(|m| m["tool_call_id"].as_str().unwrap().to_string())
            .collect()
    }
}

mod glm {
    use super::super::providers::provider_matrix;
    provider_matrix!(super::Chat::Glm);
}

mod openrouter {
    use super::super::providers::provider_matrix;
    provider_matrix!(super::Chat::OpenRouter);
}

mod local {
    use super::super::providers::provider_matrix;
    provider_matrix!(super::Chat::Local);
}

async fn body_of(wire: Chat, effort: Option<Effort>, conversation: &[Message]) -> Value {
    let server = Loopback::start(vec![text_reply(&wire, &["ok"])]).await;
    let mut opts = options(&wire, &server);
    opts.effort = effort;
    let m = model_from_route(&wire.route(&server), &opts).unwrap();
    ask(m.as_ref(), conversation).await.unwrap();
    server.requests()[0].body.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dialects_send_their_own_effort_fields() {
    let hi = [Message::user_text("hi")];
    let glm = body_of(Chat::Glm, None, &hi).await;
    assert_eq!(glm["thinking"], json!({"type": "enabled"}));
    assert_eq!(glm["tool_stream"], true);
    assert_eq!(glm["stream_options"], json!({"include_usage": true}));
    let glm_off = body_of(Chat::Glm, Some(Effort::None), &hi).await;
    assert_eq!(glm_off["thinking"], json!({"type": "disabled"}));
    let or = body_of(Chat::OpenRouter, Some(Effort::Xhigh), &hi).await;
    assert_eq!(
        or["reasoning"],
        json!({"effort": "high"}),
        "clamped to OpenRouter's top"
    );
    assert_eq!(or["usage"], json!({"include": true}));
    let local = body_of(Chat::Local, None, &hi).await;
    assert!(
        local.get("reasoning_effort").is_none(),
        "nothing unless configured"
    );
    assert_eq!(local["model"], "qwen3:8b");
    let local = body_of(Chat::Local, Some(Effort::Medium), &hi).await;
    assert_eq!(local["reasoning_effort"], "medium");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_turns_map_to_chat_messages() {
    let conversation = [
        Message::user_text("go"),
        Message {
            role: Role::Assistant,
            content: vec![
                ContentBlock::Thinking {
                    thinking: "plan".into(),
                    signature: None,
                },
                ContentBlock::ToolUse {
                    id: "call_1".into(),
                    name: "read_file".into(),
                    input: json!({"path": "a"}),
                },
            ],
        },
        Message {
            role: Role::User,
            content: vec![
                ContentBlock::ToolResult {
                    tool_use_id: "call_1".into(),
                    content: "A".into(),
                    is_error: false,
                },
                ContentBlock::Text {
                    text: "and now?".into(),
                },
            ],
        },
    ];
    let body = body_of(Chat::Glm, None, &conversation).await;
    let m = body["messages"].as_array().unwrap();
    assert_eq!(
        m[0],
        json!({"role": "system", "content": "You are a test."})
    );
    assert_eq!(
        m[2]["tool_calls"][0]["function"]["arguments"],
        "{\"path\":\"a\"}"
    );
    assert_eq!(m[2]["content"], Value::Null);
    // glm-5.3 binds thinking: its reasoning goes back with the call.
    assert_eq!(m[2]["reasoning_content"], "plan");
    assert_eq!(
        m[3],
        json!({"role": "tool", "tool_call_id": "call_1", "content": "A"})
    );
    assert_eq!(m[4], json!({"role": "user", "content": "and now?"}));
    let local = body_of(Chat::Local, None, &conversation).await;
    assert!(local["messages"][2].get("reasoning_content").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_without_done_still_completes_after_finish_reason() {
    // Some local servers close the stream after the finish chunk, without `[DONE]`.
    let mut parts = Chat::Local.preamble();
    parts.push(Chat::Local.text_delta("short"));
    parts.push(chunk(json!({}), Some("stop")));
    let server = Loopback::start(vec![Reply::sse(parts)]).await;
    let m = model_from_route(&Chat::Local.route(&server), &options(&Chat::Local, &server)).unwrap();
    assert_eq!(ask_hi(m.as_ref()).await.unwrap().message.text(), "short");
}
