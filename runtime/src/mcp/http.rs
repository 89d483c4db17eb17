//! `geode mcp --http ADDR`: `run_agent` over streamable HTTP at `http://ADDR/mcp`.
//!
//! A loopback address (127.0.0.0/8, ::1) needs no token. Any other address is refused unless a
//! token is given; with a token (on any address) every request must carry
//! `Authorization: Bearer TOKEN`, or it gets 401 before it reaches the MCP service.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::McpError;
use super::server::{RunAgentServer, RunAgentSettings};

/// The path the service answers on.
pub const MCP_PATH: &str = "/mcp";

/// Whether `addr` may be served without a token.
pub fn is_loopback(addr: &SocketAddr) -> bool {
    addr.ip().to_canonical().is_loopback()
}

/// A bound, not yet serving, HTTP endpoint.
pub struct HttpEndpoint {
    listener: TcpListener,
    token: Option<Arc<str>>,
}

impl HttpEndpoint {
    /// Check the address against the token rule, then bind.
    pub async fn bind(addr: SocketAddr, token: Option<String>) -> Result<Self, McpError> {
        let token = token.filter(|t| !t.is_empty());
        if token.is_none() && !is_loopback(&addr) {
            return Err(McpError::NonLoopbackWithoutToken { addr });
        }
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| McpError::Bind { addr, source })?;
        Ok(HttpEndpoint {
            listener,
            token: token.map(Arc::from),
        })
    }

    /// The address actually bound (port 0 resolved).
    pub fn local_addr(&self) -> Result<SocketAddr, McpError> {
        self.listener
            .local_addr()
            .map_err(|e| McpError::Serve(e.to_string()))
    }

    /// Serve `run_agent` until `shutdown` is cancelled.
    pub async fn serve(
        self,
        settings: RunAgentSettings,
        shutdown: CancellationToken,
    ) -> Result<(), McpError> {
        let server = RunAgentServer::new(settings);
        let config = StreamableHttpServerConfig {
            cancellation_token: shutdown.child_token(),
            ..StreamableHttpServerConfig::default()
        };
        let service = StreamableHttpService::new(
            move || Ok(server.clone()),
            Arc::new(LocalSessionManager::default()),
            config,
        );
        let router = axum::Router::new()
            .nest_service(MCP_PATH, service)
            .layer(middleware::from_fn_with_state(self.token, require_bearer));
        axum::serve(self.listener, router)
            .with_graceful_shutdown(async move { shutdown.cancelled().await })
            .await
            .map_err(|e| McpError::Serve(e.to_string()))
    }
}

/// Constant-time comparison, so the token cannot be guessed byte by byte from timings.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn require_bearer(
    State(token): State<Option<Arc<str>>>,
    request: Request,
    next: Next,
) -> Response {
    let Some(token) = token else {
        return next.run(request).await;
    };
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match presented {
        Some(p) if same(p.trim().as_bytes(), token.as_bytes()) => next.run(request).await,
        _ => (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            "missing or wrong bearer token\n",
        )
            .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_rule() {
        let ok = |s: &str| is_loopback(&s.parse().unwrap_or_else(|_| panic!("{s}")));
        assert!(ok("127.0.0.1:1"));
        assert!(ok("127.3.2.1:1"));
        assert!(ok("[::1]:1"));
        assert!(ok("[::ffff:127.0.0.1]:1"));
        assert!(!ok("0.0.0.0:1"));
        assert!(!ok("[::]:1"));
        assert!(!ok("192.168.1.1:1"));
        assert!(same(b"abc", b"abc") && !same(b"abc", b"abd") && !same(b"ab", b"abc"));
    }
}
