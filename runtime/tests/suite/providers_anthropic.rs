//! The Anthropic Messages adapter against a loopback server speaking its SSE.

use geode_runtime::conversation::{ContentBlock, Message, Role, Usage};
use geode_runtime::model::catalog::Catalog;
use geode_runtime::model::effort::Effort;
use geode_runtime::model::errors::ErrorClass;
use geode_runtime::model::model_from_route;
use serde_json::{Value, json};

use super::loopback::{Loopback, Part, Reply};
use super::providers::{Failing, KEY, Wire, ask, ask_hi, options, provider_matrix, text_reply};

pub struct Anthropic;

const MODEL: &str = "claude-sonnet-5";

fn event(data: Value) -> Part {
    let name = data["type"].as_str().unwrap_or_default().to_string();
    Part::event(&name, &data)
}

fn start() -> Part {
    event(json!({"type": "message_start", "message": {
        "id": "msg_01", "type": "message", "role": "assistant", "model": MODEL, "content": [],
        "stop_reason": null, "stop_sequence": null,
        "usage": {"input_tokens": 700, "cache_creation_input_tokens": 100,
                  "cache_read_input_tokens": 200, "output_tokens": 1}}}))
}

fn end(stop: &str) -> Vec<Part> {
    vec![
        event(
            json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null},
                     "usage": {"output_tokens": 50}}),
        ),
        event(json!({"type": "message_stop"})),
    ]
}

fn block_start(index: u64, block: Value) -> Part {
    event(json!({"type": "content_block_start", "index": index, "content_block": block}))
}

fn delta(index: u64, delta: Value) -> Part {
    event(json!({"type": "content_block_delta", "index": index, "delta": delta}))
}

fn stop(index: u64) -> Part {
    event(json!({"type": "content_block_stop", "index": index}))
}

fn error_reply(status: u16, kind: &str, message: &str) -> Reply {
    Reply::json(
        status,
        &json!({"type": "error", "error": {"type": kind, "message": message}}),
    )
}

impl Wire for Anthropic {
    fn route(&self, _: &Loopback) -> String {
        format!("anthropic:{MODEL}")
    }
    fn key_env(&self) -> &'static str {
        "ANTHROPIC_API_KEY"
    }
    fn base_env(&self) -> Option<(&'static str, &'static str)> {
        Some(("ANTHROPIC_BASE_URL", ""))
    }
    fn path(&self) -> &'static str {
        "/v1/messages"
    }
    fn auth(&self) -> (&'static str, String) {
        ("x-api-key", KEY.to_string())
    }
    fn preamble(&self) -> Vec<Part> {
        vec![
            start(),
            event(json!({"type": "ping"})),
            block_start(0, json!({"type": "text", "text": ""})),
        ]
    }
    fn text_delta(&self, text: &str) -> Part {
        delta(0, json!({"type": "text_delta", "text": text}))
    }
    fn text_end(&self) -> Vec<Part> {
        let mut parts = vec![stop(0)];
        parts.extend(end("end_turn"));
        parts
    }
    fn tool_calls(&self, calls: &[(&str, &str, Vec<&str>)]) -> Vec<Part> {
        let mut parts = vec![start()];
        for (i, (id, name, frags)) in calls.iter().enumerate() {
            let i = i as u64;
            parts.push(block_start(
                i,
                json!({"type": "tool_use", "id": id, "name": name, "input": {}}),
            ));
            for f in frags {
                parts.push(delta(
                    i,
                    json!({"type": "input_json_delta", "partial_json": f}),
                ));
            }
            parts.push(stop(i));
        }
        parts.extend(end("tool_use"));
        parts
    }
    fn thinking(&self, thought: &[&str], text: &str) -> Vec<Part> {
        let mut parts = vec![
            start(),
            block_start(
                0,
                json!({"type": "thinking", "thinking": "", "signature": ""}),
            ),
        ];
        for t in thought {
            parts.push(delta(0, json!({"type": "thinking_delta", "thinking": t})));
        }
        parts.push(delta(
            0,
            json!({"type": "signature_delta", "signature": "EqQBCgIYAhIM"}),
        ));
        parts.push(stop(0));
        parts.push(block_start(1, json!({"type": "text", "text": ""})));
        parts.push(delta(1, json!({"type": "text_delta", "text": text})));
        parts.push(stop(1));
        parts.extend(end("end_turn"));
        parts
    }
    fn signature(&self) -> Option<&'static str> {
        Some("EqQBCgIYAhIM")
    }
    fn malformed(&self) -> Part {
        Part::text(
            "event: content_block_delta\ndata: {\"type\": \"content_block_delta\", \"index\": 0, \"delta\": {\"type\": \"text_del\n\n",
        )
    }
    fn error(&self, failing: Failing) -> Reply {
        match failing {
            Failing::RateLimited => error_reply(
                429,
                "rate_limit_error",
                "This request would exceed your organization's rate limit.",
            ),
            Failing::ServerError => error_reply(529, "overloaded_error", "Overloaded"),
            Failing::BadKey => error_reply(401, "authentication_error", "invalid x-api-key"),
            Failing::ContextOverflow => error_reply(
                400,
                "invalid_request_error",
                "prompt is too long: 1048577 tokens > 1000000 maximum",
            ),
        }
    }
    fn usage(&self) -> Usage {
        Usage {
            input_tokens: 1000,
            cached_input_tokens: 200,
            output_tokens: 50,
            reasoning_tokens: 0,
            cost_usd: 0.0,
        }
    }
    fn cost(&self) -> f64 {
        let p = Catalog::builtin().unwrap().model(MODEL).unwrap().prices;
        p.cost(&self.usage(), 100)
    }
    fn tool_result_ids(&self, body: &Value) -> Vec<String> {
        let last = body["messages"].as_array().unwrap().last().unwrap().clone();
        assert_eq!(last["role"], "user");
        last["content"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|b| b["type"] == "tool_result")
            .map(|b| b["tool_use_id"].as_str().unwrap().to_string())
            .collect()
    }
}

provider_matrix!(Anthropic);

async fn body_for(route: &str, effort: Option<Effort>) -> Value {
    let server = Loopback::start(vec![text_reply(&Anthropic, &["ok"])]).await;
    let mut opts = options(&Anthropic, &server);
    opts.effort = effort;
    let m = model_from_route(route, &opts).unwrap();
    ask_hi(m.as_ref()).await.unwrap();
    server.requests()[0].body.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adaptive_thinking_sends_a_clamped_effort() {
    let body = body_for("anthropic:claude-opus-4-6", Some(Effort::Xhigh)).await;
    assert_eq!(body["thinking"], json!({"type": "adaptive"}));
    // claude-opus-4-6 has no xhigh: clamped down to high.
    assert_eq!(body["output_config"], json!({"effort": "high"}));
    let body = body_for("anthropic:claude-opus-5-5", Some(Effort::Minimal)).await;
    assert_eq!(body["output_config"], json!({"effort": "low"}));
    let body = body_for("anthropic:claude-sonnet-5", None).await;
    assert_eq!(
        body["output_config"],
        json!({"effort": "medium"}),
        "catalog default"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn older_models_get_budget_tokens() {
    let body = body_for("anthropic:claude-sonnet-4-5-20250929", Some(Effort::High)).await;
    assert_eq!(
        body["thinking"],
        json!({"type": "enabled", "budget_tokens": 20000})
    );
    assert!(body.get("output_config").is_none());
    let body = body_for("anthropic:claude-sonnet-4-5-20250929", Some(Effort::Max)).await;
    let budget = body["thinking"]["budget_tokens"].as_u64().unwrap();
    assert!(budget < body["max_tokens"].as_u64().unwrap());
    // Haiku's default effort is none: no thinking at all.
    let body = body_for("anthropic:claude-haiku-4-5-20251001", None).await;
    assert!(body.get("thinking").is_none(), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signed_thinking_is_replayed_and_prompts_are_cached() {
    let server = Loopback::start(vec![text_reply(&Anthropic, &["ok"])]).await;
    let m = model_from_route("anthropic:claude-opus-5-5", &options(&Anthropic, &server)).unwrap();
    let conversation = [
        Message::user_text("read it"),
        Message {
            role: Role::Assistant,
            content: vec![
                ContentBlock::Thinking {
                    thinking: "I should read.".into(),
                    signature: Some("sig-1".into()),
                },
                ContentBlock::Thinking {
                    thinking: String::new(),
                    signature: Some("redacted_thinking:opaque".into()),
                },
                ContentBlock::Thinking {
                    thinking: "unsigned, from elsewhere".into(),
                    signature: None,
                },
                ContentBlock::ToolUse {
                    id: "t1".into(),
                    name: "read_file".into(),
                    input: json!({"path": "a"}),
                },
            ],
        },
        Message {
            role: Role::User,
            content: vec![
                ContentBlock::Text {
                    text: "also this".into(),
                },
                ContentBlock::ToolResult {
                    tool_use_id: "t1".into(),
                    content: "A".into(),
                    is_error: false,
                },
            ],
        },
    ];
    ask(m.as_ref(), &conversation).await.unwrap();
    let body = &server.requests()[0].body;
    let assistant = &body["messages"][1]["content"];
    assert_eq!(
        assistant[0],
        json!({"type": "thinking", "thinking": "I should read.", "signature": "sig-1"})
    );
    assert_eq!(
        assistant[1],
        json!({"type": "redacted_thinking", "data": "opaque"})
    );
    assert_eq!(
        assistant[2]["type"], "tool_use",
        "unsigned thinking dropped"
    );
    let user = &body["messages"][2]["content"];
    assert_eq!(user[0]["type"], "tool_result", "tool results come first");
    assert_eq!(user[1]["cache_control"], json!({"type": "ephemeral"}));
    assert_eq!(
        body["system"][0]["cache_control"],
        json!({"type": "ephemeral"})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overloaded_event_before_output_is_retried() {
    let mut first = vec![start()];
    first.push(event(
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
    ));
    let server = Loopback::start(vec![Reply::sse(first), text_reply(&Anthropic, &["fine"])]).await;
    let m = model_from_route(&Anthropic.route(&server), &options(&Anthropic, &server)).unwrap();
    assert_eq!(ask_hi(m.as_ref()).await.unwrap().message.text(), "fine");
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn billing_errors_name_the_account() {
    let server = Loopback::start(vec![error_reply(
        400,
        "invalid_request_error",
        "Your credit balance is too low to access the Anthropic API.",
    )])
    .await;
    let m = model_from_route(&Anthropic.route(&server), &options(&Anthropic, &server)).unwrap();
    let err = ask_hi(m.as_ref()).await.unwrap_err();
    assert_eq!(err.class(), Some(ErrorClass::Billing));
    let text = err.to_string();
    assert!(text.contains("console.anthropic.com") && text.contains("ANTHROPIC_API_KEY"));
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_past_the_limit_is_not_waited_for() {
    let server = Loopback::start(vec![
        Anthropic
            .error(Failing::RateLimited)
            .header("retry-after", "3600"),
    ])
    .await;
    let m = model_from_route(&Anthropic.route(&server), &options(&Anthropic, &server)).unwrap();
    let err = ask_hi(m.as_ref()).await.unwrap_err();
    assert_eq!(err.class(), Some(ErrorClass::RateLimit));
    assert!(err.to_string().contains("asked to wait 3600s"), "{err}");
    assert_eq!(server.requests().len(), 1);
}

/// The loop's answer to provider failures it cannot retry away: billing stops the turn as
/// `billing_error`; a context overflow compacts and retries once, then `context_exhausted`.
mod loop_actions {
    use geode_runtime::agent::TerminationReason;
    use geode_runtime::policy::{SessionMode, SessionPolicy};
    use geode_runtime::session::create_session;
    use geode_runtime::store::timeline::TimelineEvent;

    use super::super::common::{Fixture, run};
    use super::super::loopback::Loopback;
    use super::super::providers::{Failing, Wire, options, text_reply};
    use super::Anthropic;
    use geode_runtime::model::model_from_route;

    const LONG: &str = "an answer long enough to pass the rule-based verification";

    fn session(f: &Fixture, server: &Loopback) -> geode_runtime::agent::AgenticLoop {
        let m = model_from_route(&Anthropic.route(server), &options(&Anthropic, server)).unwrap();
        let mut cfg = f.config(m, SessionPolicy::for_mode(SessionMode::Headless));
        cfg.scaffold.compaction.keep_recent_messages = 2;
        create_session(cfg).unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn billing_ends_the_turn_as_billing_error_without_retries() {
        let server = Loopback::start(vec![super::error_reply(
            400,
            "invalid_request_error",
            "Your credit balance is too low to access the Anthropic API.",
        )])
        .await;
        let f = Fixture::new();
        let mut s = session(&f, &server);
        let outcome = run(&mut s, "hi").await;
        assert_eq!(outcome.termination, TerminationReason::BillingError);
        assert_eq!(server.requests().len(), 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_overflow_compacts_then_retries_once() {
        let server = Loopback::start(vec![
            text_reply(&Anthropic, &[LONG, " (one)"]),
            text_reply(&Anthropic, &[LONG, " (two)"]),
            Anthropic.error(Failing::ContextOverflow),
            text_reply(&Anthropic, &[LONG, " (three)"]),
            Anthropic.error(Failing::ContextOverflow),
            Anthropic.error(Failing::ContextOverflow),
        ])
        .await;
        let f = Fixture::new();
        let mut s = session(&f, &server);
        run(&mut s, "first").await;
        run(&mut s, "second").await;
        let third = run(&mut s, "third").await;
        assert_eq!(third.termination, TerminationReason::Natural);
        assert!(third.text.ends_with("(three)"), "{}", third.text);
        let requests = server.requests();
        assert_eq!(requests.len(), 4);
        let sent = |i: usize| requests[i].body["messages"].as_array().unwrap().len();
        assert_eq!(sent(2), 5, "u1 a1 u2 a2 u3 overflowed");
        assert!(sent(3) < sent(2), "the retry sent the compacted context");
        f.timeline.flush().unwrap();
        assert!(f.rows(&s).iter().any(|r| matches!(
            &r.event,
            TimelineEvent::Compaction { status, .. } if status == "done"
        )));

        // Still overflowing after one compaction and its retry: the turn ends, no third try.
        let fourth = run(&mut s, "fourth").await;
        assert_eq!(fourth.termination, TerminationReason::ContextExhausted);
        assert_eq!(server.requests().len(), 6);
    }
}
