//! A running command's output as a person watching the REPL sees it: on a terminal the last
//! few lines, dimmed and indented under the tool call, redrawn in place as they come (a build's
//! progress, not megabytes of scrollback); without one, every line, indented and plain.

use std::collections::VecDeque;

/// Lines of a running command kept on the terminal.
const LIVE_LINES: usize = 5;
/// Characters of one line shown; the terminal clips at its edge anyway (wrap is off while
/// drawing, so each line is exactly one row and the redraw knows how far to go up).
const LINE_CHARS: usize = 200;
const INDENT: &str = "    ";
const DIM: &str = "\x1b[2m";
const RESET: &str = "\x1b[0m";

/// The output shown so far of the call that is running.
#[derive(Debug, Default)]
pub(in crate::cli) struct LiveTail {
    call_id: String,
    /// The last complete lines, at most [`LIVE_LINES`].
    lines: VecDeque<String>,
    /// The line still being written.
    partial: String,
    /// Complete lines that scrolled off the top of the kept ones.
    earlier: usize,
    /// Terminal rows the last redraw drew, to go back up over.
    rows: usize,
}

impl LiveTail {
    /// What to write for a piece of `call_id`'s output: on a terminal (`tty`) the redrawn tail,
    /// else the lines it completed.
    pub(in crate::cli) fn push(&mut self, call_id: &str, text: &str, tty: bool) -> String {
        if self.call_id != call_id {
            *self = LiveTail {
                call_id: call_id.to_string(),
                ..LiveTail::default()
            };
        }
        self.partial.push_str(text);
        let mut plain = String::new();
        while let Some(end) = self.partial.find('\n') {
            let line = clean(&self.partial[..end]);
            self.partial.drain(..=end);
            if tty {
                self.lines.push_back(line);
                if self.lines.len() > LIVE_LINES {
                    self.lines.pop_front();
                    self.earlier += 1;
                }
            } else {
                plain.push_str(&format!("{INDENT}{line}\n"));
            }
        }
        if tty { self.redraw() } else { plain }
    }

    /// The call's output is over, or other output follows: what is drawn stays, and plain mode
    /// gets the unfinished last line.
    pub(in crate::cli) fn end(&mut self, tty: bool) -> String {
        let rest = if !tty && !self.partial.is_empty() {
            format!("{INDENT}{}\n", clean(&self.partial))
        } else {
            String::new()
        };
        *self = LiveTail::default();
        rest
    }

    fn redraw(&mut self) -> String {
        let mut out = String::new();
        if self.rows > 0 {
            // To the first row drawn last time, and clear from there down.
            out.push_str(&format!("\x1b[{}F\x1b[J", self.rows));
        }
        out.push_str("\x1b[?7l");
        let mut rows = Vec::new();
        if self.earlier > 0 {
            rows.push(format!("... {} earlier lines", self.earlier));
        }
        rows.extend(self.lines.iter().cloned());
        if !self.partial.is_empty() {
            rows.push(clean(&self.partial));
        }
        for row in &rows {
            out.push_str(&format!("{DIM}{INDENT}{row}{RESET}\n"));
        }
        out.push_str("\x1b[?7h");
        self.rows = rows.len();
        out
    }
}

/// A line as it can be shown in one row: what a carriage return overwrote is gone (progress
/// bars), escape sequences and other control characters are dropped, tabs become spaces.
fn clean(line: &str) -> String {
    let line = line.rsplit('\r').find(|l| !l.is_empty()).unwrap_or("");
    let mut out = String::new();
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\x1b' => {
                // CSI: ESC [ parameters, then one final byte in @..~.
                if chars.next() == Some('[') {
                    for c in chars.by_ref() {
                        if ('@'..='~').contains(&c) {
                            break;
                        }
                    }
                }
            }
            '\t' => out.push(' '),
            c if c.is_control() => {}
            c => out.push(c),
        }
        if out.chars().count() >= LINE_CHARS {
            break;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_mode_prints_each_completed_line_indented() {
        let mut tail = LiveTail::default();
        assert_eq!(tail.push("c", "one\ntw", false), "    one\n");
        assert_eq!(tail.push("c", "o\n", false), "    two\n");
        assert_eq!(tail.push("c", "three", false), "");
        assert_eq!(tail.end(false), "    three\n");
    }

    #[test]
    fn a_terminal_keeps_the_last_lines_and_redraws_over_the_previous_ones() {
        let mut tail = LiveTail::default();
        let first = tail.push("c", "a\n", true);
        assert!(
            !first.contains("\x1b[1F"),
            "nothing to go back over: {first:?}"
        );
        let text: String = (0..10).map(|i| format!("line {i}\n")).collect();
        let shown = tail.push("c", &text, true);
        assert!(shown.starts_with("\x1b[1F\x1b[J"), "{shown:?}");
        assert!(shown.contains("... 6 earlier lines"), "{shown:?}");
        assert!(
            shown.contains("    line 9") && !shown.contains("line 4\x1b"),
            "{shown:?}"
        );
        assert_eq!(tail.rows, 1 + LIVE_LINES);
        // A new call starts below, never erasing the last one's lines.
        let next = tail.push("d", "x\n", true);
        assert!(!next.contains("F\x1b[J"), "{next:?}");
    }

    #[test]
    fn progress_bars_and_colours_are_flattened_to_one_row() {
        assert_eq!(clean("10%\r50%\r\x1b[32mdone\x1b[0m\tok"), "done ok");
        assert_eq!(clean(&"x".repeat(500)).len(), LINE_CHARS);
    }
}
