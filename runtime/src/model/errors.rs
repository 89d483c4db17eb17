//! Provider failures: a closed set of classes, each with one action, and the bounded retry
//! policy that carries the actions out.
//!
//! | class | action |
//! |---|---|
//! | rate_limit | wait as `retry-after` says (else backoff), bounded |
//! | timeout, connection, server | retry with jittered exponential backoff, bounded |
//! | (501, 505, 511) | bad_request: the server does not do this at all (often a wrong base URL) |
//! | auth | stop, name the credential to check |
//! | billing | stop, name the account to check |
//! | plan_limit | stop: the subscription's usage limit; say when it resets, if the server says |
//! | context_overflow | stop; the caller may compact and retry once |
//! | bad_request, unknown | stop |
//! | stream_interrupted | stop: output was already streamed, a retry would repeat it |

use std::time::Duration;

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::SeedableRng;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The class of a provider failure; each class has one action (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[derive(strum::IntoStaticStr, strum::Display, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
pub enum ErrorClass {
    /// Too many requests: waited out (`retry-after`, else backoff) and retried.
    RateLimit,
    /// The request timed out: retried with backoff.
    Timeout,
    /// The connection failed or broke before any output: retried with backoff.
    Connection,
    /// A server error or overload (5xx): retried with backoff.
    Server,
    /// The credential was refused: stop and name the credential to check.
    Auth,
    /// The account cannot pay: stop and name the account to check.
    Billing,
    /// A subscription plan's usage limit (ChatGPT plans): it resets in hours, not seconds.
    PlanLimit,
    /// The request does not fit the model's context: the caller may compact and retry once.
    ContextOverflow,
    /// A request the server will never accept as it is (often a wrong base URL or model id).
    BadRequest,
    /// The stream broke after output was shown: not retried, a retry would repeat it.
    StreamInterrupted,
    /// A failure no other class matches: not retried.
    Unknown,
}

impl ErrorClass {
    /// The class's snake_case name, as timelines and messages write it.
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// Whether the adapter retries this class (before any output was streamed).
    pub fn retried(self) -> bool {
        matches!(
            self,
            ErrorClass::RateLimit
                | ErrorClass::Timeout
                | ErrorClass::Connection
                | ErrorClass::Server
        )
    }
}

/// One failed attempt, classified.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    /// The class of the failure.
    pub class: ErrorClass,
    /// One line on the failure, `HTTP STATUS: ` first when there was a status.
    pub message: String,
    /// What the server asked us to wait (`retry-after-ms` / `retry-after`).
    pub retry_after: Option<Duration>,
}

impl Failure {
    /// A failure of `class` with no `retry_after`.
    pub fn new(class: ErrorClass, message: impl Into<String>) -> Self {
        Failure {
            class,
            message: message.into(),
            retry_after: None,
        }
    }
}

const OVERFLOW_HINTS: [&str; 8] = [
    "context_length_exceeded",
    "context length",
    "context window",
    "maximum context",
    "prompt is too long",
    "too many tokens",
    "exceeds the available context",
    "input is too long",
];

const BILLING_HINTS: [&str; 6] = [
    "insufficient_quota",
    "credit balance",
    "billing",
    "insufficient balance",
    "payment required",
    "exceeded your current quota",
];

/// Classify an error by HTTP status and the provider's error body (any of the Anthropic,
/// OpenAI, OpenRouter and Z.ai shapes, or plain text).
pub fn classify(status: u16, body: &str) -> Failure {
    let parsed: Option<Value> = serde_json::from_str(body).ok();
    let message = one_line(
        &parsed
            .as_ref()
            .and_then(error_message)
            .unwrap_or_else(|| body.to_string()),
    );
    let error_type = parsed.as_ref().and_then(error_type).unwrap_or_default();
    let hay = format!("{error_type} {message}").to_lowercase();
    let mentions = |hints: &[&str]| hints.iter().any(|h| hay.contains(h));
    let class = match (status, error_type.as_str()) {
        // Not implemented, HTTP version not supported, network authentication required: no
        // retry makes these succeed.
        (501 | 505 | 511, _) => ErrorClass::BadRequest,
        (_, "authentication_error" | "permission_error" | "invalid_api_key") => ErrorClass::Auth,
        (_, "billing_error" | "insufficient_quota") => ErrorClass::Billing,
        (_, "usage_limit_reached" | "usage_not_included") => ErrorClass::PlanLimit,
        (_, "rate_limit_error" | "rate_limit_exceeded") => ErrorClass::RateLimit,
        (_, "overloaded_error" | "api_error" | "server_error") => ErrorClass::Server,
        (_, "request_too_large") => ErrorClass::ContextOverflow,
        // Z.ai codes: 1000-1004 auth, 1113 balance, 1261 prompt too long, 1302/1303 rate.
        (_, "1000" | "1001" | "1002" | "1003" | "1004") => ErrorClass::Auth,
        (_, "1113") => ErrorClass::Billing,
        (_, "1261") => ErrorClass::ContextOverflow,
        (_, "1302" | "1303" | "1305") => ErrorClass::RateLimit,
        (401 | 403, _) => ErrorClass::Auth,
        (402, _) => ErrorClass::Billing,
        (429, _) if mentions(&BILLING_HINTS) => ErrorClass::Billing,
        (429, _) => ErrorClass::RateLimit,
        (408, _) => ErrorClass::Timeout,
        (413, _) => ErrorClass::ContextOverflow,
        (400..=499, _) if mentions(&OVERFLOW_HINTS) => ErrorClass::ContextOverflow,
        (400..=499, _) if mentions(&BILLING_HINTS) => ErrorClass::Billing,
        (400 | 404 | 422, _) => ErrorClass::BadRequest,
        (500..=599, _) => ErrorClass::Server,
        _ if mentions(&OVERFLOW_HINTS) => ErrorClass::ContextOverflow,
        _ => ErrorClass::Unknown,
    };
    let message = if status == 0 {
        message
    } else {
        format!("HTTP {status}: {message}")
    };
    let mut failure = Failure::new(class, message);
    if class == ErrorClass::PlanLimit {
        failure.retry_after = parsed.as_ref().and_then(plan_reset);
    }
    failure
}

/// The longest error message kept from a response body.
const MESSAGE_CHARS: usize = 200;

/// A response body as one line a person reads: an HTML error page (a proxy's, a web server's at
/// a wrong base URL) becomes its text without tags, whitespace runs become one space, and the
/// rest is cut at [`MESSAGE_CHARS`], so a retry or an error never prints a page.
fn one_line(body: &str) -> String {
    let mut text = String::with_capacity(body.len().min(4 * MESSAGE_CHARS));
    let mut in_tag = false;
    let html = body.trim_start().starts_with('<');
    for c in body.chars() {
        match c {
            '<' if html => in_tag = true,
            '>' if html && in_tag => {
                in_tag = false;
                text.push(' ');
            }
            _ if in_tag => {}
            c if c.is_whitespace() || c.is_control() => text.push(' '),
            c => text.push(c),
        }
    }
    let words: Vec<&str> = text.split_whitespace().collect();
    let line = words.join(" ");
    if line.chars().count() <= MESSAGE_CHARS {
        return line;
    }
    let cut: String = line.chars().take(MESSAGE_CHARS).collect();
    format!("{cut}…")
}

/// When a plan limit resets, as the ChatGPT backend says it (`resets_in_seconds`, else the
/// Unix time `resets_at`).
fn plan_reset(v: &Value) -> Option<Duration> {
    let e = v.get("error").unwrap_or(v);
    if let Some(secs) = e.get("resets_in_seconds").and_then(Value::as_u64) {
        return Some(Duration::from_secs(secs));
    }
    let at = e.get("resets_at").and_then(Value::as_i64)?;
    let secs = at.saturating_sub(chrono::Utc::now().timestamp()).max(0);
    Some(Duration::from_secs(secs.unsigned_abs()))
}

/// `error.message` (Anthropic, OpenAI, Z.ai), `message`, or `error` as a string.
fn error_message(v: &Value) -> Option<String> {
    let e = v.get("error").unwrap_or(v);
    e.get("message")
        .and_then(Value::as_str)
        .or_else(|| e.as_str())
        .map(str::to_string)
}

/// `error.type`, else `error.code` (a string or a number), else top-level `code`.
fn error_type(v: &Value) -> Option<String> {
    let e = v.get("error").unwrap_or(v);
    let code = |x: &Value| match x {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    };
    let ty = e.get("type").and_then(Value::as_str).map(str::to_string);
    // OpenAI puts the precise reason in `code` and a broad one in `type`.
    let c = e.get("code").and_then(code);
    match (ty, c) {
        (_, Some(c)) if !c.is_empty() => Some(c),
        (Some(t), _) => Some(t),
        _ => None,
    }
}

/// The wait a server asked for: `retry-after-ms` (milliseconds), else `retry-after` in seconds
/// or as an HTTP date.
pub fn retry_after(headers: &[(String, String)]) -> Option<Duration> {
    let get = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim())
    };
    if let Some(ms) = get("retry-after-ms").and_then(|v| v.parse::<f64>().ok())
        && ms.is_finite()
        && ms >= 0.0
    {
        return Some(Duration::from_secs_f64(ms / 1000.0));
    }
    let v = get("retry-after")?;
    if let Ok(secs) = v.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs));
    }
    let at = chrono::DateTime::parse_from_rfc2822(v).ok()?;
    let wait = at.signed_duration_since(chrono::Utc::now());
    Some(wait.to_std().unwrap_or(Duration::ZERO))
}

/// Bounded retries with jittered exponential backoff. Jitter comes from a seeded RNG so a test
/// (or a benchmark replay) sees the same waits every time.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// Retries after the first attempt.
    pub max_retries: u32,
    /// The wait before the first retry; doubles each time.
    pub base_delay: Duration,
    /// The longest wait between retries, before jitter.
    pub max_delay: Duration,
    /// A `retry-after` longer than this is not waited for: the call fails as rate limited.
    pub max_retry_after: Duration,
    /// Seeds the jitter RNG, so the same policy gives the same waits.
    pub seed: u64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_retries: 4,
            base_delay: Duration::from_secs(1),
            max_delay: Duration::from_secs(30),
            max_retry_after: Duration::from_secs(120),
            seed: 0x6e0de,
        }
    }
}

/// The waits of one adapter, drawn from its own RNG.
#[derive(Debug)]
pub struct Backoff {
    policy: RetryPolicy,
    rng: ChaCha8Rng,
}

impl Backoff {
    /// Waits following `policy`, its jitter drawn from an RNG seeded with `policy.seed`.
    pub fn new(policy: RetryPolicy) -> Self {
        let rng = ChaCha8Rng::seed_from_u64(policy.seed);
        Backoff { policy, rng }
    }

    /// The policy these waits follow.
    pub fn policy(&self) -> &RetryPolicy {
        &self.policy
    }

    /// The wait before retry number `retry` (0-based), or `None` when the failure must not be
    /// waited out. A server's `retry-after` wins over the computed wait (it knows its limits);
    /// otherwise the wait is `min(base * 2^retry, max)` jittered down to between half and all
    /// of it, so many clients do not retry in step.
    pub fn delay(&mut self, retry: u32, failure: &Failure) -> Option<Duration> {
        if let Some(wait) = failure.retry_after {
            return (wait <= self.policy.max_retry_after).then_some(wait);
        }
        let full = self
            .policy
            .base_delay
            .saturating_mul(2u32.saturating_pow(retry.min(20)))
            .min(self.policy.max_delay);
        let factor = self.rng.random_range(0.5..=1.0);
        Some(full.mul_f64(factor))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_page_becomes_one_short_line() {
        let page = format!(
            "<!DOCTYPE HTML>\n<html>\n<head><title>Error response</title></head>\n<body>\n\
             <h1>Error response</h1>\n<p>Error code: 501</p>\n<p>Message: Unsupported method \
             ('POST').</p>\n{}</body></html>\n",
            "<p>filler</p>\n".repeat(200)
        );
        let f = classify(501, &page);
        assert!(
            !f.message.contains('\n') && !f.message.contains('<'),
            "{}",
            f.message
        );
        assert!(
            f.message
                .starts_with("HTTP 501: Error response Error response Error code: 501 Message: Unsupported method ('POST')."),
            "{}",
            f.message
        );
        assert!(f.message.chars().count() <= "HTTP 501: ".len() + MESSAGE_CHARS + 1);
        let json = classify(400, r#"{"error":{"message":"line one\nline two"}}"#);
        assert_eq!(json.message, "HTTP 400: line one line two");
    }

    #[test]
    fn statuses_and_bodies_classify() {
        let c = |s, b: &str| classify(s, b).class;
        assert_eq!(
            c(
                429,
                r#"{"error":{"type":"rate_limit_error","message":"slow"}}"#
            ),
            ErrorClass::RateLimit
        );
        assert_eq!(
            c(
                429,
                r#"{"error":{"type":"insufficient_quota","code":"insufficient_quota","message":"You exceeded your current quota"}}"#
            ),
            ErrorClass::Billing
        );
        assert_eq!(c(401, "nope"), ErrorClass::Auth);
        assert_eq!(
            c(
                529,
                r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#
            ),
            ErrorClass::Server
        );
        assert_eq!(
            c(
                400,
                r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}"#
            ),
            ErrorClass::ContextOverflow
        );
        assert_eq!(
            c(
                400,
                r#"{"error":{"message":"This model's maximum context length is 8192 tokens","type":"invalid_request_error","code":"context_length_exceeded"}}"#
            ),
            ErrorClass::ContextOverflow
        );
        assert_eq!(
            c(
                400,
                r#"{"type":"error","error":{"type":"invalid_request_error","message":"Your credit balance is too low to access the Anthropic API."}}"#
            ),
            ErrorClass::Billing
        );
        assert_eq!(
            c(429, r#"{"error":{"code":"1113","message":"余额不足"}}"#),
            ErrorClass::Billing
        );
        assert_eq!(
            c(400, r#"{"error":{"message":"messages: field required"}}"#),
            ErrorClass::BadRequest
        );
        assert_eq!(c(502, "<html>bad gateway</html>"), ErrorClass::Server);
        assert_eq!(c(503, "busy"), ErrorClass::Server);
        assert!(ErrorClass::Server.retried());
        for status in [501, 505, 511] {
            assert_eq!(
                c(status, "<html>nope</html>"),
                ErrorClass::BadRequest,
                "{status}"
            );
        }
        assert!(!ErrorClass::BadRequest.retried());
        assert_eq!(c(418, "teapot"), ErrorClass::Unknown);
    }

    #[test]
    fn retry_after_reads_ms_seconds_and_dates() {
        let h = |k: &str, v: &str| vec![(k.to_string(), v.to_string())];
        assert_eq!(
            retry_after(&h("retry-after", "2")),
            Some(Duration::from_secs(2))
        );
        assert_eq!(
            retry_after(&h("Retry-After-Ms", "250")),
            Some(Duration::from_millis(250))
        );
        assert_eq!(
            retry_after(&h("retry-after", "Wed, 21 Oct 2015 07:28:00 GMT")),
            Some(Duration::ZERO)
        );
        assert_eq!(retry_after(&h("retry-after", "soon")), None);
    }

    #[test]
    fn backoff_is_seeded_bounded_and_honours_retry_after() {
        let policy = RetryPolicy {
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(350),
            ..RetryPolicy::default()
        };
        let server = Failure::new(ErrorClass::Server, "x");
        let waits = |p: &RetryPolicy| {
            let mut b = Backoff::new(p.clone());
            (0..4).map(|i| b.delay(i, &server)).collect::<Vec<_>>()
        };
        let a = waits(&policy);
        assert_eq!(a, waits(&policy), "same seed, same waits");
        for (i, w) in a.iter().enumerate() {
            let full = Duration::from_millis((100u64 << i).min(350));
            let w = w.unwrap();
            assert!(w >= full / 2 && w <= full, "retry {i}: {w:?}");
        }
        let mut b = Backoff::new(policy);
        let mut limited = Failure::new(ErrorClass::RateLimit, "x");
        limited.retry_after = Some(Duration::from_secs(3));
        assert_eq!(b.delay(0, &limited), Some(Duration::from_secs(3)));
        limited.retry_after = Some(Duration::from_secs(3600));
        assert_eq!(b.delay(0, &limited), None);
    }
}
