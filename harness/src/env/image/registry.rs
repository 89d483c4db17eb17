//! A client of the OCI distribution API, enough to pull: manifests (an index resolved to this
//! host's platform) and blobs, each checked against its sha256 digest, with docker's token
//! authentication and credentials, and docker-style mirrors tried before the registry itself.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine as _;
use futures::StreamExt as _;
use reqwest::StatusCode;
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, WWW_AUTHENTICATE};
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt as _;
use tokio::sync::Mutex;

use super::manifest::{self, Document, MANIFEST_ACCEPT, MAX_DOCUMENT_BYTES, Manifest, Problem};
use super::reference::DOCKER_HUB;
use super::{ImageError, Progress, PullOptions, Reference};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
/// A registry that sends nothing for this long has stalled; a slow one is fine.
const READ_TIMEOUT: Duration = Duration::from_secs(120);
/// The keys `docker login` has used for Docker Hub.
const DOCKER_HUB_KEYS: [&str; 4] = [
    "https://index.docker.io/v1/",
    "index.docker.io",
    "docker.io",
    "registry-1.docker.io",
];

/// One place to pull from: a mirror or the registry.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Endpoint {
    /// `https://registry-1.docker.io`, `http://127.0.0.1:5000` (no trailing `/`).
    pub base: String,
    pub mirror: bool,
    /// Whose credentials apply (`docker.io` for Docker Hub; a mirror's host otherwise).
    pub credentials_for: String,
}

/// Mirrors of `registry` first, then (when `with_registry`) the registry itself.
pub(crate) fn endpoints(
    registry: &str,
    mirrors: &BTreeMap<String, String>,
    with_registry: bool,
) -> Vec<Endpoint> {
    let mut out = Vec::new();
    if let Some(url) = mirrors.get(registry) {
        let base = url.trim_end_matches('/').to_string();
        let credentials_for = reqwest::Url::parse(&base)
            .ok()
            .and_then(|u| {
                u.host_str()
                    .map(|h| u.port().map_or(h.to_string(), |p| format!("{h}:{p}")))
            })
            .unwrap_or_else(|| base.clone());
        out.push(Endpoint {
            base,
            mirror: true,
            credentials_for,
        });
    }
    if with_registry {
        out.push(Endpoint {
            base: registry_base(registry),
            mirror: false,
            credentials_for: registry.to_string(),
        });
    }
    out
}

/// Loopback registries (a test registry, `registry:2` on this machine) speak plain http, as
/// docker assumes for them; every other registry is https.
fn registry_base(registry: &str) -> String {
    if registry == DOCKER_HUB {
        return "https://registry-1.docker.io".into();
    }
    let host = registry.rsplit_once(':').map_or(registry, |(h, _)| h);
    if host == "localhost" || host == "127.0.0.1" || host == "[::1]" {
        format!("http://{registry}")
    } else {
        format!("https://{registry}")
    }
}

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

    fn parse(text: &str) -> Result<Credentials, String> {
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

/// The HTTP client and credentials of one pull.
pub(crate) struct Client {
    http: reqwest::Client,
    credentials: Credentials,
    progress: Option<Progress>,
}

impl Client {
    pub fn new(opts: &PullOptions) -> Result<Client, ImageError> {
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .read_timeout(READ_TIMEOUT)
            .user_agent(concat!("geode-harness/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| ImageError::Network {
                url: "(client)".into(),
                message: error_chain(&e),
            })?;
        Ok(Client {
            http,
            credentials: Credentials::load(opts.docker_config.as_deref())?,
            progress: opts.progress.clone(),
        })
    }

    pub fn progress(&self, line: &str) {
        if let Some(p) = &self.progress {
            p(line);
        }
        tracing::debug!("{line}");
    }

    /// A session on one endpoint for one repository; it keeps the token it gets.
    pub fn session<'c>(&'c self, endpoint: &Endpoint, reference: &Reference) -> Session<'c> {
        Session {
            client: self,
            base: endpoint.base.clone(),
            reference: reference.to_string(),
            repository: reference.repository().to_string(),
            credentials: self
                .credentials
                .for_registry(&endpoint.credentials_for)
                .cloned(),
            authorization: Mutex::new(None),
        }
    }
}

/// What a reference resolved to at one endpoint.
#[derive(Debug)]
pub(crate) struct Resolved {
    pub manifest: Manifest,
    /// The digest the reference names: the index's when the tag is an index.
    pub digest: String,
    /// The platform manifest's own digest (equal to `digest` without an index).
    pub manifest_digest: String,
}

pub(crate) struct Session<'c> {
    client: &'c Client,
    base: String,
    reference: String,
    repository: String,
    credentials: Option<(String, String)>,
    authorization: Mutex<Option<String>>,
}

impl Session<'_> {
    /// The reference's manifest, through an index to this host's platform.
    pub async fn resolve(&self, reference: &Reference) -> Result<Resolved, ImageError> {
        let (body, content_type, digest, url) = self.manifest(reference.manifest_key()).await?;
        match self.document(&url, content_type.as_deref(), &body)? {
            Document::Manifest(manifest) => Ok(Resolved {
                manifest,
                manifest_digest: digest.clone(),
                digest,
            }),
            Document::Index(index) => {
                let entry = manifest::pick_platform(&index).map_err(|available| {
                    ImageError::UnsupportedPlatform {
                        reference: self.reference.clone(),
                        platform: manifest::platform_name(),
                        available,
                    }
                })?;
                let (body, content_type, manifest_digest, url) =
                    self.manifest(&entry.digest).await?;
                match self.document(&url, content_type.as_deref(), &body)? {
                    Document::Manifest(manifest) => Ok(Resolved {
                        manifest,
                        digest,
                        manifest_digest,
                    }),
                    Document::Index(_) => Err(ImageError::BadManifest {
                        reference: self.reference.clone(),
                        location: url,
                        what: "the index's platform entry is another index".into(),
                    }),
                }
            }
        }
    }

    fn document(
        &self,
        url: &str,
        content_type: Option<&str>,
        body: &[u8],
    ) -> Result<Document, ImageError> {
        manifest::parse_document(content_type, body).map_err(|p| match p {
            Problem::Unsupported(media_type) => ImageError::UnsupportedMediaType {
                reference: self.reference.clone(),
                media_type,
                what: format!("the manifest at {url}"),
            },
            Problem::Bad(what) => ImageError::BadManifest {
                reference: self.reference.clone(),
                location: url.to_string(),
                what,
            },
        })
    }

    /// GET a manifest by tag or digest: (body, content type, its digest, URL). By digest, the
    /// body must hash to it; by tag, to the `Docker-Content-Digest` header when there is one.
    async fn manifest(
        &self,
        key: &str,
    ) -> Result<(Vec<u8>, Option<String>, String, String), ImageError> {
        let url = format!("{}/v2/{}/manifests/{}", self.base, self.repository, key);
        let response = self.get(&url, Some(MANIFEST_ACCEPT)).await?;
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let content_type = header(CONTENT_TYPE.as_str());
        let header_digest = header("docker-content-digest");
        let body = self.read_limited(response, &url).await?;
        let actual = manifest::sha256_digest(&body);
        let expected = if key.starts_with("sha256:") {
            Some(key.to_string())
        } else {
            // Only a sha256 header can be checked; another algorithm's is left to the body.
            header_digest.filter(|d| d.starts_with("sha256:"))
        };
        if let Some(expected) = expected
            && expected != actual
        {
            return Err(ImageError::DigestMismatch {
                reference: self.reference.clone(),
                what: format!("the manifest at {url}"),
                expected,
                actual,
            });
        }
        Ok((body, content_type, actual, url))
    }

    /// A small blob (a config), in memory, checked against its digest.
    pub async fn blob_bytes(&self, digest: &str) -> Result<Vec<u8>, ImageError> {
        let url = self.blob_url(digest);
        let response = self.get(&url, None).await?;
        let body = self.read_limited(response, &url).await?;
        let actual = manifest::sha256_digest(&body);
        if actual != digest {
            return Err(self.blob_mismatch(&url, digest, actual));
        }
        Ok(body)
    }

    fn blob_mismatch(&self, url: &str, expected: &str, actual: String) -> ImageError {
        ImageError::DigestMismatch {
            reference: self.reference.clone(),
            what: format!("the blob at {url}"),
            expected: expected.to_string(),
            actual,
        }
    }

    /// A blob streamed to `dest` while hashing it; on any failure, including a digest that does
    /// not match, `dest` is removed. Returns the bytes written.
    pub async fn blob_to_file(
        &self,
        digest: &str,
        size: Option<u64>,
        dest: &Path,
    ) -> Result<u64, ImageError> {
        let url = self.blob_url(digest);
        let response = self.get(&url, None).await?;
        let result = self.stream_to(response, &url, digest, size, dest).await;
        if result.is_err() {
            let _ = tokio::fs::remove_file(dest).await;
        }
        result
    }

    async fn stream_to(
        &self,
        response: reqwest::Response,
        url: &str,
        digest: &str,
        size: Option<u64>,
        dest: &Path,
    ) -> Result<u64, ImageError> {
        let file = tokio::fs::File::create(dest)
            .await
            .map_err(|e| ImageError::io(dest, "creating a download file", e))?;
        let mut out = tokio::io::BufWriter::with_capacity(1 << 20, file);
        let mut hasher = Sha256::new();
        let mut written: u64 = 0;
        let mut stream = response.bytes_stream();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| network(url, &e))?;
            written += chunk.len() as u64;
            if let Some(size) = size
                && written > size
            {
                return Err(self.blob_mismatch(
                    url,
                    digest,
                    format!("(not hashed: more than the {size} bytes its descriptor gives)"),
                ));
            }
            hasher.update(&chunk);
            out.write_all(&chunk)
                .await
                .map_err(|e| ImageError::io(dest, "writing a download", e))?;
        }
        out.flush()
            .await
            .map_err(|e| ImageError::io(dest, "writing a download", e))?;
        let actual = format!("sha256:{}", hex::encode(hasher.finalize()));
        if actual != digest {
            return Err(self.blob_mismatch(url, digest, actual));
        }
        Ok(written)
    }

    fn blob_url(&self, digest: &str) -> String {
        format!("{}/v2/{}/blobs/{}", self.base, self.repository, digest)
    }

    async fn read_limited(
        &self,
        response: reqwest::Response,
        url: &str,
    ) -> Result<Vec<u8>, ImageError> {
        let mut body = Vec::new();
        let mut stream = response.bytes_stream();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| network(url, &e))?;
            if (body.len() + chunk.len()) as u64 > MAX_DOCUMENT_BYTES {
                return Err(ImageError::BadManifest {
                    reference: self.reference.clone(),
                    location: url.to_string(),
                    what: format!("larger than {MAX_DOCUMENT_BYTES} bytes"),
                });
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }

    /// GET with the session's authorization; a 401 is answered once per request by the
    /// challenge's scheme (a token may expire during a long pull), then retried.
    async fn get(&self, url: &str, accept: Option<&str>) -> Result<reqwest::Response, ImageError> {
        let mut authorized_again = false;
        loop {
            let mut request = self.client.http.get(url);
            if let Some(accept) = accept {
                request = request.header(ACCEPT, accept);
            }
            if let Some(authorization) = self.authorization.lock().await.clone() {
                request = request.header(AUTHORIZATION, authorization);
            }
            let response = request.send().await.map_err(|e| network(url, &e))?;
            let status = response.status();
            if status.is_success() {
                return Ok(response);
            }
            if status == StatusCode::UNAUTHORIZED && !authorized_again {
                authorized_again = true;
                let challenge = response
                    .headers()
                    .get(WWW_AUTHENTICATE)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_string();
                let authorization = self.authorize(url, &challenge).await?;
                *self.authorization.lock().await = Some(authorization);
                continue;
            }
            let message = snippet(response).await;
            return Err(match status {
                StatusCode::NOT_FOUND => ImageError::NotFound {
                    reference: self.reference.clone(),
                    url: url.to_string(),
                },
                StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => ImageError::Unauthorized {
                    reference: self.reference.clone(),
                    url: url.to_string(),
                    reason: format!("{status}: {message}"),
                },
                _ => ImageError::Registry {
                    url: url.to_string(),
                    status: status.as_u16(),
                    message,
                },
            });
        }
    }

    /// The `Authorization` value a `WWW-Authenticate` challenge asks for.
    async fn authorize(&self, url: &str, challenge: &str) -> Result<String, ImageError> {
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

fn network(url: &str, e: &reqwest::Error) -> ImageError {
    ImageError::Network {
        url: url.to_string(),
        message: error_chain(e),
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// The start of an error body, for the message (registries explain themselves in JSON).
async fn snippet(response: reqwest::Response) -> String {
    let text = response.text().await.unwrap_or_default();
    let text = text.trim();
    match text.char_indices().nth(300) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text.to_string(),
    }
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
    fn endpoints_put_mirrors_first_and_pick_http_for_loopback() {
        let mirrors = BTreeMap::from([(
            "docker.io".to_string(),
            "http://127.0.0.1:5000/".to_string(),
        )]);
        let eps = endpoints("docker.io", &mirrors, true);
        assert_eq!(eps.len(), 2);
        assert_eq!(eps[0].base, "http://127.0.0.1:5000");
        assert!(eps[0].mirror);
        assert_eq!(eps[0].credentials_for, "127.0.0.1:5000");
        assert_eq!(eps[1].base, "https://registry-1.docker.io");
        assert_eq!(eps[1].credentials_for, "docker.io");
        assert_eq!(
            endpoints("ghcr.io", &mirrors, true)[0].base,
            "https://ghcr.io"
        );
        assert_eq!(
            endpoints("localhost:5000", &mirrors, true)[0].base,
            "http://localhost:5000"
        );
        assert_eq!(
            endpoints("127.0.0.1:80", &mirrors, true)[0].base,
            "http://127.0.0.1:80"
        );
        assert_eq!(
            endpoints("localhost.example.com", &mirrors, true)[0].base,
            "https://localhost.example.com"
        );
        assert!(endpoints("ghcr.io", &mirrors, false).is_empty());
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
