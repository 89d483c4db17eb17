//! Who may pull: the docker client config's credentials (looked up under the keys `docker
//! login` uses) and the answer to a registry's `WWW-Authenticate` challenge (basic, or a
//! bearer token fetched from the realm it names).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use reqwest::header::AUTHORIZATION;

use super::{Session, network, snippet};
use crate::image::ImageError;
use crate::image::reference::DOCKER_HUB;

/// The keys `docker login` has used for Docker Hub.
const DOCKER_HUB_KEYS: [&str; 4] = [
    "https://index.docker.io/v1/",
    "index.docker.io",
    "docker.io",
    "registry-1.docker.io",
];

/// `auths` of the docker client config: registry -> (user, password).
#[derive(Debug, Clone, Default)]
pub(crate) struct Credentials {
    auths: BTreeMap<String, (String, String)>,
}

impl Credentials {
    /// `explicit` is a `config.json` or the folder of one; `None` is docker's default place.
    /// A missing file means anonymous pulls; an unreadable or malformed one is an error, as a
    /// silently anonymous pull of a private image would only fail later and less clearly.
    pub fn load(explicit: Option<&Path>) -> Result<Credentials, ImageError> {
        let path = match explicit {
            Some(p) if p.is_dir() => p.join("config.json"),
            Some(p) => p.to_path_buf(),
            None => match (std::env::var_os("DOCKER_CONFIG"), std::env::var_os("HOME")) {
                (Some(dir), _) => PathBuf::from(dir).join("config.json"),
                (None, Some(home)) => PathBuf::from(home).join(".docker/config.json"),
                (None, None) => return Ok(Credentials::default()),
            },
        };
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Credentials::default()),
            Err(e) => return Err(ImageError::io(&path, "reading the docker config", e)),
        };
        Self::parse(&text).map_err(|what| ImageError::BadCredentials { path, what })
    }

    pub(super) fn parse(text: &str) -> Result<Credentials, String> {
        #[derive(serde::Deserialize)]
        struct Config {
            #[serde(default)]
            auths: BTreeMap<String, Auth>,
        }
        #[derive(serde::Deserialize)]
        struct Auth {
            #[serde(default)]
            auth: Option<String>,
            #[serde(default)]
            username: Option<String>,
            #[serde(default)]
            password: Option<String>,
        }
        let config: Config =
            serde_json::from_str(text).map_err(|e| format!("not a docker config: {e}"))?;
        let mut auths = BTreeMap::new();
        for (key, auth) in config.auths {
            let pair = match (auth.auth, auth.username, auth.password) {
                (Some(encoded), _, _) if !encoded.is_empty() => {
                    let raw = base64::engine::general_purpose::STANDARD
                        .decode(encoded.trim())
                        .map_err(|e| format!("auths.{key}.auth is not base64: {e}"))?;
                    let raw = String::from_utf8(raw)
                        .map_err(|_| format!("auths.{key}.auth is not UTF-8"))?;
                    let (user, pass) = raw.split_once(':').ok_or_else(|| {
                        format!("auths.{key}.auth is not base64 of user:password")
                    })?;
                    (user.to_string(), pass.to_string())
                }
                (_, Some(user), Some(pass)) => (user, pass),
                // An entry without secrets (a credential helper's placeholder): nothing to use.
                _ => continue,
            };
            auths.insert(key, pair);
        }
        Ok(Credentials { auths })
    }

    /// The credentials stored for `registry`, under any of the keys docker writes for it.
    pub fn for_registry(&self, registry: &str) -> Option<&(String, String)> {
        let mut keys: Vec<String> = vec![
            registry.to_string(),
            format!("https://{registry}"),
            format!("http://{registry}"),
            format!("https://{registry}/v1/"),
            format!("https://{registry}/v2/"),
        ];
        if registry == DOCKER_HUB {
            keys.extend(DOCKER_HUB_KEYS.iter().map(|k| k.to_string()));
        }
        keys.iter().find_map(|k| self.auths.get(k))
    }
}

impl Session<'_> {
    /// The `Authorization` value a `WWW-Authenticate` challenge asks for.
    pub(super) async fn authorize(&self, url: &str, challenge: &str) -> Result<String, ImageError> {
        let unauthorized = |reason: String| ImageError::Unauthorized {
            reference: self.reference.clone(),
            url: url.to_string(),
            reason,
        };
        let (scheme, params) = parse_challenge(challenge);
        let basic = self.credentials.as_ref().map(|(user, pass)| {
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"))
            )
        });
        match scheme.to_ascii_lowercase().as_str() {
            "basic" => basic.ok_or_else(|| {
                unauthorized(
                    "the registry wants credentials and the docker config has none for it".into(),
                )
            }),
            "bearer" => {
                let realm = params.get("realm").ok_or_else(|| {
                    unauthorized(format!("bearer challenge without a realm: {challenge}"))
                })?;
                let mut token_url = reqwest::Url::parse(realm)
                    .map_err(|e| unauthorized(format!("bad token realm {realm:?}: {e}")))?;
                {
                    let mut query = token_url.query_pairs_mut();
                    if let Some(service) = params.get("service") {
                        query.append_pair("service", service);
                    }
                    let scope = params
                        .get("scope")
                        .cloned()
                        .unwrap_or_else(|| format!("repository:{}:pull", self.repository));
                    query.append_pair("scope", &scope);
                }
                let token_url_text = token_url.to_string();
                let mut request = self.client.http.get(token_url.clone());
                // Credentials go to the realm only over https or to the registry's own host:
                // a challenge must not be able to send them to an arbitrary http host.
                let same_host = reqwest::Url::parse(url)
                    .ok()
                    .and_then(|u| u.host_str().map(str::to_string))
                    == token_url.host_str().map(str::to_string);
                if let Some(basic) = &basic
                    && (token_url.scheme() == "https" || same_host)
                {
                    request = request.header(AUTHORIZATION, basic);
                }
                let response = request
                    .send()
                    .await
                    .map_err(|e| network(&token_url_text, &e))?;
                let status = response.status();
                if !status.is_success() {
                    let message = snippet(response).await;
                    return Err(ImageError::Unauthorized {
                        reference: self.reference.clone(),
                        url: token_url_text,
                        reason: format!("the token endpoint answered {status}: {message}"),
                    });
                }
                #[derive(serde::Deserialize)]
                struct Token {
                    #[serde(default)]
                    token: Option<String>,
                    #[serde(default)]
                    access_token: Option<String>,
                }
                let body = response
                    .bytes()
                    .await
                    .map_err(|e| network(&token_url_text, &e))?;
                let token: Token =
                    serde_json::from_slice(&body).map_err(|e| ImageError::Unauthorized {
                        reference: self.reference.clone(),
                        url: token_url_text.clone(),
                        reason: format!("the token endpoint's answer is not a token: {e}"),
                    })?;
                let token = token
                    .token
                    .or(token.access_token)
                    .filter(|t| !t.is_empty())
                    .ok_or_else(|| ImageError::Unauthorized {
                        reference: self.reference.clone(),
                        url: token_url_text.clone(),
                        reason: "the token endpoint gave no token".into(),
                    })?;
                Ok(format!("Bearer {token}"))
            }
            "" => Err(unauthorized(
                "401 without a WWW-Authenticate challenge".into(),
            )),
            other => Err(unauthorized(format!(
                "unsupported authentication scheme {other:?}"
            ))),
        }
    }
}

/// `Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="..."` ->
/// (`Bearer`, {realm, service, scope}). Quoted values may hold commas and `\"`.
fn parse_challenge(challenge: &str) -> (String, BTreeMap<String, String>) {
    let challenge = challenge.trim();
    let (scheme, rest) = challenge.split_once(' ').unwrap_or((challenge, ""));
    let mut params = BTreeMap::new();
    let mut chars = rest.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| *c == ',' || c.is_whitespace()) {
            chars.next();
        }
        let key: String = chars.by_ref().take_while(|c| *c != '=').collect();
        if key.is_empty() {
            break;
        }
        let mut value = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => {
                        if let Some(escaped) = chars.next() {
                            value.push(escaped);
                        }
                    }
                    '"' => break,
                    c => value.push(c),
                }
            }
        } else {
            while let Some(c) = chars.peek() {
                if *c == ',' {
                    break;
                }
                value.push(*c);
                chars.next();
            }
        }
        params.insert(key.trim().to_ascii_lowercase(), value.trim().to_string());
    }
    (scheme.to_string(), params)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn challenges_are_parsed_with_quotes_and_commas() {
        let (scheme, params) = parse_challenge(
            r#"Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/debian:pull,push""#,
        );
        assert_eq!(scheme, "Bearer");
        assert_eq!(params["realm"], "https://auth.docker.io/token");
        assert_eq!(params["service"], "registry.docker.io");
        assert_eq!(params["scope"], "repository:library/debian:pull,push");
        let (scheme, params) = parse_challenge(r#"Basic realm="a \"b\"", charset=UTF-8"#);
        assert_eq!(scheme, "Basic");
        assert_eq!(params["realm"], "a \"b\"");
        assert_eq!(params["charset"], "UTF-8");
    }

    #[test]
    fn docker_config_credentials_are_found_under_docker_keys() {
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let text = format!(
            r#"{{"auths":{{"https://index.docker.io/v1/":{{"auth":"{}"}},"ghcr.io":{{"auth":"{}"}},
            "quay.io":{{"username":"q","password":"p"}},"helper.io":{{}}}},"credsStore":"desktop"}}"#,
            b64("hub:secret"),
            b64("gh:tok:with:colons")
        );
        let creds = Credentials::parse(&text).unwrap();
        assert_eq!(
            creds.for_registry("docker.io"),
            Some(&("hub".into(), "secret".into()))
        );
        assert_eq!(
            creds.for_registry("ghcr.io"),
            Some(&("gh".into(), "tok:with:colons".into()))
        );
        assert_eq!(
            creds.for_registry("quay.io"),
            Some(&("q".into(), "p".into()))
        );
        assert_eq!(creds.for_registry("helper.io"), None);
        assert_eq!(creds.for_registry("example.com"), None);
        assert!(Credentials::parse(r#"{"auths":{"x":{"auth":"!!"}}}"#).is_err());

        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("config.json"), "{not json").unwrap();
        let err = Credentials::load(Some(dir.path())).unwrap_err();
        assert!(err.to_string().contains("config.json"), "{err}");
        let missing = Credentials::load(Some(&dir.path().join("nope.json"))).unwrap();
        assert!(missing.auths.is_empty());
    }
}
