//! The Kubernetes API calls the backend makes, and nothing else: create, read, list and delete
//! Pods in one namespace, and `pods/exec` over a WebSocket with the `v5.channel.k8s.io`
//! channel protocol (one byte of channel before each message: 0 stdin, 1 stdout, 2 stderr, 3
//! the command's status, 255 "this stream ends", which is how stdin reaches EOF; `v4` has no
//! way to end stdin, so commands that read it need `v5`, Kubernetes 1.30 and later).

use std::time::Duration;

use base64::Engine as _;
use serde_json::Value;

use super::settings::ClusterAccess;
use super::ws;
use crate::EnvError;

/// The channel protocols asked for, best first.
const PROTOCOLS: &str = "v5.channel.k8s.io, v4.channel.k8s.io";
/// How long a plain API call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(60);
/// Stdin is sent in messages of at most this size.
const STDIN_CHUNK: usize = 1 << 20;

/// Which stream an exec's output came on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// Channel 1.
    Stdout,
    /// Channel 2.
    Stderr,
}

/// The API server of one namespace.
#[derive(Clone)]
pub struct Api {
    http: reqwest::Client,
    server: String,
    namespace: String,
    token: Option<String>,
}

impl std::fmt::Debug for Api {
    // The token stays out of every log line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Api")
            .field("server", &self.server)
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

impl Api {
    /// A client for `access` (its CA trusted, its token sent with every call).
    pub fn new(access: &ClusterAccess) -> Result<Api, EnvError> {
        let mut builder = reqwest::Client::builder()
            // An exec's upgrade is an HTTP/1.1 affair.
            .http1_only()
            .connect_timeout(Duration::from_secs(15));
        if let Some(pem) = &access.ca_pem {
            let certs = reqwest::Certificate::from_pem_bundle(pem).map_err(|e| {
                EnvError::Unsupported(format!(
                    "kubernetes.ca_file holds no usable PEM certificate: {e}"
                ))
            })?;
            for cert in certs {
                builder = builder.add_root_certificate(cert);
            }
        }
        let http = builder
            .build()
            .map_err(|e| EnvError::Unsupported(format!("kubernetes API client: {e}")))?;
        Ok(Api {
            http,
            server: access.server.clone(),
            namespace: access.namespace.clone(),
            token: access.token.clone(),
        })
    }

    /// The namespace the Pods live in.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    fn pods_url(&self) -> String {
        format!("{}/api/v1/namespaces/{}/pods", self.server, self.namespace)
    }

    fn authorized(&self, req: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.token {
            Some(token) => req.bearer_auth(token),
            None => req,
        }
    }

    /// Send `req`; a non-success status is an error carrying the API's own message.
    async fn call(&self, what: &str, req: reqwest::RequestBuilder) -> Result<Value, ApiError> {
        let resp = self
            .authorized(req)
            .timeout(CALL_TIMEOUT)
            .send()
            .await
            .map_err(|e| ApiError::Transport(format!("{what}: {e}")))?;
        let status = resp.status();
        let body = resp
            .bytes()
            .await
            .map_err(|e| ApiError::Transport(format!("{what}: {e}")))?;
        let value: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        if status.is_success() {
            return Ok(value);
        }
        let message = value["message"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| String::from_utf8_lossy(&body).trim().to_string());
        Err(ApiError::Status {
            code: status.as_u16(),
            message: format!("{what}: {status}: {message}"),
        })
    }

    /// `POST pods`: the created Pod.
    pub async fn create_pod(&self, pod: &Value) -> Result<Value, ApiError> {
        self.call("create pod", self.http.post(self.pods_url()).json(pod))
            .await
    }

    /// `GET pods/NAME`.
    pub async fn get_pod(&self, name: &str) -> Result<Value, ApiError> {
        self.call(
            &format!("get pod {name}"),
            self.http.get(format!("{}/{name}", self.pods_url())),
        )
        .await
    }

    /// `GET pods?labelSelector=SELECTOR`: the Pods' names.
    pub async fn list_pods(&self, selector: &str) -> Result<Vec<String>, ApiError> {
        let list = self
            .call(
                "list pods",
                self.http
                    .get(self.pods_url())
                    .query(&[("labelSelector", selector)]),
            )
            .await?;
        Ok(list["items"]
            .as_array()
            .map(|items| {
                items
                    .iter()
                    .filter_map(|pod| pod["metadata"]["name"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default())
    }

    /// `DELETE pods/NAME` at once (grace period 0); a Pod already gone is deleted enough.
    pub async fn delete_pod(&self, name: &str) -> Result<(), ApiError> {
        let req = self
            .http
            .delete(format!("{}/{name}", self.pods_url()))
            .query(&[("gracePeriodSeconds", "0")]);
        match self.call(&format!("delete pod {name}"), req).await {
            Ok(_) | Err(ApiError::Status { code: 404, .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Run `argv` in the Pod's container `main` through `pods/exec`: `stdin` sent and ended
    /// (v5 only), output handed to `out` as it comes. The command's exit code, or `None` when
    /// the status says it did not exit by itself.
    pub async fn exec(
        &self,
        pod: &str,
        argv: &[String],
        stdin: Option<&[u8]>,
        out: &mut (dyn FnMut(Stream, &[u8]) + Send),
    ) -> Result<Option<i32>, ApiError> {
        let mut query: Vec<(&str, &str)> = vec![
            ("container", "main"),
            ("stdout", "true"),
            ("stderr", "true"),
        ];
        if stdin.is_some() {
            query.push(("stdin", "true"));
        }
        for arg in argv {
            query.push(("command", arg));
        }
        let key = base64::engine::general_purpose::STANDARD.encode(uuid::Uuid::new_v4().as_bytes());
        let what = format!("exec in pod {pod}");
        let req = self
            .http
            .get(format!("{}/{pod}/exec", self.pods_url()))
            .query(&query)
            .header("connection", "Upgrade")
            .header("upgrade", "websocket")
            .header("sec-websocket-version", "13")
            .header("sec-websocket-key", key)
            .header("sec-websocket-protocol", PROTOCOLS);
        let resp = self
            .authorized(req)
            .send()
            .await
            .map_err(|e| ApiError::Transport(format!("{what}: {e}")))?;
        let status = resp.status();
        if status != reqwest::StatusCode::SWITCHING_PROTOCOLS {
            let body = resp.text().await.unwrap_or_default();
            let message = serde_json::from_str::<Value>(&body)
                .ok()
                .and_then(|v| v["message"].as_str().map(str::to_string))
                .unwrap_or(body);
            return Err(ApiError::Status {
                code: status.as_u16(),
                message: format!("{what}: {status}: {}", message.trim()),
            });
        }
        let protocol = resp
            .headers()
            .get("sec-websocket-protocol")
            .and_then(|p| p.to_str().ok())
            .unwrap_or_default()
            .to_string();
        let upgraded = resp
            .upgrade()
            .await
            .map_err(|e| ApiError::Transport(format!("{what}: upgrade: {e}")))?;
        let mut ws = ws::Client::new(upgraded);
        let io = |e: std::io::Error| ApiError::Transport(format!("{what}: {e}"));
        if let Some(bytes) = stdin {
            if protocol != "v5.channel.k8s.io" {
                ws.close().await;
                return Err(ApiError::Transport(format!(
                    "{what}: the API server speaks {protocol:?}, which cannot end a command's \
                     input; GEODE needs v5.channel.k8s.io (Kubernetes 1.30 or later)"
                )));
            }
            for chunk in bytes.chunks(STDIN_CHUNK) {
                let mut message = Vec::with_capacity(chunk.len() + 1);
                message.push(0);
                message.extend_from_slice(chunk);
                ws.send(ws::BINARY, &message).await.map_err(io)?;
            }
            // v5's close message: channel 255, then the channel that ends.
            ws.send(ws::BINARY, &[255, 0]).await.map_err(io)?;
        }
        let mut exit = None;
        let mut ended = false;
        while let Some((_, message)) = ws.recv().await.map_err(io)? {
            let Some((&channel, data)) = message.split_first() else {
                continue;
            };
            match channel {
                1 => out(Stream::Stdout, data),
                2 => out(Stream::Stderr, data),
                3 => {
                    exit = exit_code(data);
                    ended = true;
                }
                _ => {}
            }
        }
        ws.close().await;
        if !ended {
            return Err(ApiError::Transport(format!(
                "{what}: the connection ended before the command's status"
            )));
        }
        Ok(exit)
    }
}

/// The exit code a `v4`/`v5` status message gives: `Success` is 0, a `NonZeroExitCode`
/// failure names its code among its causes; anything else (the process could not start, or
/// was killed) is `None`.
pub fn exit_code(status: &[u8]) -> Option<i32> {
    let status: Value = serde_json::from_slice(status).ok()?;
    match status["status"].as_str()? {
        "Success" => Some(0),
        _ if status["reason"] == "NonZeroExitCode" => status["details"]["causes"]
            .as_array()?
            .iter()
            .find(|cause| cause["reason"] == "ExitCode")?["message"]
            .as_str()?
            .parse()
            .ok(),
        _ => None,
    }
}

/// A failed API call.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The server answered with an error status.
    #[error("{message}")]
    Status {
        /// The HTTP status code.
        code: u16,
        /// What was asked, the status and the API's message.
        message: String,
    },
    /// The server could not be reached, or the connection broke.
    #[error("{0}")]
    Transport(String),
}

impl From<ApiError> for EnvError {
    fn from(e: ApiError) -> EnvError {
        EnvError::Lost(format!("kubernetes API: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_come_from_the_status_channel() {
        assert_eq!(exit_code(br#"{"metadata":{},"status":"Success"}"#), Some(0));
        let failed = br#"{"metadata":{},"status":"Failure","message":"command terminated with non-zero exit code: error executing command [sh -c exit 3], exit code 3","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"3"}]}}"#;
        assert_eq!(exit_code(failed), Some(3));
        let broken = br#"{"metadata":{},"status":"Failure","message":"OCI runtime exec failed"}"#;
        assert_eq!(exit_code(broken), None);
        assert_eq!(exit_code(b"not json"), None);
    }
}
