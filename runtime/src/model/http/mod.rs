//! The HTTP side every adapter shares: the transport (reqwest, or a cassette), the SSE read loop
//! with its idle timeout, and the bounded retries of `errors`.
//!
//! An adapter builds a `WireRequest` and an `Assembler` that turns SSE events into a reply;
//! `Driver::call` does the rest. After a failed attempt it retries only classes the table in
//! `errors` retries, and never once any output was streamed: that output would be produced
//! twice. Whatever it gives up on comes back as `ModelError::Provider`, which the loop does not
//! retry again.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use serde_json::Value;

use super::ModelError;
use super::errors::{Backoff, ErrorClass, Failure, RetryPolicy, classify, retry_after};
use super::record::Recorder;
use super::sse::{SseEvent, SseParser};
use crate::conversation::Usage;
use crate::error_chain::error_chain as chain;

mod provider;
pub mod wire;
pub(crate) use provider::{KeyHeader, ProviderConfig};
pub use provider::{RouteOptions, provider_model};
pub use wire::{ByteStream, SendError, StreamEnd, Transport, WireRequest, WireResponse};

/// Timeouts and retries of one adapter.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpSettings {
    /// The longest silence allowed while waiting for response headers or between two chunks
    /// of a stream. Providers send pings, so a silent stream is a dead one.
    pub idle_timeout: Duration,
    /// How long to wait for a connection to open.
    pub connect_timeout: Duration,
    /// How failed attempts are retried.
    pub retry: RetryPolicy,
}

impl Default for HttpSettings {
    fn default() -> Self {
        HttpSettings {
            idle_timeout: Duration::from_secs(300),
            connect_timeout: Duration::from_secs(30),
            retry: RetryPolicy::default(),
        }
    }
}

pub(crate) struct ReqwestTransport {
    client: reqwest::Client,
}

impl ReqwestTransport {
    pub fn new(settings: &HttpSettings) -> Result<Self, ModelError> {
        let client = reqwest::Client::builder()
            .connect_timeout(settings.connect_timeout)
            .build()
            .map_err(|e| ModelError::Fatal {
                model: "http".into(),
                message: format!("cannot build the HTTP client: {e}"),
            })?;
        Ok(ReqwestTransport { client })
    }
}

#[async_trait]
impl Transport for ReqwestTransport {
    async fn send(&self, request: &WireRequest) -> Result<WireResponse, SendError> {
        let mut builder = self.client.post(&request.url).json(&request.body);
        for (k, v) in &request.headers {
            builder = builder.header(k, v);
        }
        if let Some((name, key)) = &request.auth {
            let mut value = reqwest::header::HeaderValue::from_str(key.expose()).map_err(|_| {
                SendError::Connect(format!("the {name} value is not a valid header"))
            })?;
            value.set_sensitive(true);
            builder = builder.header(name.as_str(), value);
        }
        let response = builder.send().await.map_err(|e| {
            if e.is_timeout() {
                SendError::Timeout(chain(&e))
            } else {
                SendError::Connect(chain(&e))
            }
        })?;
        let status = response.status().as_u16();
        let headers = response
            .headers()
            .iter()
            .map(|(k, v)| {
                (
                    k.to_string(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect();
        let body = response
            .bytes_stream()
            .map(|r| r.map_err(|e| chain(&e)))
            .boxed();
        Ok(WireResponse {
            status,
            headers,
            body,
        })
    }
}

/// Turns the events of one streamed reply into that reply.
pub trait Assembler: Send {
    /// Take one event; `Ok(true)` when the reply is complete.
    fn on_event(&mut self, event: &SseEvent) -> Result<bool, Failure>;
    /// Whether output (text, thinking, tool arguments) has been streamed.
    fn visible(&self) -> bool;
    /// Whether a stream ending now, without its terminal event, still holds a whole reply
    /// (some OpenAI-compatible servers omit `[DONE]`).
    fn complete_at_eof(&self) -> bool {
        false
    }
}

/// Hand `events` to the assembler in order; `Ok(true)` once it completes. Events after the
/// completing (or failing) one are dropped with the rest of the batch.
fn feed<A: Assembler>(asm: &mut A, events: &mut Vec<SseEvent>) -> Result<bool, Failure> {
    for event in events.drain(..) {
        if asm.on_event(&event)? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Tool arguments as streamed; `{}` for none. Arguments that are not JSON are kept as a string
/// so the tool's schema check tells the model what went wrong.
pub fn tool_input(json: &str) -> Value {
    if json.trim().is_empty() {
        return serde_json::json!({});
    }
    serde_json::from_str(json).unwrap_or_else(|_| Value::String(json.to_string()))
}

/// Tool arguments as the model wrote them, for replay: a JSON value as text, or the raw text
/// `tool_input` kept.
pub fn tool_arguments(input: &Value) -> String {
    match input {
        Value::String(raw) => raw.clone(),
        v => v.to_string(),
    }
}

/// The usage of an OpenAI-shaped reply, its fields given as JSON pointers (Responses and Chat
/// Completions name them apart). The output count includes the reasoning tokens; they are split
/// off. The cost is left to the adapter.
pub(crate) fn usage_with_reasoning(
    usage: &Value,
    input: &str,
    cached: &str,
    output: &str,
    reasoning: &str,
) -> Usage {
    let n = |pointer: &str| usage.pointer(pointer).and_then(Value::as_u64).unwrap_or(0);
    let reasoning = n(reasoning);
    Usage {
        input_tokens: n(input),
        cached_input_tokens: n(cached),
        output_tokens: n(output).saturating_sub(reasoning),
        reasoning_tokens: reasoning,
        cost_usd: 0.0,
    }
}

/// Parse an event's data as JSON, or say which event was malformed.
pub fn event_json(event: &SseEvent) -> Result<Value, Failure> {
    serde_json::from_str(&event.data).map_err(|e| {
        let shown: String = event.data.chars().take(200).collect();
        let name = if event.event.is_empty() {
            "data"
        } else {
            &event.event
        };
        Failure::new(
            ErrorClass::Unknown,
            format!("malformed JSON in the SSE `{name}` event ({e}): {shown}"),
        )
    })
}

/// What to tell the user when a credential or an account is at fault.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CredentialHint {
    /// The credential to check: the key's environment variable, or the ChatGPT sign-in.
    pub key_env: String,
    /// Where the key was looked for (`Env::describe_sources`).
    pub sources: String,
    /// What to check when the account cannot pay (the catalog's `account`).
    pub account: String,
}

enum AttemptError {
    Failed(Failure),
    Unmatched(String),
    Record(String),
}

/// Runs calls for one adapter.
pub struct Driver {
    model_id: String,
    transport: Arc<dyn Transport>,
    settings: HttpSettings,
    backoff: Mutex<Backoff>,
    hint: CredentialHint,
    recorder: Option<Recorder>,
    /// Cassette replays: recorded outcomes are already known, so retries do not wait.
    instant_retries: bool,
}

impl Driver {
    /// A driver for the model `model_id`, sending through `transport`, recording when `recorder`
    /// is set; `instant_retries` skips the waits between retries (cassette replays).
    pub fn new(
        model_id: String,
        transport: Arc<dyn Transport>,
        settings: HttpSettings,
        hint: CredentialHint,
        recorder: Option<Recorder>,
        instant_retries: bool,
    ) -> Self {
        let backoff = Mutex::new(Backoff::new(settings.retry.clone()));
        Driver {
            model_id,
            transport,
            settings,
            backoff,
            hint,
            recorder,
            instant_retries,
        }
    }

    /// The id of the model this driver calls for.
    pub fn model_id(&self) -> &str {
        &self.model_id
    }

    /// Send `request` until an assembler (a fresh one per attempt) completes, within the
    /// retry policy.
    pub async fn call<A: Assembler>(
        &self,
        request: &WireRequest,
        mut fresh: impl FnMut() -> A,
    ) -> Result<A, ModelError> {
        let mut retries = 0;
        loop {
            let mut asm = fresh();
            let mut failure = match self.attempt(request, &mut asm).await {
                Ok(()) => return Ok(asm),
                Err(AttemptError::Failed(f)) => f,
                Err(AttemptError::Unmatched(message)) => {
                    return Err(ModelError::Cassette {
                        model: self.model_id.clone(),
                        message,
                    });
                }
                Err(AttemptError::Record(message)) => {
                    return Err(ModelError::Fatal {
                        model: self.model_id.clone(),
                        message,
                    });
                }
            };
            if asm.visible() && failure.class.retried() {
                failure.class = ErrorClass::StreamInterrupted;
                failure.message = format!(
                    "the reply was cut after output began ({}); not retried, it would repeat",
                    failure.message
                );
            }
            let may_retry = failure.class.retried() && retries < self.settings.retry.max_retries;
            let wait = if may_retry {
                let mut backoff = self.backoff.lock().unwrap_or_else(|p| p.into_inner());
                backoff.delay(retries, &failure)
            } else {
                None
            };
            let Some(wait) = wait else {
                let too_long = may_retry.then_some(failure.retry_after).flatten();
                return Err(self.give_up(failure, retries + 1, too_long));
            };
            tracing::warn!(
                model = %self.model_id,
                class = %failure.class,
                "provider call failed ({}); retry {} in {:?}",
                failure.message,
                retries + 1,
                wait
            );
            if !self.instant_retries {
                tokio::time::sleep(wait).await;
            }
            retries += 1;
        }
    }

    /// The final error; `too_long` is a `retry-after` the policy would not wait for.
    fn give_up(&self, f: Failure, attempts: u32, too_long: Option<Duration>) -> ModelError {
        let h = &self.hint;
        let message = match f.class {
            ErrorClass::Auth => format!("{}; check the key in {}", f.message, h.sources),
            ErrorClass::Billing => format!(
                "{}; check {} (the key from {})",
                f.message, h.account, h.key_env
            ),
            ErrorClass::PlanLimit => match f.retry_after {
                Some(wait) => format!(
                    "{}; the plan's usage limit is reached ({}): it resets in {}s",
                    f.message,
                    h.account,
                    wait.as_secs()
                ),
                None => format!(
                    "{}; the plan's usage limit is reached ({})",
                    f.message, h.account
                ),
            },
            _ if too_long.is_some() => format!(
                "{}; the server asked to wait {:?}, longer than the {:?} allowed",
                f.message,
                too_long.unwrap_or_default(),
                self.settings.retry.max_retry_after
            ),
            _ if attempts > 1 => format!("{} (after {attempts} attempts)", f.message),
            _ => f.message,
        };
        ModelError::Provider {
            model: self.model_id.clone(),
            class: f.class,
            message,
        }
    }

    async fn attempt<A: Assembler>(
        &self,
        request: &WireRequest,
        asm: &mut A,
    ) -> Result<(), AttemptError> {
        let idle = self.settings.idle_timeout;
        let sent = tokio::time::timeout(idle, self.transport.send(request)).await;
        let response = match sent {
            Err(_) => {
                return Err(AttemptError::Failed(Failure::new(
                    ErrorClass::Timeout,
                    format!("no response within {idle:?}"),
                )));
            }
            Ok(Err(SendError::Unmatched(m))) => return Err(AttemptError::Unmatched(m)),
            Ok(Err(SendError::Connect(m))) => {
                self.record(request, 0, &[], b"", &StreamEnd::Error(m.clone()))?;
                return Err(AttemptError::Failed(Failure::new(
                    ErrorClass::Connection,
                    m,
                )));
            }
            Ok(Err(SendError::Timeout(m))) => {
                return Err(AttemptError::Failed(Failure::new(ErrorClass::Timeout, m)));
            }
            Ok(Ok(r)) => r,
        };
        let WireResponse {
            status,
            headers,
            mut body,
        } = response;
        let mut raw = Vec::new();
        if !(200..300).contains(&status) {
            // Error bodies are small JSON documents; read them whole (bounded).
            while raw.len() < 1 << 20 {
                match tokio::time::timeout(idle, body.next()).await {
                    Ok(Some(Ok(chunk))) => raw.extend_from_slice(&chunk),
                    _ => break,
                }
            }
            self.record(request, status, &headers, &raw, &StreamEnd::Complete)?;
            let mut f = classify(status, &String::from_utf8_lossy(&raw));
            f.retry_after = retry_after(&headers).or(f.retry_after);
            return Err(AttemptError::Failed(f));
        }
        let mut parser = SseParser::new();
        let mut events = Vec::new();
        let failure = loop {
            let (end, message) = match tokio::time::timeout(idle, body.next()).await {
                Ok(Some(Ok(chunk))) => {
                    raw.extend_from_slice(&chunk);
                    if let Err(e) = parser.push(&chunk, &mut events) {
                        break Failure::new(ErrorClass::Unknown, e.to_string());
                    }
                    match feed(asm, &mut events) {
                        Ok(false) => continue,
                        Ok(true) => {
                            self.record(request, status, &headers, &raw, &StreamEnd::Complete)?;
                            return Ok(());
                        }
                        Err(f) => break f,
                    }
                }
                Ok(None) if asm.complete_at_eof() => {
                    self.record(request, status, &headers, &raw, &StreamEnd::Eof)?;
                    return Ok(());
                }
                Ok(None) => (
                    StreamEnd::Eof,
                    "the stream ended before the reply was complete".to_string(),
                ),
                Ok(Some(Err(e))) => (
                    StreamEnd::Error(e.clone()),
                    format!("the stream broke: {e}"),
                ),
                Err(_) => (
                    StreamEnd::Idle,
                    format!("the stream sent nothing for {idle:?}"),
                ),
            };
            self.record(request, status, &headers, &raw, &end)?;
            let class = match end {
                StreamEnd::Idle => ErrorClass::Timeout,
                _ => ErrorClass::Connection,
            };
            return Err(AttemptError::Failed(Failure::new(class, message)));
        };
        self.record(request, status, &headers, &raw, &StreamEnd::Complete)?;
        Err(AttemptError::Failed(failure))
    }

    fn record(
        &self,
        request: &WireRequest,
        status: u16,
        headers: &[(String, String)],
        body: &[u8],
        end: &StreamEnd,
    ) -> Result<(), AttemptError> {
        match &self.recorder {
            Some(r) => r
                .record(request, status, headers, body, end)
                .map_err(AttemptError::Record),
            None => Ok(()),
        }
    }
}
