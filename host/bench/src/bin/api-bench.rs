//! Submit throughput and latency over HTTP on loopback (not a timed test; prints figures).
//!
//! `ONESTEP_TEST_MARIADB_URL=mysql://root@127.0.0.1:3306/ target/release/api-bench` (built by
//! `scripts/bench.sh`'s one release build)
//!
//! Creates a scratch database, serves the router on 127.0.0.1:0 over the real MySQL backend, then
//! for 1, 16 and 64 concurrent clients (each a keep-alive HTTP/1.1 connection) sends
//! `POST /v1/executions` with unique idempotency keys, bounded by a request count and a time
//! budget per level (`BENCH_REQUESTS`, default 3000; `BENCH_SECONDS`, default 20). Prints
//! requests/s and p50/p99 latency; then one client sends `POST /v1/executions:batch` with 1,000
//! items a request for the same number of rows (rows/s beside the single submits), then drops
//! the database.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use onestep_api::{ApiSettings, ApiState, Tenancy, router};
use onestep_mysql::{MySqlBackend, ScratchDatabase, StoreOptions};
use tokio::net::TcpStream;

type Error = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let admin = std::env::var("ONESTEP_TEST_MARIADB_URL")
        .map_err(|_| "ONESTEP_TEST_MARIADB_URL is not set (e.g. mysql://root@127.0.0.1:3306/)")?;
    let db = ScratchDatabase::create(admin.trim(), "onestep_bench_").await?;
    let outcome = run(db.dsn()).await;
    db.drop_database().await?;
    outcome
}

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

async fn run(dsn: &str) -> Result<(), Error> {
    let mut opts = StoreOptions::new(dsn);
    opts.pool_max = 32;
    let backend = MySqlBackend::open(opts).await?;
    let state = ApiState::new(
        Arc::new(backend.clone()),
        Arc::new(backend.clone()),
        Tenancy::Single("bench".into()),
        ApiSettings::default(),
    )?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let server = tokio::spawn(async move { axum::serve(listener, router(state)).await });
    let max_requests = env_num("BENCH_REQUESTS", 3000);
    let budget = Duration::from_secs(env_num("BENCH_SECONDS", 20));
    println!(
        "submit over HTTP, loopback, MariaDB; up to {max_requests} requests or {budget:?} per level"
    );
    println!(
        "{:>8} {:>9} {:>10} {:>10} {:>10}",
        "clients", "requests", "req/s", "p50 ms", "p99 ms"
    );
    for clients in [1usize, 16, 64] {
        let start = Instant::now();
        let deadline = start + budget;
        let per_client = (max_requests as usize).div_ceil(clients);
        let tasks: Vec<_> = (0..clients)
            .map(|c| {
                tokio::spawn(async move { client(addr, c, clients, per_client, deadline).await })
            })
            .collect();
        let mut latencies = Vec::new();
        for t in tasks {
            latencies.extend(t.await??);
        }
        let elapsed = start.elapsed().as_secs_f64();
        latencies.sort_unstable();
        let pct = |p: f64| {
            let i = ((latencies.len() as f64 * p).ceil() as usize).clamp(1, latencies.len()) - 1;
            latencies[i].as_secs_f64() * 1000.0
        };
        println!(
            "{clients:>8} {:>9} {:>10.0} {:>10.2} {:>10.2}",
            latencies.len(),
            latencies.len() as f64 / elapsed,
            pct(0.50),
            pct(0.99)
        );
    }
    // Batch submit (docs/http-api.md#batch-submit): one client, 1,000 items a request, the same
    // request budget in rows; compare rows/s with the single submits above.
    let batches = (max_requests as usize).div_ceil(1000).max(1);
    let start = Instant::now();
    let deadline = start + budget;
    let latencies = batch_client(addr, batches, deadline).await?;
    let elapsed = start.elapsed().as_secs_f64();
    let rows = latencies.len() * 1000;
    let ms = |d: &Duration| d.as_secs_f64() * 1000.0;
    let worst = latencies.iter().map(ms).fold(0.0, f64::max);
    println!(
        "batch submit, 1 client, 1,000 items a request: {} requests, {rows} rows, {:.0} rows/s, \
         slowest request {worst:.1} ms",
        latencies.len(),
        rows as f64 / elapsed
    );
    server.abort();
    backend.close().await?;
    Ok(())
}

/// One keep-alive connection sending up to `n` batches of 1,000 submits before `deadline`;
/// returns each request's latency.
async fn batch_client(
    addr: std::net::SocketAddr,
    n: usize,
    deadline: Instant,
) -> Result<Vec<Duration>, Error> {
    drive(addr, n, deadline, 200, |b| {
        let items: Vec<String> = (0..1000)
            .map(|i| {
                format!(
                    r#"{{"task_name":"bench","payload":{{"batch":{b},"i":{i},"doc":"doc-{i}"}},"idempotency_key":"batch-{b}-{i}"}}"#
                )
            })
            .collect();
        post(addr, "/v1/executions:batch", format!(r#"{{"items":[{}]}}"#, items.join(",")))
    })
    .await
}

/// One keep-alive connection sending up to `n` submits before `deadline`; returns latencies.
async fn client(
    addr: std::net::SocketAddr,
    me: usize,
    level: usize,
    n: usize,
    deadline: Instant,
) -> Result<Vec<Duration>, Error> {
    drive(addr, n, deadline, 202, |i| {
        let body = format!(
            r#"{{"task_name":"bench","payload":{{"client":{me},"i":{i},"doc":"doc-{i}"}},"metadata":{{"level":{level}}}}}"#
        );
        let mut request = post(addr, "/v1/executions", body)?;
        request.headers_mut().insert(
            "idempotency-key",
            http::HeaderValue::from_str(&format!("bench-{level}-{me}-{i}"))?,
        );
        Ok(request)
    })
    .await
}

/// A JSON `POST` of `body` to `path`.
fn post(
    addr: std::net::SocketAddr,
    path: &str,
    body: String,
) -> Result<http::Request<Full<Bytes>>, Error> {
    Ok(http::Request::post(path)
        .header(http::header::HOST, addr.to_string())
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body)))?)
}

/// Sends up to `n` requests (`request(i)`) on one keep-alive connection before `deadline`, each
/// expected to answer `expect`; returns each request's latency.
async fn drive(
    addr: std::net::SocketAddr,
    n: usize,
    deadline: Instant,
    expect: u16,
    request: impl Fn(usize) -> Result<http::Request<Full<Bytes>>, Error>,
) -> Result<Vec<Duration>, Error> {
    let mut sender = connect(addr).await?;
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        if Instant::now() >= deadline {
            break;
        }
        let request = request(i)?;
        let t0 = Instant::now();
        let status = send(&mut sender, request).await?;
        out.push(t0.elapsed());
        if status != expect {
            return Err(format!("unexpected status {status} (expected {expect})").into());
        }
    }
    Ok(out)
}

/// One keep-alive HTTP/1.1 connection (hyper's client) to the API.
async fn connect(addr: std::net::SocketAddr) -> Result<SendRequest<Full<Bytes>>, Error> {
    let stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let (sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    Ok(sender)
}

/// Sends one request on the connection and reads the whole answer; returns its status.
async fn send(
    sender: &mut SendRequest<Full<Bytes>>,
    request: http::Request<Full<Bytes>>,
) -> Result<u16, Error> {
    sender.ready().await?;
    let response = sender.send_request(request).await?;
    let status = response.status().as_u16();
    response.into_body().collect().await?;
    Ok(status)
}
