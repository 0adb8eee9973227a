//! The slow loopback HTTP server of `onestep bench --http-delay-ms` (docs/benchmarks.md#outbound-http-1000-in-flight):
//! an axum server on `127.0.0.1:0` answering `GET /slow` after a fixed delay. It runs on a
//! thread of its own with a current-thread tokio runtime, so its work never takes a worker
//! thread of the runtime the benchmarked worker runs on (it still shares the machine's cores).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context, Result};
use axum::Router;
use axum::extract::State;
use axum::routing::get;
use tokio_util::sync::CancellationToken;

/// Pending connections the listener queues (the kernel caps it at `net.core.somaxconn`).
const LISTEN_BACKLOG: u32 = 4096;

/// A running slow server; [`SlowServer::stop`] (or dropping it) shuts it down.
pub struct SlowServer {
    addr: SocketAddr,
    stop: CancellationToken,
    thread: Option<JoinHandle<()>>,
    answered: Arc<AtomicU64>,
}

impl SlowServer {
    /// Binds `127.0.0.1:0` and serves `GET /slow`, answering `{"ok":true}` after `delay`.
    pub fn start(delay: Duration) -> Result<Self> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("cannot build the loopback server's runtime")?;
        let stop = CancellationToken::new();
        let answered = Arc::new(AtomicU64::new(0));
        let app = Router::new()
            .route("/slow", get(slow))
            .with_state((delay, Arc::clone(&answered)));
        let stopped = stop.clone();
        let (bound_tx, bound_rx) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("bench-http-server".into())
            .spawn(move || {
                runtime.block_on(async move {
                    // A listen backlog for a thousand connections arriving at once (the
                    // default of 128 drops SYNs, and the client retries them only after a
                    // second). Bound here: a tokio listener belongs to this runtime.
                    let bound = tokio::net::TcpSocket::new_v4().and_then(|socket| {
                        socket.bind(SocketAddr::from(([127, 0, 0, 1], 0)))?;
                        let listener = socket.listen(LISTEN_BACKLOG)?;
                        Ok((listener.local_addr()?, listener))
                    });
                    let listener = match bound {
                        Ok((addr, listener)) => {
                            let _ = bound_tx.send(Ok(addr));
                            listener
                        }
                        Err(e) => {
                            let _ = bound_tx.send(Err(e));
                            return;
                        }
                    };
                    // Stopping drops the server and, with the runtime at the end of this
                    // thread, every connection task: no waiting for clients to go away.
                    tokio::select! {
                        served = axum::serve(listener, app) => {
                            if let Err(e) = served {
                                eprintln!("onestep bench: loopback server: {e}");
                            }
                        }
                        () = stopped.cancelled() => {}
                    }
                });
            })
            .context("cannot start the loopback server's thread")?;
        let addr = bound_rx
            .recv()
            .context("the loopback server's thread ended before binding")?
            .context("cannot bind the loopback HTTP server")?;
        Ok(SlowServer {
            addr,
            stop,
            thread: Some(thread),
            answered,
        })
    }

    /// `http://127.0.0.1:<port>`: the origin the benchmark's task is allowed to reach.
    pub fn origin(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Requests answered so far.
    pub fn answered(&self) -> u64 {
        self.answered.load(Ordering::Relaxed)
    }

    /// Stops the server and waits for its thread.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.stop.cancel();
        if let Some(t) = self.thread.take()
            && t.join().is_err()
        {
            eprintln!("onestep bench: the loopback server's thread panicked");
        }
    }
}

impl Drop for SlowServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

async fn slow(State((delay, answered)): State<(Duration, Arc<AtomicU64>)>) -> &'static str {
    tokio::time::sleep(delay).await;
    answered.fetch_add(1, Ordering::Relaxed);
    "{\"ok\":true}"
}
