//! The ChatGPT (Codex subscription) sign-in behind the `openai-codex:MODEL` route: the way
//! Codex CLI signs in (OAuth 2.0 authorization code with PKCE and a loopback callback, or the
//! device-code flow), the tokens kept under `$GEODE_HOME`, and `ChatgptAuth`, which hands the
//! Responses adapter a bearer token that is refreshed before it expires.
//!
//! The library never prints and never opens a browser: `BrowserLogin::url` and `DeviceCode`
//! are returned to the binary, which shows them.

pub mod callback;
pub mod oauth;
pub mod pkce;
pub mod tokens;

use std::path::PathBuf;
use std::time::Duration;

use callback::CallbackServer;
pub use oauth::{DeviceCode, OAuthClient, REFRESH_MARGIN_SECS, now_secs};
pub use pkce::Pkce;
pub use tokens::{TokenSet, TokenStore};

use crate::model::credentials::{ApiKey, Env};

pub(crate) const DEFAULT_ISSUER: &str = "https://auth.openai.com";
/// Codex CLI's public OAuth client.
pub const CLIENT_ID: &str = "app_EMoamEEZ73f0CkXaXp7hrann";
pub(crate) const SCOPE: &str = "openid profile email offline_access";
/// The port of the registered redirect URI `http://localhost:1455/auth/callback`.
pub const CALLBACK_PORT: u16 = 1455;
/// Overrides the issuer (tests, proxies).
pub const ISSUER_ENV: &str = "GEODE_OPENAI_AUTH_ISSUER";

/// Why a ChatGPT sign-in, or the use of a stored one, failed.
#[derive(Debug, thiserror::Error)]
pub enum LoginError {
    /// No sign-in is stored.
    #[error("not signed in to ChatGPT (no tokens at {path}): run `geode login openai`")]
    NotSignedIn {
        /// The token file looked at.
        path: String,
    },
    /// The stored sign-in expired and could not be refreshed.
    #[error(
        "the ChatGPT sign-in expired and refreshing it failed ({0}): run `geode login openai` again"
    )]
    RefreshFailed(#[source] crate::error_chain::BoxError),
    /// The sign-in server refused a request or answered without what was asked.
    #[error("the sign-in server answered {status}: {message}")]
    Server {
        /// The HTTP status (200 for a success response missing a token).
        status: u16,
        /// The server's error message.
        message: String,
    },
    /// The sign-in server could not be reached.
    #[error("cannot reach the sign-in server: {0}")]
    Http(#[source] crate::error_chain::BoxError),
    /// The loopback callback failed (the port, the request, or a `state` that does not match).
    #[error("the sign-in callback: {0}")]
    Callback(#[source] crate::error_chain::BoxError),
    /// The user did not finish the sign-in in time.
    #[error("the sign-in was not completed within {0:?}")]
    TimedOut(Duration),
    /// The token file could not be read or written.
    #[error("the token file {path}: {message}")]
    Store {
        /// The token file.
        path: String,
        /// What went wrong reading or writing it.
        message: String,
    },
}

/// Where the sign-in happens and where its tokens are kept.
#[derive(Debug, Clone)]
pub struct OAuthSettings {
    /// The OAuth issuer's base URL, without a trailing slash.
    pub issuer: String,
    /// The OAuth client id (Codex CLI's public client).
    pub client_id: String,
    /// The token file.
    pub store_path: PathBuf,
}

impl OAuthSettings {
    /// The issuer from `GEODE_OPENAI_AUTH_ISSUER` (else auth.openai.com), the tokens in
    /// `$GEODE_HOME/openai-auth.json`.
    pub fn from_env(env: &Env) -> OAuthSettings {
        let issuer = env
            .var(ISSUER_ENV)
            .unwrap_or_else(|| DEFAULT_ISSUER.to_string());
        OAuthSettings {
            issuer: issuer.trim_end_matches('/').to_string(),
            client_id: CLIENT_ID.to_string(),
            store_path: TokenStore::in_home(&env.geode_home()).path().to_path_buf(),
        }
    }

    /// The token store at `store_path`.
    pub fn store(&self) -> TokenStore {
        TokenStore::new(self.store_path.clone())
    }
}

/// A browser sign-in in progress: show `url`, then `finish` waits for the callback.
pub struct BrowserLogin {
    /// The authorize URL for the user to open.
    pub url: String,
    server: CallbackServer,
    pkce: Pkce,
    state: String,
}

impl BrowserLogin {
    /// Listen for the callback on `port` and build the authorize URL.
    pub async fn start(client: &OAuthClient, port: u16) -> Result<BrowserLogin, LoginError> {
        let server = CallbackServer::bind(port).await?;
        let pkce = Pkce::generate();
        let state = pkce::random_token(32);
        let url = client.authorize_url(&server.redirect_uri(), &pkce, &state)?;
        Ok(BrowserLogin {
            url,
            server,
            pkce,
            state,
        })
    }

    /// Wait (at most `max_wait`) for the browser to come back, then redeem the code.
    pub async fn finish(
        self,
        client: &OAuthClient,
        max_wait: Duration,
    ) -> Result<TokenSet, LoginError> {
        let redirect = self.server.redirect_uri();
        let code = tokio::time::timeout(max_wait, self.server.wait_for_code(&self.state))
            .await
            .map_err(|_| LoginError::TimedOut(max_wait))??;
        client
            .exchange_code(&code, &self.pkce.verifier, &redirect)
            .await
    }
}

/// The credential of the `openai-codex` route: the stored sign-in, refreshed (and saved)
/// before it expires. One lock: concurrent calls refresh once, never twice with one token.
#[derive(Debug)]
pub struct ChatgptAuth {
    client: OAuthClient,
    store: TokenStore,
    current: tokio::sync::Mutex<TokenSet>,
}

impl ChatgptAuth {
    /// The stored sign-in; `NotSignedIn` when there is none.
    pub fn load(settings: OAuthSettings) -> Result<ChatgptAuth, LoginError> {
        let store = settings.store();
        let tokens = store.load()?.ok_or_else(|| LoginError::NotSignedIn {
            path: store.path().display().to_string(),
        })?;
        Ok(ChatgptAuth {
            client: OAuthClient::new(settings)?,
            store,
            current: tokio::sync::Mutex::new(tokens),
        })
    }

    /// The access token and the account id to send now.
    pub async fn bearer(&self) -> Result<(ApiKey, String), LoginError> {
        let mut current = self.current.lock().await;
        if current.expires_at - now_secs() < REFRESH_MARGIN_SECS {
            let fresh = self.client.refresh(&current).await?;
            self.store.save(&fresh)?;
            *current = fresh;
        }
        Ok((current.access_token.clone(), current.account_id.clone()))
    }
}
