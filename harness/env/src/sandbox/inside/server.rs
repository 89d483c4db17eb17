//! `geode __sandbox-server SPEC_JSON` and `geode __sandbox-agent SPEC_JSON`: the two
//! processes of a sandbox that talk to the harness.
//!
//! The server builds the sandbox ([`super::setup`]): namespaces, mounts, the namespace's init,
//! and the agent, then pivots into the new root and reports `ready`. A process that unshared
//! CLONE_NEWPID may not create threads, so the server stays single-threaded and only waits:
//! the agent (a child, inside the pid namespace) serves the [`protocol`](crate::sandbox::protocol) on
//! the stdin/stdout it inherited, every request but `cancel` and `kill_all` on a thread of its
//! own. When the agent exits (`shutdown`, or end of input), the server closes init's pipe and
//! kills it, and the kernel ends whatever is left in the namespace. No async runtime: the
//! binary calls these before it starts one.

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::path::Path;
use std::process::ExitCode;
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex, OnceLock};

use super::exec::{self, ExecEvent, Host};
use super::init;
use super::setup;
use super::views::Views;
use crate::fsops;
use crate::sandbox::protocol::{
    ErrorKind, FAREWELL_ID, Network, Op, ReadyInfo, Reply, ReplyError, Request, Response,
    SERVER_SCHEMA, ServerSpec,
};

/// What every request handler of the agent shares.
pub(crate) struct Server {
    pub spec: ServerSpec,
    out: Mutex<std::io::Stdout>,
    /// Running execs by request id, to deliver `cancel`.
    running: Mutex<HashMap<u64, Sender<ExecEvent>>>,
    /// Made at the first request, on the main thread, before any other thread exists.
    views: OnceLock<Result<Views, String>>,
    /// `cgroup.procs` of the agent's view's group, open for writing (see [`Views`]).
    tool_cgroups: Vec<std::os::fd::OwnedFd>,
    /// The watch of the layer while a verifier runs, or why it could not start.
    watch: Mutex<Option<Result<super::watch::LayerWatch, String>>>,
}

impl exec::Host for Server {
    fn spec(&self) -> &ServerSpec {
        &self.spec
    }

    fn views(&self) -> Result<&Views, ReplyError> {
        match self.views.get() {
            Some(Ok(views)) => Ok(views),
            Some(Err(e)) => Err(ReplyError {
                kind: ErrorKind::Other,
                message: e.clone(),
            }),
            None => Err(ReplyError {
                kind: ErrorKind::Other,
                message: "the sandbox's views are not ready".into(),
            }),
        }
    }

    fn register(&self, id: u64, tx: Sender<ExecEvent>) {
        self.lock_running().insert(id, tx);
    }

    fn unregister(&self, id: u64) {
        self.lock_running().remove(&id);
    }
}

impl Server {
    /// At the hand-over, start watching `layer` (nothing to report yet). After the verifier,
    /// the verifier's inputs written meanwhile that are gone by the end, absolute: not in
    /// `present`, nor renamed into a place that is (an installer writes `curl.dpkg-new` and
    /// renames it to `curl`; a wrapper planted and removed leaves nothing).
    fn watch_layer(
        &self,
        layer: &Path,
        exempt: &str,
        when: crate::Judgment,
        present: &[String],
    ) -> Vec<String> {
        let mut watch = match self.watch.lock() {
            Ok(w) => w,
            Err(poisoned) => poisoned.into_inner(),
        };
        match when {
            // Only a layer on the trial's own disk: a file-system mark on a layer kept on the
            // host's disk (`--base host`) would watch everything the host writes there.
            crate::Judgment::HandOver if self.spec.disk.is_none() => Vec::new(),
            crate::Judgment::HandOver => {
                *watch = Some(super::watch::LayerWatch::start(layer).map_err(|e| e.to_string()));
                Vec::new()
            }
            crate::Judgment::AfterVerifier => match watch.take() {
                Some(Ok(running)) => {
                    let seen = running.finish();
                    let touched: Vec<String> =
                        seen.touched.iter().map(|p| format!("/{p}")).collect();
                    let stayed = |path: &str| {
                        // Follow renames a few steps: a -> b -> c.
                        let mut at = path.trim_start_matches('/').to_string();
                        for _ in 0..8 {
                            if present.contains(&format!("/{at}")) {
                                return true;
                            }
                            match seen.renamed.get(&at) {
                                Some(next) => at = next.clone(),
                                None => return false,
                            }
                        }
                        false
                    };
                    crate::evidence::verifier_inputs_among(&touched, exempt)
                        .into_iter()
                        .filter(|p| !stayed(p))
                        .collect()
                }
                // A watch that could not start is named as a finding of its own.
                Some(Err(e)) => vec![format!(
                    "(what was written while the verifier ran was not watched: {e})"
                )],
                None => Vec::new(),
            },
        }
    }

    fn send(&self, id: u64, reply: Reply) {
        let line = match serde_json::to_string(&Response { id, reply }) {
            Ok(line) => line,
            Err(e) => format!(
                r#"{{"id":{id},"reply":"error","kind":"other","message":"encode reply: {e}"}}"#
            ),
        };
        let mut out = match self.out.lock() {
            Ok(out) => out,
            Err(poisoned) => poisoned.into_inner(),
        };
        // A broken stdout means the harness is gone; end of stdin will end us shortly.
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    }

    fn lock_running(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Sender<ExecEvent>>> {
        match self.running.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// Kill every process but ours and init's; the tool view's init is not counted.
    fn kill_all(&self) -> usize {
        let count = init::kill_all_but_me();
        match self.views.get() {
            Some(Ok(_)) => count.saturating_sub(1),
            _ => count,
        }
    }
}

fn send_line(reply: &Response) {
    if let Ok(line) = serde_json::to_string(reply) {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    }
}

fn parse_spec(spec_json: &str) -> Result<ServerSpec, String> {
    let spec: ServerSpec =
        serde_json::from_str(spec_json).map_err(|e| format!("bad sandbox spec: {e}"))?;
    if spec.schema != SERVER_SCHEMA {
        return Err(format!(
            "sandbox spec schema {:?}, expected {SERVER_SCHEMA}",
            spec.schema
        ));
    }
    Ok(spec)
}

pub(crate) fn server_main(spec_json: &str) -> ExitCode {
    let fail = |message: String| {
        let reply = Reply::Error(ReplyError {
            kind: ErrorKind::Other,
            message,
        });
        send_line(&Response { id: 0, reply });
        ExitCode::from(3)
    };
    let spec = match parse_spec(spec_json) {
        Ok(spec) => spec,
        Err(message) => return fail(message),
    };
    // A session of its own, with no controlling terminal, before anything of the sandbox
    // exists: `geode` started from a person's shell would otherwise leave that terminal as
    // every trial's `/dev/tty`, where TIOCSTI types commands into the person's shell. setsid
    // fails only for a process group leader, which the harness never makes of this process.
    if let Err(e) = nix::unistd::setsid() {
        return fail(format!("leave the harness's session (setsid): {e}"));
    }
    let mut entered = match setup::enter(&spec) {
        Ok(entered) => entered,
        Err(message) => return fail(message),
    };
    let ready = ReadyInfo {
        init_pid: entered.init.id(),
        pid_namespace: entered.pid_namespace.clone(),
        notes: std::mem::take(&mut entered.notes),
    };
    send_line(&Response {
        id: 0,
        reply: Reply::Ready(ready),
    });
    let status = entered.agent.wait();
    // The agent ends by itself (exit 0) on `shutdown` or when the harness goes. Killed with
    // init still alive, the killer was inside: tell the harness before anything ends.
    if let Ok(status) = status
        && !status.success()
        && !exits_within(&mut entered.init, std::time::Duration::from_millis(200))
    {
        send_line(&Response {
            id: FAREWELL_ID,
            reply: Reply::Error(ReplyError {
                kind: ErrorKind::Other,
                message: format!(
                    "a process inside the sandbox ended its agent ({status}) while its init \
                     lived"
                ),
            }),
        });
    }
    drop(entered.init_in);
    let _ = entered.init.kill();
    let _ = entered.init.wait();
    ExitCode::SUCCESS
}

/// Whether `child` exits within `grace` (an init killed from outside takes its namespace down
/// first, so its agent may be seen dead a moment before it).
fn exits_within(child: &mut std::process::Child, grace: std::time::Duration) -> bool {
    let deadline = std::time::Instant::now() + grace;
    loop {
        if !matches!(child.try_wait(), Ok(None)) {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

pub(crate) fn agent_main(spec_json: &str, ready_fd: Option<&str>) -> ExitCode {
    init::hide_executable();
    let spec = match parse_spec(spec_json) {
        Ok(spec) => spec,
        Err(message) => {
            // This is the agent process's own main: its standard error is its log.
            #[allow(clippy::print_stderr)]
            {
                eprintln!("sandbox agent: {message}");
            }
            return ExitCode::from(3);
        }
    };
    // The agent's view's groups, opened while the host's cgroup tree is in reach: the
    // server pivots once we say we run. One that cannot be opened leaves that view in the
    // sandbox's group, sharing its limit.
    let tool_cgroups: Vec<std::os::fd::OwnedFd> = spec
        .tool_cgroup_procs
        .iter()
        .filter_map(|procs| {
            std::fs::OpenOptions::new()
                .write(true)
                .open(procs)
                .ok()
                .map(Into::into)
        })
        .collect();
    // Running our own code means the loader is done with the host's libraries: the server
    // may pivot now.
    if let Some(fd) = ready_fd.and_then(|fd| fd.parse::<i32>().ok()) {
        use std::io::Write;
        use std::os::fd::FromRawFd;
        // SAFETY: the server handed this descriptor to us alone (`setup::start_agent`), and
        // it is owned, used and closed here.
        #[allow(unsafe_code)]
        let mut ready = unsafe { std::fs::File::from_raw_fd(fd) };
        let _ = ready.write_all(b"1");
    }
    if spec.userns {
        fsops::give_created_entries_to_root();
    }
    let server = Arc::new(Server {
        spec,
        out: Mutex::new(std::io::stdout()),
        running: Mutex::new(HashMap::new()),
        views: OnceLock::new(),
        tool_cgroups,
        watch: Mutex::new(None),
    });
    serve(&server);
    // End of input without `shutdown`: the harness is gone; take everything down.
    init::kill_all_but_me();
    ExitCode::SUCCESS
}

fn serve(server: &Arc<Server>) {
    let stdin = std::io::stdin();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { return };
        if line.trim().is_empty() {
            continue;
        }
        let request: Request = match serde_json::from_str(&line) {
            Ok(r) => r,
            Err(e) => {
                server.send(
                    u64::MAX,
                    Reply::Error(ReplyError {
                        kind: ErrorKind::InvalidInput,
                        message: format!("bad request: {e}"),
                    }),
                );
                continue;
            }
        };
        let id = request.id;
        // Before the first command, a read of the sandbox's files (the logs brought back at
        // teardown of a sandbox that never ran one) is answered here, on this thread: the
        // views are not made for it, and no thread exists to keep them from being made later.
        if server.views.get().is_none() && answers_without_views(&request.op) {
            let reply = handle(server, id, request.op);
            server.send(id, reply);
            continue;
        }
        // The sandbox has pivoted (requests come after `ready`) and no thread exists yet; a
        // sandbox that only ever shuts down needs no views.
        if !matches!(request.op, Op::Shutdown) {
            let raw_sockets = server.spec.network != Network::Allowlist;
            let userns = server.spec.userns;
            let groups: Vec<i32> = server
                .tool_cgroups
                .iter()
                .map(std::os::fd::AsRawFd::as_raw_fd)
                .collect();
            server.views.get_or_init(|| {
                Views::prepare(raw_sockets, userns, groups, server.spec.rlimit_nproc)
            });
        }
        match request.op {
            Op::Cancel { target } => {
                if let Some(tx) = server.lock_running().get(&target) {
                    let _ = tx.send(ExecEvent::Cancel);
                }
                server.send(id, Reply::Done);
            }
            Op::KillAll => {
                let count = match server.views() {
                    Ok(views) => views.kill_tools(),
                    Err(_) => init::kill_all_but_me(),
                };
                server.send(id, Reply::Killed { count });
            }
            Op::Shutdown => {
                let count = server.kill_all();
                server.send(id, Reply::Killed { count });
                std::process::exit(0);
            }
            op => {
                let worker = Arc::clone(server);
                let spawned = std::thread::Builder::new().spawn(move || {
                    let reply = handle(&worker, id, op);
                    worker.send(id, reply);
                });
                // The trial's pids are all held (threads count as processes): answer rather
                // than panic, which would take the sandbox down.
                if let Err(e) = spawned {
                    server.send(
                        id,
                        Reply::Error(ReplyError {
                            kind: ErrorKind::of(&e),
                            message: format!("no thread for the request: {e}"),
                        }),
                    );
                }
            }
        }
    }
}

/// Reads of the sandbox's own files: no process of the trial is involved.
fn answers_without_views(op: &Op) -> bool {
    matches!(
        op,
        Op::ListDir { scope: None, .. } | Op::ReadChunk { .. } | Op::ReadFile { scope: None, .. }
    )
}

fn handle(server: &Server, id: u64, op: Op) -> Reply {
    let result = match op {
        Op::Exec(spec) => exec::run(server, id, spec).map(Reply::Exec),
        Op::ReadFile { path, scope } => fsops::read_file(&path, scope.as_deref()),
        Op::ReadChunk { path, offset, len } => fsops::read_chunk(&path, offset, len),
        Op::WriteFile {
            path,
            data_b64,
            scope,
        } => fsops::write_file(&path, &data_b64, scope.as_deref()),
        Op::ListDir { path, scope } => fsops::list_dir(&path, scope.as_deref()),
        Op::Install { from, to, merge } => fsops::install(&from, &to, merge),
        Op::ChangedInputs { exempt, when } => {
            let layer = std::path::Path::new(crate::sandbox::protocol::UPPER_MOUNT);
            let judge = || {
                if !layer.is_dir() {
                    return crate::ChangedInputs::default();
                }
                let present = crate::evidence::verifier_inputs_changed(layer, &exempt);
                let vanished = server.watch_layer(layer, &exempt, when, &present);
                crate::ChangedInputs { present, vanished }
            };
            // Judged with the agent's processes stopped: nothing it left running can move a
            // file out of the walk's way while the layer is read, nor write between the walk
            // and the start of the watch.
            let paths = match server.views() {
                Ok(views) => views.with_tools_stopped(judge),
                Err(_) => judge(),
            };
            Ok(Reply::Changed(paths))
        }
        Op::UnroutedPackets => Ok(Reply::Counted {
            count: crate::sandbox::netns::unrouted_packets(),
        }),
        Op::Computer { display, action } => computer(&display, &action),
        Op::Cancel { .. } | Op::KillAll | Op::Shutdown => Err(ReplyError {
            kind: ErrorKind::InvalidInput,
            message: "handled inline".into(),
        }),
    };
    result.unwrap_or_else(Reply::Error)
}

/// The display is the sandbox's own Xvfb: this process sees its socket in the sandbox's
/// `/tmp/.X11-unix`, which no process outside the sandbox can reach.
fn computer(
    display: &str,
    action: &geode_runtime::tools::computer::ComputerAction,
) -> Result<Reply, ReplyError> {
    match geode_runtime::tools::computer::x11::perform(Some(display), action) {
        Ok(shot) => Ok(Reply::Screenshot {
            png_b64: crate::sandbox::protocol::encode(&shot.png),
            width: shot.width,
            height: shot.height,
            screen_width: shot.screen_width,
            screen_height: shot.screen_height,
        }),
        Err(e) => Err(ReplyError {
            kind: ErrorKind::Other,
            message: e.to_string(),
        }),
    }
}
