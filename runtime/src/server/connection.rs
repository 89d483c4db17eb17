//! One IPC session per connection. Three tasks per connection, each owning its state:
//! - the writer owns the write half and serialises every outgoing message;
//! - the reader owns the read half and the table of pending approvals, and keeps reading while a
//!   turn runs, so an `approval_response` is never stuck behind the turn that waits for it; a
//!   `cancel` refuses every pending approval, so a turn cancelled at its prompt stops there;
//! - the session task (this function) owns the `AgenticLoop` and runs one turn at a time under
//!   the connection's session lane.
//!
//! The same code serves the REPL in-process (over an in-memory duplex pipe), so the REPL and
//! the thin client are one experience.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::protocol::{ClientMessage, PROTOCOL, ServerMessage, encode};
use super::{ServerError, Shared};
use crate::agent::{AgenticLoop, LoopEvent, TurnOutcome};
use crate::ids::SessionId;
use crate::session::{SessionConfig, create_session, resume_session};
use crate::tools::approval::{ApprovalAnswer, ApprovalRequest, Approver};

type Registration = (String, oneshot::Sender<ApprovalAnswer>);

/// Relays approval prompts to the client; an unanswered prompt is denied after the timeout.
struct RelayApprover {
    out: UnboundedSender<ServerMessage>,
    /// The prompts, relayed by the session task after the turn's events that came before them
    /// (the text and tool line the person is asked about), never ahead of them.
    asks: UnboundedSender<ServerMessage>,
    register: UnboundedSender<Registration>,
    timeout: std::time::Duration,
    next: AtomicU64,
}

#[async_trait]
impl Approver for RelayApprover {
    async fn ask(&self, request: &ApprovalRequest) -> ApprovalAnswer {
        let id = format!("ap-{}", self.next.fetch_add(1, Ordering::Relaxed) + 1);
        let (tx, rx) = oneshot::channel();
        // Registered before the request is written, so the answer always finds it.
        if self.register.send((id.clone(), tx)).is_err() {
            return ApprovalAnswer::No;
        }
        let mut detail = request.preview.clone();
        if let Some(reason) = &request.reason {
            detail = format!("{detail}\n(a hook asks: {reason})");
        }
        let sent = self.asks.send(ServerMessage::ApprovalRequest {
            approval_id: id.clone(),
            tool_name: request.tool_name.clone(),
            detail,
            safety_level: request.safety_level,
        });
        if sent.is_err() {
            return ApprovalAnswer::No;
        }
        match tokio::time::timeout(self.timeout, rx).await {
            Ok(Ok(answer)) => answer,
            // The connection closed: nobody can answer.
            Ok(Err(_)) => ApprovalAnswer::No,
            Err(_) => {
                let _ = self
                    .out
                    .send(ServerMessage::ApprovalTimeout { approval_id: id });
                ApprovalAnswer::No
            }
        }
    }

    async fn show(&self, request: &ApprovalRequest) {
        // Through `asks`: after the text and tool line it belongs to, as a prompt would be.
        let _ = self.asks.send(ServerMessage::AutoApproved {
            tool_name: request.tool_name.clone(),
            detail: request.preview.clone(),
        });
    }
}

async fn write_loop<W: AsyncWrite + Unpin>(mut wr: W, mut rx: UnboundedReceiver<ServerMessage>) {
    while let Some(msg) = rx.recv().await {
        if wr.write_all(encode(&msg).as_bytes()).await.is_err() || wr.flush().await.is_err() {
            break;
        }
    }
    let _ = wr.shutdown().await;
}

async fn read_loop<R: AsyncRead + Unpin>(
    rd: R,
    inbox: UnboundedSender<ClientMessage>,
    mut registrations: UnboundedReceiver<Registration>,
    out: UnboundedSender<ServerMessage>,
) {
    let mut lines = BufReader::new(rd).lines();
    let mut pending: HashMap<String, oneshot::Sender<ApprovalAnswer>> = HashMap::new();
    loop {
        tokio::select! {
                   Some((id, tx)) = registrations.recv() => {
                       pending.retain(|_, t| !t.is_closed());
                       pending.insert(id, tx);
                   }
                   line = lines.next_line() => {
                       let Ok(Some(line)) = line else { break };
                       if line.trim().is_empty() {
                           continue;
                       }
                       match serde_json::from_str::<ClientMessage>(&line) {
                           Ok(ClientMessage::ApprovalResponse { approval_id, decision }) => {
                               while let Ok((id, tx)) = registrations.try_recv() {
                                   pending.insert(id, tx);
                               }
                               let delivered = pending
                                   .remove(&approval_id)
                                   .is_some_and(|tx| tx.send(decision).is_ok());
                               if !delivered {
                                   let _ = out.send(ServerMessage::Error {
        ends_request: false,
                                       message: format!(
                                           "no pending approval {approval_id} (timed out or answered)"
                                       ),
                                   });
                               }
                           }
                           Ok(ClientMessage::Cancel) => {
                               // Cancelled first, so the turn sees the refusal as cancelled.
                               if inbox.send(ClientMessage::Cancel).is_err() {
                                   break;
                               }
                               while let Ok((id, tx)) = registrations.try_recv() {
                                   pending.insert(id, tx);
                               }
                               // Dropped: each waiting approver wakes with a refusal.
                               pending.clear();
                           }
                           Ok(msg) => {
                               if inbox.send(msg).is_err() {
                                   break;
                               }
                           }
                           Err(e) => {
                               let _ = out.send(ServerMessage::Error {
        ends_request: false,
                                   message: format!("bad message: {e}"),
                               });
                           }
                       }
                   }
               }
    }
    // Dropping `pending` wakes every waiting approver with a denial.
}

/// The live session of a connection and its event stream.
struct Live {
    lp: AgenticLoop,
    events: UnboundedReceiver<LoopEvent>,
    /// Restored by `/resume`: the next turn goes through `resume_turn`.
    resumed: bool,
    /// What the person's `!commands` since the last prompt printed, for the next prompt.
    shell_context: Vec<String>,
}

struct Conn {
    shared: Arc<Shared>,
    out: UnboundedSender<ServerMessage>,
    approver: Arc<RelayApprover>,
}

impl Conn {
    fn send(&self, msg: ServerMessage) {
        let _ = self.out.send(msg);
    }

    fn greet(&self, live: &Live) {
        self.send(ServerMessage::Session {
            protocol: PROTOCOL.into(),
            session_id: live.lp.session_id().to_string(),
            model: live.lp.model_id().to_string(),
            mode: self.shared.mode,
            model_unavailable: live.lp.model_unavailable().map(str::to_string),
        });
    }

    fn wire(&self, mut cfg: SessionConfig) -> (SessionConfig, UnboundedReceiver<LoopEvent>) {
        let (tx, rx) = unbounded_channel();
        cfg.approver = self.approver.clone();
        cfg.events = Some(tx);
        (cfg, rx)
    }

    fn open(&self) -> Result<Live, ServerError> {
        let (cfg, events) = self.wire(self.shared.factory.new_session()?);
        Ok(Live {
            lp: create_session(cfg)?,
            events,
            resumed: false,
            shell_context: Vec::new(),
        })
    }

    /// Switch to the session `/resume ARG` means (see `resume::resolve`), from `live`.
    fn resume(&self, arg: &str, live: &SessionId) -> Result<(Live, String), ServerError> {
        let factory = self.shared.factory.as_ref();
        let listed = super::resume::resumable(factory, live).unwrap_or_default();
        let id = super::resume::resolve(arg, &listed).map_err(ServerError::NoSuchSession)?;
        let (cfg, events) = self.wire(factory.resume(&id)?);
        let (lp, report) = resume_session(cfg)?;
        let text = format!(
            "resumed {} ({} messages{}{})",
            report.session_id,
            report.messages,
            if report.turn_in_progress {
                ", an interrupted turn: send a prompt to continue"
            } else {
                ""
            },
            if report.unresolved.is_empty() {
                String::new()
            } else {
                format!(
                    ", {} uncertain effects: see `geode receipts`",
                    report.unresolved.len()
                )
            }
        );
        Ok((
            Live {
                lp,
                events,
                resumed: true,
                shell_context: Vec::new(),
            },
            text,
        ))
    }
}

/// Serve one client on `stream` until it exits, disconnects, or the daemon drains.
pub async fn serve_connection<S>(stream: S, shared: Arc<Shared>) -> Result<(), ServerError>
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let (rd, wr) = tokio::io::split(stream);
    let (out, out_rx) = unbounded_channel();
    let writer = tokio::spawn(write_loop(wr, out_rx));
    let (inbox_tx, mut inbox) = unbounded_channel();
    let (reg_tx, reg_rx) = unbounded_channel();
    let (asks_tx, mut asks) = unbounded_channel();
    let reader = tokio::spawn(read_loop(rd, inbox_tx, reg_rx, out.clone()));
    let conn = Conn {
        approver: Arc::new(RelayApprover {
            out: out.clone(),
            asks: asks_tx,
            register: reg_tx,
            timeout: shared.approval_timeout,
            next: AtomicU64::new(0),
        }),
        shared,
        out,
    };
    let mut live = match conn.open() {
        Ok(l) => l,
        Err(e) => {
            conn.send(ServerMessage::Error {
                ends_request: true,
                message: e.to_string(),
            });
            drop(conn);
            // The reader holds a sender of the writer's queue: it must end before the writer
            // can, or a client that keeps its end open waits on both for ever.
            reader.abort();
            let _ = reader.await;
            let _ = writer.await;
            return Err(e);
        }
    };
    conn.greet(&live);
    let mut queued: VecDeque<ClientMessage> = VecDeque::new();
    let mut reason = "user_exit";
    loop {
        let msg = match queued.pop_front() {
            Some(m) => Some(m),
            None => tokio::select! {
                m = inbox.recv() => m,
                _ = conn.shared.draining.cancelled() => { reason = "daemon_drain"; None }
            },
        };
        match msg {
            None => break,
            Some(ClientMessage::Exit) => break,
            Some(ClientMessage::Prompt { text }) => {
                let talk = Talk {
                    inbox: &mut inbox,
                    asks: &mut asks,
                    queued: &mut queued,
                };
                if run_prompt(&conn, &mut live, &text, talk).await {
                    break;
                }
            }
            Some(ClientMessage::Command { name, args }) => {
                if name == "quit" || name == "exit" {
                    break;
                }
                if name == "resume" && args.trim().is_empty() {
                    let factory = conn.shared.factory.as_ref();
                    conn.send(super::resume::listing(factory, live.lp.session_id()));
                    continue;
                }
                let text = run_command(&conn, &mut live, &name, &args).await;
                conn.send(ServerMessage::CommandResult { name, text });
            }
            Some(ClientMessage::Shell { command }) => {
                let text = run_shell(&conn, &mut live, &command, &mut asks).await;
                conn.send(ServerMessage::CommandResult {
                    name: "!".into(),
                    text,
                });
            }
            Some(ClientMessage::Resume { session_id }) => {
                queued.push_front(ClientMessage::Command {
                    name: "resume".into(),
                    args: session_id,
                })
            }
            // Nothing runs: nothing to cancel. Capabilities change nothing yet.
            Some(ClientMessage::Cancel | ClientMessage::ClientCapability { .. }) => {}
            Some(ClientMessage::ApprovalResponse { .. }) => {}
        }
    }
    live.lp.close(reason).await;
    conn.shared
        .lanes
        .forget(live.lp.session_id().as_str())
        .await;
    drop(live);
    drop(conn);
    reader.abort();
    let _ = writer.await;
    Ok(())
}

/// Answer one slash command other than quit/exit and the `/resume` listing; `/clear` and
/// `/resume ARG` replace the live
/// session (closing the old one) and greet the client again.
async fn run_command(conn: &Conn, live: &mut Live, name: &str, args: &str) -> String {
    match name {
        "clear" | "resume" => {
            let next = if name == "clear" {
                conn.open().map(|l| (l, "new session".to_string()))
            } else {
                let live_id = live.lp.session_id().clone();
                conn.resume(args.trim(), &live_id)
            };
            match next {
                Ok((l, text)) => {
                    let mut old = std::mem::replace(live, l);
                    old.lp.close("user_exit").await;
                    conn.greet(live);
                    text
                }
                Err(e) => format!("error: {e}"),
            }
        }
        "compact" => super::commands::compact(&mut live.lp).await,
        "mode" => super::commands::permission_mode(&mut live.lp, args),
        "rewind" => super::commands::rewind(&mut live.lp, args),
        "model" | "effort" if !args.trim().is_empty() => {
            super::commands::switch(name, args, &mut live.lp, &conn.shared)
        }
        _ => super::commands::run(name, &live.lp, &conn.shared),
    }
}

/// `!COMMAND`: under the session's lane, a `bash` call through the session's pipeline. Its
/// output is the answer now, and goes to the model ahead of the next prompt.
async fn run_shell(
    conn: &Conn,
    live: &mut Live,
    command: &str,
    asks: &mut UnboundedReceiver<ServerMessage>,
) -> String {
    let key = live.lp.session_id().to_string();
    let Ok(_lane) = conn.shared.lanes.acquire(&key).await else {
        return "the daemon is draining: no new commands".into();
    };
    let Live {
        lp,
        events,
        shell_context,
        ..
    } = &mut *live;
    let cancel = CancellationToken::new();
    let run = lp.run_user_command(command, &cancel);
    tokio::pin!(run);
    // Relayed while the command runs, so its output shows as it comes.
    let record = loop {
        tokio::select! {
            // Events first: an approval prompt follows what was shown before it was asked.
            biased;
            Some(ev) = events.recv() => relay(conn, &ev),
            Some(ask) = asks.recv() => conn.send(ask),
            record = &mut run => break record,
        }
    };
    while let Ok(ev) = events.try_recv() {
        relay(conn, &ev);
    }
    let output = record.result.content;
    shell_context.push(format!(
        "The user ran `{command}` in the workspace ({}):\n{output}",
        record.outcome
    ));
    output
}

fn relay(conn: &Conn, ev: &LoopEvent) {
    if let Some(m) = ServerMessage::from_event(ev) {
        conn.send(m);
    }
}

/// What a turn hears from the client meanwhile, and the approval prompts it relays.
struct Talk<'a> {
    inbox: &'a mut UnboundedReceiver<ClientMessage>,
    asks: &'a mut UnboundedReceiver<ServerMessage>,
    /// Prompts and commands sent during the turn, run after it.
    queued: &'a mut VecDeque<ClientMessage>,
}

/// Run one turn under the session lane, relaying its events. Returns true when the client
/// asked to exit (or went away) during the turn. A client that went away does not cancel the
/// turn: it runs to its end in the session (the daemon's), for a later `/resume` to see.
async fn run_prompt(conn: &Conn, live: &mut Live, text: &str, talk: Talk<'_>) -> bool {
    let Talk {
        inbox,
        asks,
        queued,
    } = talk;
    let key = live.lp.session_id().to_string();
    let Ok(_lane) = conn.shared.lanes.acquire(&key).await else {
        conn.send(ServerMessage::Error {
            ends_request: true,
            message: "the daemon is draining: no new turns".into(),
        });
        return false;
    };
    if let Err(e) = live.lp.add_tools(conn.shared.factory.mcp_tools()) {
        tracing::warn!("MCP tools not added to the session: {e}");
    }
    let cancel = CancellationToken::new();
    let mut exit = false;
    let mut inbox_open = true;
    let resumed = std::mem::replace(&mut live.resumed, false);
    // Only what the person typed attaches files, not the output of their `!` commands.
    let text = super::attach::attach_files(text, live.lp.workspace().as_ref()).await;
    let text = with_shell_context(std::mem::take(&mut live.shell_context), &text);
    let text = text.as_str();
    let Live { lp, events, .. } = live;
    let outcome: Result<TurnOutcome, String> = {
        let turn = async {
            if resumed {
                lp.resume_turn(Some(text), &cancel)
                    .await
                    .map_err(|e| e.to_string())
            } else {
                Ok(lp.run_turn(text, &cancel).await)
            }
        };
        tokio::pin!(turn);
        loop {
            tokio::select! {
                // Events, then prompts (see `run_shell`); a cancel before the turn goes on.
                biased;
                Some(ev) = events.recv() => relay(conn, &ev),
                Some(ask) = asks.recv() => conn.send(ask),
                m = inbox.recv(), if inbox_open => match m {
                    None => {
                        inbox_open = false;
                        exit = true;
                    }
                    Some(ClientMessage::Exit) => {
                        inbox_open = false;
                        exit = true;
                        cancel.cancel();
                    }
                    Some(ClientMessage::Cancel) => cancel.cancel(),
                    // Serial per session: later prompts and commands wait for this turn.
                    Some(other) => queued.push_back(other),
                },
                o = &mut turn => break o,
            }
        }
    };
    while let Ok(ev) = events.try_recv() {
        relay(conn, &ev);
    }
    match outcome {
        Ok(o) => conn.send(ServerMessage::Result {
            text: o.text,
            rounds: o.rounds,
            tool_calls: o.tool_calls,
            termination: o.termination,
            model: lp.model_id().to_string(),
            system_prompt_hash: lp.system_prompt_hash().map(str::to_string),
            usage: o.usage,
        }),
        Err(message) => conn.send(ServerMessage::Error {
            message,
            ends_request: true,
        }),
    }
    exit
}

/// The prompt, after what the person's `!commands` printed since the last one.
fn with_shell_context(context: Vec<String>, prompt: &str) -> String {
    if context.is_empty() {
        return prompt.to_string();
    }
    format!("{}\n\n{prompt}", context.join("\n\n"))
}
