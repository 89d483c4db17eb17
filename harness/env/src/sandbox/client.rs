//! The harness's end of a sandbox server: start it, send requests, pair replies by id.
//!
//! One task reads the server's stdout and completes waiting calls; writes go through an
//! unbounded channel to a writer task, so a dropped call can still send its `cancel` from
//! `Drop` without awaiting.

use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::protocol::{
    ExecResult, ExecSpec, FAREWELL_ID, Op, ReadyInfo, Reply, Request, Response, ServerSpec,
};
use crate::EnvError;

/// How long a server may take to build its sandbox.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// Bytes of the server's stderr kept for error messages.
const STDERR_TAIL: usize = 4096;

/// Calls waiting for their reply. `None` once the server's output has ended: a call submitted
/// after that must fail at once instead of waiting for a reply that can never come.
type Pending = Arc<Mutex<Option<HashMap<u64, oneshot::Sender<Reply>>>>>;

#[derive(Debug)]
pub(crate) struct ServerClient {
    lines: mpsc::UnboundedSender<String>,
    pending: Pending,
    next_id: AtomicU64,
    child: tokio::sync::Mutex<Option<Child>>,
    stderr_tail: Arc<Mutex<VecDeque<u8>>>,
    /// The server's farewell ([`FAREWELL_ID`]): the receiver until it came, then its words,
    /// which every later call that finds the server gone reports.
    farewell: Mutex<(Option<oneshot::Receiver<Reply>>, Option<String>)>,
    pub ready: ReadyInfo,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}

impl ServerClient {
    pub(crate) async fn start(geode_exe: &Path, spec: &ServerSpec) -> Result<Self, EnvError> {
        let json = serde_json::to_string(spec).map_err(|e| EnvError::Io {
            context: "encode the sandbox spec".into(),
            source: std::io::Error::other(e),
        })?;
        let mut child = Command::new(geode_exe)
            .arg(crate::SERVER_ARG)
            .arg(json)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|source| EnvError::Io {
                context: format!("start the sandbox server {}", geode_exe.display()),
                source,
            })?;
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(EnvError::Lost("sandbox server pipes missing".into()));
        };
        let stderr_tail = Arc::new(Mutex::new(VecDeque::new()));
        tokio::spawn(keep_tail(stderr, Arc::clone(&stderr_tail)));
        let (lines, mut line_rx) = mpsc::unbounded_channel::<String>();
        tokio::spawn(async move {
            let mut stdin = stdin;
            while let Some(line) = line_rx.recv().await {
                if stdin.write_all(line.as_bytes()).await.is_err()
                    || stdin.write_all(b"\n").await.is_err()
                    || stdin.flush().await.is_err()
                {
                    break;
                }
            }
        });
        let pending: Pending = Arc::new(Mutex::new(Some(HashMap::new())));
        let (ready_tx, ready_rx) = oneshot::channel();
        if let Some(map) = lock(&pending).as_mut() {
            map.insert(0, ready_tx);
        }
        tokio::spawn(read_replies(BufReader::new(stdout), Arc::clone(&pending)));
        let tail = || lock(&stderr_tail).iter().copied().collect::<Vec<u8>>();
        let ready = match tokio::time::timeout(READY_TIMEOUT, ready_rx).await {
            Ok(Ok(Reply::Ready(info))) => info,
            Ok(Ok(Reply::Error(e))) => {
                let _ = child.kill().await;
                return Err(EnvError::SetupFailed {
                    step: "sandbox".into(),
                    message: e.message,
                });
            }
            Ok(Ok(other)) => {
                let _ = child.kill().await;
                return Err(EnvError::Lost(format!("unexpected first reply {other:?}")));
            }
            Ok(Err(_)) => {
                let status = child.wait().await.ok();
                return Err(EnvError::Lost(format!(
                    "sandbox server exited ({status:?}) before it was ready: {}",
                    String::from_utf8_lossy(&tail())
                )));
            }
            Err(_) => {
                let _ = child.kill().await;
                return Err(EnvError::Lost(format!(
                    "sandbox server not ready after {READY_TIMEOUT:?}"
                )));
            }
        };
        let (farewell_tx, farewell) = oneshot::channel();
        if let Some(map) = lock(&pending).as_mut() {
            map.insert(FAREWELL_ID, farewell_tx);
        }
        Ok(ServerClient {
            farewell: Mutex::new((Some(farewell), None)),
            lines,
            pending,
            next_id: AtomicU64::new(1),
            child: tokio::sync::Mutex::new(Some(child)),
            stderr_tail,
            ready,
        })
    }

    fn lost(&self) -> EnvError {
        // The farewell line comes before the end of the output that made this call fail.
        let mut farewell = lock(&self.farewell);
        if let Some(rx) = farewell.0.as_mut()
            && let Ok(Reply::Error(e)) = rx.try_recv()
        {
            farewell.1 = Some(e.message);
        }
        if let Some(words) = &farewell.1 {
            return EnvError::BrokenFromInside(words.clone());
        }
        drop(farewell);
        let tail: Vec<u8> = lock(&self.stderr_tail).iter().copied().collect();
        EnvError::Lost(format!(
            "the sandbox server stopped answering; its last words: {}",
            String::from_utf8_lossy(&tail).trim()
        ))
    }

    fn submit(&self, op: Op) -> Result<(u64, oneshot::Receiver<Reply>), EnvError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let line = serde_json::to_string(&Request { id, op }).map_err(|e| EnvError::Io {
            context: "encode a sandbox request".into(),
            source: std::io::Error::other(e),
        })?;
        let (tx, rx) = oneshot::channel();
        match lock(&self.pending).as_mut() {
            Some(map) => map.insert(id, tx),
            None => return Err(self.lost()),
        };
        if self.lines.send(line).is_err() {
            if let Some(map) = lock(&self.pending).as_mut() {
                map.remove(&id);
            }
            return Err(self.lost());
        }
        Ok((id, rx))
    }

    pub(crate) async fn call(&self, op: Op) -> Result<Reply, EnvError> {
        let (_, rx) = self.submit(op)?;
        rx.await.map_err(|_| self.lost())
    }

    /// Run a command; cancelling the token (or dropping the future) kills its process group.
    pub(crate) async fn exec(
        &self,
        spec: ExecSpec,
        cancel: CancellationToken,
    ) -> Result<ExecResult, EnvError> {
        let (id, mut rx) = self.submit(Op::Exec(spec))?;
        let mut guard = CancelOnDrop {
            lines: self.lines.clone(),
            target: Some(id),
        };
        let reply = tokio::select! {
            reply = &mut rx => reply,
            () = cancel.cancelled() => {
                guard.fire();
                rx.await
            }
        };
        guard.target = None;
        match reply.map_err(|_| self.lost())? {
            Reply::Exec(result) => Ok(result),
            Reply::Error(e) => Err(EnvError::Io {
                context: "exec in the sandbox".into(),
                source: std::io::Error::new(e.kind.io_kind(), e.message),
            }),
            other => Err(EnvError::Lost(format!("unexpected reply {other:?}"))),
        }
    }

    /// Wait for the server to exit (after `shutdown`), killing it if it takes too long.
    pub(crate) async fn wait_exit(&self, grace: Duration) {
        let mut child = self.child.lock().await;
        if let Some(c) = child.as_mut()
            && tokio::time::timeout(grace, c.wait()).await.is_err()
        {
            let _ = c.kill().await;
        }
        *child = None;
    }

    /// The server's host pid, while it runs.
    pub(crate) async fn pid(&self) -> Option<u32> {
        self.child.lock().await.as_ref().and_then(Child::id)
    }
}

struct CancelOnDrop {
    lines: mpsc::UnboundedSender<String>,
    target: Option<u64>,
}

impl CancelOnDrop {
    fn fire(&mut self) {
        if let Some(target) = self.target.take() {
            let req = Request {
                id: u64::MAX - target,
                op: Op::Cancel { target },
            };
            if let Ok(line) = serde_json::to_string(&req) {
                let _ = self.lines.send(line);
            }
        }
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.fire();
    }
}

async fn read_replies<R: tokio::io::AsyncBufRead + Unpin>(mut out: R, pending: Pending) {
    let mut line = String::new();
    loop {
        line.clear();
        match out.read_line(&mut line).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let Ok(resp) = serde_json::from_str::<Response>(line.trim()) else {
            tracing::warn!(line = line.trim(), "unparsable sandbox reply");
            continue;
        };
        if let Some(tx) = lock(&pending).as_mut().and_then(|m| m.remove(&resp.id)) {
            let _ = tx.send(resp.reply);
        }
    }
    // Dropping the senders wakes every waiting call with "lost".
    lock(&pending).take();
}

async fn keep_tail<R: tokio::io::AsyncRead + Unpin>(mut err: R, tail: Arc<Mutex<VecDeque<u8>>>) {
    let mut buf = [0u8; 4096];
    loop {
        match err.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let mut t = lock(&tail);
                t.extend(&buf[..n]);
                while t.len() > STDERR_TAIL {
                    t.pop_front();
                }
            }
        }
    }
}
