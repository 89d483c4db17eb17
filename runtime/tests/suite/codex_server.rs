//! A loopback stand-in for the ChatGPT sign-in and the Codex Responses endpoint, on 127.0.0.1:
//! an OAuth authorization server that verifies PKCE S256, rotates refresh tokens and refuses a
//! used or unknown one; the device-code endpoints; and `/responses`, which answers only the
//! current access token with the right account header. Shared with the e2e test of the CLI.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::json;
use sha2::{Digest, Sha256};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use super::loopback::{Reply, Seen, read_request, write_reply};

pub const ACCOUNT: &str = "acct-loopback-7";
pub const CLIENT_ID: &str = "app_EMoamEEZ73f0CkXaXp7hrann";

#[derive(Default)]
pub struct State {
    /// code -> (challenge, redirect_uri)
    codes: BTreeMap<String, (String, String)>,
    refresh: BTreeSet<String>,
    access: BTreeSet<String>,
    issued: u32,
    device_polls: u32,
    /// `expires_in` of the tokens it issues.
    pub expires_in: i64,
    /// Replies of `/responses`, in order.
    pub replies: VecDeque<Reply>,
    /// Requests `/responses` accepted.
    pub responses: Vec<Seen>,
    /// Every `/oauth/token` grant: (grant_type, accepted).
    pub grants: Vec<(String, bool)>,
    /// Every token it issued (access and refresh), to look for leaks.
    pub secrets: Vec<String>,
}

pub struct CodexServer {
    addr: std::net::SocketAddr,
    pub state: Arc<Mutex<State>>,
    task: JoinHandle<()>,
}

impl CodexServer {
    pub async fn start(replies: Vec<Reply>) -> CodexServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(Mutex::new(State {
            expires_in: 3600,
            replies: replies.into(),
            ..State::default()
        }));
        let s = state.clone();
        let task = tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            while let Ok((stream, _)) = listener.accept().await {
                connections.spawn(serve(stream, s.clone(), addr));
            }
        });
        CodexServer { addr, state, task }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Make a refresh token the server knows, with its access token (a sign-in from before).
    pub fn seed_tokens(&self) -> (String, String, String) {
        let mut st = self.state.lock().unwrap();
        let (access, refresh) = issue(&mut st);
        (id_token(), access, refresh)
    }
}

impl Drop for CodexServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub fn id_token() -> String {
    let claims = json!({"email": "dev@example.com",
        "https://api.openai.com/auth": {"chatgpt_account_id": ACCOUNT, "chatgpt_plan_type": "plus"}});
    format!(
        "eyJhbGciOiJub25lIn0.{}.sig",
        URL_SAFE_NO_PAD.encode(claims.to_string())
    )
}

fn issue(st: &mut State) -> (String, String) {
    st.issued += 1;
    let access = format!("at-loopback-{}-0123456789", st.issued);
    let refresh = format!("rt-loopback-{}-0123456789", st.issued);
    st.access.insert(access.clone());
    st.refresh.insert(refresh.clone());
    st.secrets.extend([access.clone(), refresh.clone()]);
    (access, refresh)
}

fn params(query: &str) -> BTreeMap<String, String> {
    reqwest::Url::parse(&format!("http://x/?{query}"))
        .unwrap()
        .query_pairs()
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

fn oauth_error(code: &str, description: &str) -> Reply {
    Reply::json(
        400,
        &json!({"error": code, "error_description": description}),
    )
}

async fn serve(mut stream: TcpStream, state: Arc<Mutex<State>>, addr: std::net::SocketAddr) {
    let mut buf = Vec::new();
    while let Some(req) = read_request(&mut stream, &mut buf).await {
        let reply = handle(&state, req, &format!("http://{addr}"));
        if !write_reply(&mut stream, reply).await {
            return;
        }
    }
}

fn handle(state: &Mutex<State>, req: Seen, base: &str) -> Reply {
    let (path, query) = req.path.split_once('?').unwrap_or((&req.path, ""));
    let mut st = state.lock().unwrap();
    match (req.method.as_str(), path) {
        ("GET", "/oauth/authorize") => {
            let q = params(query);
            if q.get("client_id").map(String::as_str) != Some(CLIENT_ID)
                || q.get("code_challenge_method").map(String::as_str) != Some("S256")
                || q.get("response_type").map(String::as_str) != Some("code")
            {
                return oauth_error(
                    "invalid_request",
                    "S256 PKCE and the client id are required",
                );
            }
            let code = format!("code-{}", st.codes.len() + 1);
            let redirect = q["redirect_uri"].clone();
            st.codes.insert(
                code.clone(),
                (q["code_challenge"].clone(), redirect.clone()),
            );
            let location = format!("{redirect}?code={code}&state={}", q["state"]);
            Reply {
                status: 302,
                headers: vec![("location".into(), location)],
                parts: vec![],
                chunked: false,
            }
        }
        ("POST", "/oauth/token") => token(&mut st, &params(&req.raw_body)),
        ("POST", "/api/accounts/deviceauth/usercode") => {
            if req.body["client_id"] != CLIENT_ID {
                return oauth_error("invalid_client", "unknown client");
            }
            Reply::json(
                200,
                &json!({"device_auth_id": "dev-1", "user_code": "WXYZ-1234", "interval": "1"}),
            )
        }
        ("POST", "/api/accounts/deviceauth/token") => {
            st.device_polls += 1;
            if st.device_polls == 1 {
                // The user has not entered the code yet.
                return Reply::json(403, &json!({"error": "authorization_pending"}));
            }
            let verifier = "device-verifier-0123456789-abcdefghijklmnopqrstuvwxyz".to_string();
            let challenge = URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()));
            let code = format!("device-code-{}", st.device_polls);
            st.codes.insert(
                code.clone(),
                (challenge.clone(), format!("{base}/deviceauth/callback")),
            );
            Reply::json(
                200,
                &json!({"authorization_code": code, "code_challenge": challenge,
                        "code_verifier": verifier}),
            )
        }
        ("POST", "/responses") => {
            let bearer = req
                .headers
                .get("authorization")
                .cloned()
                .unwrap_or_default();
            let token = bearer.strip_prefix("Bearer ").unwrap_or_default();
            let account = req.headers.get("chatgpt-account-id").map(String::as_str);
            if !st.access.contains(token) || account != Some(ACCOUNT) {
                return Reply::json(
                    401,
                    &json!({"error": {"message": "invalid bearer token or account", "type": "invalid_request_error", "code": "invalid_api_key"}}),
                );
            }
            st.responses.push(req);
            st.replies.pop_front().unwrap_or_else(|| {
                Reply::json(500, &json!({"error": {"message": "no reply left"}}))
            })
        }
        _ => Reply::json(404, &json!({"error": "not found"})),
    }
}

fn token(st: &mut State, form: &BTreeMap<String, String>) -> Reply {
    let grant = form.get("grant_type").cloned().unwrap_or_default();
    let reply = match grant.as_str() {
        "authorization_code" => {
            let code = form.get("code").cloned().unwrap_or_default();
            match st.codes.remove(&code) {
                None => oauth_error("invalid_grant", "unknown or used code"),
                Some((challenge, redirect)) => {
                    let verifier = form.get("code_verifier").cloned().unwrap_or_default();
                    let s256 = URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()));
                    if s256 != challenge {
                        oauth_error("invalid_grant", "PKCE verification failed")
                    } else if form.get("redirect_uri") != Some(&redirect) {
                        oauth_error("invalid_grant", "redirect_uri mismatch")
                    } else {
                        let (access, refresh) = issue(st);
                        Reply::json(
                            200,
                            &json!({"id_token": id_token(), "access_token": access,
                                    "refresh_token": refresh, "expires_in": st.expires_in}),
                        )
                    }
                }
            }
        }
        "refresh_token" => {
            let old = form.get("refresh_token").cloned().unwrap_or_default();
            // Rotation: a refresh token works once.
            if form.get("client_id").map(String::as_str) == Some(CLIENT_ID)
                && st.refresh.remove(&old)
            {
                let (access, refresh) = issue(st);
                Reply::json(
                    200,
                    &json!({"access_token": access, "refresh_token": refresh,
                            "expires_in": st.expires_in}),
                )
            } else {
                oauth_error("invalid_grant", "refresh token expired, used or unknown")
            }
        }
        _ => oauth_error("unsupported_grant_type", "unknown grant"),
    };
    st.grants.push((grant, reply.status == 200));
    reply
}
