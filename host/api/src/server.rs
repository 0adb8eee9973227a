//! The connection loop of `onestep serve` (docs/security.md#api-connections): hyper's HTTP/1.1
//! server with the limits a hostile client needs, instead of `axum::serve`, which sets none.
//!
//! - **Connection cap** ([`ServerLimits::max_connections`]): a connection is accepted only with a
//!   permit of a semaphore; at the cap, new connections wait in the kernel's listen backlog (they
//!   cost the server no memory) until an open one closes.
//! - **Header-read timeout** ([`ServerLimits::header_read_timeout`]): hyper closes a connection
//!   that has not sent a complete request head within it. The clock starts when hyper starts
//!   reading a head, that is when the connection opens and again after every response, so it is
//!   also the idle keep-alive timeout: a connection that sends nothing is closed after it.
//! - **Read buffer** ([`ServerLimits::max_buf_size`]): the most a request head may buffer; a
//!   longer head is answered by hyper itself (431, empty body) and the connection closed. The
//!   router's own head limits ([`crate::guard`]) are lower and answer with JSON.
//!
//! The request body has its own deadline ([`crate::extract::BODY_READ_TIMEOUT`]).
//! On shutdown the listener closes first, then open connections finish their in-flight request
//! (hyper's graceful shutdown) for at most [`ServerLimits::shutdown_grace`].

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// Default [`ServerLimits::max_connections`].
pub const DEFAULT_MAX_CONNECTIONS: usize = 512;
/// Default [`ServerLimits::header_read_timeout`] (also the idle keep-alive timeout).
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Default [`ServerLimits::max_buf_size`]: 64 KiB.
pub const DEFAULT_MAX_BUF_SIZE: usize = 64 * 1024;
/// How long graceful shutdown waits for in-flight requests.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

/// The transport limits of the server (docs/security.md#api-connections).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerLimits {
    /// Open connections at most; more wait in the listen backlog.
    pub max_connections: usize,
    /// Time to receive a complete request head, counted from the connection's start or the
    /// previous response (so also the idle keep-alive timeout).
    pub header_read_timeout: Duration,
    /// Most bytes hyper buffers for one connection's reads (≥ 8192).
    pub max_buf_size: usize,
    /// Most time graceful shutdown waits for open connections.
    pub shutdown_grace: Duration,
}

impl Default for ServerLimits {
    fn default() -> Self {
        ServerLimits {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            max_buf_size: DEFAULT_MAX_BUF_SIZE,
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
        }
    }
}

/// Serves `router` on `listener` with `limits` until `shutdown` resolves, then shuts down
/// gracefully. Accept errors (e.g. out of file descriptors) are logged and retried after a
/// short pause; they never stop the server.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ServerLimits,
    shutdown: impl Future<Output = ()>,
) {
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let graceful = GracefulShutdown::new();
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(limits.max_buf_size.max(8192));
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            p = Arc::clone(&permits).acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
            () = &mut shutdown => break,
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => stream,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot accept a connection; retrying");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(router.clone());
        let conn = builder.serve_connection(TokioIo::new(stream), service);
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "connection ended with an error");
            }
            drop(permit);
        });
    }
    drop(listener);
    if tokio::time::timeout(limits.shutdown_grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            "connections still open after {:?}; closing them",
            limits.shutdown_grace
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::get;
    use std::time::Instant;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    /// Reads until the server closes the connection (or `limit` passes): the bytes and
    /// whether it closed.
    async fn read_until_closed(stream: &mut TcpStream, limit: Duration) -> (Vec<u8>, bool) {
        let mut out = Vec::new();
        let mut buf = [0u8; 1024];
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, stream.read(&mut buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) => return (out, true),
                Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
                Err(_) => return (out, false),
            }
        }
    }

    #[tokio::test]
    async fn the_cap_holds_new_connections_until_stalled_ones_time_out() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let limits = ServerLimits {
            max_connections: 2,
            header_read_timeout: Duration::from_millis(600),
            ..ServerLimits::default()
        };
        let router = Router::new().route("/", get(|| async { "ok" }));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve(listener, router, limits, async {
            let _ = stopped.await;
        }));
        let mut stalled = Vec::new();
        for _ in 0..2 {
            let mut s = TcpStream::connect(addr).await.unwrap();
            s.write_all(b"GET / HT").await.unwrap();
            stalled.push(s);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        let started = Instant::now();
        let mut third = TcpStream::connect(addr).await.unwrap();
        third
            .write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let (answer, closed) = read_until_closed(&mut third, Duration::from_secs(5)).await;
        let waited = started.elapsed();
        let answer = String::from_utf8_lossy(&answer);
        assert!(closed && answer.starts_with("HTTP/1.1 200"), "{answer:?}");
        // Answered only once a stalled connection was closed by the header-read timeout.
        assert!(
            waited >= Duration::from_millis(400),
            "answered after {waited:?}"
        );
        for s in &mut stalled {
            let (_, closed) = read_until_closed(s, Duration::from_secs(2)).await;
            assert!(closed, "a stalled connection was not closed");
        }
        stop.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(5), server)
            .await
            .unwrap()
            .unwrap();
    }
}
