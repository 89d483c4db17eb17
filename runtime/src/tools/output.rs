//! A command's output twice over: the bounded capture that becomes the tool result the model
//! reads, and the live copy a person watching sees while the command still runs.
//!
//! The two are kept apart on purpose. The capture is the same whether anyone watches or not, so
//! attaching a sink never changes what the model sees. The live copy is only for the person and
//! is bounded per call ([`LIVE_OUTPUT_CAP`]), so a command printing gigabytes cannot flood a
//! driver or its client.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Bytes of one call's live output handed on; after them comes one marker line and nothing
/// more (the call's result still carries its own, separately capped, output).
pub const LIVE_OUTPUT_CAP: usize = 64 * 1024;

type SendFn = dyn Fn(&str, &str) + Send + Sync;

/// Where a step's tools send output as it is produced, tagged with the call's id. The default
/// one drops it (benchmark trials, tests, callers with no one watching).
#[derive(Clone, Default)]
pub struct ToolOutputSink(Option<Arc<SendFn>>);

impl ToolOutputSink {
    /// `f` receives `(call_id, text)`.
    pub fn new(f: impl Fn(&str, &str) + Send + Sync + 'static) -> Self {
        ToolOutputSink(Some(Arc::new(f)))
    }

    /// The sink of one call, with its own budget of [`LIVE_OUTPUT_CAP`] bytes.
    pub fn for_call(&self, call_id: &str) -> OutputSink {
        OutputSink(self.0.as_ref().map(|send| {
            Arc::new(CallOutput {
                call_id: call_id.to_string(),
                send: send.clone(),
                sent: AtomicUsize::new(0),
            })
        }))
    }
}

impl std::fmt::Debug for ToolOutputSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "ToolOutputSink(on)"
        } else {
            "ToolOutputSink(off)"
        })
    }
}

struct CallOutput {
    call_id: String,
    send: Arc<SendFn>,
    sent: AtomicUsize,
}

/// One call's live output; the default one is off.
#[derive(Clone, Default)]
pub struct OutputSink(Option<Arc<CallOutput>>);

impl OutputSink {
    /// Whether anyone listens; a workspace need not decode output nobody reads.
    pub fn is_on(&self) -> bool {
        self.0.is_some()
    }

    /// Hand on `text`; the piece that crosses [`LIVE_OUTPUT_CAP`] ends with a marker line, and
    /// everything after it is dropped.
    pub fn send(&self, text: &str) {
        let Some(call) = &self.0 else { return };
        if text.is_empty() {
            return;
        }
        let before = call.sent.fetch_add(text.len(), Ordering::Relaxed);
        if before >= LIVE_OUTPUT_CAP {
            return;
        }
        if before + text.len() <= LIVE_OUTPUT_CAP {
            (call.send)(&call.call_id, text);
            return;
        }
        let mut cut = LIVE_OUTPUT_CAP - before;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        let mut shown = text[..cut].to_string();
        if !shown.is_empty() && !shown.ends_with('\n') {
            shown.push('\n');
        }
        shown.push_str(&format!(
            "[... live output stops at {LIVE_OUTPUT_CAP} bytes; the command still runs ...]\n"
        ));
        (call.send)(&call.call_id, &shown);
    }
}

impl std::fmt::Debug for OutputSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Some(call) => write!(f, "OutputSink({})", call.call_id),
            None => f.write_str("OutputSink(off)"),
        }
    }
}

/// Turns a byte stream read in arbitrary pieces into text: a character split across two reads
/// waits for its second half instead of showing as two replacement characters.
#[derive(Debug, Default)]
pub struct Utf8Pieces {
    pending: Vec<u8>,
}

impl Utf8Pieces {
    /// The text `bytes` completes; an unfinished character at the end is kept for the next.
    pub fn push(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let unfinished = match std::str::from_utf8(&self.pending) {
            Err(e) if e.error_len().is_none() => self.pending.len() - e.valid_up_to(),
            _ => 0,
        };
        let tail = self.pending.split_off(self.pending.len() - unfinished);
        let text = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending = tail;
        text
    }

    /// Whatever is left at the stream's end, lossily.
    pub fn finish(&mut self) -> String {
        String::from_utf8_lossy(&std::mem::take(&mut self.pending)).into_owned()
    }
}

/// Collects at most `cap` bytes of one output stream; what is cut is still read and dropped.
/// Every workspace (this one, the harness's sandbox) reports output through it, so the model
/// sees one truncation format.
pub struct OutputCapture {
    buf: Vec<u8>,
    cap: usize,
    truncated: bool,
}

impl OutputCapture {
    /// An empty capture that keeps at most `cap` bytes.
    pub fn new(cap: usize) -> Self {
        OutputCapture {
            buf: Vec::new(),
            cap,
            truncated: false,
        }
    }

    /// Append `chunk`, dropping whatever lies past the cap and noting that something was cut.
    pub fn push(&mut self, chunk: &[u8]) {
        let room = self.cap.saturating_sub(self.buf.len());
        if chunk.len() > room {
            self.truncated = true;
        }
        self.buf.extend_from_slice(&chunk[..chunk.len().min(room)]);
    }

    /// Whether anything was cut.
    pub fn truncated(&self) -> bool {
        self.truncated
    }

    /// Read `pipe` to its end.
    pub async fn pump<R: tokio::io::AsyncRead + Unpin>(&mut self, pipe: Option<R>) {
        self.pump_live(pipe, &OutputSink::default()).await;
    }

    /// Read `pipe` to its end, handing each piece to `live` as soon as it is read. The capture
    /// is filled exactly as by [`OutputCapture::pump`]: the live copy never changes the result.
    pub async fn pump_live<R: tokio::io::AsyncRead + Unpin>(
        &mut self,
        pipe: Option<R>,
        live: &OutputSink,
    ) {
        use tokio::io::AsyncReadExt;
        let Some(mut pipe) = pipe else { return };
        let mut pieces = Utf8Pieces::default();
        let mut chunk = [0u8; 8192];
        loop {
            match pipe.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    self.push(&chunk[..n]);
                    if live.is_on() {
                        live.send(&pieces.push(&chunk[..n]));
                    }
                }
            }
        }
        live.send(&pieces.finish());
    }

    /// Lossy text with a visible marker where it was cut; a character split by the cut is
    /// dropped rather than shown as a replacement character.
    pub fn into_text(mut self) -> String {
        if self.truncated
            && let Err(e) = std::str::from_utf8(&self.buf)
            && e.error_len().is_none()
        {
            self.buf.truncate(e.valid_up_to());
        }
        let mut text = String::from_utf8_lossy(&self.buf).into_owned();
        if self.truncated {
            if !text.is_empty() && !text.ends_with('\n') {
                text.push('\n');
            }
            text.push_str(&format!(
                "[... output truncated at {} bytes ...]\n",
                self.cap
            ));
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn capture_marks_truncation_and_drops_a_split_character() {
        let mut c = OutputCapture::new(4);
        c.push(b"abcdef");
        let text = c.into_text();
        assert!(
            text.starts_with("abcd\n[... output truncated at 4 bytes ...]"),
            "{text}"
        );
        // Five bytes cut the second two-byte character in half: it is dropped, not mangled.
        let mut c = OutputCapture::new(5);
        c.push("ab\u{e9}\u{e9}".as_bytes());
        assert!(c.into_text().starts_with("ab\u{e9}\n["));
    }

    #[test]
    fn a_character_split_across_reads_waits_for_its_half() {
        let mut pieces = Utf8Pieces::default();
        let bytes = "a\u{e9}b".as_bytes();
        assert_eq!(pieces.push(&bytes[..2]), "a");
        assert_eq!(pieces.push(&bytes[2..]), "\u{e9}b");
        assert_eq!(pieces.finish(), "");
    }

    #[test]
    fn live_output_stops_at_the_cap_with_one_marker() {
        let got = Arc::new(std::sync::Mutex::new(Vec::<(String, String)>::new()));
        let seen = got.clone();
        let sink = ToolOutputSink::new(move |id, text| {
            seen.lock()
                .unwrap()
                .push((id.to_string(), text.to_string()))
        });
        let call = sink.for_call("c1");
        let line = "x".repeat(1000) + "\n";
        for _ in 0..100 {
            call.send(&line);
        }
        let sent = got.lock().unwrap().clone();
        let total: usize = sent.iter().map(|(_, t)| t.len()).sum();
        let markers = sent
            .iter()
            .filter(|(_, t)| t.contains("live output stops"))
            .count();
        assert_eq!(markers, 1);
        assert!(sent.iter().all(|(id, _)| id == "c1"));
        assert!(total < LIVE_OUTPUT_CAP + 200, "{total}");
        assert!(sent.last().unwrap().1.contains("live output stops"));
        // A second call has a budget of its own.
        sink.for_call("c2").send("y");
        assert_eq!(
            got.lock().unwrap().last().unwrap(),
            &("c2".into(), "y".into())
        );
    }
}
