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
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub auth: Option<(String, ApiKey)>,
    pub body: Value,
}

pub type ByteStream = BoxStream<'static, Result<Bytes, String>>;

pub struct WireResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: ByteStream,
}

#[derive(Debug, Clone, PartialEq)]
pub enum SendError {
    Connect(String),
    Timeout(String),
    /// A cassette has no recorded exchange for the request: never retried.
    Unmatched(String),
}

/// Sends one request. The live one is reqwest; a cassette replays recorded exchanges.
#[async_trait]
pub trait Transport: Send + Sync {
    async fn send(&self, request: &WireRequest) -> Result<WireResponse, SendError>;
}

/// How a response stream ended, for recordings.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamEnd {
    Complete,
    Eof,
    Error(String),
    Idle,
}
