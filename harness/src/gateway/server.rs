//! The gateway's HTTP face on axum: the three formats' routes and `GET /v1/models`, the token
//! check, and each call as a sentence: authorize, read, admit under the budgets, ask the model,
//! answer (whole or streamed), record.
//!
//! A streamed answer's first frames (`message_start`, the role chunk, `response.created`) go
//! out before the model is asked, so the agent sees bytes at once; the model's text and
//! thinking follow as its deltas arrive; tool calls and the end follow the whole reply.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::serve::ListenerExt;
use geode_runtime::conversation::AssistantTurn;
use geode_runtime::model::{DeltaSink, Model, ModelDelta};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::call::{self, Encoder, Refusal, Shaper, WireCall, reply_id};
use super::records::{CallRecord, CallStatus, Ledger, SCHEMA, WireFormat};
use super::{anthropic, chat, responses};

/// What every request handler shares.
pub(super) struct Shared {
    pub model: Arc<dyn Model>,
    pub model_name: String,
    pub token: String,
    pub ledger: Ledger,
    pub secrets: Vec<String>,
    /// The streamed calls' tasks, which outlive their request handlers: `finish` waits for
    /// them so the records it hands back are whole.
    pub calls: TaskTracker,
}

/// Agents send whole conversations, screenshots included, on every call: axum's 2 MB default
/// would refuse a long trial's calls.
const BODY_LIMIT: usize = 64 * 1024 * 1024;

fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/v1/messages", post(messages))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/responses", post(responses))
        .route("/v1/models", get(models))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(shared)
}

pub(super) fn serve_tcp(
    listener: tokio::net::TcpListener,
    shared: Arc<Shared>,
    stop: CancellationToken,
) -> JoinHandle<std::io::Result<()>> {
    let app = router(shared);
    // A stream is many small frames: without TCP_NODELAY the second waits for the agent's
    // delayed ACK of the first (about 40 ms on Linux), which `geode bench gateway` showed.
    let listener = listener.tap_io(|tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::warn!("gateway: TCP_NODELAY not set: {e}");
        }
    });
    tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(stop.cancelled_owned())
            .await
    })
}

pub(super) fn serve_unix(
    listener: tokio::net::UnixListener,
    shared: Arc<Shared>,
    stop: CancellationToken,
) -> JoinHandle<std::io::Result<()>> {
    let app = router(shared);
    tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(stop.cancelled_owned())
            .await
    })
}

async fn messages(State(s): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    handle(s, WireFormat::AnthropicMessages, &headers, &body).await
}

async fn chat_completions(
    State(s): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    handle(s, WireFormat::ChatCompletions, &headers, &body).await
}

async fn responses(State(s): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    handle(s, WireFormat::OpenaiResponses, &headers, &body).await
}

/// The one model the gateway serves, in a list both Anthropic's and OpenAI's clients read.
async fn models(State(s): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    if !authorized(&headers, &s.token) {
        let (status, body) = chat::error(&Refusal::Unauthorized);
        return (status, axum::Json(body)).into_response();
    }
    let name = &s.model_name;
    axum::Json(json!({
        "object": "list",
        "data": [{"id": name, "object": "model", "type": "model", "display_name": name,
                  "created": 0, "created_at": "1970-01-01T00:00:00Z", "owned_by": "geode"}],
        "has_more": false, "first_id": name, "last_id": name,
    }))
    .into_response()
}

/// The per-trial token as `x-api-key` or `Authorization: Bearer`, compared in constant time.
fn authorized(headers: &HeaderMap, token: &str) -> bool {
    let same = |given: &str| {
        given.len() == token.len()
            && given
                .bytes()
                .zip(token.bytes())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0
    };
    let header = |name: header::HeaderName| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    header(header::HeaderName::from_static("x-api-key")).is_some_and(same)
        || header(header::AUTHORIZATION)
            .and_then(|v| v.strip_prefix("Bearer "))
            .is_some_and(|t| same(t.trim()))
}

fn parse(format: WireFormat, body: &Value) -> Result<WireCall, String> {
    match format {
        WireFormat::AnthropicMessages => anthropic::parse(body),
        WireFormat::ChatCompletions => chat::parse(body),
        WireFormat::OpenaiResponses => responses::parse(body),
    }
}

fn error_of(format: WireFormat, refusal: &Refusal) -> (StatusCode, Value) {
    match format {
        WireFormat::AnthropicMessages => anthropic::error(refusal),
        WireFormat::ChatCompletions | WireFormat::OpenaiResponses => chat::error(refusal),
    }
}

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1000.0
}

/// One call through the gateway.
async fn handle(
    shared: Arc<Shared>,
    format: WireFormat,
    headers: &HeaderMap,
    body: &[u8],
) -> Response {
    let started = Instant::now();
    let mut record = CallRecord {
        schema: SCHEMA.into(),
        seq: 0,
        started_at: chrono::Utc::now().to_rfc3339(),
        format,
        stream: false,
        route_model: shared.model.id().to_string(),
        request: None,
        reply: None,
        usage: Default::default(),
        first_byte_ms: 0.0,
        latency_ms: 0.0,
        status: CallStatus::Ok,
        error: None,
    };
    if !authorized(headers, &shared.token) {
        return refuse(&shared, record, Refusal::Unauthorized, started);
    }
    let mut call = match serde_json::from_slice::<Value>(body)
        .map_err(|e| format!("body: not JSON: {e}"))
        .and_then(|v| parse(format, &v))
    {
        Ok(call) => call,
        Err(e) => return refuse(&shared, record, Refusal::BadRequest(e), started),
    };
    shared.ledger.restore_signatures(&mut call.request.messages);
    record.stream = call.stream;
    record.request = Some(call.request.clone());
    let number = match shared.ledger.admit() {
        Ok(n) => n,
        Err(why) => return refuse(&shared, record, Refusal::Budget(why), started),
    };
    if call.stream {
        stream(shared, call, record, number, started)
    } else {
        whole(shared, call, record, number, started).await
    }
}

/// Record a call that got an error, and send the error in its format's shape.
fn refuse(shared: &Shared, mut record: CallRecord, refusal: Refusal, started: Instant) -> Response {
    let (status, body) = error_of(record.format, &refusal);
    record.status = refusal.status();
    record.error = Some(refusal.message().to_string());
    record.latency_ms = ms(started);
    record.first_byte_ms = record.latency_ms;
    keep(shared, record);
    (status, axum::Json(body)).into_response()
}

fn keep(shared: &Shared, record: CallRecord) {
    if let Err(e) = shared.ledger.append(record) {
        tracing::warn!("{e}");
    }
}

/// A call that did not ask for a stream: the reply as one JSON object.
async fn whole(
    shared: Arc<Shared>,
    call: WireCall,
    mut record: CallRecord,
    number: u64,
    started: Instant,
) -> Response {
    let plan = call::plan(&call.request.tools);
    let result = call::run(
        &*shared.model,
        &call.request,
        &plan,
        number,
        DeltaSink::default(),
    )
    .await;
    let turn = match result {
        Ok(turn) => turn,
        Err(e) => {
            let refusal = Refusal::from_model(&e, &shared.secrets);
            return refuse(&shared, record, refusal, started);
        }
    };
    let model = &call.request.model;
    let created = chrono::Utc::now().timestamp();
    let body = match call.format {
        WireFormat::AnthropicMessages => anthropic::reply(&turn, model, &reply_id("msg_")),
        WireFormat::ChatCompletions => chat::reply(&turn, model, &reply_id("chatcmpl-"), created),
        WireFormat::OpenaiResponses => responses::reply(&turn, model, &reply_id("resp_"), created),
    };
    settle(&mut record, &turn, started);
    record.first_byte_ms = record.latency_ms;
    keep(&shared, record);
    axum::Json(body).into_response()
}

fn settle(record: &mut CallRecord, turn: &AssistantTurn, started: Instant) {
    record.usage = turn.usage;
    record.reply = Some(turn.clone());
    record.latency_ms = ms(started);
}

fn encoder(call: &WireCall) -> Box<dyn Encoder> {
    let model = &call.request.model;
    let created = chrono::Utc::now().timestamp();
    match call.format {
        WireFormat::AnthropicMessages => Box::new(anthropic::Stream::new(model, &reply_id("msg_"))),
        WireFormat::ChatCompletions => Box::new(chat::Stream::new(
            model,
            &reply_id("chatcmpl-"),
            created,
            call.include_usage,
        )),
        WireFormat::OpenaiResponses => {
            Box::new(responses::Stream::new(model, &reply_id("resp_"), created))
        }
    }
}

/// A streamed call: the body is fed by a task that opens the stream, asks the model, passes its
/// deltas on, closes the stream with the whole reply and records the call. The record is kept
/// even when the agent hangs up midway.
fn stream(
    shared: Arc<Shared>,
    call: WireCall,
    mut record: CallRecord,
    number: u64,
    started: Instant,
) -> Response {
    let (tx, rx) = mpsc::unbounded_channel::<String>();
    let mut shaper = Shaper::new(encoder(&call));
    let send = move |frames: Vec<String>| {
        for f in frames {
            // The agent may have hung up: the call still ends and is recorded.
            let _ = tx.send(f);
        }
    };
    send(shaper.start());
    record.first_byte_ms = ms(started);
    let calls = shared.calls.clone();
    calls.spawn(async move {
        let plan = call::plan(&call.request.tools);
        let (dtx, mut drx) = mpsc::unbounded_channel::<ModelDelta>();
        let sink = DeltaSink::new(move |d| {
            let _ = dtx.send(d);
        });
        let run = call::run(&*shared.model, &call.request, &plan, number, sink);
        tokio::pin!(run);
        let result = loop {
            tokio::select! {
                biased;
                Some(d) = drx.recv() => send(shaper.delta(&d)),
                r = &mut run => break r,
            }
        };
        while let Ok(d) = drx.try_recv() {
            send(shaper.delta(&d));
        }
        match result {
            Ok(turn) => {
                send(shaper.finish(&turn));
                settle(&mut record, &turn, started);
            }
            Err(e) => {
                let refusal = Refusal::from_model(&e, &shared.secrets);
                send(shaper.fail(&refusal));
                record.status = refusal.status();
                record.error = Some(refusal.message().to_string());
                record.latency_ms = ms(started);
            }
        }
        keep(&shared, record);
    });
    let frames = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|f| (Ok::<_, Infallible>(Bytes::from(f)), rx))
    });
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(frames))
        .unwrap_or_else(|e| (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response())
}
