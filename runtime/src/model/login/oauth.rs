//! The OAuth 2.0 client of the ChatGPT sign-in: the authorize URL (authorization code with
//! PKCE), the code exchange, refresh-token rotation, and the device-code flow for machines
//! without a browser. Every endpoint hangs off the issuer, so tests point it at loopback.

use std::time::Duration;

use serde::Deserialize;
use serde_json::json;

use super::pkce::Pkce;
use super::tokens::{TokenSet, account_id, jwt_claims};
use super::{LoginError, OAuthSettings};
use crate::model::credentials::ApiKey;

/// Refresh this long before the access token expires, so no request goes out with a token
/// that dies in flight.
pub const REFRESH_MARGIN_SECS: i64 = 300;

/// What `/oauth/token` answers. A refresh may leave out the tokens it does not rotate.
#[derive(Deserialize)]
struct TokenResponse {
    #[serde(default)]
    id_token: Option<String>,
    #[serde(default)]
    access_token: Option<String>,
    #[serde(default)]
    refresh_token: Option<String>,
    #[serde(default)]
    expires_in: Option<i64>,
}

/// A device code to show the user, and what polling needs.
#[derive(Debug, Clone)]
pub struct DeviceCode {
    /// The page where the user enters `user_code`.
    pub verification_url: String,
    /// The code the user types on that page.
    pub user_code: String,
    device_auth_id: String,
    interval: Duration,
}

#[derive(Deserialize)]
struct UserCodeResponse {
    device_auth_id: String,
    #[serde(alias = "usercode")]
    user_code: String,
    #[serde(default)]
    interval: Option<serde_json::Value>,
}

/// The device flow ends in an ordinary authorization code, with the PKCE pair the server made.
#[derive(Deserialize)]
struct DeviceGrant {
    authorization_code: String,
    code_verifier: String,
}

/// Talks to the sign-in server: authorize URL, code exchange, device flow and refresh.
#[derive(Debug, Clone)]
pub struct OAuthClient {
    settings: OAuthSettings,
    http: reqwest::Client,
}

/// The current time, in Unix seconds.
pub fn now_secs() -> i64 {
    chrono::Utc::now().timestamp()
}

impl OAuthClient {
    /// A client for `settings`; fails only when the HTTP client cannot be built.
    pub fn new(settings: OAuthSettings) -> Result<OAuthClient, LoginError> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .map_err(|e| LoginError::Http(e.into()))?;
        Ok(OAuthClient { settings, http })
    }

    /// Where this client signs in and where its tokens are kept.
    pub fn settings(&self) -> &OAuthSettings {
        &self.settings
    }

    /// The URL the user opens to sign in.
    pub fn authorize_url(
        &self,
        redirect_uri: &str,
        pkce: &Pkce,
        state: &str,
    ) -> Result<String, LoginError> {
        let s = &self.settings;
        let url = reqwest::Url::parse_with_params(
            &format!("{}/oauth/authorize", s.issuer),
            [
                ("response_type", "code"),
                ("client_id", s.client_id.as_str()),
                ("redirect_uri", redirect_uri),
                ("scope", super::SCOPE),
                ("code_challenge", pkce.challenge.as_str()),
                ("code_challenge_method", "S256"),
                ("id_token_add_organizations", "true"),
                ("codex_cli_simplified_flow", "true"),
                ("state", state),
            ],
        )
        .map_err(|e| LoginError::Http(format!("bad issuer URL {}: {e}", s.issuer).into()))?;
        Ok(url.to_string())
    }

    /// Redeem an authorization code for tokens.
    pub async fn exchange_code(
        &self,
        code: &str,
        verifier: &str,
        redirect_uri: &str,
    ) -> Result<TokenSet, LoginError> {
        let form = [
            ("grant_type", "authorization_code"),
            ("code", code),
            ("redirect_uri", redirect_uri),
            ("client_id", self.settings.client_id.as_str()),
            ("code_verifier", verifier),
        ];
        let r = self.token_request(&form).await?;
        let missing = |what: &str| LoginError::Server {
            status: 200,
            message: format!("the token response has no {what}"),
        };
        let id_token = r.id_token.ok_or_else(|| missing("id_token"))?;
        let access = r.access_token.ok_or_else(|| missing("access_token"))?;
        let refresh = r.refresh_token.ok_or_else(|| missing("refresh_token"))?;
        token_set(id_token, access, refresh, r.expires_in)
    }

    /// Trade the refresh token for fresh tokens. The server may rotate the refresh token:
    /// the new one replaces the old, which it will refuse from now on.
    pub async fn refresh(&self, old: &TokenSet) -> Result<TokenSet, LoginError> {
        let form = [
            ("grant_type", "refresh_token"),
            ("refresh_token", old.refresh_token.expose()),
            ("client_id", self.settings.client_id.as_str()),
            ("scope", "openid profile email"),
        ];
        let r = self
            .token_request(&form)
            .await
            .map_err(|e| LoginError::RefreshFailed(e.into()))?;
        let access = r
            .access_token
            .ok_or_else(|| LoginError::RefreshFailed("no access_token in the reply".into()))?;
        let id_token = r
            .id_token
            .unwrap_or_else(|| old.id_token.expose().to_string());
        let refresh = r
            .refresh_token
            .unwrap_or_else(|| old.refresh_token.expose().to_string());
        let mut t = token_set(id_token, access, refresh, r.expires_in)?;
        if t.account_id.is_empty() {
            t.account_id = old.account_id.clone();
        }
        Ok(t)
    }

    async fn token_request(&self, form: &[(&str, &str)]) -> Result<TokenResponse, LoginError> {
        let url = format!("{}/oauth/token", self.settings.issuer);
        let resp = self
            .http
            .post(&url)
            .form(form)
            .send()
            .await
            .map_err(|e| LoginError::Http(format!("{url}: {e}").into()))?;
        let status = resp.status();
        let text = resp
            .text()
            .await
            .map_err(|e| LoginError::Http(format!("{url}: {e}").into()))?;
        if !status.is_success() {
            return Err(LoginError::Server {
                status: status.as_u16(),
                message: server_message(&text),
            });
        }
        serde_json::from_str(&text).map_err(|e| LoginError::Server {
            status: status.as_u16(),
            message: format!("unreadable token response: {e}"),
        })
    }

    /// Ask for a device code (`{issuer}/api/accounts/deviceauth/usercode`).
    pub async fn request_device_code(&self) -> Result<DeviceCode, LoginError> {
        let issuer = &self.settings.issuer;
        let url = format!("{issuer}/api/accounts/deviceauth/usercode");
        let body = json!({"client_id": self.settings.client_id});
        let resp = self.post_json(&url, &body).await?;
        let (status, text) = resp;
        if status == 404 {
            return Err(LoginError::Server {
                status,
                message: "this issuer has no device-code sign-in; use the browser sign-in".into(),
            });
        }
        if !(200..300).contains(&status) {
            return Err(LoginError::Server {
                status,
                message: server_message(&text),
            });
        }
        let uc: UserCodeResponse = serde_json::from_str(&text).map_err(|e| LoginError::Server {
            status,
            message: format!("unreadable device code: {e}"),
        })?;
        let secs = match &uc.interval {
            Some(serde_json::Value::Number(n)) => n.as_u64(),
            Some(serde_json::Value::String(s)) => s.trim().parse().ok(),
            _ => None,
        };
        Ok(DeviceCode {
            verification_url: format!("{issuer}/codex/device"),
            user_code: uc.user_code,
            device_auth_id: uc.device_auth_id,
            interval: Duration::from_secs(secs.unwrap_or(5).max(1)),
        })
    }

    /// Poll until the user has entered the code (the server answers 403/404 until then), then
    /// redeem the authorization code the server hands back.
    pub async fn complete_device(
        &self,
        code: &DeviceCode,
        max_wait: Duration,
    ) -> Result<TokenSet, LoginError> {
        let issuer = &self.settings.issuer;
        let url = format!("{issuer}/api/accounts/deviceauth/token");
        let body = json!({"device_auth_id": code.device_auth_id, "user_code": code.user_code});
        let start = std::time::Instant::now();
        let grant: DeviceGrant = loop {
            let (status, text) = self.post_json(&url, &body).await?;
            match status {
                200..=299 => {
                    break serde_json::from_str(&text).map_err(|e| LoginError::Server {
                        status,
                        message: format!("unreadable device grant: {e}"),
                    })?;
                }
                403 | 404 if start.elapsed() < max_wait => tokio::time::sleep(code.interval).await,
                403 | 404 => return Err(LoginError::TimedOut(max_wait)),
                _ => {
                    return Err(LoginError::Server {
                        status,
                        message: server_message(&text),
                    });
                }
            }
        };
        let redirect = format!("{issuer}/deviceauth/callback");
        self.exchange_code(&grant.authorization_code, &grant.code_verifier, &redirect)
            .await
    }

    async fn post_json(
        &self,
        url: &str,
        body: &serde_json::Value,
    ) -> Result<(u16, String), LoginError> {
        let resp = self
            .http
            .post(url)
            .json(body)
            .send()
            .await
            .map_err(|e| LoginError::Http(format!("{url}: {e}").into()))?;
        let status = resp.status().as_u16();
        let text = resp
            .text()
            .await
            .map_err(|e| LoginError::Http(format!("{url}: {e}").into()))?;
        Ok((status, text))
    }
}

fn token_set(
    id_token: String,
    access: String,
    refresh: String,
    expires_in: Option<i64>,
) -> Result<TokenSet, LoginError> {
    let expires_at = match expires_in {
        Some(secs) => now_secs() + secs,
        None => jwt_claims(&access)
            .and_then(|c| c["exp"].as_i64())
            .unwrap_or_else(|| now_secs() + 3600),
    };
    Ok(TokenSet {
        account_id: account_id(&id_token).unwrap_or_default(),
        id_token: ApiKey::new(id_token),
        access_token: ApiKey::new(access),
        refresh_token: ApiKey::new(refresh),
        expires_at,
    })
}

/// The error an OAuth server gave (`error_description`, `error.message`, or `error`), never
/// the whole body: it could echo a token.
fn server_message(body: &str) -> String {
    let v: serde_json::Value = serde_json::from_str(body).unwrap_or_default();
    v["error_description"]
        .as_str()
        .or_else(|| v["error"]["message"].as_str())
        .or_else(|| v["error"].as_str())
        .unwrap_or("no error description")
        .chars()
        .take(300)
        .collect()
}
