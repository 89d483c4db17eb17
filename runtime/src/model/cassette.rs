//! Replaying a recording (`cassette:DIR`): a transport that answers each request with the
//! exchange recorded for it (matched by the SHA-256 of its canonical body, recorded order for
//! repeats), and the model the route builds over it. Above the recorder's files (`record.rs`)
//! and the HTTP driver it plugs into.

use std::collections::{BTreeMap, VecDeque};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;

use super::catalog::{Route, parse_route};
use super::http::{RouteOptions, SendError, Transport, WireRequest, WireResponse, provider_model};
use super::record::{Exchange, RecordedResponse, load_exchanges};
use super::{Model, ModelError};
use crate::ids::canonical_sha256;

/// Answers requests from a recording.
pub struct CassetteTransport {
    dir: String,
    queues: Mutex<BTreeMap<String, VecDeque<RecordedResponse>>>,
    recorded: usize,
}

impl CassetteTransport {
    pub(crate) fn new(dir: &Path, exchanges: &[Exchange]) -> Self {
        let mut queues: BTreeMap<String, VecDeque<RecordedResponse>> = BTreeMap::new();
        for ex in exchanges {
            queues
                .entry(canonical_sha256(&ex.request.body))
                .or_default()
                .push_back(ex.response.clone());
        }
        CassetteTransport {
            dir: dir.display().to_string(),
            queues: Mutex::new(queues),
            recorded: exchanges.len(),
        }
    }
}

#[async_trait]
impl Transport for CassetteTransport {
    async fn send(&self, request: &WireRequest) -> Result<WireResponse, SendError> {
        let hash = canonical_sha256(&request.body);
        let next = {
            let mut queues = self.queues.lock().unwrap_or_else(|p| p.into_inner());
            queues.get_mut(&hash).and_then(VecDeque::pop_front)
        };
        let Some(r) = next else {
            return Err(SendError::Unmatched(format!(
                "no recorded exchange in {} matches this request (body sha256 {hash}, {} \
                 recorded): the request differs from the recording, or was made more often; \
                 record again with --record",
                self.dir, self.recorded
            )));
        };
        if r.status == 0 {
            return Err(SendError::Connect(r.error.unwrap_or_default()));
        }
        let body = futures::stream::iter([Ok(Bytes::from(r.body.into_bytes()))]);
        let body = match r.end.as_str() {
            "error" => body
                .chain(futures::stream::iter([Err(r.error.unwrap_or_default())]))
                .boxed(),
            "idle" => body.chain(futures::stream::pending()).boxed(),
            _ => body.boxed(),
        };
        Ok(WireResponse {
            status: r.status,
            headers: r.headers,
            body,
        })
    }
}

/// `cassette:DIR`: the recorded route's adapter, answering from the recording. It needs no
/// key and no network.
pub fn cassette_model(dir: &Path, opts: &RouteOptions) -> Result<Arc<dyn Model>, ModelError> {
    let shown = format!("cassette:{}", dir.display());
    let err = |message: String| ModelError::Cassette {
        model: shown.clone(),
        message,
    };
    let exchanges = load_exchanges(dir).map_err(err)?;
    let Some(first) = exchanges.first() else {
        return Err(err(format!(
            "{} holds no recorded exchanges",
            dir.display()
        )));
    };
    if let Some(other) = exchanges.iter().find(|e| e.route != first.route) {
        return Err(err(format!(
            "the recording mixes routes {} and {}; keep one route per directory",
            first.route, other.route
        )));
    }
    let Route::Provider(mut route) = parse_route(&first.route)? else {
        return Err(err(format!("{} is not a provider route", first.route)));
    };
    route.text = shown;
    let mut replay = opts.clone();
    replay.effort = first.effort;
    replay.max_output_tokens = first.max_output_tokens;
    replay.record_dir = None;
    // Recorded bodies arrive at once; silence can only be a recorded idle stream.
    replay.http.idle_timeout = Duration::from_millis(200);
    let transport = Arc::new(CassetteTransport::new(dir, &exchanges));
    provider_model(&route, &replay, Some(transport))
}
