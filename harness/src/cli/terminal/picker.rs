//! `/resume` without an id: the sessions one may resume, offered as a picker on a terminal
//! (Up/Down or k/j move, Enter resumes, Esc, Ctrl-C or q cancels, typing filters by title) and
//! as a numbered list otherwise, which `/resume N` picks from. The server sends the list
//! (`sessions`); the picker's choice goes back as `/resume ID`.

use std::io::{IsTerminal, Write};
use std::os::fd::AsFd;

use chrono::{DateTime, Utc};
use geode_runtime::ids::SessionId;
use geode_runtime::model::catalog::cost_text;
use geode_runtime::server::protocol::{ClientMessage, SessionEntry};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::termios::{SetArg, Termios, cfmakeraw, tcgetattr, tcsetattr};

use super::render::Screen;

/// How many sessions the picker shows at once; the window follows the highlighted one.
const WINDOW: usize = 10;

/// After an Esc byte, how long a following byte makes it an arrow key's sequence instead.
const ESC_SEQUENCE_MS: u8 = 50;

/// Offer `sessions` to pick from: the `/resume ID` to send for the one picked, or `None` when
/// nothing was picked (or the list was printed instead).
pub(in crate::cli) async fn offer(
    sessions: Vec<SessionEntry>,
    screen: &mut Screen,
) -> anyhow::Result<Option<ClientMessage>> {
    let now = Utc::now();
    if sessions.is_empty() {
        screen.line("no other session to resume");
        return Ok(None);
    }
    if !(std::io::stdin().is_terminal() && std::io::stdout().is_terminal()) {
        screen.line(&numbered(&sessions, now));
        return Ok(None);
    }
    let listed = sessions.clone();
    let picked = tokio::task::spawn_blocking(move || pick(Picker::new(sessions), now)).await?;
    let id = match picked {
        Ok(Some(id)) => id,
        Ok(None) => return Ok(None),
        // A terminal the picker cannot drive still gets the list `/resume N` picks from.
        Err(e) => {
            screen.line(&format!(
                "geode: no picker ({e})\n{}",
                numbered(&listed, now)
            ));
            return Ok(None);
        }
    };
    Ok(Some(ClientMessage::Command {
        name: "resume".into(),
        args: id.to_string(),
    }))
}

/// How long ago `updated_at` (RFC 3339) was, as a person says it.
fn relative(updated_at: &str, now: DateTime<Utc>) -> String {
    let Ok(then) = DateTime::parse_from_rfc3339(updated_at) else {
        return updated_at.to_string();
    };
    let secs = (now - then.with_timezone(&Utc)).num_seconds();
    let plural = |n: i64, unit: &str| format!("{n} {unit}{} ago", if n == 1 { "" } else { "s" });
    match secs {
        ..60 => "just now".into(),
        60..3600 => format!("{} min ago", secs / 60),
        3600..86_400 => plural(secs / 3600, "hour"),
        86_400..604_800 => plural(secs / 86_400, "day"),
        _ => then.format("%Y-%m-%d").to_string(),
    }
}

/// One session's line after its marker: title, last activity, turns, cost, folder.
fn row(entry: &SessionEntry, title_width: usize, now: DateTime<Utc>) -> String {
    let turns = match entry.turns {
        1 => "1 turn".to_string(),
        n => format!("{n} turns"),
    };
    format!(
        "{:<title_width$}  {:>12}  {turns:>9}  {}  {}",
        entry.title,
        relative(&entry.updated_at, now),
        cost_text(&entry.model, entry.cost_usd),
        entry.cwd
    )
}

fn title_width<'a>(entries: impl Iterator<Item = &'a SessionEntry>) -> usize {
    entries.map(|e| e.title.chars().count()).max().unwrap_or(0)
}

/// The list without a terminal: numbered for `/resume N`, ids for `/resume ID`.
fn numbered(sessions: &[SessionEntry], now: DateTime<Utc>) -> String {
    let width = title_width(sessions.iter());
    let mut lines: Vec<String> = sessions
        .iter()
        .enumerate()
        .map(|(i, e)| format!("{:>2}. {}  {}", i + 1, row(e, width, now), e.session_id))
        .collect();
    lines.push("/resume N or /resume ID continues one".into());
    lines.join("\n")
}

/// A key of the picker, decoded from the terminal's bytes.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Key {
    Up,
    Down,
    Enter,
    /// Esc or Ctrl-C.
    Cancel,
    Backspace,
    Char(char),
    Other,
}

/// What a key did.
#[derive(Debug, PartialEq)]
enum Step {
    Redraw,
    Chosen(SessionId),
    Cancelled,
}

/// The picker's state: the sessions, the filter typed so far, the highlighted line.
struct Picker {
    sessions: Vec<SessionEntry>,
    filter: String,
    /// Index into `visible()`.
    selected: usize,
}

impl Picker {
    fn new(sessions: Vec<SessionEntry>) -> Self {
        Picker {
            sessions,
            filter: String::new(),
            selected: 0,
        }
    }

    /// The sessions whose title contains the filter (ignoring case), in the list's order.
    fn visible(&self) -> Vec<&SessionEntry> {
        let filter = self.filter.to_lowercase();
        self.sessions
            .iter()
            .filter(|e| e.title.to_lowercase().contains(&filter))
            .collect()
    }

    fn key(&mut self, key: Key) -> Step {
        let shown = self.visible().len();
        match key {
            Key::Cancel => return Step::Cancelled,
            // j, k and q are keys until a filter is being typed; then they are letters.
            Key::Char('q') if self.filter.is_empty() => return Step::Cancelled,
            Key::Up => self.selected = self.selected.saturating_sub(1),
            Key::Char('k') if self.filter.is_empty() => {
                self.selected = self.selected.saturating_sub(1)
            }
            Key::Down => self.selected = (self.selected + 1).min(shown.saturating_sub(1)),
            Key::Char('j') if self.filter.is_empty() => {
                self.selected = (self.selected + 1).min(shown.saturating_sub(1))
            }
            Key::Enter => {
                if let Some(e) = self.visible().get(self.selected) {
                    return Step::Chosen(e.session_id.clone());
                }
            }
            Key::Backspace => {
                self.filter.pop();
                self.selected = 0;
            }
            Key::Char(c) if !c.is_control() => {
                self.filter.push(c);
                self.selected = 0;
            }
            Key::Char(_) | Key::Other => {}
        }
        Step::Redraw
    }

    /// The picker's lines: a header, then a window of sessions with the highlighted one
    /// marked (and in reverse video on the terminal).
    fn lines(&self, now: DateTime<Utc>) -> Vec<String> {
        let visible = self.visible();
        let mut lines = vec![if self.filter.is_empty() {
            "Resume a session: Up/Down move, Enter resumes, Esc cancels, type to filter".into()
        } else {
            format!("Resume a session whose title contains: {}", self.filter)
        }];
        if visible.is_empty() {
            lines.push("  (no title contains that)".into());
            return lines;
        }
        let width = title_width(visible.iter().copied());
        let first = self
            .selected
            .saturating_sub(WINDOW - 1)
            .min(visible.len().saturating_sub(WINDOW));
        for (i, e) in visible.iter().enumerate().skip(first).take(WINDOW) {
            let text = row(e, width, now);
            lines.push(if i == self.selected {
                format!("\x1b[7m> {text}\x1b[0m")
            } else {
                format!("  {text}")
            });
        }
        lines
    }
}

/// The terminal in raw mode (keys one by one, no echo), the cursor hidden and long lines cut
/// at the margin rather than wrapped (so every line drawn is one row to erase), until
/// dropped, also on an error.
struct RawMode {
    saved: Termios,
}

impl RawMode {
    fn enter() -> anyhow::Result<Self> {
        let stdin = std::io::stdin();
        let saved = tcgetattr(stdin.as_fd())?;
        let mut raw = saved.clone();
        cfmakeraw(&mut raw);
        tcsetattr(stdin.as_fd(), SetArg::TCSANOW, &raw)?;
        let mode = RawMode { saved };
        let mut out = std::io::stdout();
        out.write_all(b"\x1b[?7l\x1b[?25l")?;
        out.flush()?;
        Ok(mode)
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        let mut out = std::io::stdout();
        let _ = out.write_all(b"\x1b[?7h\x1b[?25h");
        let _ = out.flush();
        let _ = tcsetattr(std::io::stdin().as_fd(), SetArg::TCSANOW, &self.saved);
    }
}

/// Run the picker on the terminal until a session is chosen (`Some`) or it is cancelled.
/// Drawn below the cursor and erased afterwards, so the screen goes on where it was.
fn pick(mut picker: Picker, now: DateTime<Utc>) -> anyhow::Result<Option<SessionId>> {
    let _raw = RawMode::enter()?;
    let mut out = std::io::stdout();
    let mut drawn = draw(&mut out, &picker.lines(now), 0)?;
    let step = loop {
        match picker.key(read_key()?) {
            Step::Redraw => drawn = draw(&mut out, &picker.lines(now), drawn)?,
            done => break done,
        }
    };
    draw(&mut out, &[], drawn)?;
    Ok(match step {
        Step::Chosen(id) => Some(id),
        Step::Redraw | Step::Cancelled => None,
    })
}

/// Replace the `drawn` rows above the cursor with `lines`; the rows now drawn.
fn draw(out: &mut impl Write, lines: &[String], drawn: usize) -> std::io::Result<usize> {
    let mut frame = String::from("\r");
    if drawn > 0 {
        frame.push_str(&format!("\x1b[{drawn}A"));
    }
    frame.push_str("\x1b[J");
    for line in lines {
        frame.push_str(line);
        frame.push_str("\r\n");
    }
    out.write_all(frame.as_bytes())?;
    out.flush()?;
    Ok(lines.len())
}

/// One key from the terminal (raw mode): arrows arrive as `ESC [ A` or `ESC O A`; an Esc
/// with nothing after it is the Esc key.
fn read_key() -> anyhow::Result<Key> {
    let mut bytes = [0u8; 16];
    let n = read_stdin(&mut bytes[..1])?;
    if n == 0 {
        return Ok(Key::Cancel);
    }
    let key = match bytes[0] {
        0x1b if !more_within(ESC_SEQUENCE_MS)? => Key::Cancel,
        0x1b => {
            let n = read_stdin(&mut bytes[1..])?;
            decode_escape(&bytes[1..1 + n])
        }
        b'\r' | b'\n' => Key::Enter,
        0x03 => Key::Cancel,
        0x7f | 0x08 => Key::Backspace,
        b if b.is_ascii() => Key::Char(b as char),
        first => Key::Char(read_utf8(first)?),
    };
    Ok(key)
}

/// The key an escape sequence (after its ESC) stands for.
fn decode_escape(seq: &[u8]) -> Key {
    match seq {
        [b'[' | b'O', b'A', ..] => Key::Up,
        [b'[' | b'O', b'B', ..] => Key::Down,
        _ => Key::Other,
    }
}

/// The rest of a UTF-8 character whose first byte is `first`.
fn read_utf8(first: u8) -> anyhow::Result<char> {
    let len = match first {
        0xc0..=0xdf => 2,
        0xe0..=0xef => 3,
        0xf0..=0xf7 => 4,
        _ => return Ok(char::REPLACEMENT_CHARACTER),
    };
    let mut buf = [first, 0, 0, 0];
    let mut got = 1;
    while got < len {
        let n = read_stdin(&mut buf[got..len])?;
        if n == 0 {
            break;
        }
        got += n;
    }
    Ok(std::str::from_utf8(&buf[..got])
        .ok()
        .and_then(|s| s.chars().next())
        .unwrap_or(char::REPLACEMENT_CHARACTER))
}

/// Bytes from stdin, read again when a signal (a window resize) interrupts the wait.
fn read_stdin(buf: &mut [u8]) -> anyhow::Result<usize> {
    loop {
        match nix::unistd::read(std::io::stdin().as_fd(), buf) {
            Err(nix::errno::Errno::EINTR) => continue,
            done => return Ok(done?),
        }
    }
}

/// Whether another byte arrives on stdin within `ms` milliseconds.
fn more_within(ms: u8) -> anyhow::Result<bool> {
    let stdin = std::io::stdin();
    let mut fds = [PollFd::new(stdin.as_fd(), PollFlags::POLLIN)];
    loop {
        match poll(&mut fds, PollTimeout::from(ms)) {
            Err(nix::errno::Errno::EINTR) => continue,
            ready => return Ok(ready? > 0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: &str, title: &str, updated_at: &str, turns: u32) -> SessionEntry {
        SessionEntry {
            session_id: SessionId::new(id),
            title: title.into(),
            updated_at: updated_at.into(),
            turns,
            model: "scripted".into(),
            cost_usd: 0.0,
            cwd: "/work/project".into(),
        }
    }

    fn now() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-03-02T12:00:00Z")
            .unwrap()
            .with_timezone(&Utc)
    }

    fn sessions() -> Vec<SessionEntry> {
        vec![
            entry("s1", "write the release notes", "2026-03-02T11:58:30Z", 1),
            entry("s2", "fix the flaky test", "2026-03-02T09:00:00Z", 3),
            entry("s3", "keep the journal", "2026-02-20T09:00:00Z", 2),
        ]
    }

    #[test]
    fn last_activity_reads_as_time_ago() {
        let ago = |t| relative(t, now());
        assert_eq!(ago("2026-03-02T11:59:30.123456Z"), "just now");
        assert_eq!(ago("2026-03-02T11:58:30Z"), "1 min ago");
        assert_eq!(ago("2026-03-02T11:00:00Z"), "1 hour ago");
        assert_eq!(ago("2026-03-02T09:00:00Z"), "3 hours ago");
        assert_eq!(ago("2026-02-28T12:00:00Z"), "2 days ago");
        assert_eq!(ago("2026-02-20T09:00:00Z"), "2026-02-20");
        assert_eq!(ago("not a time"), "not a time");
    }

    #[test]
    fn without_a_terminal_the_list_is_numbered() {
        let text = numbered(&sessions(), now());
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[0].starts_with(" 1. write the release notes     1 min ago     1 turn  $0"),
            "{text}"
        );
        assert!(lines[1].starts_with(" 2. fix the flaky test "), "{text}");
        assert!(lines[1].contains("3 turns"), "{text}");
        assert!(lines[1].ends_with("  s2"), "{text}");
        assert_eq!(lines[3], "/resume N or /resume ID continues one");
    }

    #[test]
    fn arrows_and_j_k_move_enter_picks_and_esc_or_q_cancels() {
        let mut p = Picker::new(sessions());
        assert_eq!(p.key(Key::Up), Step::Redraw);
        assert_eq!(p.key(Key::Down), Step::Redraw);
        assert_eq!(p.key(Key::Char('j')), Step::Redraw);
        assert_eq!(p.key(Key::Char('j')), Step::Redraw);
        assert_eq!(p.key(Key::Char('k')), Step::Redraw);
        assert_eq!(p.key(Key::Enter), Step::Chosen(SessionId::new("s2")));
        assert_eq!(Picker::new(sessions()).key(Key::Cancel), Step::Cancelled);
        assert_eq!(Picker::new(sessions()).key(Key::Char('q')), Step::Cancelled);
        let lines = p.lines(now());
        assert!(
            lines[2].starts_with("\x1b[7m> fix the flaky test"),
            "{lines:?}"
        );
        assert!(
            lines[1].starts_with("  write the release notes"),
            "{lines:?}"
        );
    }

    #[test]
    fn typing_filters_by_title_and_then_j_k_q_are_letters() {
        let mut p = Picker::new(sessions());
        // Every title has a "t"; then "he j" is in one only, its "j" a letter, not a move.
        for c in "the j".chars() {
            assert_eq!(p.key(Key::Char(c)), Step::Redraw);
        }
        let lines = p.lines(now());
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(lines[0].ends_with("contains: the j"), "{lines:?}");
        assert!(lines[1].contains("keep the journal"), "{lines:?}");
        assert_eq!(p.key(Key::Char('q')), Step::Redraw);
        assert!(p.lines(now())[1].contains("no title contains"));
        assert_eq!(p.key(Key::Enter), Step::Redraw);
        for _ in 0.."the jq".len() {
            p.key(Key::Backspace);
        }
        for c in "FIX".chars() {
            p.key(Key::Char(c));
        }
        assert_eq!(p.key(Key::Enter), Step::Chosen(SessionId::new("s2")));
    }

    #[test]
    fn arrow_sequences_decode_in_both_cursor_modes() {
        assert_eq!(decode_escape(b"[A"), Key::Up);
        assert_eq!(decode_escape(b"OB"), Key::Down);
        assert_eq!(decode_escape(b"[C"), Key::Other);
    }

    #[test]
    fn the_window_follows_the_highlighted_line() {
        let many: Vec<SessionEntry> = (0..15)
            .map(|i| {
                entry(
                    &format!("s{i}"),
                    &format!("task {i}"),
                    "2026-03-02T11:00:00Z",
                    1,
                )
            })
            .collect();
        let mut p = Picker::new(many);
        for _ in 0..12 {
            p.key(Key::Down);
        }
        let lines = p.lines(now());
        assert_eq!(lines.len(), 1 + WINDOW);
        assert!(lines[WINDOW].starts_with("\x1b[7m> task 12"), "{lines:?}");
        assert!(lines[1].starts_with("  task 3 "), "{lines:?}");
    }
}
