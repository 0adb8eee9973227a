//! Bounded capture of a guest's stdout/stderr, forwarded line by line to
//! `tracing` (target `onestep_wasm::guest`) with the execution and attempt
//! ids. Bytes past the limit are dropped but the guest's writes still succeed,
//! so a chatty guest cannot make the host buffer without bound nor crash
//! itself on a failed `println!`.

use bytes::Bytes;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use tokio::io::AsyncWrite;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

use crate::context::LogIds;

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
    dropped: u64,
    ids: Arc<LogIds>,
}

/// Shared handle on one captured stream (clones see the same buffer).
#[derive(Debug, Clone)]
pub(crate) struct Capture {
    inner: Arc<Mutex<Inner>>,
}

impl Capture {
    pub(crate) fn new(kind: StreamKind, limit_bytes: u64, ids: Arc<LogIds>) -> Self {
        let limit = usize::try_from(limit_bytes).unwrap_or(usize::MAX);
        Self {
            inner: Arc::new(Mutex::new(Inner {
                kind,
                limit,
                buf: Vec::new(),
                forwarded: 0,
                dropped: 0,
                ids,
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
        if take < bytes.len() {
            if inner.dropped == 0 {
                tracing::warn!(
                    target: "onestep_wasm::guest",
                    execution_id = %inner.ids.execution_id,
                    attempt_id = %inner.ids.attempt_id,
                    stream = inner.kind.name(),
                    limit_bytes = inner.limit,
                    "guest output exceeds its limit; the rest is dropped"
                );
            }
            inner.dropped += (bytes.len() - take) as u64;
        }
        inner.forward(false);
    }

    /// Forwards any unterminated last line (call once the guest is done).
    pub(crate) fn finish(&self) {
        self.lock().forward(true);
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
    fn forward(&mut self, all: bool) {
        while self.forwarded < self.buf.len() {
            let rest = &self.buf[self.forwarded..];
            let (line, consumed) = match rest.iter().position(|b| *b == b'\n') {
                Some(nl) => (&rest[..nl], nl + 1),
                None if all => (rest, rest.len()),
                None => break,
            };
            let line = String::from_utf8_lossy(line);
            let line = line.trim_end_matches('\r');
            let (exec, attempt, stream) = (
                &self.ids.execution_id,
                &self.ids.attempt_id,
                self.kind.name(),
            );
            match self.kind {
                StreamKind::Stdout => tracing::info!(
                    target: "onestep_wasm::guest",
                    execution_id = %exec, attempt_id = %attempt, stream, "{line}"
                ),
                StreamKind::Stderr => tracing::warn!(
                    target: "onestep_wasm::guest",
                    execution_id = %exec, attempt_id = %attempt, stream, "{line}"
                ),
            }
            self.forwarded += consumed;
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
