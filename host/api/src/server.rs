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
