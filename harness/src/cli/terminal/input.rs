//! What the person types, read on a thread of its own (rustyline: editing, history and Tab
//! completion on a terminal; plain lines when stdin is a pipe), so a running turn keeps
//! rendering while the next line is edited.
//!
//! A message may span lines: a line ending in `\` goes on on the next one (the convention of
//! shells and of Claude Code, and one that works the same over a pipe, where no key chord
//! exists). Tab completes slash commands at the start of a line and `@path` mentions anywhere.

use std::borrow::Cow;
use std::io::Write as _;

use anyhow::Context as _;
use geode_runtime::server::commands::HELP;
use rustyline::completion::{Completer, FilenameCompleter, Pair};
use rustyline::error::ReadlineError;
use rustyline::highlight::Highlighter;
use rustyline::hint::Hinter;
use rustyline::history::DefaultHistory;
use rustyline::validate::Validator;
use rustyline::{Context, Editor, ExternalPrinter, Helper};
use tokio::sync::{mpsc, oneshot};

use super::super::assembly::geode_home;

/// What the input thread read.
pub enum Input {
    Line(String),
    Interrupted,
    Eof,
}

/// The prompt shown on the lines that continue a message.
const CONTINUATION_PROMPT: &str = "  ... ";

struct Request {
    prompt: String,
    /// A message (continued over lines ending in `\`, kept in history), not an approval answer.
    message: bool,
    reply: oneshot::Sender<Input>,
}

/// A line-editing thread; each request shows a prompt and answers with one line (or message).
pub struct LineInput {
    tx: mpsc::UnboundedSender<Request>,
    /// Prints above the line being edited and draws the prompt again under it (a terminal
    /// only; `None` on a pipe, where there is no prompt to keep).
    printer: Option<std::sync::Mutex<Box<dyn ExternalPrinter + Send>>>,
}

impl LineInput {
    pub fn start() -> anyhow::Result<Self> {
        let (tx, mut rx) = mpsc::unbounded_channel::<Request>();
        let mut editor: Editor<Completion, DefaultHistory> =
            Editor::new().context("starting the line editor")?;
        editor.set_helper(Some(Completion::default()));
        // Shift-Tab on an empty line switches the permission mode, as in Claude Code.
        let switch = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        editor.bind_sequence(
            rustyline::KeyEvent(rustyline::KeyCode::BackTab, rustyline::Modifiers::NONE),
            rustyline::EventHandler::Conditional(Box::new(ModeSwitch(switch.clone()))),
        );
        let printer = editor
            .create_external_printer()
            .ok()
            .map(|p| std::sync::Mutex::new(Box::new(p) as Box<dyn ExternalPrinter + Send>));
        let history = geode_home().join("history");
        let _ = editor.load_history(&history);
        std::thread::spawn(move || {
            while let Some(request) = rx.blocking_recv() {
                let mut input = if request.message {
                    read_message(&mut editor, &request.prompt)
                } else {
                    read_line(&mut editor, &request.prompt)
                };
                if switch.swap(false, std::sync::atomic::Ordering::SeqCst)
                    && matches!(&input, Input::Line(l) if l.is_empty())
                {
                    input = Input::Line(if request.message { "/mode" } else { "" }.into());
                }
                if let Input::Line(text) = &input
                    && request.message
                    && !text.trim().is_empty()
                {
                    let _ = editor.add_history_entry(text.as_str());
                    let _ = editor.append_history(&history);
                }
                if request.reply.send(input).is_err() {
                    break;
                }
            }
        });
        Ok(LineInput { tx, printer })
    }

    /// Show `text` (whole lines) while the prompt may be up: above it on a terminal, as shells
    /// show the notices of background jobs, plainly on a pipe.
    pub fn print_above(&self, text: &str) {
        let mut text = text.to_string();
        if !text.ends_with('\n') {
            text.push('\n');
        }
        if let Some(printer) = &self.printer {
            let mut printer = printer.lock().unwrap_or_else(|p| p.into_inner());
            if printer.print(text.clone()).is_ok() {
                return;
            }
        }
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(text.as_bytes());
        let _ = out.flush();
    }

    /// One message at the main prompt.
    pub async fn message(&self, prompt: &str) -> Input {
        self.request(prompt, true).await
    }

    /// One line, not kept in history (an approval's answer).
    pub async fn line(&self, prompt: &str) -> Input {
        self.request(prompt, false).await
    }

    async fn request(&self, prompt: &str, message: bool) -> Input {
        let (reply, rx) = oneshot::channel();
        let request = Request {
            prompt: prompt.to_string(),
            message,
            reply,
        };
        if self.tx.send(request).is_err() {
            return Input::Eof;
        }
        rx.await.unwrap_or(Input::Eof)
    }
}

/// Shift-Tab: on an empty line, ends it as a request for the next permission mode.
struct ModeSwitch(std::sync::Arc<std::sync::atomic::AtomicBool>);

impl rustyline::ConditionalEventHandler for ModeSwitch {
    fn handle(
        &self,
        _: &rustyline::Event,
        _: rustyline::RepeatCount,
        _: bool,
        ctx: &rustyline::EventContext,
    ) -> Option<rustyline::Cmd> {
        if !ctx.line().is_empty() {
            return Some(rustyline::Cmd::Noop);
        }
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
        Some(rustyline::Cmd::AcceptLine)
    }
}

fn read_line(editor: &mut Editor<Completion, DefaultHistory>, prompt: &str) -> Input {
    match editor.readline(prompt) {
        Ok(line) => Input::Line(line),
        Err(ReadlineError::Interrupted) => Input::Interrupted,
        Err(_) => Input::Eof,
    }
}

/// Lines up to one that does not end in `\`, joined by newlines. The input's end inside a
/// message sends what was typed so far; an interrupt drops it.
fn read_message(editor: &mut Editor<Completion, DefaultHistory>, prompt: &str) -> Input {
    let mut message = String::new();
    let mut prompt = prompt;
    loop {
        let line = match read_line(editor, prompt) {
            Input::Line(line) => line,
            Input::Eof if !message.is_empty() => return Input::Line(message),
            other => return other,
        };
        match continued(&line) {
            Some(head) => {
                message.push_str(head);
                message.push('\n');
                prompt = CONTINUATION_PROMPT;
            }
            None => {
                message.push_str(&line);
                return Input::Line(message);
            }
        }
    }
}

/// The line without its trailing `\` when it asks to go on (`\\` at the end is a literal one).
fn continued(line: &str) -> Option<&str> {
    let head = line.strip_suffix('\\')?;
    (!head.ends_with('\\')).then_some(head)
}

/// Tab completion: slash commands, then `@` file mentions.
#[derive(Default)]
struct Completion {
    files: FilenameCompleter,
}

/// The slash commands, as `/help` lists them.
fn slash_commands() -> impl Iterator<Item = &'static str> {
    HELP.lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|w| w.starts_with('/'))
}

/// Completions of a slash command typed at the start of the line, up to `pos`.
fn complete_command(line: &str, pos: usize) -> Option<Vec<String>> {
    let typed = &line[..pos];
    if !typed.starts_with('/') || typed.contains(char::is_whitespace) {
        return None;
    }
    Some(
        slash_commands()
            .filter(|c| c.starts_with(typed))
            .map(|c| format!("{c} "))
            .collect(),
    )
}

impl Completer for Completion {
    type Candidate = Pair;

    fn complete(
        &self,
        line: &str,
        pos: usize,
        _ctx: &Context<'_>,
    ) -> rustyline::Result<(usize, Vec<Pair>)> {
        if let Some(commands) = complete_command(line, pos) {
            let pairs = commands
                .into_iter()
                .map(|c| Pair {
                    display: c.trim_end().to_string(),
                    replacement: c,
                })
                .collect();
            return Ok((0, pairs));
        }
        // The word under the cursor, after `@`: `@` breaks words for the file completer.
        let word_start = line[..pos].rfind(char::is_whitespace).map_or(0, |i| i + 1);
        if line[word_start..pos].starts_with('@') {
            return self.files.complete_path(line, pos);
        }
        Ok((pos, Vec::new()))
    }
}

impl Hinter for Completion {
    type Hint = String;
}

impl Highlighter for Completion {
    fn highlight_prompt<'b, 's: 'b, 'p: 'b>(
        &'s self,
        prompt: &'p str,
        _default: bool,
    ) -> Cow<'b, str> {
        Cow::Borrowed(prompt)
    }
}

impl Validator for Completion {}

impl Helper for Completion {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trailing_backslash_continues_and_a_doubled_one_does_not() {
        assert_eq!(continued("first line\\"), Some("first line"));
        assert_eq!(continued("a path C:\\\\"), None);
        assert_eq!(continued("no continuation"), None);
    }

    #[test]
    fn slash_commands_complete_at_the_start_of_the_line_only() {
        assert_eq!(
            complete_command("/res", 4),
            Some(vec!["/resume ".to_string()])
        );
        assert_eq!(
            complete_command("/re", 3),
            Some(vec!["/rewind ".to_string(), "/resume ".to_string()])
        );
        let all = complete_command("/", 1).unwrap();
        assert!(all.contains(&"/help ".to_string()) && all.contains(&"/hooks ".to_string()));
        assert_eq!(complete_command("/model gpt", 10), None);
        assert_eq!(complete_command("fix /re", 7), None);
    }

    #[test]
    fn an_at_mention_completes_a_file_name() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("notes.md"), "").unwrap();
        let line = format!("read @{}/no", dir.path().display());
        let editor_history = DefaultHistory::new();
        let ctx = Context::new(&editor_history);
        let (start, pairs) = Completion::default()
            .complete(&line, line.len(), &ctx)
            .unwrap();
        assert_eq!(start, "read @".len());
        let names: Vec<&str> = pairs.iter().map(|p| p.replacement.as_str()).collect();
        assert_eq!(names, [format!("{}/notes.md", dir.path().display())]);
        let (_, none) = Completion::default().complete("read no", 7, &ctx).unwrap();
        assert!(none.is_empty());
    }
}
