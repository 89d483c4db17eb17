//! What a person watching a turn sees: the reply as it streams (Markdown on a terminal), the
//! model's thinking dimmed, a running command's output under its call (`live_tail.rs`), a
//! spinner with the elapsed time while the model or a tool works, and each turn's tokens and
//! cost. Without a terminal (plain mode) the text goes out as is and nothing transient is
//! drawn, so pipes and logs get clean lines.

use std::io::{IsTerminal, Write};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use geode_runtime::conversation::Usage;
use geode_runtime::model::catalog::cost_text;

use super::live_tail::LiveTail;
use super::markdown::Markdown;

const DIM: &str = "\x1b[2m";
const RESET: &str = "\x1b[0m";
const FRAMES: [char; 10] = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];

/// The spinner's state, shared by the drawing task and every write to the terminal: a write
/// first erases the spinner, so the two never interleave on one line.
#[derive(Default)]
struct SpinState {
    /// Drawn while set: what is awaited, and since when.
    waiting: Option<(String, Instant)>,
    drawn: bool,
    frame: usize,
}

impl SpinState {
    fn erase(&mut self, out: &mut impl Write) {
        if std::mem::take(&mut self.drawn) {
            let _ = out.write_all(b"\r\x1b[2K");
        }
    }
}

/// The terminal of one client.
pub struct Screen {
    tty: bool,
    spin: Arc<Mutex<SpinState>>,
    ticker: Option<tokio::task::JoinHandle<()>>,
    markdown: Markdown,
    /// Thinking is being shown (dimmed); text starts on a new line after it.
    thinking: bool,
    /// This round's text was shown as it streamed; its whole copy is not shown again.
    streamed: bool,
    turn_started: Option<Instant>,
    /// The running command's output shown so far.
    tail: LiveTail,
}

impl Screen {
    pub fn new() -> Self {
        let tty = std::io::stdout().is_terminal();
        let spin = Arc::new(Mutex::new(SpinState::default()));
        let ticker = tty.then(|| tokio::spawn(tick(spin.clone())));
        Screen {
            tty,
            spin,
            ticker,
            markdown: Markdown::new(tty),
            thinking: false,
            streamed: false,
            turn_started: None,
            tail: LiveTail::default(),
        }
    }

    /// Write `text` to stdout, erasing the spinner first; `stop` also ends the wait it shows.
    fn write(&self, text: &str, stop: bool) {
        let mut spin = self.spin.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = std::io::stdout().lock();
        spin.erase(&mut out);
        if stop {
            spin.waiting = None;
        }
        let _ = out.write_all(text.as_bytes());
        let _ = out.flush();
    }

    /// A whole line, after whatever was streaming.
    pub fn line(&mut self, text: &str) {
        self.end_reply();
        let rest = self.tail.end(self.tty);
        self.write(&format!("{rest}{text}\n"), true);
    }

    /// A piece of a running call's output, under its tool line; the spinner goes on.
    pub fn tool_output(&mut self, call_id: &str, text: &str) {
        let shown = self.tail.push(call_id, text, self.tty);
        if !shown.is_empty() {
            self.write(&shown, false);
        }
    }

    /// Show the spinner (on a terminal) until the next output: the model or a tool works.
    pub fn wait(&mut self, what: &str) {
        let since = *self.turn_started.get_or_insert_with(Instant::now);
        if self.tty {
            let mut spin = self.spin.lock().unwrap_or_else(|p| p.into_inner());
            spin.waiting = Some((what.to_string(), since));
        }
    }

    pub fn text_delta(&mut self, text: &str) {
        if std::mem::take(&mut self.thinking) {
            self.write(&format!("{RESET}\n"), true);
        }
        self.streamed = true;
        let shown = self.markdown.push(text);
        self.write(&shown, true);
    }

    /// Thinking is shown dimmed on a terminal; plain mode leaves it out, as it always did.
    pub fn thinking_delta(&mut self, text: &str) {
        if !self.tty {
            return;
        }
        let start = if self.thinking { "" } else { DIM };
        self.thinking = true;
        self.write(&format!("{start}{text}"), true);
    }

    /// A round's whole text: shown unless its deltas already were.
    pub fn round_text(&mut self, text: &str) {
        if !self.streamed {
            self.text_delta(text);
        }
        self.end_reply();
    }

    /// End the streamed reply's line and styles.
    pub fn end_reply(&mut self) {
        let mut rest = self.markdown.finish();
        if std::mem::take(&mut self.thinking) {
            rest.insert_str(0, &format!("{RESET}\n"));
        }
        self.streamed = false;
        if !rest.is_empty() {
            self.write(&rest, true);
        }
    }

    /// The turn's closing line: how it ended, its tokens and cost, and on a terminal how long
    /// it took.
    pub fn turn_done(&mut self, summary: &str, usage: &Usage, model: &str) {
        let took = self.turn_started.take().map(|t| t.elapsed());
        let mut line = format!(
            "-- {summary}; {} tokens in, {} out, {}",
            usage.input_tokens,
            usage.output_tokens + usage.reasoning_tokens,
            cost_text(model, usage.cost_usd)
        );
        if let (true, Some(took)) = (self.tty, took) {
            line.push_str(&format!(", {:.1}s", took.as_secs_f64()));
        }
        self.line(&line);
        if let (true, Some(took)) = (self.tty, took)
            && took >= notify_after()
        {
            // A bell, and OSC 9 (a desktop notification in the terminals that show one): the
            // person who went elsewhere during a long turn learns it ended.
            let mut out = std::io::stdout().lock();
            let _ = write!(out, "\x07\x1b]9;geode: turn ended: {summary}\x07");
            let _ = out.flush();
        }
    }
}

/// How long a turn runs before its end is notified: `GEODE_NOTIFY_AFTER_SECS`, 30 by default.
fn notify_after() -> Duration {
    std::env::var("GEODE_NOTIFY_AFTER_SECS")
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map_or(Duration::from_secs(30), Duration::from_secs_f64)
}

impl Drop for Screen {
    fn drop(&mut self) {
        if let Some(t) = self.ticker.take() {
            t.abort();
        }
    }
}

/// Redraws the spinner ten times a second while something is awaited.
async fn tick(spin: Arc<Mutex<SpinState>>) {
    let mut every = tokio::time::interval(Duration::from_millis(100));
    loop {
        every.tick().await;
        let mut state = spin.lock().unwrap_or_else(|p| p.into_inner());
        let Some((what, since)) = state.waiting.clone() else {
            continue;
        };
        state.frame = (state.frame + 1) % FRAMES.len();
        let frame = FRAMES[state.frame];
        let mut out = std::io::stdout().lock();
        let _ = write!(
            out,
            "\r\x1b[2K{DIM}{frame} {what} {:.1}s{RESET}",
            since.elapsed().as_secs_f64()
        );
        let _ = out.flush();
        state.drawn = true;
    }
}
