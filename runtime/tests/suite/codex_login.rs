//! The `openai-codex:MODEL` route end to end against loopback servers: the browser sign-in
//! (the test plays the browser), the device-code sign-in, refresh before expiry with rotation,
//! a whole tool-using turn, the refusals, and no token in recordings or the timeline.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use geode_runtime::agent::TerminationReason;
use geode_runtime::model::credentials::{ApiKey, Env};
use geode_runtime::model::errors::ErrorClass;
use geode_runtime::model::http::RouteOptions;
use geode_runtime::model::login::{
    BrowserLogin, LoginError, OAuthClient, OAuthSettings, TokenSet, now_secs,
};
use geode_runtime::model::{ModelError, model_from_route};
use geode_runtime::policy::SafetyLevel;
use geode_runtime::session::create_session;
use serde_json::json;

use super::codex_server::{ACCOUNT, CodexServer};
use super::common::*;
use super::loopback::Reply;
use super::providers::{Wire, ask_hi, fast_http, text_reply};
use super::providers_openai::OpenAi;

/// Route options whose issuer, Codex endpoint and GEODE_HOME all point at the test's own.
fn options(server: &CodexServer, home: &Path) -> RouteOptions {
    let vars: BTreeMap<String, String> = [
        ("GEODE_HOME", home.display().to_string()),
        ("GEODE_OPENAI_AUTH_ISSUER", server.url()),
        ("GEODE_OPENAI_CODEX_BASE_URL", server.url()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let mut o = RouteOptions::with_env(Env::from_map(vars, None));
    o.http = fast_http(Duration::from_secs(2), 0);
    o
}

fn settings(opts: &RouteOptions) -> OAuthSettings {
    OAuthSettings::from_env(&opts.env)
}

/// A stored sign-in from before, made of tokens the server knows.
fn stored(server: &CodexServer, opts: &RouteOptions, expires_at: i64) -> TokenSet {
    let (id, access, refresh) = server.seed_tokens();
    let t = TokenSet {
        id_token: ApiKey::new(id),
        access_token: ApiKey::new(access),
        refresh_token: ApiKey::new(refresh),
        account_id: ACCOUNT.into(),
        expires_at,
    };
    settings(opts).store().save(&t).unwrap();
    t
}

/// The browser: open the authorize URL, follow its redirect to the loopback callback.
async fn play_browser(url: String) -> reqwest::StatusCode {
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let r = http.get(&url).send().await.unwrap();
    assert_eq!(r.status(), 302, "the issuer redirects to the callback");
    let to = r.headers()["location"].to_str().unwrap().to_string();
    http.get(to).send().await.unwrap().status()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn browser_sign_in_then_a_tool_turn_on_the_subscription() {
    let f = Fixture::new();
    std::fs::write(f.path("input.txt"), "seed").unwrap();
    let server = CodexServer::start(vec![
        Reply::sse(OpenAi.tool_calls(&[
            ("call_r", "read_file", vec!["{\"path\":", "\"input.txt\"}"]),
            (
                "call_w",
                "write_file",
                vec!["{\"path\":\"out.txt\",", "\"content\":\"grown\"}"],
            ),
        ])),
        text_reply(&OpenAi, &["Read input.txt and wrote out.txt."]),
    ])
    .await;
    let home = tempfile::tempdir().unwrap();
    let mut opts = options(&server, home.path());
    let record = tempfile::tempdir().unwrap();
    opts.record_dir = Some(record.path().to_path_buf());
    let client = OAuthClient::new(settings(&opts)).unwrap();
    let login = BrowserLogin::start(&client, 0).await.unwrap();
    assert!(
        login.url.contains("code_challenge_method=S256"),
        "{}",
        login.url
    );
    let browser = tokio::spawn(play_browser(login.url.clone()));
    let tokens = login
        .finish(&client, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(browser.await.unwrap(), 200);
    assert_eq!(tokens.account_id, ACCOUNT);
    let store = settings(&opts).store();
    store.save(&tokens).unwrap();
    let mode = std::fs::metadata(store.path())
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);

    let m = model_from_route("openai-codex:gpt-6-sol", &opts).unwrap();
    let mut s = create_session(f.config(m, headless(SafetyLevel::Write))).unwrap();
    let out = run(&mut s, "grow the seed").await;
    assert_eq!(out.termination, TerminationReason::Natural, "{out:?}");
    assert_eq!((out.rounds, out.tool_calls), (2, 2));
    assert_eq!(std::fs::read_to_string(f.path("out.txt")).unwrap(), "grown");
    // Usage as on the API route; no price on a subscription.
    assert_eq!(s.usage().input_tokens, 2 * OpenAi.usage().input_tokens);
    assert_eq!(
        s.usage().reasoning_tokens,
        2 * OpenAi.usage().reasoning_tokens
    );
    assert_eq!(out.usage.cost_usd, 0.0);
    let st = server.state.lock().unwrap();
    assert_eq!(st.responses.len(), 2);
    assert_eq!(st.responses[0].body["model"], "gpt-6-sol");
    assert_eq!(st.grants, [("authorization_code".to_string(), true)]);
    drop(s);
    assert_no_secret(&st.secrets, record.path(), "recordings");
    assert_no_secret(&st.secrets, f._dir.path(), "the timeline");
}

/// No token, and not the account id, in any file under `dir`.
fn assert_no_secret(secrets: &[String], dir: &Path, what: &str) {
    let mut files = 0;
    for entry in walk(dir) {
        let bytes = std::fs::read(&entry).unwrap();
        let text = String::from_utf8_lossy(&bytes);
        files += 1;
        for s in secrets.iter().map(String::as_str).chain([ACCOUNT]) {
            assert!(
                !text.contains(s),
                "{what}: {} holds a secret",
                entry.display()
            );
        }
    }
    assert!(
        files > 0,
        "{what}: nothing was written under {}",
        dir.display()
    );
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_pkce_verifier_and_a_foreign_state_are_refused() {
    let server = CodexServer::start(vec![]).await;
    let home = tempfile::tempdir().unwrap();
    let opts = options(&server, home.path());
    let client = OAuthClient::new(settings(&opts)).unwrap();
    let login = BrowserLogin::start(&client, 0).await.unwrap();
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let r = http.get(&login.url).send().await.unwrap();
    let location = r.headers()["location"].to_str().unwrap().to_string();
    let code = location
        .split("code=")
        .nth(1)
        .unwrap()
        .split('&')
        .next()
        .unwrap();
    let redirect = location.split('?').next().unwrap();
    let err = client
        .exchange_code(code, "not-the-verifier", redirect)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("PKCE"), "{err}");
    // A callback with another state ends the sign-in without a code.
    let forged = location.replace("state=", "state=forged");
    let waiting = tokio::spawn(async move { http.get(forged).send().await.unwrap().status() });
    let err = login
        .finish(&client, Duration::from_secs(10))
        .await
        .unwrap_err();
    assert!(matches!(err, LoginError::Callback(_)), "{err}");
    assert_eq!(waiting.await.unwrap(), 400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn device_code_sign_in_polls_until_the_code_is_entered() {
    let server = CodexServer::start(vec![]).await;
    let home = tempfile::tempdir().unwrap();
    let opts = options(&server, home.path());
    let client = OAuthClient::new(settings(&opts)).unwrap();
    let code = client.request_device_code().await.unwrap();
    assert_eq!(code.user_code, "WXYZ-1234");
    assert_eq!(
        code.verification_url,
        format!("{}/codex/device", server.url())
    );
    let tokens = client
        .complete_device(&code, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(tokens.account_id, ACCOUNT);
    let st = server.state.lock().unwrap();
    assert_eq!(st.grants, [("authorization_code".to_string(), true)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expiring_token_is_refreshed_and_the_refresh_token_rotates() {
    let server = CodexServer::start(vec![text_reply(&OpenAi, &["fresh"])]).await;
    let home = tempfile::tempdir().unwrap();
    let opts = options(&server, home.path());
    // Expires within the refresh margin: refreshed before the call.
    let old = stored(&server, &opts, now_secs() + 60);
    let m = model_from_route("openai-codex:gpt-6-sol", &opts).unwrap();
    let turn = ask_hi(m.as_ref()).await.unwrap();
    assert_eq!(turn.usage.cost_usd, 0.0);
    let saved = settings(&opts).store().load().unwrap().unwrap();
    assert_ne!(saved.refresh_token.expose(), old.refresh_token.expose());
    assert_ne!(saved.access_token.expose(), old.access_token.expose());
    assert!(saved.expires_at > now_secs() + 3000);
    {
        let st = server.state.lock().unwrap();
        assert_eq!(st.grants, [("refresh_token".to_string(), true)]);
        let sent = st.responses[0].headers["authorization"].clone();
        assert_eq!(sent, format!("Bearer {}", saved.access_token.expose()));
    }
    // The rotated-out refresh token is refused from now on.
    let client = OAuthClient::new(settings(&opts)).unwrap();
    let err = client.refresh(&old).await.unwrap_err();
    assert!(matches!(err, LoginError::RefreshFailed(_)), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_refresh_says_to_sign_in_again_before_any_request() {
    let server = CodexServer::start(vec![text_reply(&OpenAi, &["never"])]).await;
    let home = tempfile::tempdir().unwrap();
    let opts = options(&server, home.path());
    let mut t = stored(&server, &opts, now_secs() - 10);
    t.refresh_token = ApiKey::new("rt-unknown-0123456789");
    settings(&opts).store().save(&t).unwrap();
    let m = model_from_route("openai-codex:gpt-6-sol", &opts).unwrap();
    let err = ask_hi(m.as_ref()).await.unwrap_err();
    assert_eq!(err.class(), Some(ErrorClass::Auth));
    let msg = err.to_string();
    assert!(
        msg.contains("refreshing it failed") && msg.contains("geode login openai"),
        "{msg}"
    );
    assert!(!msg.contains("rt-unknown"), "{msg}");
    assert!(server.state.lock().unwrap().responses.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_signed_in_and_unlisted_models_are_refused_before_any_request() {
    let server = CodexServer::start(vec![]).await;
    let home = tempfile::tempdir().unwrap();
    let opts = options(&server, home.path());
    let err = model_from_route("openai-codex:gpt-6-sol", &opts)
        .err()
        .unwrap();
    assert_eq!(err.class(), Some(ErrorClass::Auth));
    assert!(
        err.to_string().contains("run `geode login openai`"),
        "{err}"
    );
    stored(&server, &opts, now_secs() + 3600);
    let err = model_from_route("openai-codex:gpt-5.5", &opts)
        .err()
        .unwrap();
    assert!(matches!(err, ModelError::UnknownRoute { .. }), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("gpt-6-sol") && msg.contains("gpt-5.6-luna"),
        "{msg}"
    );
    assert!(
        !msg.contains("gpt-5.5,"),
        "only allowed ids are listed: {msg}"
    );
    assert!(model_from_route("openai-codex:gpt-7", &opts).is_err());
    let st = server.state.lock().unwrap();
    assert!(st.responses.is_empty() && st.grants.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_limit_stops_with_the_reset_time() {
    let limit = Reply::json(
        429,
        &json!({"error": {"type": "usage_limit_reached", "message": "The usage limit has been reached",
                          "plan_type": "plus", "resets_in_seconds": 5400}}),
    );
    let server = CodexServer::start(vec![limit]).await;
    let home = tempfile::tempdir().unwrap();
    let opts = options(&server, home.path());
    stored(&server, &opts, now_secs() + 3600);
    let m = model_from_route("openai-codex:gpt-6-sol", &opts).unwrap();
    let err = ask_hi(m.as_ref()).await.unwrap_err();
    assert_eq!(err.class(), Some(ErrorClass::PlanLimit), "{err}");
    assert!(err.to_string().contains("resets in 5400s"), "{err}");
    assert_eq!(
        server.state.lock().unwrap().responses.len(),
        1,
        "not retried"
    );
}

/// Collects what the tracing subscriber writes.
#[derive(Clone, Default)]
struct LogBuffer(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for LogBuffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test(flavor = "current_thread")]
async fn no_token_reaches_the_debug_log() {
    let logs = LogBuffer::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let server = CodexServer::start(vec![
        Reply::json(
            500,
            &json!({"error": {"message": "overloaded", "type": "server_error"}}),
        ),
        text_reply(&OpenAi, &["ok"]),
    ])
    .await;
    let home = tempfile::tempdir().unwrap();
    let mut opts = options(&server, home.path());
    opts.http = fast_http(Duration::from_secs(2), 1);
    stored(&server, &opts, now_secs() + 10);
    let m = model_from_route("openai-codex:gpt-6-sol", &opts).unwrap();
    ask_hi(m.as_ref()).await.unwrap();
    let text = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    assert!(text.contains("retry 1"), "the retry was logged: {text}");
    let st = server.state.lock().unwrap();
    assert_eq!(st.grants, [("refresh_token".to_string(), true)]);
    for secret in &st.secrets {
        assert!(
            !text.contains(secret.as_str()),
            "a token in the log: {text}"
        );
    }
}
