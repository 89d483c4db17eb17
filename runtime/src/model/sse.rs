//! An incremental Server-Sent Events parser (the WHATWG `text/event-stream` rules).
//!
//! Bytes arrive in arbitrary chunks (a line, or a UTF-8 character, may be split across two);
//! the parser buffers only the unfinished line and hands out complete events. Lines end in
//! `\n`, `\r\n` or `\r`; `data` lines of one event are joined by `\n`; comment lines (`:`) are
//! skipped; an event is dispatched at a blank line, and one left unfinished when the stream
//! ends is dropped, as the standard says (a cut stream must not look complete).

/// One dispatched event. `event` is empty when the stream named none (the standard's
/// `message`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SseEvent {
    /// The event's type, from its `event:` line.
    pub event: String,
    /// Its `data:` lines, joined by `
    /// `.
    pub data: String,
    /// The last `id:` seen in the stream so far; it carries over to later events.
    pub id: Option<String>,
}

/// Why the parser refused the stream.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    /// A line grew past the parser's limit without ending.
    #[error("an SSE line grew past {limit} bytes without ending")]
    LineTooLong {
        /// The limit, in bytes.
        limit: usize,
    },
}

/// Lines longer than this are refused rather than buffered forever.
pub const DEFAULT_MAX_LINE: usize = 32 * 1024 * 1024;

/// An incremental SSE parser: `push` chunks as they arrive, get back the complete events.
#[derive(Debug)]
pub struct SseParser {
    buf: Vec<u8>,
    /// The last chunk ended in `\r`; a `\n` starting the next chunk belongs to it.
    after_cr: bool,
    event: String,
    data: String,
    has_data: bool,
    id: Option<String>,
    max_line: usize,
}

impl Default for SseParser {
    fn default() -> Self {
        SseParser::new()
    }
}

impl SseParser {
    /// A parser that refuses lines over `DEFAULT_MAX_LINE` bytes.
    pub fn new() -> Self {
        SseParser::with_max_line(DEFAULT_MAX_LINE)
    }

    pub(crate) fn with_max_line(max_line: usize) -> Self {
        SseParser {
            buf: Vec::new(),
            after_cr: false,
            event: String::new(),
            data: String::new(),
            has_data: false,
            id: None,
            max_line,
        }
    }

    /// Feed a chunk; complete events are appended to `out`.
    pub fn push(&mut self, chunk: &[u8], out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        let mut rest = chunk;
        if self.after_cr {
            self.after_cr = false;
            if let Some(b'\n') = rest.first() {
                rest = &rest[1..];
            }
        }
        while let Some(end) = rest.iter().position(|&b| b == b'\n' || b == b'\r') {
            let line_bytes = &rest[..end];
            let ending = rest[end];
            let mut next = end + 1;
            if ending == b'\r' {
                match rest.get(next) {
                    Some(b'\n') => next += 1,
                    None => self.after_cr = true,
                    Some(_) => {}
                }
            }
            if self.buf.is_empty() {
                self.line(line_bytes, out);
            } else {
                let mut line = std::mem::take(&mut self.buf);
                line.extend_from_slice(line_bytes);
                self.line(&line, out);
                line.clear();
                self.buf = line;
            }
            rest = &rest[next..];
        }
        if self.buf.len() + rest.len() > self.max_line {
            return Err(SseError::LineTooLong {
                limit: self.max_line,
            });
        }
        self.buf.extend_from_slice(rest);
        Ok(())
    }

    fn line(&mut self, line: &[u8], out: &mut Vec<SseEvent>) {
        if line.is_empty() {
            if self.has_data {
                out.push(SseEvent {
                    event: std::mem::take(&mut self.event),
                    data: std::mem::take(&mut self.data),
                    id: self.id.clone(),
                });
            } else {
                self.event.clear();
            }
            self.has_data = false;
            return;
        }
        if line[0] == b':' {
            return;
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &b""[..]),
        };
        // Lines are split at ASCII bytes only, so a complete line holds whole characters; a
        // stray invalid byte is replaced rather than failing the stream.
        let value = String::from_utf8_lossy(value);
        match field {
            b"data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(&value);
                self.has_data = true;
            }
            b"event" => {
                self.event.clear();
                self.event.push_str(&value);
            }
            b"id" if !value.contains('\0') => self.id = Some(value.into_owned()),
            _ => {}
        }
    }
}

/// Parse a whole body at once (tests, benches, cassettes).
pub fn parse_all(body: &[u8]) -> Result<Vec<SseEvent>, SseError> {
    let mut p = SseParser::new();
    let mut out = Vec::new();
    p.push(body, &mut out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(event: &str, data: &str) -> SseEvent {
        SseEvent {
            event: event.into(),
            data: data.into(),
            id: None,
        }
    }

    #[test]
    fn events_split_anywhere_parse_the_same() {
        let body = "event: a\ndata: {\"x\":1}\n\n: comment\r\ndata: l1\r\ndata:l2\r\n\r\n\
                    event: é\rdata: ü\r\rdata: tail-without-blank";
        let whole = parse_all(body.as_bytes()).unwrap();
        assert_eq!(
            whole,
            [ev("a", "{\"x\":1}"), ev("", "l1\nl2"), ev("é", "ü")]
        );
        let bytes = body.as_bytes();
        for cut in 0..bytes.len() {
            let mut p = SseParser::new();
            let mut out = Vec::new();
            p.push(&bytes[..cut], &mut out).unwrap();
            p.push(&bytes[cut..], &mut out).unwrap();
            assert_eq!(out, whole, "cut at {cut}");
        }
        let mut p = SseParser::new();
        let mut out = Vec::new();
        for b in bytes {
            p.push(std::slice::from_ref(b), &mut out).unwrap();
        }
        assert_eq!(out, whole, "byte by byte");
    }

    #[test]
    fn ids_and_empty_events() {
        let out = parse_all(b"id: 7\nevent: ping\n\nevent: x\ndata\n\n").unwrap();
        assert_eq!(
            out,
            [SseEvent {
                event: "x".into(),
                data: String::new(),
                id: Some("7".into())
            }]
        );
    }

    #[test]
    fn runaway_lines_are_refused() {
        let mut p = SseParser::with_max_line(8);
        let mut out = Vec::new();
        assert!(p.push(b"data: 0123456789", &mut out).is_err());
    }
}
