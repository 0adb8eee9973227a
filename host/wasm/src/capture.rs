//! Bounded capture of a guest's stdout/stderr, forwarded line by line to
//! `tracing` (target `onestep_wasm::guest`, through [`crate::guest_log`]) with
//! the execution and attempt ids. Bytes past the limit are dropped but the
//! guest's writes still succeed, so a chatty guest cannot make the host buffer
//! without bound nor crash itself on a failed `println!`.
//!
//! The cost is O(bytes written): each write scans only its own new bytes for a
//! line break (the scan position is remembered across writes, so a long
//! unterminated line written a byte at a time is not rescanned). Each line
//! asks the attempt's [`LogBudget`] before it becomes a log event (the same
//! budget as `log` and `progress`: bytes, lines and the task's rate); lines it
//! refuses stay in the captured text but are only counted. The bytes dropped
//! past the capture limit are reported on the attempt's end line.

use bytes::Bytes;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use tokio::io::AsyncWrite;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

use crate::context::LogIds;
use crate::guest_log;
use crate::log_budget::LogBudget;

/// Which stream a capture is attached to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StreamKind {
    Stdout,
    Stderr,
}

impl StreamKind {
    fn name(self) -> &'static str {
        match self {
            StreamKind::Stdout => "stdout",
            StreamKind::Stderr => "stderr",
        }
    }
}

#[derive(Debug)]
struct Inner {
    kind: StreamKind,
    limit: usize,
    buf: Vec<u8>,
    /// Index in `buf` of the first byte not yet forwarded to tracing.
    forwarded: usize,
    /// Index in `buf` up to which the pending line (from `forwarded`) is
    /// known to hold no line break; the next scan starts here.
    scanned: usize,
    /// Bytes dropped because of the limit.
    dropped: u64,
    finished: bool,
    ids: Arc<LogIds>,
    budget: LogBudget,
    /// Bytes examined in search of a line break, to test the scan cost.
    #[cfg(test)]
    scan_work: u64,
}

/// Shared handle on one captured stream (clones see the same buffer).
#[derive(Debug, Clone)]
pub(crate) struct Capture {
    inner: Arc<Mutex<Inner>>,
}

impl Capture {
    pub(crate) fn new(
        kind: StreamKind,
        limit_bytes: u64,
        ids: Arc<LogIds>,
        budget: LogBudget,
    ) -> Self {
        let limit = usize::try_from(limit_bytes).unwrap_or(usize::MAX);
        Self {
            inner: Arc::new(Mutex::new(Inner {
                kind,
                limit,
                buf: Vec::new(),
                forwarded: 0,
                scanned: 0,
                dropped: 0,
                finished: false,
                ids,
                budget,
                #[cfg(test)]
                scan_work: 0,
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A poisoned lock only means a panic elsewhere mid-write; the buffer
        // is still a valid Vec, keep using it.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self, bytes: &[u8]) {
        let mut inner = self.lock();
        let room = inner.limit.saturating_sub(inner.buf.len());
        let take = room.min(bytes.len());
        inner.buf.extend_from_slice(&bytes[..take]);
        inner.dropped += (bytes.len() - take) as u64;
        inner.forward(false);
    }

    /// Forwards any unterminated last line (call once the guest is done;
    /// later calls do nothing).
    pub(crate) fn finish(&self) {
        let mut inner = self.lock();
        if inner.finished {
            return;
        }
        inner.finished = true;
        inner.forward(true);
    }

    /// Everything captured so far (lossy UTF-8).
    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.lock().buf).into_owned()
    }

    /// Bytes dropped because of the limit.
    pub(crate) fn dropped(&self) -> u64 {
        self.lock().dropped
    }
}

impl Inner {
    /// Forwards every complete line not yet forwarded (and, with `all`, the
    /// unterminated rest). Each byte of `buf` is scanned once in total.
    fn forward(&mut self, all: bool) {
        loop {
            let start = self.scanned.max(self.forwarded);
            let fresh = &self.buf[start..];
            let newline = fresh.iter().position(|b| *b == b'\n');
            #[cfg(test)]
            {
                self.scan_work += newline.map_or(fresh.len(), |i| i + 1) as u64;
            }
            match newline {
                Some(i) => {
                    let end = start + i;
                    self.emit(self.forwarded, end);
                    self.forwarded = end + 1;
                    self.scanned = self.forwarded;
                }
                None => {
                    self.scanned = self.buf.len();
                    if all && self.forwarded < self.buf.len() {
                        self.emit(self.forwarded, self.buf.len());
                        self.forwarded = self.buf.len();
                    }
                    return;
                }
            }
        }
    }

    /// Logs `buf[from..to]` as one line if the attempt's log budget admits
    /// it (it counts the lines it refuses).
    fn emit(&mut self, from: usize, to: usize) {
        let stderr = self.kind == StreamKind::Stderr;
        let level = if stderr {
            tracing::Level::WARN
        } else {
            tracing::Level::INFO
        };
        let line = String::from_utf8_lossy(&self.buf[from..to]);
        let line = line.trim_end_matches('\r');
        if let Some(journal) = &self.ids.journal {
            journal.log(self.kind.name(), line);
        }
        if let Some(line) = self.budget.admit(level, line) {
            guest_log::output_line(&self.ids, self.kind.name(), stderr, &line);
        }
    }
}

impl IsTerminal for Capture {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for Capture {
    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }

    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }
}

/// Largest write permit handed to the guest at once.
const PERMIT: usize = 64 * 1024;

impl OutputStream for Capture {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        Capture::write(self, &bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(PERMIT)
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for Capture {
    async fn ready(&mut self) {}
}

impl AsyncWrite for Capture {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Capture::write(&self, buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guest_log::tests::{FORGED, ids, logged};

    /// A capture whose budget allows `lines` lines and plenty of bytes.
    fn capture_with(kind: StreamKind, limit: u64, lines: u64) -> (Capture, LogBudget) {
        let sandbox = crate::SandboxSettings {
            log_limit_bytes: 1 << 30,
            max_log_lines: lines,
            log_rate_bytes_per_minute: 1 << 40,
            ..crate::SandboxSettings::default()
        };
        let ids = Arc::new(ids());
        let budget = LogBudget::new(&sandbox, Default::default(), ids.clone());
        (Capture::new(kind, limit, ids, budget.clone()), budget)
    }

    fn capture(kind: StreamKind, limit: u64) -> Capture {
        capture_with(kind, limit, 1 << 30).0
    }

    fn scan_work(c: &Capture) -> u64 {
        c.lock().scan_work
    }

    /// Messages of the JSON events in `out`, one per line.
    fn messages(out: &str) -> Vec<serde_json::Value> {
        out.lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("JSON event"))
            .map(|v| v["fields"].clone())
            .collect()
    }

    #[test]
    fn lines_split_across_writes_are_reassembled() {
        let c = capture(StreamKind::Stdout, 1 << 20);
        let out = logged(true, || {
            for w in ["ab", "c\nd", "e\r\n", "", "\n", "f"] {
                c.write(w.as_bytes());
            }
            c.finish();
            c.finish();
        });
        let lines: Vec<_> = messages(&out)
            .iter()
            .map(|f| f["message"].as_str().unwrap_or_default().to_string())
            .collect();
        assert_eq!(lines, ["abc", "de", "", "f"]);
        assert_eq!(c.text(), "abc\nde\r\n\nf");
        assert_eq!(scan_work(&c), c.text().len() as u64);
    }

    #[test]
    fn two_million_one_byte_writes_scan_each_byte_once() {
        const WRITES: u64 = 2_000_000;
        // Limit above the volume: every byte is kept and must be scanned once.
        let c = capture(StreamKind::Stdout, 4 << 20);
        let out = logged(true, || {
            for _ in 0..WRITES {
                c.write(b"x");
            }
            assert!(scan_work(&c) <= WRITES, "{}", scan_work(&c));
            c.finish();
        });
        assert!(scan_work(&c) <= WRITES + 1, "{}", scan_work(&c));
        assert_eq!(messages(&out).len(), 1, "one unterminated line");

        // Default-sized limit: past it, writes are dropped without any scan.
        let c = capture(StreamKind::Stdout, 64 * 1024);
        let out = logged(true, || {
            for _ in 0..WRITES {
                c.write(b"x");
            }
            c.finish();
        });
        assert!(scan_work(&c) <= 64 * 1024 + 1, "{}", scan_work(&c));
        assert_eq!(c.dropped(), WRITES - 64 * 1024);
        // Only the line (cut to max_log_message_bytes): the bytes dropped past
        // the capture limit are reported on the attempt's end line.
        let events = messages(&out);
        assert_eq!(events.len(), 1, "{events:?}");
        let line = events[0]["message"].as_str().unwrap_or_default();
        assert!(line.ends_with("[truncated]"), "{line}");
    }

    #[test]
    fn newline_floods_are_capped_by_the_attempts_line_budget() {
        const BYTES: usize = 64 * 1024;
        const LINES: u64 = 1000;
        for one_write in [true, false] {
            let (c, budget) = capture_with(StreamKind::Stderr, BYTES as u64, LINES);
            let out = logged(true, || {
                if one_write {
                    c.write(&[b'\n'; BYTES]);
                } else {
                    for _ in 0..BYTES {
                        c.write(b"\n");
                    }
                }
                c.finish();
            });
            let events = messages(&out);
            assert_eq!(events.len() as u64, LINES + 1, "lines + one warning");
            let warning = &events[LINES as usize];
            let text = warning["message"].as_str().unwrap_or_default();
            assert!(text.contains("max_log_lines is reached"), "{text}");
            let totals = budget.totals();
            assert_eq!(totals.lines, LINES);
            assert_eq!(totals.dropped_lines, BYTES as u64 - LINES);
            assert_eq!(c.text().len(), BYTES, "the captured text is complete");
            assert!(scan_work(&c) <= BYTES as u64, "{}", scan_work(&c));
        }
    }

    #[test]
    fn forged_output_lines_are_escaped() {
        for kind in [StreamKind::Stdout, StreamKind::Stderr] {
            let c = capture(kind, 1 << 20);
            let out = logged(false, || {
                c.write(FORGED.as_bytes());
                c.write(b"tail \x1b[2J\rover");
                c.finish();
            });
            // Output is split into lines at `\n` (each its own event with the
            // guest's own ids in front); nothing else breaks a line.
            let lines: Vec<&str> = out.lines().collect();
            assert_eq!(lines.len(), 3, "{out:?}");
            for line in &lines {
                assert!(line.contains(" onestep_wasm::guest: "), "{line:?}");
                assert!(line.contains("execution_id=mine"), "{line:?}");
                assert!(!line.contains('\u{1b}') && !line.contains('\r'), "{line:?}");
            }
            assert!(lines[1].contains("\\u{1b}[31mforged"), "{out:?}");
            assert!(lines[2].contains("tail \\u{1b}[2J\\rover"), "{out:?}");
        }
    }
}
