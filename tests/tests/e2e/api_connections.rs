//! Slow and idle connections against a real `onestep serve` (docs/security.md#api-connections):
//! 500 connections that send half a request line and stall, one idle keep-alive connection,
//! and one that stalls in its body. The server closes the first two kinds within the
//! header-read timeout and answers the body 408 (JSON) within the body timeout, its RSS stays
//! under a stated ceiling while they are open, and a normal request is still answered
//! meanwhile. A head longer than the read buffer gets hyper's own 431; a 900 KB body still
//! streams through it.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use onestep_e2e::{Env, e2e_config, wait_for};

use crate::api_flow::{Server, curl};
use crate::procfs::memory_kb;

/// Slow connections opened at once (below the server's cap of 512).
const SLOW: usize = 500;
/// The server's header-read (and idle keep-alive) timeout, `DEFAULT_HEADER_READ_TIMEOUT`.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// The server's body timeout, `BODY_READ_TIMEOUT`.
const BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// Generous ceiling of the RSS growth with [`SLOW`] connections open: 64 MiB (128 KiB each;
/// measured ~12 KiB each with the limits, ~800 KiB each without them).
const RSS_GROWTH_CEILING_KB: u64 = 64 * 1024;

/// One client connection and what the server sent on it.
struct Conn {
    stream: TcpStream,
    received: Vec<u8>,
    closed_after: Option<Duration>,
}

impl Conn {
    fn open(addr: &str, first_bytes: &[u8]) -> Result<Conn> {
        let mut stream = TcpStream::connect(addr).context("connect")?;
        stream.write_all(first_bytes)?;
        stream.set_nonblocking(true)?;
        Ok(Conn {
            stream,
            received: Vec::new(),
            closed_after: None,
        })
    }

    /// Reads what is there; records when the server closed the connection.
    fn poll(&mut self, since: Instant) {
        if self.closed_after.is_some() {
            return;
        }
        let mut buf = [0u8; 4096];
        loop {
            match self.stream.read(&mut buf) {
                Ok(0) => break self.closed_after = Some(since.elapsed()),
                Ok(n) => self.received.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(_) => break self.closed_after = Some(since.elapsed()),
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_and_idle_connections_are_closed_and_bounded() -> Result<()> {
    let url = std::env::var("ONESTEP_TEST_MARIADB_URL").context("ONESTEP_TEST_MARIADB_URL")?;
    let env = Env::new("mariadb", &url, &e2e_config("worker.yaml")).await?;
    let outcome = slow_connections(&env).await;
    env.finish().await?;
    outcome
}

async fn slow_connections(env: &Env) -> Result<()> {
    let logs = tempfile::tempdir()?;
    let log = logs.path().join("serve.log");
    let server = Server::spawn(&env.onestep_env(), &log)?;
    let base = server.base.clone();
    let addr = base.trim_start_matches("http://").to_owned();
    wait_for(
        "the API to answer /healthz",
        Duration::from_secs(30),
        || async { Ok((curl(&[&format!("{base}/healthz")])?.0 == 200).then_some(())) },
    )
    .await
    .with_context(|| std::fs::read_to_string(&log).unwrap_or_default())?;
    let pid = server.child.id();
    for _ in 0..5 {
        curl(&[&format!("{base}/v1/executions")])?;
    }
    // A large body still streams through the 64 KiB read buffer.
    let big = logs.path().join("big.json");
    std::fs::write(
        &big,
        serde_json::json!({"task_name": "echo", "payload": "b".repeat(900_000)}).to_string(),
    )?;
    let big_arg = format!("@{}", big.display());
    let (code, answer) = curl(&[
        "-X",
        "POST",
        &format!("{base}/v1/executions"),
        "-H",
        "Content-Type: application/json",
        "-H",
        "Idempotency-Key: big-body",
        "--data-binary",
        &big_arg,
    ])?;
    ensure!(code == 202, "a 900 KB submit answered {code}: {answer}");
    let (rss_before, _) = memory_kb(pid)?;

    let started = Instant::now();
    let mut slow = (0..SLOW)
        .map(|_| Conn::open(&addr, b"GET /v1/exec"))
        .collect::<Result<Vec<_>>>()?;
    // A keep-alive connection that got its answer and then stays idle.
    let mut idle = Conn::open(&addr, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")?;
    // A request whose body stalls after 2 of its 100 bytes.
    let mut stalled_body = Conn::open(
        &addr,
        b"POST /v1/executions:cancel HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
          Content-Length: 100\r\n\r\n{\"",
    )?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (rss_open, _) = memory_kb(pid)?;

    let asked = Instant::now();
    let (code, page) = curl(&[&format!("{base}/v1/executions")])?;
    let latency = asked.elapsed();
    ensure!(
        code == 200,
        "a normal request with {SLOW} slow connections open answered {code}: {page}"
    );

    // Every slow and idle connection is closed by the server within the timeout (+ margin).
    let deadline = HEADER_READ_TIMEOUT + Duration::from_secs(10);
    while started.elapsed() < deadline {
        for c in slow.iter_mut().chain(std::iter::once(&mut idle)) {
            c.poll(started);
        }
        if slow.iter().all(|c| c.closed_after.is_some()) && idle.closed_after.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let open = slow.iter().filter(|c| c.closed_after.is_none()).count();
    let last_close = slow.iter().filter_map(|c| c.closed_after).max();
    let (rss_closed, _) = memory_kb(pid)?;

    // The stalled body gets 408 with the JSON error body.
    let body_deadline = BODY_READ_TIMEOUT + Duration::from_secs(10);
    while stalled_body.closed_after.is_none() && started.elapsed() < body_deadline {
        stalled_body.poll(started);
        if stalled_body.received.ends_with(b"}") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let stalled_answer = String::from_utf8_lossy(&stalled_body.received).into_owned();

    // A head longer than the read buffer (64 KiB): refused by hyper before the router.
    let mut huge = TcpStream::connect(&addr)?;
    huge.set_read_timeout(Some(Duration::from_secs(10)))?;
    let head = format!(
        "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Padding: {}\r\n\r\n",
        "p".repeat(80 * 1024)
    );
    let _ = huge.write_all(head.as_bytes());
    let mut huge_answer = Vec::new();
    let _ = huge.read_to_end(&mut huge_answer);
    let huge_answer = String::from_utf8_lossy(&huge_answer).into_owned();

    eprintln!(
        "api connections: RSS {rss_before} kB before, {rss_open} kB with {SLOW} slow connections \
         (+{} kB, {} kB each), {rss_closed} kB after they closed; a normal request took {:.1} ms; \
         slow connections closed by {:.1} s (timeout {} s), idle keep-alive closed at {:?}; \
         stalled body answered: {:?}; 80 KiB head answered: {:?}",
        rss_open.saturating_sub(rss_before),
        rss_open.saturating_sub(rss_before) / SLOW as u64,
        latency.as_secs_f64() * 1000.0,
        last_close.map_or(f64::NAN, |d| d.as_secs_f64()),
        HEADER_READ_TIMEOUT.as_secs(),
        idle.closed_after,
        stalled_answer.lines().next().unwrap_or_default(),
        huge_answer.lines().next().unwrap_or_default(),
    );
    ensure!(
        open == 0,
        "{open} of {SLOW} slow connections still open {} s after they stalled (header-read \
         timeout {} s)",
        deadline.as_secs(),
        HEADER_READ_TIMEOUT.as_secs()
    );
    ensure!(
        idle.closed_after.is_some(),
        "an idle keep-alive connection was not closed within {} s",
        deadline.as_secs()
    );
    ensure!(
        String::from_utf8_lossy(&idle.received).starts_with("HTTP/1.1 200"),
        "the keep-alive connection's request was answered: {:?}",
        String::from_utf8_lossy(&idle.received)
    );
    ensure!(
        rss_open.saturating_sub(rss_before) < RSS_GROWTH_CEILING_KB,
        "RSS grew by {} kB with {SLOW} slow connections (ceiling {RSS_GROWTH_CEILING_KB} kB)",
        rss_open.saturating_sub(rss_before)
    );
    ensure!(
        stalled_answer.starts_with("HTTP/1.1 408")
            && stalled_answer.contains("\"code\":\"request_timeout\""),
        "a stalled body was answered {stalled_answer:?}"
    );
    ensure!(
        huge_answer.starts_with("HTTP/1.1 431"),
        "an 80 KiB head was answered {huge_answer:?}"
    );
    Ok(())
}
