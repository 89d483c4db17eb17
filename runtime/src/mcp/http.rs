//! `geode mcp --http ADDR`: `run_agent` over streamable HTTP at `http://ADDR/mcp`.
//!
//! A loopback address (127.0.0.0/8, ::1) needs no token. Any other address is refused unless a
//! token is given; with a token (on any address) every request must carry
//! `Authorization: Bearer TOKEN`, or it gets 401 before it reaches the MCP service.
//!
//! Against DNS rebinding (a web page whose host name now resolves to 127.0.0.1 posting to the
//! server from the user's browser), a request whose `Origin` names another host is refused
//! with 403, as the MCP specification asks, and a loopback server also refuses a `Host` that is
//! not a loopback name. `Origin: null` is refused too: browsers send it from sandboxed frames,
//! `file:` pages and data URLs, none of which is this server's own page, so it says nothing
//! about who is asking. A request without `Origin` is not from a browser page and passes.
//!
//! Both protocol eras of the official SDKs are served on the one path: a 2026-07-28 request
//! (its `MCP-Protocol-Version` header and `_meta` envelope name that revision) is answered on
//! its own, without a session; anything else opens a session with `initialize`, which the
//! client ends with `DELETE`, answered `204 No Content`.

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
            .map_err(|e| McpError::Serve(e.into()))
    }

    /// Serve `run_agent` until `shutdown` is cancelled.
    pub async fn serve(
        self,
        settings: RunAgentSettings,
        shutdown: CancellationToken,
    ) -> Result<(), McpError> {
        let server = RunAgentServer::new(settings);
        // Host and Origin are checked below (`require_own_origin`) by the rule `geode view`
        // shares; rmcp's own Host list would refuse every name off loopback, token or not.
        let config = StreamableHttpServerConfig::default()
            .with_cancellation_token(shutdown.child_token())
            .disable_allowed_hosts()
            .disable_allowed_origins();
        let service = StreamableHttpService::new(
            move || Ok(server.clone()),
            Arc::new(LocalSessionManager::default()),
            config,
        );
        let loopback = self.local_addr().is_ok_and(|a| is_loopback(&a));
        let router = axum::Router::new()
            .nest_service(MCP_PATH, service)
            .layer(middleware::from_fn(session_end_is_no_content))
            .layer(middleware::from_fn_with_state(self.token, require_bearer))
            .layer(middleware::from_fn_with_state(loopback, require_own_origin));
        axum::serve(self.listener, router)
            .with_graceful_shutdown(async move { shutdown.cancelled().await })
            .await
            .map_err(|e| McpError::Serve(e.into()))
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

/// Why a request's `Host` or `Origin` is not one this server answers.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// A `Host` header that is not a loopback name, on a loopback server.
    #[error("Host {0} is not a loopback name; this server answers only on loopback")]
    ForeignHost(String),
    /// `Origin: null`.
    #[error(
        "Origin null (a sandboxed frame, a file: page or a data URL) is refused: this server \
         answers only pages of its own host"
    )]
    NullOrigin,
    /// An `Origin` naming another host than the request's.
    #[error("Origin {0} is another site; this server answers only pages of its own host")]
    ForeignOrigin(String),
}

/// Whether a request's `Host` and `Origin` are ones this server answers: on loopback, loopback
/// names only; elsewhere, an `Origin` (when sent) naming the host the request was sent to. An
/// opaque origin (`null`) is never one of them.
pub fn check_origin(
    loopback: bool,
    host: Option<&str>,
    origin: Option<&str>,
) -> Result<(), Refusal> {
    let host_name_only = host.map(host_name);
    if loopback
        && let Some(h) = host_name_only
        && !is_loopback_name(h)
    {
        return Err(Refusal::ForeignHost(h.to_string()));
    }
    let Some(origin) = origin else {
        return Ok(());
    };
    if origin.trim().eq_ignore_ascii_case("null") {
        return Err(Refusal::NullOrigin);
    }
    let authority = origin.split_once("://").map_or(origin, |(_, rest)| rest);
    let origin_host = host_name(authority.split('/').next().unwrap_or(authority));
    let own = if loopback {
        is_loopback_name(origin_host)
    } else {
        host_name_only.is_some_and(|h| h.eq_ignore_ascii_case(origin_host))
    };
    if own {
        Ok(())
    } else {
        Err(Refusal::ForeignOrigin(origin.to_string()))
    }
}

/// [`check_origin`] as a yes or no. Public so every HTTP face of GEODE on a person's machine
/// (`geode view` too) applies the one rule against DNS rebinding.
pub fn own_origin(loopback: bool, host: Option<&str>, origin: Option<&str>) -> bool {
    check_origin(loopback, host, origin).is_ok()
}

async fn require_own_origin(
    State(loopback): State<bool>,
    request: Request,
    next: Next,
) -> Response {
    let headers = request.headers();
    let value = |name| headers.get(name).and_then(|v| v.to_str().ok());
    match check_origin(loopback, value(header::HOST), value(header::ORIGIN)) {
        Ok(()) => next.run(request).await,
        Err(refusal) => (StatusCode::FORBIDDEN, format!("{refusal}\n")).into_response(),
    }
}

/// rmcp answers a session's `DELETE` with `202 Accepted`, a status the official SDK clients
/// log as a failed termination (they take 200 and 204): the session is closed by the time
/// rmcp answers, so say so with `204 No Content`.
async fn session_end_is_no_content(request: Request, next: Next) -> Response {
    let delete = request.method() == axum::http::Method::DELETE;
    let mut response = next.run(request).await;
    if delete && response.status() == StatusCode::ACCEPTED {
        *response.status_mut() = StatusCode::NO_CONTENT;
    }
    response
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
        // A rebound name, a page elsewhere, or an opaque origin is refused, each saying why.
        assert_eq!(
            check_origin(true, Some("127.0.0.1:8931"), Some("null")),
            Err(Refusal::NullOrigin)
        );
        assert!(!local("127.0.0.1:8931", Some("NULL")));
        assert!(!own_origin(false, Some("10.0.0.5:8931"), Some("null")));
        assert_eq!(
            check_origin(true, Some("evil.example:8931"), None),
            Err(Refusal::ForeignHost("evil.example".into()))
        );
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
