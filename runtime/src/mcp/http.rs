//! `geode mcp --http ADDR`: `run_agent` over streamable HTTP at `http://ADDR/mcp`.
//!
//! A loopback address (127.0.0.0/8, ::1) needs no token. Any other address is refused unless a
//! token is given; with a token (on any address) every request must carry
//! `Authorization: Bearer TOKEN`, or it gets 401 before it reaches the MCP service.
//!
//! Against DNS rebinding (a web page whose host name now resolves to 127.0.0.1 posting to the
//! server from the user's browser), a request whose `Origin` names another host is refused
//! with 403, as the MCP specification asks, and a loopback server also refuses a `Host` that is
//! not a loopback name.

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
        let loopback = self.local_addr().is_ok_and(|a| is_loopback(&a));
        let router = axum::Router::new()
            .nest_service(MCP_PATH, service)
            .layer(middleware::from_fn_with_state(self.token, require_bearer))
            .layer(middleware::from_fn_with_state(loopback, require_own_origin));
        axum::serve(self.listener, router)
            .with_graceful_shutdown(async move { shutdown.cancelled().await })
            .await
            .map_err(|e| McpError::Serve(e.to_string()))
    }
}

/// The host of a `Host` value or of an origin's authority, without its port (`[::1]` kept
/// bracketed).
fn host_name(authority: &str) -> &str {
    if authority.starts_with('[') {
        return authority.split_inclusive(']').next().unwrap_or(authority);
    }
    authority.split(':').next().unwrap_or(authority)
}

/// `localhost`, `[::1]` or an address in 127.0.0.0/8.
fn is_loopback_name(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host == "[::1]"
        || host
            .parse::<std::net::Ipv4Addr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Whether a request's `Host` and `Origin` are ones this server answers: on loopback, loopback
/// names only; elsewhere, an `Origin` (when sent) naming the host the request was sent to.
/// Public so every HTTP face of GEODE on a person's machine (`geode view` too) applies the one
/// rule against DNS rebinding.
pub fn own_origin(loopback: bool, host: Option<&str>, origin: Option<&str>) -> bool {
    let host = host.map(host_name);
    if loopback && host.is_some_and(|h| !is_loopback_name(h)) {
        return false;
    }
    match origin {
        None | Some("null") => true,
        Some(origin) => {
            let authority = origin.split_once("://").map_or(origin, |(_, rest)| rest);
            let origin_host = host_name(authority.split('/').next().unwrap_or(authority));
            if loopback {
                is_loopback_name(origin_host)
            } else {
                host.is_some_and(|h| h.eq_ignore_ascii_case(origin_host))
            }
        }
    }
}

async fn require_own_origin(
    State(loopback): State<bool>,
    request: Request,
    next: Next,
) -> Response {
    let headers = request.headers();
    let value = |name| headers.get(name).and_then(|v| v.to_str().ok());
    let allowed = own_origin(loopback, value(header::HOST), value(header::ORIGIN));
    if allowed {
        next.run(request).await
    } else {
        (
            StatusCode::FORBIDDEN,
            "this server answers only its own host and origin\n",
        )
            .into_response()
    }
}

/// Constant-time comparison, so the token cannot be guessed byte by byte from timings.
pub fn same(a: &[u8], b: &[u8]) -> bool {
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
    fn only_own_hosts_and_origins_are_answered() {
        let local = |host, origin| own_origin(true, Some(host), origin);
        assert!(local("127.0.0.1:8931", None));
        assert!(local("localhost:8931", Some("http://localhost:8931")));
        assert!(local("[::1]:8931", Some("http://127.0.0.1:3000")));
        assert!(local("127.0.0.1:8931", Some("null")));
        // A rebound name, or a page elsewhere, is refused.
        assert!(!local("evil.example:8931", None));
        assert!(!local("127.0.0.1:8931", Some("http://evil.example")));
        assert!(!local(
            "127.0.0.1:8931",
            Some("https://127.0.0.1.evil.example")
        ));
        // Off loopback (a token is required there): the origin must be the host itself.
        assert!(own_origin(false, Some("10.0.0.5:8931"), None));
        assert!(own_origin(
            false,
            Some("10.0.0.5:8931"),
            Some("http://10.0.0.5:8931")
        ));
        assert!(!own_origin(
            false,
            Some("10.0.0.5:8931"),
            Some("http://evil.example")
        ));
    }

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
