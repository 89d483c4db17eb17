//! The loopback half of the browser sign-in: a one-shot HTTP listener on 127.0.0.1 that the
//! issuer redirects the browser to (`/auth/callback?code=..&state=..`). It answers the browser
//! with a short page and hands the code to the login, after checking `state` (a page of any
//! other site cannot complete a sign-in it did not start).

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::LoginError;

pub(crate) struct CallbackServer {
    listener: TcpListener,
    port: u16,
}

impl CallbackServer {
    /// Listen on `127.0.0.1:port` (0: any free port).
    pub async fn bind(port: u16) -> Result<CallbackServer, LoginError> {
        let listener = TcpListener::bind(("127.0.0.1", port)).await.map_err(|e| {
            LoginError::Callback(format!("cannot listen on port {port}: {e}").into())
        })?;
        let port = listener
            .local_addr()
            .map_err(|e| LoginError::Callback(e.into()))?
            .port();
        Ok(CallbackServer { listener, port })
    }

    /// The redirect URI registered for the client: `http://localhost:PORT/auth/callback`.
    pub fn redirect_uri(&self) -> String {
        format!("http://localhost:{}/auth/callback", self.port)
    }

    /// Wait for the callback carrying `state`; other requests (a favicon) get a 404.
    pub async fn wait_for_code(self, state: &str) -> Result<String, LoginError> {
        loop {
            let (mut stream, _) = self
                .listener
                .accept()
                .await
                .map_err(|e| LoginError::Callback(e.into()))?;
            let Some(target) = read_target(&mut stream).await else {
                continue;
            };
            let Some(query) = target.strip_prefix("/auth/callback") else {
                respond(&mut stream, 404, "Not found.").await;
                continue;
            };
            let url = reqwest::Url::parse(&format!("http://localhost/{query}"))
                .map_err(|e| LoginError::Callback(e.into()))?;
            let param = |name: &str| {
                url.query_pairs()
                    .find(|(k, _)| k == name)
                    .map(|(_, v)| v.into_owned())
            };
            if param("state").as_deref() != Some(state) {
                respond(
                    &mut stream,
                    400,
                    "Sign-in refused: the state does not match.",
                )
                .await;
                return Err(LoginError::Callback(
                    "the callback's state does not match".into(),
                ));
            }
            if let Some(error) = param("error") {
                let detail = param("error_description").unwrap_or_default();
                respond(&mut stream, 400, "Sign-in failed; see the terminal.").await;
                return Err(LoginError::Callback(format!("{error}: {detail}").into()));
            }
            let Some(code) = param("code") else {
                respond(&mut stream, 400, "Sign-in failed: no code.").await;
                return Err(LoginError::Callback("the callback has no code".into()));
            };
            respond(
                &mut stream,
                200,
                "Signed in to GEODE. You may close this tab.",
            )
            .await;
            return Ok(code);
        }
    }
}

/// The request target of a `GET` (`/auth/callback?...`).
async fn read_target(stream: &mut TcpStream) -> Option<String> {
    let mut buf = Vec::new();
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < 16 * 1024 {
        let mut chunk = [0u8; 2048];
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let head = String::from_utf8_lossy(&buf);
    let mut first = head.lines().next()?.split(' ');
    (first.next()? == "GET").then_some(())?;
    first.next().map(str::to_string)
}

async fn respond(stream: &mut TcpStream, status: u16, text: &str) {
    let reason = match status {
        200 => "OK",
        404 => "Not Found",
        _ => "Bad Request",
    };
    let body = format!("<!doctype html><title>GEODE</title><p>{text}</p>");
    let reply = format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: text/html; charset=utf-8\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    // The browser may have gone; the code (or the refusal) stands either way.
    let _ = stream.write_all(reply.as_bytes()).await;
    let _ = stream.shutdown().await;
}
