//! A table as text cells, and its terminal and Markdown forms. Every output format starts from
//! the same [`Table`]s, so the terminal, Markdown and HTML reports can never disagree on a
//! number.

/// Column alignment: text left, numbers right.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    /// Left-aligned, for text.
    Left,
    /// Right-aligned, for numbers.
    Right,
}

/// A titled table of formatted cells.
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    /// Heading shown above the table.
    pub title: String,
    /// One sentence on what the numbers mean (method, exclusions).
    pub note: Option<String>,
    /// Column headers with their alignment.
    pub headers: Vec<(String, Align)>,
    /// Formatted cells, one `Vec` per row in header order.
    pub rows: Vec<Vec<String>>,
}

impl Table {
    /// An empty table with no note.
    pub fn new(title: &str, headers: &[(&str, Align)]) -> Table {
        Table {
            title: title.to_owned(),
            note: None,
            headers: headers.iter().map(|(h, a)| ((*h).to_owned(), *a)).collect(),
            rows: Vec::new(),
        }
    }

    /// Sets the note, replacing any earlier one.
    pub fn note(mut self, note: impl Into<String>) -> Table {
        self.note = Some(note.into());
        self
    }

    /// Appends `rows`, one `Vec` of cells per row, in the order of the headers.
    pub fn rows(mut self, rows: impl IntoIterator<Item = Vec<String>>) -> Table {
        self.rows.extend(rows);
        self
    }

    /// Drops column `i` (used to leave out the run column of a one-run report).
    pub fn without_column(mut self, i: usize) -> Table {
        if i < self.headers.len() {
            self.headers.remove(i);
            for r in &mut self.rows {
                if i < r.len() {
                    r.remove(i);
                }
            }
        }
        self
    }
}

/// The missing-value mark.
pub const NONE: &str = "—";

/// `x` with `d` decimals, or the missing mark.
pub fn num(x: Option<f64>, d: usize) -> String {
    match x {
        Some(v) if v.is_finite() => format!("{v:.d$}"),
        _ => NONE.to_owned(),
    }
}

/// `[lo, hi]` with `d` decimals, or the missing mark.
pub fn interval(x: Option<(f64, f64)>, d: usize) -> String {
    match x {
        Some((lo, hi)) if lo.is_finite() && hi.is_finite() => format!("[{lo:.d$}, {hi:.d$}]"),
        _ => NONE.to_owned(),
    }
}

/// Dollars with 4 decimals (agent trials cost fractions of a cent).
pub fn usd(x: f64) -> String {
    format!("${x:.4}")
}

/// Integers with thin grouping for readability: 1234567 -> 1,234,567.
pub fn int(n: i64) -> String {
    let s = n.unsigned_abs().to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3 + 1);
    if n < 0 {
        out.push('-');
    }
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// First `max` characters of `s` (one line), with an ellipsis when cut.
pub fn clip(s: &str, max: usize) -> String {
    let line = s.lines().next().unwrap_or("");
    if line.chars().count() <= max && line.len() == s.trim_end().len() {
        return line.to_owned();
    }
    let cut: String = line.chars().take(max.saturating_sub(1)).collect();
    format!("{cut}…")
}

/// Terminal notes wrap at this many characters (tables do not: they are as wide as they are).
const NOTE_WIDTH: usize = 100;

/// Word-wraps `text` at `max` characters; every line ends with a newline.
fn wrap(text: &str, max: usize) -> String {
    let mut out = String::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && width(&line) + 1 + width(word) > max {
            out.push_str(&line);
            out.push('\n');
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        out.push_str(&line);
        out.push('\n');
    }
    out
}

fn width(s: &str) -> usize {
    s.chars().count()
}

/// Plain aligned columns under a title and a rule: copy-paste friendly, no box drawing.
pub fn term(tables: &[Table]) -> String {
    let mut out = String::new();
    for t in tables {
        out.push_str(&t.title);
        out.push('\n');
        out.push_str(&"=".repeat(width(&t.title)));
        out.push('\n');
        if let Some(n) = &t.note {
            out.push_str(&wrap(n, NOTE_WIDTH));
        }
        let mut w: Vec<usize> = t.headers.iter().map(|(h, _)| width(h)).collect();
        for r in &t.rows {
            for (i, c) in r.iter().enumerate() {
                if i < w.len() {
                    w[i] = w[i].max(width(c));
                }
            }
        }
        let line = |cells: Vec<&str>| {
            let mut s = String::new();
            for (i, c) in cells.iter().enumerate() {
                if i > 0 {
                    s.push_str("  ");
                }
                let pad = w[i].saturating_sub(width(c));
                match t.headers[i].1 {
                    Align::Left => {
                        s.push_str(c);
                        if i + 1 < cells.len() {
                            s.push_str(&" ".repeat(pad));
                        }
                    }
                    Align::Right => {
                        s.push_str(&" ".repeat(pad));
                        s.push_str(c);
                    }
                }
            }
            s.push('\n');
            s
        };
        out.push_str(&line(t.headers.iter().map(|(h, _)| h.as_str()).collect()));
        let rules: Vec<String> = w.iter().map(|n| "-".repeat(*n)).collect();
        out.push_str(&line(rules.iter().map(String::as_str).collect()));
        for r in &t.rows {
            out.push_str(&line(r.iter().map(String::as_str).take(w.len()).collect()));
        }
        if t.rows.is_empty() {
            out.push_str("(none)\n");
        }
        out.push('\n');
    }
    out
}

fn md_cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

/// GitHub-flavoured Markdown: one `##` section per table.
pub fn markdown(tables: &[Table]) -> String {
    let mut out = String::new();
    for t in tables {
        out.push_str(&format!("## {}\n\n", t.title));
        if let Some(n) = &t.note {
            out.push_str(&format!("{n}\n\n"));
        }
        if t.rows.is_empty() {
            out.push_str("(none)\n\n");
            continue;
        }
        let heads: Vec<String> = t.headers.iter().map(|(h, _)| md_cell(h)).collect();
        out.push_str(&format!("| {} |\n", heads.join(" | ")));
        let rules: Vec<&str> = t
            .headers
            .iter()
            .map(|(_, a)| match a {
                Align::Left => ":--",
                Align::Right => "--:",
            })
            .collect();
        out.push_str(&format!("|{}|\n", rules.join("|")));
        for r in &t.rows {
            let cells: Vec<String> = r.iter().map(|c| md_cell(c)).collect();
            out.push_str(&format!("| {} |\n", cells.join(" | ")));
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(int(1_234_567), "1,234,567");
        assert_eq!(int(-12), "-12");
        assert_eq!(num(None, 3), NONE);
        assert_eq!(num(Some(0.12345), 3), "0.123");
        assert_eq!(clip("abcdef", 4), "abc…");
        assert_eq!(clip("ab\ncd", 10), "ab…");
        assert_eq!(wrap("aa bb cc", 5), "aa bb\ncc\n");
    }

    #[test]
    fn term_aligns_numbers_right() {
        let t = Table::new("T", &[("name", Align::Left), ("n", Align::Right)]).rows([
            vec!["a".into(), "10".into()],
            vec!["bbb".into(), "2".into()],
        ]);
        assert_eq!(
            term(&[t]),
            "T\n=\nname   n\n----  --\na     10\nbbb    2\n\n"
        );
    }
}
