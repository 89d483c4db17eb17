//! A scripted HTTP/1.1 server on 127.0.0.1 for the provider adapters: it records every request
//! and answers from a queue of replies, byte for byte: status and headers, SSE bodies sent
//! chunk by chunk (chunked transfer encoding) with delays, streams cut mid-reply, and streams
//! that go silent.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// One piece of a reply body.
#[derive(Debug, Clone)]
pub enum Part {
    /// Sent as one chunk.
    Bytes(Vec<u8>),
    Delay(Duration),
    /// Send nothing more, keep the connection open until the client gives up.
    Hang,
    /// Close the connection without ending the body.
    Cut,
}

impl Part {
    pub fn text(s: impl Into<String>) -> Part {
        Part::Bytes(s.into().into_bytes())
    }

    /// One SSE event with a name (`event:` line) and JSON data.
    pub fn event(name: &str, data: &Value) -> Part {
        Part::text(format!("event: {name}\ndata: {data}\n\n"))
    }

    /// One SSE event with data only.
    pub fn data(data: &Value) -> Part {
        Part::text(format!("data: {data}\n\n"))
    }
}

#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub parts: Vec<Part>,
    /// Chunked transfer encoding (streams); otherwise Content-Length.
    pub chunked: bool,
}

impl Reply {
    pub fn sse(parts: Vec<Part>) -> Reply {
        Reply {
            status: 200,
            headers: vec![
                ("content-type".into(), "text/event-stream".into()),
                ("cache-control".into(), "no-cache".into()),
            ],
            parts,
            chunked: true,
        }
    }

    pub fn json(status: u16, body: &Value) -> Reply {
        Reply {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            parts: vec![Part::text(body.to_string())],
            chunked: false,
        }
    }

    pub fn header(mut self, name: &str, value: &str) -> Reply {
        self.headers.push((name.into(), value.into()));
        self
    }
}

/// A request as the server saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub headers: BTreeMap<String, String>,
    pub raw_body: String,
    pub body: Value,
}

type Shared<T> = Arc<Mutex<T>>;

pub struct Loopback {
    addr: std::net::SocketAddr,
    seen: Shared<Vec<Seen>>,
    task: JoinHandle<()>,
}

impl Loopback {
    pub async fn start(replies: Vec<Reply>) -> Loopback {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen: Shared<Vec<Seen>> = Arc::default();
        let replies: Shared<VecDeque<Reply>> = Arc::new(Mutex::new(replies.into()));
        let (s, r) = (seen.clone(), replies.clone());
        let task = tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            while let Ok((stream, _)) = listener.accept().await {
                connections.spawn(serve(stream, s.clone(), r.clone()));
            }
        });
        Loopback { addr, seen, task }
    }

    /// `http://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn requests(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for Loopback {
    fn drop(&mut self) {
        // Dropping the accept task drops its JoinSet, which aborts every connection.
        self.task.abort();
    }
}

async fn serve(mut stream: TcpStream, seen: Shared<Vec<Seen>>, replies: Shared<VecDeque<Reply>>) {
    let mut buf = Vec::new();
    loop {
        let Some(request) = read_request(&mut stream, &mut buf).await else {
            return;
        };
        seen.lock().unwrap().push(request);
        let reply = replies.lock().unwrap().pop_front().unwrap_or_else(|| {
            Reply::json(
                500,
                &serde_json::json!({"error": {"message": "the loopback script has no reply left"}}),
            )
        });
        if !write_reply(&mut stream, reply).await {
            return;
        }
    }
}

/// Read one request (headers, then a Content-Length body). `None` when the client closed.
pub async fn read_request(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Option<Seen> {
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        let mut chunk = [0u8; 8192];
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let method = first.next()?.to_string();
    let path = first.next()?.to_string();
    let headers: BTreeMap<String, String> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_lowercase(), v.trim().to_string()))
        .collect();
    let len: usize = headers
        .get("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let body_start = head_end + 4;
    while buf.len() < body_start + len {
        let mut chunk = [0u8; 8192];
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let raw = buf[body_start..body_start + len].to_vec();
    buf.drain(..body_start + len);
    let raw_body = String::from_utf8_lossy(&raw).into_owned();
    Some(Seen {
        method,
        path,
        headers,
        body: serde_json::from_str(&raw_body).unwrap_or(Value::Null),
        raw_body,
    })
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        402 => "Payment Required",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        529 => "Overloaded",
        _ => "Status",
    }
}

/// Write a reply; `false` when the connection must close (cut, hang, or a write failed).
pub async fn write_reply(stream: &mut TcpStream, reply: Reply) -> bool {
    let mut head = format!("HTTP/1.1 {} {}\r\n", reply.status, reason(reply.status));
    for (k, v) in &reply.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if reply.chunked {
        head.push_str("transfer-encoding: chunked\r\n\r\n");
    } else {
        let len: usize = reply
            .parts
            .iter()
            .map(|p| match p {
                Part::Bytes(b) => b.len(),
                _ => 0,
            })
            .sum();
        head.push_str(&format!("content-length: {len}\r\n\r\n"));
    }
    if stream.write_all(head.as_bytes()).await.is_err() {
        return false;
    }
    for part in reply.parts {
        match part {
            Part::Bytes(b) => {
                let framed = if reply.chunked {
                    let mut f = format!("{:x}\r\n", b.len()).into_bytes();
                    f.extend_from_slice(&b);
                    f.extend_from_slice(b"\r\n");
                    f
                } else {
                    b
                };
                if stream.write_all(&framed).await.is_err() || stream.flush().await.is_err() {
                    return false;
                }
            }
            Part::Delay(d) => tokio::time::sleep(d).await,
            Part::Hang => {
                // Wait for the client to hang up (it reads nothing more from us).
                let mut sink = [0u8; 1024];
                while let Ok(n) = stream.read(&mut sink).await {
                    if n == 0 {
                        break;
                    }
                }
                return false;
            }
            Part::Cut => {
                let _ = stream.shutdown().await;
                return false;
            }
        }
    }
    if reply.chunked && stream.write_all(b"0\r\n\r\n").await.is_err() {
        return false;
    }
    stream.flush().await.is_ok()
}
