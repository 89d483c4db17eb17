//! The ChatGPT sign-in on disk: one JSON file under `$GEODE_HOME`, mode 0600 from creation,
//! written whole (temporary file, then rename) so a crash never leaves half a token.
//!
//! Tokens live in `ApiKey`s in memory, whose `Debug` is redacted, so formatting a `TokenSet`
//! (a log line, an error) cannot leak them.

use std::io::Write;
use std::path::{Path, PathBuf};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::LoginError;
use crate::model::credentials::ApiKey;

/// `schema` of the token file.
pub const TOKEN_SCHEMA: &str = "geode.openai_auth.v1";

/// The tokens of one ChatGPT sign-in.
#[derive(Debug, Clone)]
pub struct TokenSet {
    /// The OpenID token naming the account.
    pub id_token: ApiKey,
    /// The bearer token of model calls.
    pub access_token: ApiKey,
    /// Redeemed for a new access token before it expires.
    pub refresh_token: ApiKey,
    /// `chatgpt_account_id` of the id_token: sent as the `chatgpt-account-id` header.
    pub account_id: String,
    /// When the access token expires (Unix seconds).
    pub expires_at: i64,
}

/// The file's shape (`geode.openai_auth.v1`).
#[derive(Serialize, Deserialize)]
struct TokenFile {
    schema: String,
    id_token: String,
    access_token: String,
    refresh_token: String,
    account_id: String,
    expires_at: i64,
}

/// The claims of a JWT, unverified: the issuer signed it for us over TLS, and we only read
/// which account and expiry it names.
pub fn jwt_claims(jwt: &str) -> Option<Value> {
    let payload = jwt.split('.').nth(1)?;
    let bytes = URL_SAFE_NO_PAD.decode(payload.trim_end_matches('=')).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// The ChatGPT account an id_token belongs to.
pub fn account_id(id_token: &str) -> Option<String> {
    let claims = jwt_claims(id_token)?;
    claims["https://api.openai.com/auth"]["chatgpt_account_id"]
        .as_str()
        .map(str::to_string)
}

/// Where the sign-in is kept, and the one place that reads and writes it.
#[derive(Debug, Clone)]
pub struct TokenStore {
    path: PathBuf,
}

impl TokenStore {
    /// A store at `path`; nothing is read until `load`.
    pub fn new(path: PathBuf) -> TokenStore {
        TokenStore { path }
    }

    /// `$GEODE_HOME/openai-auth.json`.
    pub fn in_home(home: &Path) -> TokenStore {
        TokenStore::new(home.join("openai-auth.json"))
    }

    /// The token file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The stored sign-in; `Ok(None)` when there is none.
    pub fn load(&self) -> Result<Option<TokenSet>, LoginError> {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(self.error(e.to_string())),
        };
        let f: TokenFile = serde_json::from_str(&text).map_err(|e| self.error(e.to_string()))?;
        if f.schema != TOKEN_SCHEMA {
            return Err(self.error(format!("schema {:?} is not {TOKEN_SCHEMA}", f.schema)));
        }
        Ok(Some(TokenSet {
            id_token: ApiKey::new(f.id_token),
            access_token: ApiKey::new(f.access_token),
            refresh_token: ApiKey::new(f.refresh_token),
            account_id: f.account_id,
            expires_at: f.expires_at,
        }))
    }

    /// Write the sign-in, readable by the owner only.
    pub fn save(&self, t: &TokenSet) -> Result<(), LoginError> {
        let file = TokenFile {
            schema: TOKEN_SCHEMA.into(),
            id_token: t.id_token.expose().into(),
            access_token: t.access_token.expose().into(),
            refresh_token: t.refresh_token.expose().into(),
            account_id: t.account_id.clone(),
            expires_at: t.expires_at,
        };
        let text = serde_json::to_string_pretty(&file).map_err(|e| self.error(e.to_string()))?;
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| self.error(e.to_string()))?;
        }
        let tmp = self.path.with_extension("json.tmp");
        let _ = std::fs::remove_file(&tmp);
        let mut f = open_private(&tmp).map_err(|e| self.error(e.to_string()))?;
        f.write_all(text.as_bytes())
            .and_then(|()| f.sync_all())
            .and_then(|()| std::fs::rename(&tmp, &self.path))
            .map_err(|e| self.error(e.to_string()))
    }

    /// Forget the sign-in; `false` when there was none.
    pub fn remove(&self) -> Result<bool, LoginError> {
        match std::fs::remove_file(&self.path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(self.error(e.to_string())),
        }
    }

    fn error(&self, message: String) -> LoginError {
        LoginError::Store {
            path: self.path.display().to_string(),
            message,
        }
    }
}

/// Created with mode 0600: the tokens are never readable by others, not even for an instant.
fn open_private(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn tokens_round_trip_private_and_redacted() {
        let dir = tempfile::tempdir().unwrap();
        let store = TokenStore::in_home(&dir.path().join("home"));
        assert!(store.load().unwrap().is_none());
        let t = TokenSet {
            id_token: ApiKey::new("id-secret"),
            access_token: ApiKey::new("access-secret"),
            refresh_token: ApiKey::new("refresh-secret"),
            account_id: "acct".into(),
            expires_at: 42,
        };
        store.save(&t).unwrap();
        let mode = std::fs::metadata(store.path())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let back = store.load().unwrap().unwrap();
        assert_eq!(back.refresh_token.expose(), "refresh-secret");
        assert_eq!((back.account_id.as_str(), back.expires_at), ("acct", 42));
        assert!(!format!("{back:?}").contains("secret"));
        assert!(store.remove().unwrap());
        assert!(!store.remove().unwrap());
    }

    #[test]
    fn the_account_comes_from_the_id_token_claims() {
        let claims =
            serde_json::json!({"https://api.openai.com/auth": {"chatgpt_account_id": "a-1"}});
        let jwt = format!("h.{}.s", URL_SAFE_NO_PAD.encode(claims.to_string()));
        assert_eq!(account_id(&jwt).as_deref(), Some("a-1"));
        assert_eq!(account_id("not-a-jwt"), None);
    }
}
