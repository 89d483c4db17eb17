//! Provider adapters against loopback servers: the scenario matrix every wire format runs
//! (`provider_matrix!`), and the cross-provider checks (routes, keys, judge, cost budget).
//!
//! Each wire format implements `Wire`: how its server streams a text reply, tool calls and
//! thinking, and how it reports each kind of error. The scenarios are written once, here.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use geode_runtime::agent::TerminationReason;
use geode_runtime::conversation::{AssistantTurn, ContentBlock, Message, StopReason, Usage};
use geode_runtime::ids::CorrelationId;
use geode_runtime::ids::StepSnapshot;
use geode_runtime::model::credentials::Env;
use geode_runtime::model::errors::{ErrorClass, RetryPolicy};
use geode_runtime::model::http::{HttpSettings, RouteOptions};
use geode_runtime::model::{
    DeltaSink, Model, ModelDelta, ModelError, ModelRequest, judge_from_route, model_from_route,
};
use geode_runtime::policy::SafetyLevel;
use geode_runtime::session::create_session;
use geode_runtime::tools::builtin::builtin_tools;
use geode_runtime::tools::plan::BoundToolPlan;
use serde_json::{Value, json};

use super::common::*;
use super::loopback::{Loopback, Part, Reply};

/// The key every test server expects; it must never show up in a recording or an error.
pub const KEY: &str = "sk-test-0123456789abcdef";

/// The error replies a wire format must classify.
#[derive(Debug, Clone, Copy)]
pub enum Failing {
    RateLimited,
    ServerError,
    BadKey,
    ContextOverflow,
}

/// One provider's wire format, as its server speaks it.
pub trait Wire: Send + Sync {
    /// The route, given the server (compat routes carry the base URL).
    fn route(&self, server: &Loopback) -> String;
    fn key_env(&self) -> &'static str;
    /// The base URL variable and the path the provider's base URL ends with.
    fn base_env(&self) -> Option<(&'static str, &'static str)>;
    /// The request path the adapter must POST to.
    fn path(&self) -> &'static str;
    /// The credential header the server expects.
    fn auth(&self) -> (&'static str, String);
    /// Events before any output (message start, an empty text block, ...).
    fn preamble(&self) -> Vec<Part>;
    fn text_delta(&self, text: &str) -> Part;
    /// Events after the last delta of a text reply, usage included.
    fn text_end(&self) -> Vec<Part>;
    /// A whole reply proposing `calls` (id, name, argument fragments).
    fn tool_calls(&self, calls: &[(&str, &str, Vec<&str>)]) -> Vec<Part>;
    /// A reply thinking `thought` (in fragments), then saying `text`.
    fn thinking(&self, thought: &[&str], text: &str) -> Vec<Part>;
    /// The signature the thinking reply carries (`None`: the wire has none).
    fn signature(&self) -> Option<&'static str>;
    /// An event whose data is not JSON.
    fn malformed(&self) -> Part;
    fn error(&self, failing: Failing) -> Reply;
    /// The usage the streams report, as the adapter must map it (cost excluded).
    fn usage(&self) -> Usage;
    fn cost(&self) -> f64;
    /// Tool-result call ids in a request body, in order.
    fn tool_result_ids(&self, body: &Value) -> Vec<String>;
}

pub fn text_reply(wire: &dyn Wire, fragments: &[&str]) -> Reply {
    let mut parts = wire.preamble();
    for f in fragments {
        parts.push(wire.text_delta(f));
        parts.push(Part::Delay(Duration::from_millis(5)));
    }
    parts.extend(wire.text_end());
    Reply::sse(parts)
}

pub fn fast_http(idle: Duration, retries: u32) -> HttpSettings {
    HttpSettings {
        idle_timeout: idle,
        connect_timeout: Duration::from_secs(2),
        retry: RetryPolicy {
            max_retries: retries,
            base_delay: Duration::from_millis(10),
            max_delay: Duration::from_millis(40),
            max_retry_after: Duration::from_secs(5),
            seed: 7,
        },
    }
}

pub fn options(wire: &dyn Wire, server: &Loopback) -> RouteOptions {
    let mut vars = BTreeMap::new();
    vars.insert(wire.key_env().to_string(), KEY.to_string());
    if let Some((env, path)) = wire.base_env() {
        vars.insert(env.to_string(), format!("{}{path}", server.url()));
    }
    let mut o = RouteOptions::with_env(Env::from_map(vars, None));
    o.http = fast_http(Duration::from_secs(1), 3);
    o
}

pub fn model(wire: &dyn Wire, server: &Loopback) -> Arc<dyn Model> {
    model_from_route(&wire.route(server), &options(wire, server)).unwrap()
}

/// One model call with the built-in tools bound, as the loop would make it.
pub async fn ask(model: &dyn Model, messages: &[Message]) -> Result<AssistantTurn, ModelError> {
    ask_streaming(model, messages, DeltaSink::default()).await
}

/// `hi`, with the reply's deltas collected in the order they were sent.
pub async fn ask_hi_watched(model: &dyn Model) -> (AssistantTurn, Vec<ModelDelta>) {
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = seen.clone();
    let sink = DeltaSink::new(move |d| sink.lock().unwrap().push(d));
    let turn = ask_streaming(model, &[Message::user_text("hi")], sink)
        .await
        .unwrap();
    let deltas = seen.lock().unwrap().clone();
    (turn, deltas)
}

async fn ask_streaming(
    model: &dyn Model,
    messages: &[Message],
    deltas: DeltaSink,
) -> Result<AssistantTurn, ModelError> {
    let plan = BoundToolPlan::new(1, builtin_tools());
    let snapshot = StepSnapshot {
        model_id: model.id().to_string(),
        plan_generation: plan.generation(),
        plan_hash: plan.hash().clone(),
        correlation_id: CorrelationId::new("c-1"),
        round: 1,
    };
    model
        .complete(&ModelRequest {
            system: "You are a test.",
            messages,
            plan: &plan,
            snapshot: &snapshot,
            force_text: false,
            deltas,
        })
        .await
}

pub async fn ask_hi(model: &dyn Model) -> Result<AssistantTurn, ModelError> {
    ask(model, &[Message::user_text("hi")]).await
}

fn class_of(r: Result<AssistantTurn, ModelError>) -> (ErrorClass, String) {
    let e = r.expect_err("the call should fail");
    assert!(!e.retryable(), "the loop must not retry again: {e}");
    eprintln!("error: {e}");
    (
        e.class().unwrap_or_else(|| panic!("no class: {e}")),
        e.to_string(),
    )
}

// --- the matrix -------------------------------------------------------------------------------

pub async fn streams_text(wire: &dyn Wire) {
    let server = Loopback::start(vec![text_reply(wire, &["Hel", "lo, ", "world."])]).await;
    let m = model(wire, &server);
    let (turn, deltas) = ask_hi_watched(m.as_ref()).await;
    assert_eq!(turn.message.text(), "Hello, world.");
    // Each fragment went on to the watcher as it was parsed.
    assert_eq!(
        deltas,
        ["Hel", "lo, ", "world."].map(|t| ModelDelta::Text(t.into()))
    );
    assert_eq!(turn.stop_reason, StopReason::EndTurn);
    let seen = server.requests();
    assert_eq!(seen.len(), 1);
    let r = &seen[0];
    assert_eq!((r.method.as_str(), r.path.as_str()), ("POST", wire.path()));
    let (header, value) = wire.auth();
    assert_eq!(r.headers.get(header), Some(&value));
    assert_eq!(r.body["stream"], true);
    assert!(r.raw_body.contains("You are a test.") && r.raw_body.contains("hi"));
}

pub async fn streams_tool_call_fragments(wire: &dyn Wire) {
    let frags = vec!["{\"pa", "th\": \"no", "tes.t", "xt\"}"];
    let server = Loopback::start(vec![Reply::sse(wire.tool_calls(&[(
        "call_a",
        "read_file",
        frags,
    )]))])
    .await;
    let turn = ask_hi(model(wire, &server).as_ref()).await.unwrap();
    assert_eq!(turn.stop_reason, StopReason::ToolUse);
    let calls = turn.message.tool_calls();
    assert_eq!(calls.len(), 1);
    assert_eq!(
        (calls[0].id.as_str(), calls[0].name.as_str()),
        ("call_a", "read_file")
    );
    assert_eq!(calls[0].input, json!({"path": "notes.txt"}));
    // The tools went out in this wire's shape.
    let body = &server.requests()[0].body;
    assert!(
        body["tools"].as_array().is_some_and(|t| t.len() >= 3),
        "{body}"
    );
}

pub async fn streams_thinking(wire: &dyn Wire) {
    let server = Loopback::start(vec![Reply::sse(
        wire.thinking(&["Let me ", "think."], "Done thinking."),
    )])
    .await;
    let (turn, deltas) = ask_hi_watched(model(wire, &server).as_ref()).await;
    let (mut thought, mut said) = (String::new(), String::new());
    for d in &deltas {
        match d {
            ModelDelta::Thinking(t) => {
                assert!(said.is_empty(), "thinking after text: {deltas:?}");
                thought.push_str(t);
            }
            ModelDelta::Text(t) => said.push_str(t),
        }
    }
    assert_eq!(
        (thought.as_str(), said.as_str()),
        ("Let me think.", "Done thinking.")
    );
    assert_eq!(
        turn.message.content,
        [
            ContentBlock::Thinking {
                thinking: "Let me think.".into(),
                signature: wire.signature().map(str::to_string),
            },
            ContentBlock::Text {
                text: "Done thinking.".into()
            }
        ]
    );
    assert_eq!(turn.message.text(), "Done thinking.");
}

pub async fn accounts_usage_and_cost(wire: &dyn Wire) {
    let server = Loopback::start(vec![text_reply(wire, &["ok"])]).await;
    let turn = ask_hi(model(wire, &server).as_ref()).await.unwrap();
    let want = wire.usage();
    let got = Usage {
        cost_usd: 0.0,
        ..turn.usage
    };
    assert_eq!(got, want);
    assert!(
        (turn.usage.cost_usd - wire.cost()).abs() < 1e-12,
        "cost {} != {}",
        turn.usage.cost_usd,
        wire.cost()
    );
}

pub async fn waits_out_a_rate_limit(wire: &dyn Wire) {
    let server = Loopback::start(vec![
        wire.error(Failing::RateLimited).header("retry-after", "1"),
        text_reply(wire, &["after the wait"]),
    ])
    .await;
    let started = Instant::now();
    let turn = ask_hi(model(wire, &server).as_ref()).await.unwrap();
    assert_eq!(turn.message.text(), "after the wait");
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "retry-after honoured"
    );
    assert_eq!(server.requests().len(), 2);
}

pub async fn retries_server_errors(wire: &dyn Wire) {
    let server = Loopback::start(vec![
        wire.error(Failing::ServerError),
        wire.error(Failing::ServerError),
        text_reply(wire, &["third time"]),
    ])
    .await;
    let turn = ask_hi(model(wire, &server).as_ref()).await.unwrap();
    assert_eq!(turn.message.text(), "third time");
    let seen = server.requests();
    assert_eq!(seen.len(), 3);
    assert_eq!(
        seen[0].body, seen[2].body,
        "a retry resends the same request"
    );
}

pub async fn stops_on_a_bad_key(wire: &dyn Wire) {
    let server = Loopback::start(vec![wire.error(Failing::BadKey)]).await;
    let (class, message) = class_of(ask_hi(model(wire, &server).as_ref()).await);
    assert_eq!(class, ErrorClass::Auth);
    assert!(message.contains(wire.key_env()), "{message}");
    assert!(!message.contains(KEY), "the key leaked: {message}");
    assert_eq!(server.requests().len(), 1, "auth errors are not retried");
}

pub async fn reports_context_overflow(wire: &dyn Wire) {
    let server = Loopback::start(vec![wire.error(Failing::ContextOverflow)]).await;
    let (class, _) = class_of(ask_hi(model(wire, &server).as_ref()).await);
    assert_eq!(class, ErrorClass::ContextOverflow);
    assert_eq!(server.requests().len(), 1);
}

pub async fn a_cut_stream_is_interrupted_not_retried(wire: &dyn Wire) {
    let mut parts = wire.preamble();
    parts.push(wire.text_delta("Partial ans"));
    parts.push(Part::Cut);
    let server = Loopback::start(vec![Reply::sse(parts), text_reply(wire, &["never"])]).await;
    let (class, message) = class_of(ask_hi(model(wire, &server).as_ref()).await);
    assert_eq!(class, ErrorClass::StreamInterrupted, "{message}");
    assert_eq!(server.requests().len(), 1, "no silent retry after output");
}

pub async fn malformed_json_is_a_clear_error(wire: &dyn Wire) {
    let mut parts = wire.preamble();
    parts.push(wire.malformed());
    parts.extend(wire.text_end());
    let server = Loopback::start(vec![Reply::sse(parts)]).await;
    let (class, message) = class_of(ask_hi(model(wire, &server).as_ref()).await);
    assert_eq!(class, ErrorClass::Unknown);
    assert!(message.contains("malformed JSON"), "{message}");
    assert_eq!(server.requests().len(), 1);
}

pub async fn an_idle_stream_times_out(wire: &dyn Wire) {
    let mut parts = wire.preamble();
    parts.push(Part::Hang);
    let server = Loopback::start(vec![Reply::sse(parts.clone()), Reply::sse(parts)]).await;
    let mut opts = options(wire, &server);
    opts.http = fast_http(Duration::from_millis(400), 1);
    let m = model_from_route(&wire.route(&server), &opts).unwrap();
    let started = Instant::now();
    let (class, message) = class_of(ask_hi(m.as_ref()).await);
    assert_eq!(class, ErrorClass::Timeout, "{message}");
    assert!(message.contains("2 attempts"), "{message}");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(
        server.requests().len(),
        2,
        "a silent stream before output is retried"
    );
}

/// One loop turn: the model reads a file and writes another in one round, then answers.
pub async fn runs_a_multi_tool_turn_in_the_loop(wire: &dyn Wire) {
    let f = Fixture::new();
    std::fs::write(f.path("input.txt"), "seed").unwrap();
    let server = Loopback::start(vec![
        Reply::sse(wire.tool_calls(&[
            ("call_r", "read_file", vec!["{\"path\":", "\"input.txt\"}"]),
            (
                "call_w",
                "write_file",
                vec!["{\"path\":\"out.txt\",", "\"content\":\"grown\"}"],
            ),
        ])),
        text_reply(wire, &["Read input.txt and wrote out.txt."]),
    ])
    .await;
    let m = model(wire, &server);
    let mut s = create_session(f.config(m, headless(SafetyLevel::Write))).unwrap();
    let out = run(&mut s, "grow the seed").await;
    assert_eq!(out.termination, TerminationReason::Natural, "{out:?}");
    assert_eq!((out.rounds, out.tool_calls), (2, 2));
    assert_eq!(std::fs::read_to_string(f.path("out.txt")).unwrap(), "grown");
    let seen = server.requests();
    assert_eq!(seen.len(), 2);
    assert_eq!(wire.tool_result_ids(&seen[1].body), ["call_r", "call_w"]);
    assert!(
        seen[1].raw_body.contains("seed"),
        "the read result went back"
    );
    assert!((out.usage.cost_usd - 2.0 * wire.cost()).abs() < 1e-9);
    assert_eq!(s.usage().input_tokens, 2 * wire.usage().input_tokens);
}

/// `--record` then `cassette:`: the same request replays offline; another one fails loudly.
pub async fn records_and_replays(wire: &dyn Wire) {
    let dir = tempfile::tempdir().unwrap();
    let server = Loopback::start(vec![
        wire.error(Failing::ServerError),
        text_reply(wire, &["recorded ", "answer"]),
    ])
    .await;
    let mut opts = options(wire, &server);
    opts.record_dir = Some(dir.path().to_path_buf());
    let live = model_from_route(&wire.route(&server), &opts).unwrap();
    let turn = ask_hi(live.as_ref()).await.unwrap();
    drop(server);
    let files: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(files.len(), 2, "every attempt is recorded");
    for f in files {
        let text = std::fs::read_to_string(f.unwrap().path()).unwrap();
        assert!(!text.contains(KEY), "a recording holds the key");
        assert!(text.contains("geode.cassette.v1"));
    }
    let route = format!("cassette:{}", dir.path().display());
    let replay = model_from_route(&route, &RouteOptions::with_env(Env::empty())).unwrap();
    assert_eq!(replay.id(), route);
    let again = ask_hi(replay.as_ref()).await.unwrap();
    assert_eq!(again, turn);
    let err = ask(replay.as_ref(), &[Message::user_text("something else")])
        .await
        .unwrap_err();
    assert!(matches!(err, ModelError::Cassette { .. }), "{err}");
    assert!(err.to_string().contains("no recorded exchange"), "{err}");
}

/// The scenario matrix as test functions, for one `Wire` value.
macro_rules! provider_matrix {
    ($wire:expr) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn streams_text() {
            crate::suite::providers::streams_text(&$wire).await
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn streams_tool_call_fragments() {
            crate::suite::providers::streams_tool_call_fragments(&$wire).await
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn streams_thinking() {
            crate::suite::providers::streams_thinking(&$wire).await
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn accounts_usage_and_cost() {
            crate::suite::providers::accounts_usage_and_cost(&$wire).await
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn waits_out_a_rate_limit() {
            crate::suite::providers::waits_out_a_rate_limit(&$wire).await
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn retries_server_errors() {
            crate::suite::providers::retries_server_errors(&$wire).await
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn stops_on_a_bad_key() {
            crate::suite::providers::stops_on_a_bad_key(&$wire).await
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn reports_context_overflow() {
            crate::suite::providers::reports_context_overflow(&$wire).await
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn a_cut_stream_is_interrupted_not_retried() {
            crate::suite::providers::a_cut_stream_is_interrupted_not_retried(&$wire).await
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn malformed_json_is_a_clear_error() {
            crate::suite::providers::malformed_json_is_a_clear_error(&$wire).await
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn an_idle_stream_times_out() {
            crate::suite::providers::an_idle_stream_times_out(&$wire).await
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn runs_a_multi_tool_turn_in_the_loop() {
            crate::suite::providers::runs_a_multi_tool_turn_in_the_loop(&$wire).await
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn records_and_replays() {
            crate::suite::providers::records_and_replays(&$wire).await
        }
    };
}
pub(crate) use provider_matrix;

// --- across providers -------------------------------------------------------------------------

#[test]
fn routes_refuse_unknown_ids_and_subscription_plans() {
    let opts = RouteOptions::with_env(Env::empty());
    let err = |route: &str| model_from_route(route, &opts).err().unwrap().to_string();
    let e = err("anthropic:claude-sonnet-5-20990101");
    assert!(
        e.contains("claude-sonnet-5,") && e.contains("nothing is upgraded"),
        "{e}"
    );
    assert!(err("openai:gpt-6").contains("gpt-6-sol"));
    assert!(err("openai-codex:gpt-6-sol").contains("geode login openai"));
    assert!(err("glm-coding:glm-5.3").contains("coding plan"));
    assert!(err("anthropic-oauth:claude-opus-5-5").contains("OAuth"));
    assert!(err("mystery:x").contains("anthropic:MODEL"));
    // A known id without a key: the error names the variable and the .env file.
    let e = err("anthropic:claude-opus-5-5");
    assert!(e.contains("auth") && e.contains("ANTHROPIC_API_KEY"), "{e}");
    // Embedded routes still work through the general function.
    assert_eq!(model_from_route("nop", &opts).unwrap().id(), "nop");
    // Embedded models that only a benchmark trial can build say so, naming the route.
    let e = err("flaky-oracle:0.5");
    assert!(
        e.contains("\"flaky-oracle:0.5\"") && e.contains("benchmark trial"),
        "{e}"
    );
    assert!(err("oracle").contains("benchmark trial"));
}

#[test]
fn keys_come_from_the_dotenv_file_under_geode_home() {
    let home = tempfile::tempdir().unwrap();
    let dotenv = home.path().join(".env");
    std::fs::write(&dotenv, "export ZAI_API_KEY=\"zai-from-file\"\n").unwrap();
    let opts = RouteOptions::with_env(Env::from_map(BTreeMap::new(), Some(&dotenv)));
    let m = model_from_route("glm:glm-5.3", &opts).unwrap();
    assert_eq!(m.id(), "glm:glm-5.3");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_judge_decides_but_is_never_a_root_model() {
    use super::providers_anthropic::Anthropic;
    let wire = Anthropic;
    let server = Loopback::start(vec![text_reply(&wire, &["PASS"])]).await;
    let opts = options(&wire, &server);
    let route = format!("judge:{}", wire.route(&server));
    let err = model_from_route(&route, &opts).err().unwrap();
    assert!(matches!(err, ModelError::RefusedRoute { .. }), "{err}");
    assert!(err.to_string().contains("root text model"), "{err}");
    let judge = judge_from_route(&route, &opts).unwrap();
    assert_eq!(judge.id(), format!("judge:{}", wire.route(&server)));
    let decision = judge.decide("Grade.", "Is 2+2=4?").await.unwrap();
    assert_eq!(decision.text, "PASS");
    assert!(decision.usage.cost_usd > 0.0);
    // Decisions are text only: tool use is switched off in the request.
    assert_eq!(server.requests()[0].body["tool_choice"], Value::Null);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cost_budget_stops_the_loop() {
    use super::providers_anthropic::Anthropic;
    let wire = Anthropic;
    let f = Fixture::new();
    let server = Loopback::start(vec![
        Reply::sse(wire.tool_calls(&[("call_1", "list_dir", vec!["{}"])])),
        text_reply(&wire, &["never reached"]),
    ])
    .await;
    let mut cfg = f.config(model(&wire, &server), headless(SafetyLevel::Safe));
    cfg.scaffold.guards.cost_budget_usd = Some(wire.cost() / 2.0);
    let mut s = create_session(cfg).unwrap();
    let out = run(&mut s, "list").await;
    assert_eq!(out.termination, TerminationReason::CostBudgetExceeded);
    assert_eq!(out.termination.as_str(), "cost_budget_exceeded");
    assert_eq!(server.requests().len(), 1);
    assert!((out.usage.cost_usd - wire.cost()).abs() < 1e-12);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_refused_is_retried_then_reported() {
    // Bind then drop a listener: the port is very likely closed afterwards.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut opts = RouteOptions::with_env(Env::empty());
    opts.http = fast_http(Duration::from_secs(1), 2);
    let route = format!("compat:http://127.0.0.1:{port}/v1:local");
    let m = model_from_route(&route, &opts).unwrap();
    let (class, message) = class_of(ask_hi(m.as_ref()).await);
    assert_eq!(class, ErrorClass::Connection, "{message}");
    assert!(message.contains("3 attempts"), "{message}");
}
