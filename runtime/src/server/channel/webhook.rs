//! The channels' HTTP face: the loopback listener, bearer-token check and request routing,
//! kept apart from the channel configuration and the turn it runs so the axum plumbing has
//! one home.

use std::future::IntoFuture;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path as UrlPath, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::json;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::{ChannelError, Channels, InboundMessage, run_message};
use crate::server::Shared;

/// The webhook's loopback listener.
pub struct Webhook {
    listener: TcpListener,
    addr: SocketAddr,
}

struct WebhookState {
    channels: Channels,
    shared: Arc<Shared>,
    /// Turns run as tasks of their own: a client that hangs up does not cut a turn short.
    turns: TaskTracker,
}

impl Webhook {
    /// Bind `addr` (port 0: any free port). Only loopback addresses are accepted.
    pub async fn bind(addr: SocketAddr) -> Result<Webhook, ChannelError> {
        if !addr.ip().is_loopback() {
            return Err(ChannelError::NotLoopback(addr));
        }
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| ChannelError::Bind { addr, source })?;
        let addr = listener
            .local_addr()
            .map_err(|source| ChannelError::Bind { addr, source })?;
        Ok(Webhook { listener, addr })
    }

    /// The bound address (with the real port when 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serve until `shutdown` fires; then stop accepting and give running turns up to
    /// `drain_timeout`. Returns the number of turns still running at the deadline.
    pub async fn serve(
        self,
        channels: Channels,
        shared: Arc<Shared>,
        shutdown: CancellationToken,
        drain_timeout: Duration,
    ) -> usize {
        let turns = TaskTracker::new();
        let state = Arc::new(WebhookState {
            channels,
            shared,
            turns: turns.clone(),
        });
        let app = axum::Router::new()
            .route("/channels/{name}/messages", post(handle_message))
            .with_state(state);
        let server = axum::serve(self.listener, app)
            .with_graceful_shutdown(shutdown.clone().cancelled_owned())
            .into_future();
        let server = tokio::spawn(server);
        shutdown.cancelled().await;
        turns.close();
        let left = match tokio::time::timeout(drain_timeout, turns.wait()).await {
            Ok(()) => 0,
            Err(_) => turns.len(),
        };
        // Answered turns still have their responses to write.
        match tokio::time::timeout(Duration::from_secs(2), server).await {
            Ok(Ok(Err(e))) => tracing::warn!("webhook server: {e}"),
            Ok(Err(e)) => tracing::warn!("webhook server task: {e}"),
            _ => {}
        }
        left
    }
}

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (status, Json(json!({"error": message.into()}))).into_response()
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
        .map(str::trim)
}

/// `POST /channels/{name}/messages`: channel (404), token (401), body (400), then the turn.
/// Nothing is built before the first three checks pass.
async fn handle_message(
    State(state): State<Arc<WebhookState>>,
    UrlPath(name): UrlPath<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Some(channel) = state.channels.get(&name) else {
        return error(
            StatusCode::NOT_FOUND,
            format!("no channel named {name:?} is bound"),
        );
    };
    if !bearer(&headers).is_some_and(|t| channel.token_matches(t)) {
        return error(
            StatusCode::UNAUTHORIZED,
            "missing or wrong bearer token for this channel",
        );
    }
    let message = match InboundMessage::parse(&body) {
        Ok(m) => m,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    tracing::info!(
        channel = %name,
        thread = %message.thread,
        sender = message.sender.as_deref().unwrap_or(""),
        "channel message"
    );
    let shared = state.shared.clone();
    let channel = channel.clone();
    let task = state
        .turns
        .spawn(async move { run_message(&shared, &name, &channel, &message).await });
    match task.await {
        Ok(Ok(reply)) => (StatusCode::OK, Json(reply)).into_response(),
        Ok(Err(ChannelError::Draining)) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            ChannelError::Draining.to_string(),
        ),
        Ok(Err(e)) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        Err(e) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the turn task failed: {e}"),
        ),
    }
}
