//! The thin client: renders a session served over the IPC protocol. `geode --connect` talks to
//! the daemon's socket; the REPL (repl.rs) talks to an in-process server through the same code,
//! so both look and behave the same.
//!
//! Input comes from a line-editing thread (input.rs). Ctrl-C during a turn cancels the turn, not
//! the program, and so does Ctrl-C at an approval prompt (as in Claude Code and Codex: the call
//! is refused and no further round runs); at the main prompt it clears the line.

use super::exit::Exit;
use std::path::PathBuf;

use anyhow::Context;
use geode_runtime::policy::SafetyLevel;
use geode_runtime::server::protocol::{ClientMessage, ServerMessage, encode};
use geode_runtime::tools::approval::ApprovalAnswer;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, Lines};

use super::terminal::input::{Input, LineInput};
use super::terminal::render::Screen;

async fn send<W: AsyncWrite + Unpin>(wr: &mut W, msg: &ClientMessage) -> anyhow::Result<()> {
    wr.write_all(encode(msg).as_bytes()).await?;
    wr.flush().await?;
    Ok(())
}

/// Drive one session: prompts and slash commands in, rendered output out. `first` is sent
/// before anything typed (`--continue`'s `/resume ID`). `early`: draw the prompt at once,
/// while the session is still being set up (its stores created); what is typed meanwhile
/// waits in the pipe, and the greeting is printed above the prompt when it arrives.
pub async fn drive<R, W>(
    rd: R,
    mut wr: W,
    input: &LineInput,
    mut first: Option<String>,
    early: bool,
) -> anyhow::Result<Exit>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut lines = BufReader::new(rd).lines();
    send(
        &mut wr,
        &ClientMessage::ClientCapability {
            approvals: true,
            version: Some(env!("CARGO_PKG_VERSION").into()),
        },
    )
    .await?;
    // `waiting`: a prompt or command was sent and its answer has not arrived yet (at first, the
    // greeting). `/clear` and `/resume` greet again before their own answer: only the first
    // greeting ends a wait.
    let mut waiting = !early;
    let mut greeted = early;
    let mut closed = false;
    let mut screen = Screen::new();
    loop {
        if !waiting {
            let read = match first.take() {
                Some(line) => Input::Line(line),
                None => read_meanwhile(input, &mut lines, &mut closed).await?,
            };
            if closed {
                screen.line("geode: the session closed");
                return Ok(Exit::Failed);
            }
            match send_next(read, &mut wr).await? {
                Sent::Nothing => continue,
                Sent::Quit => return Ok(Exit::Success),
                Sent::Request => waiting = true,
            }
        }
        let line = tokio::select! {
            l = lines.next_line() => l?,
            _ = tokio::signal::ctrl_c() => {
                screen.line("^C cancelling the turn");
                send(&mut wr, &ClientMessage::Cancel).await?;
                continue;
            }
        };
        let Some(line) = line else {
            screen.line("geode: the session closed");
            return Ok(Exit::Failed);
        };
        let msg: ServerMessage = match serde_json::from_str(&line) {
            Ok(m) => m,
            Err(e) => {
                screen.line(&format!("geode: unreadable message ({e}): {line}"));
                continue;
            }
        };
        if show(msg, input, &mut wr, &mut screen, &mut greeted).await? {
            waiting = false;
        }
    }
}

/// The person's next message at the main prompt. What the session says meanwhile (with no
/// request out, only the greeting of a session still being set up, or an error) is printed
/// above the prompt; `closed` is set when the session ends meanwhile.
async fn read_meanwhile<R: AsyncRead + Unpin>(
    input: &LineInput,
    lines: &mut Lines<BufReader<R>>,
    closed: &mut bool,
) -> anyhow::Result<Input> {
    let reading = input.message("geode> ");
    tokio::pin!(reading);
    loop {
        tokio::select! {
            read = &mut reading => return Ok(read),
            line = lines.next_line(), if !*closed => match line? {
                Some(line) => input.print_above(&notice(&line)),
                None => {
                    // The line editor cannot be stopped mid-line (it owns the terminal's mode
                    // until it returns), so say how to leave rather than leave a dead prompt.
                    input.print_above("geode: the session ended; press Enter or Ctrl-D to leave");
                    *closed = true;
                }
            },
        }
    }
}

/// A message that arrived with no request out, as the line printed for it.
fn notice(line: &str) -> String {
    match serde_json::from_str(line) {
        Ok(ServerMessage::Session {
            session_id,
            model,
            model_unavailable,
            ..
        }) => greeting(&session_id, &model, model_unavailable.as_deref()),
        Ok(ServerMessage::Error { message, .. }) => format!("geode: {message}"),
        Ok(other) => format!("geode: unexpected while idle: {other:?}"),
        Err(e) => format!("geode: unreadable message ({e}): {line}"),
    }
}

/// The line a session starts with; when its model cannot answer, why, and what to do, first.
fn greeting(session_id: &str, model: &str, unavailable: Option<&str>) -> String {
    let line = format!("geode: session {session_id} (model {model}); /help for commands");
    match unavailable {
        Some(why) => format!("{why}\n{line}"),
        None => line,
    }
}

/// What the user's next line sent.
enum Sent {
    /// Nothing (an empty line, an interrupt): ask again.
    Nothing,
    /// A prompt or a command, whose answer is awaited.
    Request,
    /// `/quit` or `/exit` (or the input's end): the session is left.
    Quit,
}

/// Sends what was `read` (a queued line or the user's) as a prompt or a slash command.
async fn send_next<W: AsyncWrite + Unpin>(read: Input, wr: &mut W) -> anyhow::Result<Sent> {
    let text = match read {
        Input::Line(l) => l,
        Input::Interrupted => return Ok(Sent::Nothing),
        Input::Eof => "/quit".into(),
    };
    let text = text.trim();
    if text.is_empty() {
        return Ok(Sent::Nothing);
    }
    if let Some(command) = text.strip_prefix('!') {
        let command = command.trim().to_string();
        if command.is_empty() {
            return Ok(Sent::Nothing);
        }
        send(wr, &ClientMessage::Shell { command }).await?;
        return Ok(Sent::Request);
    }
    if let Some(cmd) = text.strip_prefix('/') {
        let (name, args) = cmd.split_once(' ').unwrap_or((cmd, ""));
        if name == "quit" || name == "exit" {
            send(wr, &ClientMessage::Exit).await?;
            return Ok(Sent::Quit);
        }
        let msg = ClientMessage::Command {
            name: name.into(),
            args: args.trim().into(),
        };
        send(wr, &msg).await?;
    } else {
        send(wr, &ClientMessage::Prompt { text: text.into() }).await?;
    }
    Ok(Sent::Request)
}

/// Renders one message from the daemon (and answers an approval request); `true` when it
/// ends the wait for an answer.
async fn show<W: AsyncWrite + Unpin>(
    msg: ServerMessage,
    input: &LineInput,
    wr: &mut W,
    screen: &mut Screen,
    greeted: &mut bool,
) -> anyhow::Result<bool> {
    match msg {
        ServerMessage::Session {
            session_id,
            model,
            model_unavailable,
            ..
        } => {
            screen.line(&greeting(&session_id, &model, model_unavailable.as_deref()));
            if !*greeted {
                *greeted = true;
                return Ok(true);
            }
        }
        ServerMessage::TextDelta { text } => screen.text_delta(&text),
        ServerMessage::ThinkingDelta { text } => screen.thinking_delta(&text),
        ServerMessage::Stream { text } => screen.round_text(&text),
        ServerMessage::RoundStart { .. } => {
            screen.end_reply();
            screen.wait("waiting for the model");
        }
        ServerMessage::ToolStart { tool, input, .. } => {
            screen.line(&format!("  > {tool} {input}"));
            screen.wait(&format!("running {tool}"));
        }
        ServerMessage::ToolOutputDelta { call_id, text } => screen.tool_output(&call_id, &text),
        ServerMessage::HookDecision {
            event,
            hook,
            tool,
            decision,
            reason,
        } => {
            let on = tool.map(|t| format!(" on {t}")).unwrap_or_default();
            let why = reason.map(|r| format!(": {r}")).unwrap_or_default();
            screen.line(&format!("  ! {event} hook {hook}{on}: {decision}{why}"));
        }
        ServerMessage::ToolEnd {
            tool,
            outcome,
            is_error,
            ..
        } => screen.line(&format!(
            "  < {tool} {outcome}{}",
            if is_error { " (error)" } else { "" }
        )),
        ServerMessage::ApprovalRequest {
            approval_id,
            tool_name,
            detail,
            safety_level,
        } => {
            screen.line(&render_preview(&detail));
            let msg = match ask_approval(input, &tool_name, safety_level).await {
                Some(decision) => ClientMessage::ApprovalResponse {
                    approval_id,
                    decision,
                },
                // The daemon refuses every call awaiting an answer when the turn is cancelled.
                None => {
                    screen.line("^C cancelling the turn");
                    ClientMessage::Cancel
                }
            };
            send(wr, &msg).await?;
        }
        ServerMessage::AutoApproved { detail, .. } => screen.line(&render_preview(&detail)),
        ServerMessage::ApprovalTimeout { .. } => {
            screen.line("geode: no answer in time: the call was denied")
        }
        ServerMessage::Result {
            termination,
            rounds,
            tool_calls,
            model,
            usage,
            ..
        } => {
            let summary = format!("{termination}, {rounds} rounds, {tool_calls} tool calls");
            screen.turn_done(&summary, &usage, &model);
            return Ok(true);
        }
        ServerMessage::CommandResult { text, .. } => {
            screen.line(&text);
            return Ok(true);
        }
        ServerMessage::Sessions { sessions } => {
            // Picked: `/resume ID` goes out and its answer is due; otherwise the wait ends.
            let Some(resume) = super::terminal::picker::offer(sessions, screen).await? else {
                return Ok(true);
            };
            send(wr, &resume).await?;
            return Ok(false);
        }
        ServerMessage::Error {
            message,
            ends_request,
        } => {
            screen.line(&format!("geode: {message}"));
            return Ok(ends_request);
        }
        ServerMessage::TurnEnd {
            error: Some(error), ..
        } => screen.line(&format!("geode: {error}")),
        ServerMessage::Tokens { .. } | ServerMessage::TurnEnd { .. } => {}
    }
    Ok(false)
}

/// The user's answer to an approval request, asked until it is one the daemon takes; `None`
/// when the person interrupted (or the input ended): the whole turn is to be cancelled.
async fn ask_approval(
    input: &LineInput,
    tool_name: &str,
    safety_level: SafetyLevel,
) -> Option<ApprovalAnswer> {
    let prompt = format!("Allow {tool_name} ({safety_level})? [y/n/a, n: why] ");
    loop {
        match input.line(&prompt).await {
            Input::Line(l) => match l.parse() {
                Ok(answer) => break Some(answer),
                Err(_) => println!(
                    "answer y (yes), n (no), a (always for {tool_name}) or \
                     n: WHY (no, and tell the model why)"
                ),
            },
            Input::Interrupted | Input::Eof => break None,
        }
    }
}

/// An approval's preview as the terminal shows it: a diff's added lines green and removed ones
/// red when stdout is a terminal, plain text otherwise.
fn render_preview(detail: &str) -> String {
    use std::io::IsTerminal;
    if !std::io::stdout().is_terminal() {
        return detail.to_string();
    }
    detail
        .lines()
        .map(|line| match line.as_bytes().first() {
            Some(b'+') => format!("\x1b[32m{line}\x1b[0m"),
            Some(b'-') => format!("\x1b[31m{line}\x1b[0m"),
            Some(b'@') => format!("\x1b[36m{line}\x1b[0m"),
            _ => line.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// `geode --connect`: the daemon on `socket`.
pub async fn run(socket: PathBuf, first: Option<String>) -> anyhow::Result<Exit> {
    let stream = tokio::net::UnixStream::connect(&socket)
        .await
        .with_context(|| format!("no geode daemon answers on {}", socket.display()))?;
    let (rd, wr) = stream.into_split();
    let input = LineInput::start()?;
    drive(rd, wr, &input, first, false).await
}
