//! The wire between an adapter and a provider: one request, its streamed response, how the
//! stream ended, and the transport that sends it (reqwest live, a cassette in replays). Below
//! the driver and the recorder, which both speak it.

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use serde_json::Value;

use crate::model::credentials::ApiKey;

/// One HTTP POST with a JSON body. The credential travels apart from the other headers, so a
/// recording can never pick it up.
#[derive(Debug, Clone)]
pub struct WireRequest {
    /// The full URL.
    pub url: String,
    /// Headers other than the credential.
    pub headers: Vec<(String, String)>,
    /// The credential header's name and value, kept apart from `headers`.
    pub auth: Option<(String, ApiKey)>,
    /// The JSON body.
    pub body: Value,
}

/// A response body as it arrives, chunk by chunk; an `Err` says how the stream broke.
pub type ByteStream = BoxStream<'static, Result<Bytes, String>>;

/// A response as it starts: status and headers at once, the body streamed.
pub struct WireResponse {
    /// The HTTP status.
    pub status: u16,
    /// The response headers.
    pub headers: Vec<(String, String)>,
    /// The body, streamed.
    pub body: ByteStream,
}

/// Why a request got no response.
#[derive(Debug, Clone, PartialEq)]
pub enum SendError {
    /// The connection could not be made or broke before a response.
    Connect(String),
    /// No response in time.
    Timeout(String),
    /// A cassette has no recorded exchange for the request: never retried.
    Unmatched(String),
}

/// Sends one request. The live one is reqwest; a cassette replays recorded exchanges.
#[async_trait]
pub trait Transport: Send + Sync {
    /// Send `request`; the response's body streams in afterwards.
    async fn send(&self, request: &WireRequest) -> Result<WireResponse, SendError>;
}

/// How a response stream ended, for recordings.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamEnd {
    /// The reply was read to its end (an error body counts).
    Complete,
    /// The connection closed; the reply may still be whole if its format can end there.
    Eof,
    /// The stream broke; the text says how.
    Error(String),
    /// The stream went silent for longer than the idle timeout.
    Idle,
}
