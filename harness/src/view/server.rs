//! The viewer's HTTP face: a JSON API over the catalog and the page that draws it, on axum.
//!
//! Guards, in order, on every request (assets included): the `Host` and `Origin` rule of
//! `geode mcp --http` (on loopback, only loopback names; a page of another origin is refused,
//! against DNS rebinding), then the token printed at start: in the URL's `token` parameter
//! (which also sets a cookie named after the port, `HttpOnly`, `SameSite=Strict`, so the page's
//! own requests and images carry it) or in that cookie. Anything else is 403. Every answer says
//! `no-store`, `nosniff`, `no-referrer` (the token never leaves in a `Referer`) and a content
//! security policy of this origin only, with no inline script.
//!
//! The catalog is one `Mutex`: SQLite work runs on the blocking pool, one request at a time,
//! each after a refresh, so a page always reads the folder as it is now.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Query, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use geode_runtime::mcp::http::{is_loopback, own_origin, same};
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::catalog::Catalog;
use super::decisions::{self, Roots};
use super::filter::{self, TrialQuery};
use super::runs;
use super::{ViewError, trial};

/// How to serve.
#[derive(Debug, Clone)]
pub struct ViewOptions {
    /// The jobs folder to show (run stores and Harbor folders under it).
    pub jobs: PathBuf,
    /// Where to listen; port 0 picks a free one (see `Viewer::local_addr`).
    pub addr: SocketAddr,
    /// Serve a non-loopback address (the token still guards every request).
    pub allow_remote: bool,
    /// Search output folders outside the jobs folder.
    pub searches: Vec<PathBuf>,
}

struct Shared {
    catalog: Mutex<Catalog>,
    roots: Roots,
    token: String,
    cookie: String,
    loopback: bool,
}

/// A bound viewer, not yet serving.
pub struct Viewer {
    listener: TcpListener,
    addr: SocketAddr,
    shared: Arc<Shared>,
}

/// 32 random bytes from the operating system, as hex. The one random value in GEODE that is
/// deliberately not derived from a seed: it is a secret, and a seeded one would be guessable.
fn new_token() -> Result<String, ViewError> {
    use rand::TryRngCore;
    let mut bytes = [0u8; 32];
    rand::rngs::OsRng
        .try_fill_bytes(&mut bytes)
        .map_err(|e| ViewError::Serve(std::io::Error::other(e)))?;
    Ok(hex::encode(bytes))
}

impl Viewer {
    /// Reads the jobs folder once (so a wrong path fails here) and binds the address.
    pub async fn bind(options: ViewOptions) -> Result<Viewer, ViewError> {
        let loopback = is_loopback(&options.addr);
        if !loopback && !options.allow_remote {
            return Err(ViewError::NotLoopback { addr: options.addr });
        }
        let catalog = Catalog::open(&options.jobs)?;
        let listener = TcpListener::bind(options.addr)
            .await
            .map_err(|source| ViewError::Bind {
                addr: options.addr,
                source,
            })?;
        let addr = listener.local_addr().map_err(ViewError::Serve)?;
        Ok(Viewer {
            listener,
            addr,
            shared: Arc::new(Shared {
                catalog: Mutex::new(catalog),
                roots: Roots {
                    searches: options.searches,
                },
                token: new_token()?,
                cookie: format!("geode-view-{}", addr.port()),
                loopback,
            }),
        })
    }

    /// The address actually bound (the chosen port when `addr` asked for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The address to open, token included.
    pub fn url(&self) -> String {
        let host = match self.addr {
            SocketAddr::V6(a) => format!("[{}]:{}", a.ip(), a.port()),
            SocketAddr::V4(a) => a.to_string(),
        };
        format!("http://{host}/?token={}", self.shared.token)
    }

    /// Serves until `shutdown` is cancelled.
    pub async fn serve(self, shutdown: CancellationToken) -> Result<(), ViewError> {
        let router = Router::new()
            .route("/", get(page))
            .route("/assets/{file}", get(asset))
            .route("/api/stamp", get(stamp))
            .route("/api/runs", get(runs))
            .route("/api/trials", get(trials))
            .route("/api/trial", get(trial_detail))
            .route("/api/trajectory", get(trajectory))
            .route("/api/timeline", get(timeline))
            .route("/api/screenshot", get(screenshot))
            .route("/api/compare", get(compare))
            .route("/api/decision", get(decision))
            .route("/api/search", get(search))
            .layer(middleware::from_fn_with_state(self.shared.clone(), guard))
            .with_state(self.shared);
        axum::serve(self.listener, router)
            .with_graceful_shutdown(async move { shutdown.cancelled().await })
            .await
            .map_err(ViewError::Serve)
    }
}

/// The token a request presents in its query, if any.
fn query_token(request: &Request) -> Option<&str> {
    request
        .uri()
        .query()?
        .split('&')
        .find_map(|pair| pair.strip_prefix("token="))
}

fn cookie_token<'a>(request: &'a Request, name: &str) -> Option<&'a str> {
    request
        .headers()
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|c| {
            let (k, v) = c.trim().split_once('=')?;
            (k == name).then_some(v)
        })
}

fn forbidden(why: &'static str) -> Response {
    (StatusCode::FORBIDDEN, why).into_response()
}

async fn guard(State(shared): State<Arc<Shared>>, request: Request, next: Next) -> Response {
    let headers = request.headers();
    let value = |name| headers.get(name).and_then(|v| v.to_str().ok());
    if !own_origin(shared.loopback, value(header::HOST), value(header::ORIGIN)) {
        return forbidden("this server answers only its own host and origin\n");
    }
    let token = shared.token.as_bytes();
    let by_query = query_token(&request).is_some_and(|t| same(t.as_bytes(), token));
    let by_cookie =
        cookie_token(&request, &shared.cookie).is_some_and(|t| same(t.as_bytes(), token));
    if !by_query && !by_cookie {
        return forbidden("missing or wrong token: open the address `geode view` printed\n");
    }
    let mut response = next.run(request).await;
    let h = response.headers_mut();
    if by_query
        && let Ok(v) = HeaderValue::from_str(&format!(
            "{}={}; Path=/; HttpOnly; SameSite=Strict",
            shared.cookie, shared.token
        ))
    {
        h.insert(header::SET_COOKIE, v);
    }
    for (name, v) in [
        (header::CACHE_CONTROL, "no-store"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
             connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
        ),
    ] {
        h.insert(name, HeaderValue::from_static(v));
    }
    response
}

/// The page and its assets, compiled into the binary.
const ASSETS: [(&str, &str, &str); 8] = [
    (
        "index.html",
        "text/html; charset=utf-8",
        include_str!("assets/index.html"),
    ),
    (
        "app.css",
        "text/css; charset=utf-8",
        include_str!("assets/app.css"),
    ),
    (
        "main.js",
        "text/javascript; charset=utf-8",
        include_str!("assets/main.js"),
    ),
    (
        "dom.js",
        "text/javascript; charset=utf-8",
        include_str!("assets/dom.js"),
    ),
    (
        "runs.js",
        "text/javascript; charset=utf-8",
        include_str!("assets/runs.js"),
    ),
    (
        "trial.js",
        "text/javascript; charset=utf-8",
        include_str!("assets/trial.js"),
    ),
    (
        "compare.js",
        "text/javascript; charset=utf-8",
        include_str!("assets/compare.js"),
    ),
    (
        "records.js",
        "text/javascript; charset=utf-8",
        include_str!("assets/records.js"),
    ),
];

fn serve_asset(name: &str) -> Response {
    match ASSETS.iter().find(|(n, _, _)| *n == name) {
        Some((_, mime, body)) => ([(header::CONTENT_TYPE, *mime)], *body).into_response(),
        None => (StatusCode::NOT_FOUND, "no such asset\n").into_response(),
    }
}

async fn page() -> Response {
    serve_asset("index.html")
}

async fn asset(axum::extract::Path(file): axum::extract::Path<String>) -> Response {
    serve_asset(&file)
}

impl IntoResponse for ViewError {
    fn into_response(self) -> Response {
        let status = match &self {
            ViewError::NotFound { .. } => StatusCode::NOT_FOUND,
            ViewError::BadRequest { .. } => StatusCode::BAD_REQUEST,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        (
            status,
            axum::Json(serde_json::json!({ "error": self.to_string() })),
        )
            .into_response()
    }
}

/// Runs `f` on the refreshed catalog on the blocking pool.
async fn with_catalog<T: Serialize + Send + 'static>(
    shared: Arc<Shared>,
    f: impl FnOnce(&Catalog, &Roots) -> Result<T, ViewError> + Send + 'static,
) -> Response {
    let done = tokio::task::spawn_blocking(move || {
        // A panic while holding the lock leaves a catalog that the next refresh rebuilds.
        let mut catalog = shared.catalog.lock().unwrap_or_else(|p| p.into_inner());
        catalog.refresh()?;
        f(&catalog, &shared.roots)
    })
    .await;
    let value = match done {
        Ok(Ok(v)) => serde_json::to_value(v),
        Ok(Err(e)) => return e.into_response(),
        Err(e) => return ViewError::Serve(std::io::Error::other(e)).into_response(),
    };
    match value {
        Ok(v) => axum::Json(super::exact_in_browsers(v)).into_response(),
        Err(e) => ViewError::Serve(std::io::Error::other(e)).into_response(),
    }
}

#[derive(Serialize)]
struct Stamp {
    stamp: String,
}

async fn stamp(State(shared): State<Arc<Shared>>) -> Response {
    with_catalog(shared, |c, _| {
        Ok(Stamp {
            stamp: format!("{:016x}", c.stamp()),
        })
    })
    .await
}

#[derive(Serialize)]
struct RunsPage {
    jobs: String,
    runs: Vec<runs::RunView>,
    decisions: Vec<decisions::DecisionItem>,
    searches: Vec<decisions::SearchItem>,
    problems: Vec<String>,
}

async fn runs(State(shared): State<Arc<Shared>>) -> Response {
    with_catalog(shared, |c, roots| {
        let mut problems = c.problems.clone();
        let runs = runs::runs(c)?;
        let decisions = decisions::decisions(c, roots, &mut problems);
        let searches = decisions::searches(c, roots, &mut problems);
        // Decisions and searches both read the lineages: one line per file at fault.
        problems.sort();
        problems.dedup();
        Ok(RunsPage {
            jobs: c.jobs().display().to_string(),
            runs,
            decisions,
            searches,
            problems,
        })
    })
    .await
}

/// Axum's query rejection as the viewer's error, naming the parameter that did not parse.
fn bad_query(e: axum::extract::rejection::QueryRejection) -> Response {
    ViewError::BadRequest {
        field: "query",
        message: e.body_text(),
    }
    .into_response()
}

async fn trials(
    State(shared): State<Arc<Shared>>,
    q: Result<Query<TrialQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    match q {
        Ok(Query(q)) => with_catalog(shared, move |c, _| filter::trials(c, &q)).await,
        Err(e) => bad_query(e),
    }
}

#[derive(Deserialize)]
struct TrialRef {
    run: String,
    trial: String,
    /// Only for screenshots: the file under `agent/`.
    file: Option<String>,
}

macro_rules! trial_route {
    ($name:ident, $f:expr) => {
        async fn $name(
            State(shared): State<Arc<Shared>>,
            q: Result<Query<TrialRef>, axum::extract::rejection::QueryRejection>,
        ) -> Response {
            match q {
                Ok(Query(r)) => with_catalog(shared, move |c, _| $f(c, &r.run, &r.trial)).await,
                Err(e) => bad_query(e),
            }
        }
    };
}

trial_route!(trial_detail, trial::detail);
trial_route!(trajectory, trial::trajectory);
trial_route!(timeline, trial::timeline);

async fn screenshot(
    State(shared): State<Arc<Shared>>,
    q: Result<Query<TrialRef>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let r = match q {
        Ok(Query(r)) => r,
        Err(e) => return bad_query(e),
    };
    let done = tokio::task::spawn_blocking(move || {
        let mut catalog = shared.catalog.lock().unwrap_or_else(|p| p.into_inner());
        catalog.refresh()?;
        trial::screenshot(&catalog, &r.run, &r.trial, r.file.as_deref().unwrap_or(""))
    })
    .await;
    match done {
        Ok(Ok(bytes)) => ([(header::CONTENT_TYPE, "image/png")], bytes).into_response(),
        Ok(Err(e)) => e.into_response(),
        Err(e) => ViewError::Serve(std::io::Error::other(e)).into_response(),
    }
}

#[derive(Deserialize)]
struct CompareRef {
    baseline: String,
    candidate: String,
}

async fn compare(
    State(shared): State<Arc<Shared>>,
    q: Result<Query<CompareRef>, axum::extract::rejection::QueryRejection>,
) -> Response {
    #[derive(Serialize)]
    struct Paired {
        baseline: runs::RunView,
        candidate: runs::RunView,
        comparison: geode_graders::compare::Comparison,
    }
    match q {
        Ok(Query(r)) => {
            with_catalog(shared, move |c, _| {
                Ok(Paired {
                    baseline: runs::run_view(c, c.run(&r.baseline)?)?,
                    candidate: runs::run_view(c, c.run(&r.candidate)?)?,
                    comparison: runs::compare(c, &r.baseline, &r.candidate)?,
                })
            })
            .await
        }
        Err(e) => bad_query(e),
    }
}

#[derive(Deserialize)]
struct IdRef {
    id: String,
}

async fn decision(
    State(shared): State<Arc<Shared>>,
    q: Result<Query<IdRef>, axum::extract::rejection::QueryRejection>,
) -> Response {
    match q {
        Ok(Query(r)) => {
            with_catalog(shared, move |c, roots| decisions::decision(c, roots, &r.id)).await
        }
        Err(e) => bad_query(e),
    }
}

async fn search(
    State(shared): State<Arc<Shared>>,
    q: Result<Query<IdRef>, axum::extract::rejection::QueryRejection>,
) -> Response {
    match q {
        Ok(Query(r)) => {
            with_catalog(shared, move |c, roots| decisions::search(c, roots, &r.id)).await
        }
        Err(e) => bad_query(e),
    }
}
