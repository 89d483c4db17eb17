//! A client of the OCI distribution API, enough to pull: manifests (an index resolved to this
//! host's platform) and blobs, each checked against its sha256 digest, with docker's token
//! authentication and credentials, and docker-style mirrors tried before the registry itself.
//!
//! Who may pull (credentials, token challenges) is [`auth`]'s; this module fetches.

use geode_runtime::error_chain::error_chain;
use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt as _;
use reqwest::StatusCode;
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, WWW_AUTHENTICATE};
use tokio::sync::Mutex;

use super::manifest::{self, Document, MANIFEST_ACCEPT, MAX_DOCUMENT_BYTES, Manifest, Problem};
use super::reference::DOCKER_HUB;
use super::{ImageError, Progress, PullOptions, Reference};

mod auth;

use self::auth::Credentials;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
/// A registry that sends nothing for this long has stalled; a slow one is fine.
const READ_TIMEOUT: Duration = Duration::from_secs(120);
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

    /// A blob as it arrives, chunk by chunk, for the caller to hash and unpack on the way;
    /// the URL names it in errors. Nothing is checked here: the reader checks the digest
    /// (and the descriptor's size) as the bytes pass.
    pub async fn blob_stream(
        &self,
        digest: &str,
    ) -> Result<
        (
            impl futures::Stream<Item = Result<bytes::Bytes, ImageError>> + Send + use<>,
            String,
        ),
        ImageError,
    > {
        let url = self.blob_url(digest);
        let response = self.get(&url, None).await?;
        let at = url.clone();
        let stream = response
            .bytes_stream()
            .map(move |chunk| chunk.map_err(|e| network(&at, &e)));
        Ok((stream, url))
    }

    /// The error of a blob whose bytes are not the ones its digest names.
    pub fn mismatch(&self, url: &str, expected: &str, actual: String) -> ImageError {
        self.blob_mismatch(url, expected, actual)
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
}

fn network(url: &str, e: &reqwest::Error) -> ImageError {
    ImageError::Network {
        url: url.to_string(),
        message: error_chain(e),
    }
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
}
