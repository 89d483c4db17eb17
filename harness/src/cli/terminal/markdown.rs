//! Markdown for a terminal, rendered as it streams: a reply is shown as its pieces arrive, so
//! the renderer never takes back what it wrote. Prose goes out character by character (only a
//! line's first few marker characters wait, to tell a heading, a list item or a code fence from
//! text); code blocks go out a whole line at a time, with a small keyword highlighter. Without
//! a terminal the text passes through as is (plain mode).
//!
//! Our own small renderer rather than a CommonMark parser: a parser needs the whole document
//! (or re-renders it), and what a reply uses is a handful of line and inline forms.

const BOLD: &str = "\x1b[1m";
const NOT_BOLD: &str = "\x1b[22m";
const DIM: &str = "\x1b[2m";
const CODE: &str = "\x1b[36m";
const NOT_CODE: &str = "\x1b[39m";
const KEYWORD: &str = "\x1b[35m";
const STRING: &str = "\x1b[32m";
const NUMBER: &str = "\x1b[33m";
const RESET: &str = "\x1b[0m";

/// Words coloured in code blocks, across the languages replies show most.
const KEYWORDS: &[&str] = &[
    "as", "async", "await", "break", "class", "const", "continue", "def", "do", "done", "elif",
    "else", "enum", "export", "false", "fi", "fn", "for", "from", "func", "function", "if", "impl",
    "import", "in", "let", "loop", "match", "mod", "mut", "None", "null", "pub", "return", "self",
    "Self", "static", "struct", "then", "trait", "true", "True", "False", "type", "use", "var",
    "while", "with", "yield",
];

/// A line's opening characters that may still turn out to be a marker (`#`, `-`, `` ``` ``,
/// `>`, `1.`), and how many of them are waited for at most.
fn is_marker(c: char) -> bool {
    matches!(c, '#' | '`' | '-' | '*' | '+' | '>' | ' ' | '.' | '0'..='9')
}
const MAX_HEAD: usize = 8;

/// The streaming renderer of one reply.
#[derive(Debug, Default)]
pub struct Markdown {
    styled: bool,
    /// The line's opening characters, held while they may be a marker; `None` past them.
    head: Option<String>,
    /// Inside a fenced code block: the line so far.
    code: Option<String>,
    /// The current line opens a code block: shown dimmed whole.
    fence: bool,
    /// The line's own style (a heading, a quote), reset at its end.
    line_style: bool,
    inline_code: bool,
    bold: bool,
    /// A `*` that may be the first of `**`.
    star: bool,
    /// Something was written since the last newline.
    mid_line: bool,
}

impl Markdown {
    /// `styled`: a terminal (colours and markers rendered); otherwise text passes as is.
    pub fn new(styled: bool) -> Self {
        Markdown {
            styled,
            head: Some(String::new()),
            ..Markdown::default()
        }
    }

    /// Take the next piece of the reply; returns what to write now.
    pub fn push(&mut self, text: &str) -> String {
        let mut out = String::new();
        if !self.styled {
            out.push_str(text);
            if let Some(last) = text.chars().last() {
                self.mid_line = last != '\n';
            }
            return out;
        }
        for c in text.chars() {
            self.char(c, &mut out);
        }
        out
    }

    /// The reply ended: write out what was held and end its line.
    pub fn finish(&mut self) -> String {
        let held = |s: &Option<String>| s.as_deref().is_some_and(|s| !s.is_empty());
        let pending = self.mid_line || self.star || held(&self.head) || held(&self.code);
        let out = match (pending, self.styled) {
            (false, _) => String::new(),
            (true, true) => self.push("\n"),
            (true, false) => "\n".to_string(),
        };
        *self = Markdown::new(self.styled);
        out
    }

    fn char(&mut self, c: char, out: &mut String) {
        if let Some(line) = &mut self.code {
            if c != '\n' {
                line.push(c);
                return;
            }
            let line = std::mem::take(line);
            self.code_line(&line, out);
            return;
        }
        if let Some(head) = &mut self.head {
            if c != '\n' && is_marker(c) && head.len() < MAX_HEAD {
                head.push(c);
                return;
            }
            let head = self.head.take().unwrap_or_default();
            if head.trim_start().starts_with("```") {
                // The rest of the fence line (its language) is held with it.
                self.fence = true;
                self.code = Some(head);
                self.char(c, out);
                return;
            }
            self.line_start(&head, out);
        }
        self.inline(c, out);
    }

    /// A line's opening: a heading is bold, a list item gets a bullet, a quote is dimmed.
    fn line_start(&mut self, head: &str, out: &mut String) {
        let trimmed = head.trim_start();
        let indent = &head[..head.len() - trimmed.len()];
        let hashes = trimmed.chars().take_while(|&c| c == '#').count();
        let mut rest = head;
        if hashes > 0 && trimmed[hashes..].starts_with(' ') {
            out.push_str(BOLD);
            self.line_style = true;
        } else if ["- ", "* ", "+ "].iter().any(|m| trimmed.starts_with(m)) {
            out.push_str(indent);
            out.push('•');
            rest = &trimmed[1..];
        } else if trimmed.starts_with('>') {
            out.push_str(DIM);
            self.line_style = true;
        }
        for c in rest.chars() {
            self.inline(c, out);
        }
    }

    /// Prose: `code` in colour, **bold** in bold, markers dropped.
    fn inline(&mut self, c: char, out: &mut String) {
        if std::mem::take(&mut self.star) {
            if c == '*' {
                out.push_str(if self.bold { NOT_BOLD } else { BOLD });
                self.bold = !self.bold;
                return;
            }
            out.push('*');
        }
        match c {
            '\n' => {
                if self.line_style || self.inline_code || self.bold {
                    out.push_str(RESET);
                }
                self.line_style = false;
                self.inline_code = false;
                self.bold = false;
                self.mid_line = false;
                self.head = Some(String::new());
                out.push('\n');
                return;
            }
            '*' if !self.inline_code => self.star = true,
            '`' => {
                out.push_str(if self.inline_code { NOT_CODE } else { CODE });
                self.inline_code = !self.inline_code;
            }
            _ => out.push(c),
        }
        self.mid_line = true;
    }

    /// One whole line of a code block or of its fences, highlighted.
    fn code_line(&mut self, line: &str, out: &mut String) {
        let closing = !self.fence && line.trim_start().starts_with("```");
        if std::mem::take(&mut self.fence) || closing {
            out.push_str(DIM);
            out.push_str(line);
            out.push_str(RESET);
        } else {
            highlight(line, out);
        }
        out.push('\n');
        if closing {
            self.code = None;
            self.head = Some(String::new());
        } else {
            self.code = Some(String::new());
        }
    }
}

/// A code line: keywords, strings and numbers coloured; a comment line dimmed.
fn highlight(line: &str, out: &mut String) {
    let trimmed = line.trim_start();
    if trimmed.starts_with("//") || trimmed.starts_with("# ") || trimmed == "#" {
        out.push_str(DIM);
        out.push_str(line);
        out.push_str(RESET);
        return;
    }
    let mut chars = line.char_indices().peekable();
    while let Some((start, c)) = chars.next() {
        if c == '"' || c == '\'' {
            let mut end = line.len();
            for (i, d) in chars.by_ref() {
                if d == c {
                    end = i + d.len_utf8();
                    break;
                }
            }
            out.push_str(STRING);
            out.push_str(&line[start..end]);
            out.push_str(NOT_CODE);
        } else if c.is_alphanumeric() || c == '_' {
            let mut end = start + c.len_utf8();
            while let Some(&(i, d)) = chars.peek() {
                if !(d.is_alphanumeric() || d == '_') {
                    break;
                }
                end = i + d.len_utf8();
                chars.next();
            }
            let word = &line[start..end];
            let colour = if KEYWORDS.contains(&word) {
                Some(KEYWORD)
            } else if c.is_ascii_digit() {
                Some(NUMBER)
            } else {
                None
            };
            match colour {
                Some(colour) => {
                    out.push_str(colour);
                    out.push_str(word);
                    out.push_str(NOT_CODE);
                }
                None => out.push_str(word),
            }
        } else {
            out.push(c);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPLY: &str = "# Plan\nSome **bold** and `code` here.\n- one\n  * two\n> quoted\n\
                         ```rust\nfn main() { let x = \"hi\"; }\n// note\n```\nafter\n";

    fn whole(text: &str) -> String {
        let mut md = Markdown::new(true);
        let mut out = md.push(text);
        out.push_str(&md.finish());
        out
    }

    #[test]
    fn lines_and_inline_forms_are_styled() {
        let out = whole(REPLY);
        assert!(
            out.starts_with(&format!("{BOLD}# Plan{RESET}\n")),
            "{out:?}"
        );
        assert!(
            out.contains(&format!(
                "Some {BOLD}bold{NOT_BOLD} and {CODE}code{NOT_CODE} here."
            )),
            "{out:?}"
        );
        assert!(out.contains("• one\n  • two\n"), "{out:?}");
        assert!(out.contains(&format!("{DIM}> quoted{RESET}\n")), "{out:?}");
        assert!(out.contains(&format!("{DIM}```rust{RESET}\n")), "{out:?}");
        assert!(
            out.contains(&format!(
                "{KEYWORD}fn{NOT_CODE} main() {{ {KEYWORD}let{NOT_CODE} x = {STRING}\"hi\"{NOT_CODE}; }}\n"
            )),
            "{out:?}"
        );
        assert!(out.contains(&format!("{DIM}// note{RESET}\n")), "{out:?}");
        // The closing fence ends the block: what follows is prose again.
        assert!(
            out.ends_with(&format!("{DIM}```{RESET}\nafter\n")),
            "{out:?}"
        );
    }

    #[test]
    fn pieces_render_as_the_whole_does() {
        let expected = whole(REPLY);
        let mut md = Markdown::new(true);
        let mut out = String::new();
        for c in REPLY.chars() {
            out.push_str(&md.push(&c.to_string()));
        }
        out.push_str(&md.finish());
        assert_eq!(out, expected);
    }

    #[test]
    fn prose_is_written_as_it_arrives() {
        let mut md = Markdown::new(true);
        assert_eq!(md.push("Hello wor"), "Hello wor");
        assert_eq!(md.push("ld"), "ld");
        assert_eq!(md.finish(), "\n");
    }

    #[test]
    fn plain_mode_passes_text_as_is() {
        let mut md = Markdown::new(false);
        assert_eq!(md.push("# Plan\n**x**"), "# Plan\n**x**");
        assert_eq!(md.finish(), "\n");
        assert_eq!(md.push("done\n"), "done\n");
        assert_eq!(md.finish(), "");
    }
}
