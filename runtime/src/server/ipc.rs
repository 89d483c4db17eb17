//! The serve daemon's socket: bind `~/.geode/cli.sock` with mode 0600 from creation, refuse to
//! start while a live daemon answers on it, remove a stale one; accept connections (one IPC
//! session each) until told to drain, then let running turns finish and remove the socket.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use nix::sys::stat::{Mode, umask};
use tokio::net::{UnixListener, UnixStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::connection::serve_connection;
use super::{ServerError, Shared};

/// A bound daemon socket; the file is removed when the daemon ends.
pub struct DaemonSocket {
    listener: UnixListener,
    path: PathBuf,
}

fn socket_err(path: &Path) -> impl FnOnce(std::io::Error) -> ServerError + '_ {
    move |source| ServerError::Socket {
        path: path.to_path_buf(),
        source,
    }
}

impl DaemonSocket {
    /// Bind `path`. A socket file that accepts a connection belongs to a live daemon: refuse.
    /// One that refuses is stale (a daemon died without cleaning up): remove it.
    pub async fn bind(path: &Path) -> Result<Self, ServerError> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(socket_err(dir))?;
        }
        if path.exists() {
            if UnixStream::connect(path).await.is_ok() {
                return Err(ServerError::AlreadyRunning(path.to_path_buf()));
            }
            std::fs::remove_file(path).map_err(socket_err(path))?;
        }
        // The socket file takes its mode from the umask at bind(2); a chmod afterwards would
        // leave a window where another user could connect. The umask is process-wide, so this
        // runs at daemon start, before any other task creates files.
        let old = umask(Mode::from_bits_truncate(0o177));
        let bound = UnixListener::bind(path);
        umask(old);
        Ok(DaemonSocket {
            listener: bound.map_err(socket_err(path))?,
            path: path.to_path_buf(),
        })
    }

    /// The socket file it listens on.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Accept connections until `shutdown` fires; then drain: stop accepting, tell every
    /// connection to finish its running turn and close, wait up to `drain_timeout`, remove the
    /// socket. Returns the number of connections still open at the deadline.
    pub async fn serve(
        self,
        shared: Arc<Shared>,
        shutdown: CancellationToken,
        drain_timeout: Duration,
    ) -> usize {
        let tracker = TaskTracker::new();
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                accepted = self.listener.accept() => match accepted {
                    Ok((stream, _)) => {
                        let shared = shared.clone();
                        tracker.spawn(async move {
                            if let Err(e) = serve_connection(stream, shared).await {
                                tracing::warn!("connection ended: {e}");
                            }
                        });
                    }
                    Err(e) => tracing::warn!("accept failed: {e}"),
                },
            }
        }
        // No new connections from here on: the socket goes first so a new daemon can start.
        let _ = std::fs::remove_file(&self.path);
        drop(self.listener);
        shared.draining.cancel();
        shared.lanes.close();
        tracker.close();
        if tokio::time::timeout(drain_timeout, tracker.wait())
            .await
            .is_err()
        {
            return tracker.len();
        }
        0
    }
}
