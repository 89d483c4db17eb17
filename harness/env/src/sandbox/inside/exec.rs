//! Running one command inside the sandbox (server side).
//!
//! The command leads its own process group; the group is killed on timeout and on cancel.
//! When the command returns by itself, what it left in the background (`server &`, `nohup
//! cmd &`, `disown`) lives on if the request says so (`keep_background`: the trial's commands,
//! as under `docker exec`, where a solution's `python3 -m http.server &` serves the tests);
//! otherwise the group is killed then too (image build steps, the verifier). A process that
//! leaves its group (`setsid`) lives on either way. Whatever lives on ends at `kill_all` or
//! teardown, which the pid namespace makes total.

use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use super::user::{User, resolve_user};
use super::views::Views;
use crate::fsops::check_scope;
use crate::sandbox::protocol::{ErrorKind, ExecResult, ExecSpec, ReplyError, ServerSpec, View};
use geode_runtime::tools::workspace::OutputCapture;

/// How long to keep reading output once the command's group is dead; a process that left the
/// group can hold the pipes open forever.
const DRAIN_GRACE: Duration = Duration::from_secs(2);

/// How long to keep reading output once a command that keeps its background processes has
/// returned. What the command itself wrote is in the pipe by then (a writer blocks until
/// the pipe has room), so this only bounds the wait for background processes that still hold
/// the pipe; what they write later is not the command's output.
const BACKGROUND_DRAIN_GRACE: Duration = Duration::from_millis(500);

pub(crate) const DEFAULT_PATH: &str =
    "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

pub(crate) enum ExecEvent {
    Exited(std::io::Result<std::process::ExitStatus>),
    Cancel,
}

/// What a command needs of the server running it: the sandbox's spec, the views it enters,
/// and the table of running commands a cancel finds it in. A trait, so the command runner
/// does not depend on the server that calls it.
pub(crate) trait Host {
    fn spec(&self) -> &ServerSpec;
    fn views(&self) -> Result<&Views, ReplyError>;
    fn register(&self, id: u64, tx: mpsc::Sender<ExecEvent>);
    fn unregister(&self, id: u64);
}

fn fail(kind: ErrorKind, message: String) -> ReplyError {
    ReplyError { kind, message }
}

pub(crate) fn run(server: &dyn Host, id: u64, spec: ExecSpec) -> Result<ExecResult, ReplyError> {
    let cwd = resolve_cwd(server, &spec);
    if let Some(scope) = &spec.scope {
        check_scope(&cwd, scope)?;
    }
    let user = match spec.user.as_ref().or(server.spec().user.as_ref()) {
        Some(u) => Some(resolve_user(u)?),
        None => None,
    };
    let env = command_env(server, &spec, user.as_ref());

    let shell = spec
        .shell
        .clone()
        .unwrap_or_else(|| vec!["bash".into(), "-c".into()]);
    let Some((program, shell_args)) = shell.split_first() else {
        return Err(fail(ErrorKind::InvalidInput, "empty shell".into()));
    };
    let mut cmd = Command::new(program);
    cmd.args(shell_args)
        .arg(&spec.command)
        .env_clear()
        .envs(env)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let views = server.views()?;
    if matches!(spec.view, View::Verifier { .. }) {
        // What the agent left busy yields the CPU to the verifier; idle services keep theirs.
        views.lower_busy_tools();
    }
    let started = Instant::now();
    let mut child = views
        .spawn(&mut cmd, &spec.view, &cwd, user.as_ref())
        .map_err(|e| {
            fail(
                ErrorKind::of(&e),
                format!("could not start {program} in {cwd}: {e}"),
            )
        })?;
    let pgid = i32::try_from(child.id()).ok().map(Pid::from_raw);
    let kill_group = || {
        if let Some(pgid) = pgid {
            // ESRCH: the group is already empty.
            let _ = killpg(pgid, Signal::SIGKILL);
        }
    };
    // Threads count against the trial's pids as processes do: when the agent's leftovers hold
    // them all, the command fails with an answer instead of a panic that would leave its
    // caller waiting.
    let no_thread = |e: std::io::Error| {
        kill_group();
        fail(ErrorKind::of(&e), format!("could not watch {program}: {e}"))
    };
    let out_rx = pump(child.stdout.take(), spec.output_cap).map_err(no_thread)?;
    let err_rx = pump(child.stderr.take(), spec.output_cap).map_err(no_thread)?;

    let (tx, rx) = mpsc::channel();
    server.register(id, tx.clone());
    let waiter = std::thread::Builder::new().spawn(move || {
        let _ = tx.send(ExecEvent::Exited(child.wait()));
    });
    if let Err(e) = waiter {
        server.unregister(id);
        return Err(no_thread(e));
    }
    let deadline = started + Duration::from_millis(spec.timeout_ms);
    let (status, timed_out, cancelled) = wait_for(&rx, deadline, kill_group);
    server.unregister(id);
    let kept = spec.keep_background && !timed_out && !cancelled;
    if !kept {
        kill_group();
    }
    let status = status.map_err(|e| fail(ErrorKind::Other, format!("wait: {e}")))?;
    let grace = Instant::now()
        + if kept {
            BACKGROUND_DRAIN_GRACE
        } else {
            DRAIN_GRACE
        };
    let out = out_rx.finish(grace, spec.output_cap);
    let err = err_rx.finish(grace, spec.output_cap);
    let truncated = out.truncated() || err.truncated();
    Ok(ExecResult {
        exit_code: status.code(),
        signal: status.signal(),
        stdout: out.into_text(),
        stderr: err.into_text(),
        timed_out,
        cancelled,
        truncated,
        duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
    })
}

/// The command's working directory: the workdir, or `cwd` against it.
fn resolve_cwd(server: &dyn Host, spec: &ExecSpec) -> String {
    match &spec.cwd {
        None => server.spec().workdir.clone(),
        Some(dir) if dir.starts_with('/') => dir.clone(),
        Some(dir) => Path::new(&server.spec().workdir)
            .join(dir)
            .to_string_lossy()
            .into_owned(),
    }
}

/// The command's whole environment: the defaults a login would give, the user's, the
/// image's, then the request's (later values win).
fn command_env(server: &dyn Host, spec: &ExecSpec, user: Option<&User>) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = vec![
        ("PATH".into(), DEFAULT_PATH.into()),
        ("HOSTNAME".into(), server.spec().hostname.clone()),
        ("HOME".into(), "/root".into()),
    ];
    if let Some(u) = user {
        env.push(("HOME".into(), u.home.clone()));
        env.push(("USER".into(), u.name.clone()));
        env.push(("LOGNAME".into(), u.name.clone()));
    }
    env.extend(server.spec().env.iter().cloned());
    env.extend(spec.env.iter().cloned());
    env
}

/// Wait for the command's exit, killing its group at the deadline or on cancel; the exit
/// status, and whether it timed out or was cancelled.
fn wait_for(
    rx: &mpsc::Receiver<ExecEvent>,
    deadline: Instant,
    kill_group: impl Fn(),
) -> (std::io::Result<std::process::ExitStatus>, bool, bool) {
    let mut timed_out = false;
    let mut cancelled = false;
    let status = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let event = if timed_out || cancelled {
            rx.recv().map_err(|_| RecvTimeoutError::Disconnected)
        } else {
            rx.recv_timeout(left)
        };
        match event {
            Ok(ExecEvent::Exited(status)) => break status,
            Ok(ExecEvent::Cancel) => {
                cancelled = true;
                kill_group();
            }
            Err(RecvTimeoutError::Timeout) => {
                timed_out = true;
                kill_group();
            }
            Err(RecvTimeoutError::Disconnected) => {
                break Err(std::io::Error::other("lost the waiter thread"));
            }
        }
    };
    (status, timed_out, cancelled)
}

/// A pipe read to its end on a thread of its own, so a writer never meets a closed pipe
/// (a kept background server that logs each request would fail on EPIPE). What it read is
/// taken by [`Pump::finish`]; anything read after that is dropped.
struct Pump {
    ended: mpsc::Receiver<()>,
    capture: Arc<Mutex<Option<OutputCapture>>>,
}

fn pump<R: Read + Send + 'static>(pipe: Option<R>, cap: usize) -> std::io::Result<Pump> {
    let (tx, ended) = mpsc::channel();
    let capture = Arc::new(Mutex::new(Some(OutputCapture::new(cap))));
    let shared = Arc::clone(&capture);
    std::thread::Builder::new().spawn(move || {
        if let Some(mut pipe) = pipe {
            let mut chunk = [0u8; 8192];
            loop {
                match pipe.read(&mut chunk) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if let Some(c) = lock(&shared).as_mut() {
                            c.push(&chunk[..n]);
                        }
                    }
                }
            }
        }
        let _ = tx.send(());
    })?;
    Ok(Pump { ended, capture })
}

impl Pump {
    /// What was read by the end of the pipe or by `until`, whichever comes first.
    fn finish(self, until: Instant, cap: usize) -> OutputCapture {
        let _ = self
            .ended
            .recv_timeout(until.saturating_duration_since(Instant::now()));
        lock(&self.capture)
            .take()
            .unwrap_or_else(|| OutputCapture::new(cap))
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}
