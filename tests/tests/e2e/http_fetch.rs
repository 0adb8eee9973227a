//! Outbound HTTP through a real worker (docs/security.md#network): the `fetch` guest (world
//! `onestep:handler@0.2.0`) against a loopback axum server started by the test, with the
//! task's `sandbox.network` allowing only that server. An allowed request succeeds with what
//! the guest computed from the response; a request to an origin not allowed fails as the
//! handler decides (a fatal handler error; the log names `HttpRequestDenied` and the origin); the host-injected header
//! reaches the server and is in no line of the worker's log; a cancel while the guest waits on
//! a slow server ends the execution `cancelled` (the latency is printed).
//!
//! Against a probe server that records when a request arrives and when the client drops it:
//! the attempt's `timeout_s` ends a request still waiting (outcome `timeout`); a lease taken
//! away in SQL stops the guest at the next heartbeat and the old lease writes nothing; SIGTERM
//! during a slow request exits within the shutdown timeout and leaves the execution `retrying`
//! for a second worker; a 200 MiB response to a task capped at 1 MiB fails the request while
//! the worker's RSS stays flat.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use axum::Router;
use axum::extract::Path as AxPath;
use axum::http::HeaderMap;
use axum::response::IntoResponse;
use axum::routing::get;
use futures::StreamExt;
use onestep_core::ExecutionStatus as S;
use onestep_e2e::{Env, Schedule, guest, on_each_server, statuses, wait_for};
use serde_json::json;

use crate::procfs::memory_kb;

const SECRET: &str = "Bearer e2e-secret-5b1d7e";
const LIMIT: Duration = Duration::from_secs(30);

async fn start_server() -> Result<u16> {
    let app = Router::new()
        .route("/ok", get(|| async { "hello over http" }))
        .route(
            "/headers",
            get(|h: HeaderMap| async move {
                let auth = h
                    .get("authorization")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_owned();
                axum::Json(json!({"authorization": auth}))
            }),
        )
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_secs(60)).await;
                "late"
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(port)
}

fn write_config(dir: &Path, port: u16) -> Result<std::path::PathBuf> {
    let fetch = guest("fetch")?;
    let yaml = format!(
        r#"apiVersion: onestep/v1alpha1
kind: App
app:
  name: http-fetch
  shutdown_timeout_s: 1.0
  logging: {{level: DEBUG, format: text}}
resources:
  db:
    type: "${{ONESTEP_E2E_BACKEND:-mysql}}"
    dsn: "${{ONESTEP_DSN}}"
  fetch_jobs:
    type: "${{ONESTEP_E2E_BACKEND:-mysql}}_execution_source"
    connector: db
    namespace: e2e
    task_names: [fetch]
    worker_id: "${{ONESTEP_WORKER_ID:-w1}}"
    lease_duration_s: 6.0
    heartbeat_interval_s: 2.0
    poll_interval_s: 0.2
tasks:
  - name: fetch
    source: fetch_jobs
    handler: {{component: "{fetch}"}}
    concurrency: 2
    timeout_s: 20
    sandbox:
      network:
        allow: ["http://127.0.0.1:{port}"]
        headers:
          "http://127.0.0.1:{port}": {{Authorization: "{SECRET}"}}
        request_timeout_s: 15
"#,
        fetch = fetch.display(),
    );
    let path = dir.join("http_fetch.yaml");
    std::fs::write(&path, yaml)?;
    Ok(path)
}

async fn fetch_case(env: Arc<Env>, port: u16) -> Result<()> {
    let _worker = env.spawn_worker("w1")?;
    let base = format!("http://127.0.0.1:{port}");

    let ok = env
        .submit("fetch", json!({"url": format!("{base}/ok")}))
        .await?;
    let done = env.wait_status(ok.id, &[S::Succeeded], LIMIT).await?;
    let result = done.result.context("result")?;
    ensure!(result["status"] == 200, "{result}");
    ensure!(result["body_prefix"] == "hello over http", "{result}");

    let denied = env
        .submit(
            "fetch",
            json!({"url": format!("http://localhost:{port}/ok")}),
        )
        .await?;
    let done = env.wait_status(denied.id, &[S::Failed], LIMIT).await?;
    let error = done.error.clone().context("error")?;
    ensure!(
        error.kind == "error" && error.exception_type == "HandlerError",
        "{error:?}"
    );
    ensure!(
        done.attempts == 1,
        "a fatal handler error is not retried: {done:?}"
    );

    let headers = env
        .submit("fetch", json!({"url": format!("{base}/headers")}))
        .await?;
    let done = env.wait_status(headers.id, &[S::Succeeded], LIMIT).await?;
    let result = done.result.context("result")?;
    ensure!(result["json"]["authorization"] == SECRET, "{result}");

    let slow = env
        .submit("fetch", json!({"url": format!("{base}/slow")}))
        .await?;
    env.wait_status(slow.id, &[S::Running], LIMIT).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    env.client
        .cancel(slow.id, Some("http e2e"))
        .await?
        .context("cancel found nothing")?;
    let cancelled_at = Instant::now();
    env.wait_status(slow.id, &[S::Cancelled], LIMIT).await?;
    // Cancel request → `cancelled`: the cancel poll (1 s by default) finds it, the guest is
    // stopped and the completion written (docs/security.md#network records the figure).
    let latency = cancelled_at.elapsed().as_secs_f64();
    eprintln!(
        "[{}] cancel during a slow request → cancelled: {latency:.3}s",
        env.server()
    );
    ensure!(
        latency < 5.0,
        "cancel took {latency:.2}s to end the execution"
    );
    let attempts = env.db.attempts(slow.id).await?;
    ensure!(statuses(&attempts) == ["cancelled"], "{attempts:?}");

    let log = env.worker_logs();
    ensure!(
        log.contains("outbound HTTP request denied")
            && log.contains(&format!("origin=http://localhost:{port}"))
            && log.contains("error=request failed: ErrorCode::HttpRequestDenied"),
        "the denial and the handler's error are not in the worker's log: {log}"
    );
    ensure!(
        !log.contains("e2e-secret-5b1d7e"),
        "the injected header is in the worker's log: {log}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_runs_fetch_against_a_loopback_server() -> Result<()> {
    let port = start_server().await?;
    let dir = tempfile::tempdir()?;
    let config = write_config(dir.path(), port)?;
    on_each_server("http fetch", &config, Schedule::Concurrent, move |env| {
        fetch_case(env, port)
    })
    .await
}

// ---------------------------------------------------------------------------------------------
// Slow and huge responses through a real worker: the attempt's timeout, a lost lease, the drain,
// a response over `max_response_bytes`, and the time from a cancel to `cancelled`.

/// What the probe server saw of one request (keyed by the tag in its path).
#[derive(Debug, Clone, Copy, Default)]
struct Probe {
    arrived: Option<Instant>,
    /// When the handler's future was dropped before it answered: the client went away.
    dropped: Option<Instant>,
    /// Body bytes the server produced (the huge responses).
    produced: u64,
}

type Probes = Arc<Mutex<HashMap<String, Probe>>>;

fn probe_of(probes: &Probes, tag: &str) -> Probe {
    probes
        .lock()
        .map(|p| p.get(tag).copied().unwrap_or_default())
        .unwrap_or_default()
}

/// Marks its tag's request as dropped unless disarmed (the response was sent).
struct DropMark {
    probes: Probes,
    tag: String,
    armed: bool,
}

impl Drop for DropMark {
    fn drop(&mut self) {
        if self.armed
            && let Ok(mut p) = self.probes.lock()
        {
            p.entry(self.tag.clone()).or_default().dropped = Some(Instant::now());
        }
    }
}

/// 64 KiB of body.
static CHUNK: [u8; 65536] = [b'x'; 65536];
/// The huge responses' size: 200 MiB.
const HUGE_BYTES: u64 = 200 << 20;

/// `/slow/{tag}`: answers after 60 s (records arrival and a dropped request);
/// `/once/{tag}`: slow like `/slow` the first time a tag is seen, then at once;
/// `/huge/{tag}` and `/huge-declared/{tag}`: 200 MiB streamed in 64 KiB chunks, without and with
/// a `Content-Length`.
async fn start_probe_server(probes: Probes) -> Result<u16> {
    async fn slow(probes: Probes, tag: String) -> &'static str {
        let mut mark = DropMark {
            probes: Arc::clone(&probes),
            tag: tag.clone(),
            armed: true,
        };
        if let Ok(mut p) = probes.lock() {
            p.entry(tag).or_default().arrived = Some(Instant::now());
        }
        tokio::time::sleep(Duration::from_secs(60)).await;
        mark.armed = false;
        "late"
    }
    fn huge(probes: Probes, tag: String, declared: bool) -> axum::response::Response {
        let chunks = HUGE_BYTES / CHUNK.len() as u64;
        let stream = futures::stream::iter(0..chunks).map(move |_| {
            if let Ok(mut p) = probes.lock() {
                p.entry(tag.clone()).or_default().produced += CHUNK.len() as u64;
            }
            Ok::<_, std::convert::Infallible>(bytes::Bytes::from_static(&CHUNK))
        });
        let mut response = axum::body::Body::from_stream(stream).into_response();
        if declared {
            response.headers_mut().insert(
                axum::http::header::CONTENT_LENGTH,
                axum::http::HeaderValue::from(HUGE_BYTES),
            );
        }
        response
    }
    let (p1, p2, p3, p4) = (
        Arc::clone(&probes),
        Arc::clone(&probes),
        Arc::clone(&probes),
        Arc::clone(&probes),
    );
    let app = Router::new()
        .route("/ok", get(|| async { "hello over http" }))
        .route(
            "/slow/{tag}",
            get(move |AxPath(tag): AxPath<String>| slow(Arc::clone(&p1), tag)),
        )
        .route(
            "/once/{tag}",
            get(move |AxPath(tag): AxPath<String>| {
                let probes = Arc::clone(&p2);
                async move {
                    let seen = probes.lock().map(|p| p.contains_key(&tag)).unwrap_or(false);
                    if seen {
                        "second time"
                    } else {
                        slow(probes, tag).await
                    }
                }
            }),
        )
        .route(
            "/huge/{tag}",
            get(
                move |AxPath(tag): AxPath<String>| async move { huge(Arc::clone(&p3), tag, false) },
            ),
        )
        .route(
            "/huge-declared/{tag}",
            get(move |AxPath(tag): AxPath<String>| async move { huge(Arc::clone(&p4), tag, true) }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(port)
}

/// Attempt timeout of the `fetch_timeout` task.
const TIMEOUT_S: f64 = 2.0;
/// `max_response_bytes` of the `fetch_capped` task.
const CAP_BYTES: u64 = 1 << 20;

fn write_slow_config(dir: &Path, port: u16) -> Result<std::path::PathBuf> {
    let fetch = guest("fetch")?;
    let yaml = format!(
        r#"apiVersion: onestep/v1alpha1
kind: App
app:
  name: http-slow
  shutdown_timeout_s: 1.0
  logging: {{level: INFO, format: text}}
resources:
  db:
    type: "${{ONESTEP_E2E_BACKEND:-mysql}}"
    dsn: "${{ONESTEP_DSN}}"
  jobs: &jobs
    type: "${{ONESTEP_E2E_BACKEND:-mysql}}_execution_source"
    connector: db
    namespace: e2e
    task_names: [fetch]
    worker_id: "${{ONESTEP_WORKER_ID:-w1}}"
    lease_duration_s: 6.0
    heartbeat_interval_s: 2.0
    poll_interval_s: 0.2
  timeout_jobs:
    <<: *jobs
    task_names: [fetch_timeout]
  capped_jobs:
    <<: *jobs
    task_names: [fetch_capped]
tasks:
  - name: fetch
    source: jobs
    handler: {{component: "{fetch}"}}
    concurrency: 4
    sandbox:
      network:
        allow: ["http://127.0.0.1:{port}"]
  - name: fetch_timeout
    source: timeout_jobs
    handler: {{component: "{fetch}"}}
    concurrency: 2
    timeout_s: {TIMEOUT_S}
    sandbox:
      network:
        allow: ["http://127.0.0.1:{port}"]
  - name: fetch_capped
    source: capped_jobs
    handler: {{component: "{fetch}"}}
    concurrency: 2
    sandbox:
      network:
        allow: ["http://127.0.0.1:{port}"]
        max_response_bytes: {CAP_BYTES}
"#,
        fetch = fetch.display(),
    );
    let path = dir.join("http_slow.yaml");
    std::fs::write(&path, yaml)?;
    Ok(path)
}

/// A unique tag for one request of one case on one server.
fn tag(env: &Env, what: &str) -> String {
    format!("{}-{what}-{}", env.server(), uuid::Uuid::new_v4().simple())
}

/// Waits until the probe server has seen `tag`'s request arrive.
async fn wait_arrived(probes: &Probes, tag: &str) -> Result<Instant> {
    wait_for(&format!("request {tag} at the server"), LIMIT, || async {
        Ok(probe_of(probes, tag).arrived)
    })
    .await
}

async fn timeout_and_lease_loss_case(env: Arc<Env>, port: u16, probes: Probes) -> Result<()> {
    let _worker = env.spawn_worker("w1")?;
    let base = format!("http://127.0.0.1:{port}");

    // The attempt's timeout ends a request that is still waiting on the server.
    let t_tag = tag(&env, "timeout");
    let timed = env
        .submit(
            "fetch_timeout",
            json!({"url": format!("{base}/slow/{t_tag}")}),
        )
        .await?;
    // Lease loss: another "worker" takes the lease in SQL while the guest waits.
    let l_tag = tag(&env, "lease");
    let lost = env
        .submit("fetch", json!({"url": format!("{base}/slow/{l_tag}")}))
        .await?;

    let done = env.wait_status(timed.id, &[S::Failed], LIMIT).await?;
    let error = done.error.clone().context("error")?;
    ensure!(
        error.kind == "timeout" && error.exception_type == "TimeoutError",
        "the attempt's timeout is the outcome, not the request's error: {error:?}"
    );
    let t_probe = probe_of(&probes, &t_tag);
    let (arrived, dropped) = (
        t_probe.arrived.context("timeout request never arrived")?,
        t_probe.dropped.context("timeout request not dropped")?,
    );
    let held = dropped.duration_since(arrived).as_secs_f64();
    ensure!(
        held < TIMEOUT_S + 2.0,
        "the timed-out request was held {held:.2}s (timeout {TIMEOUT_S}s)"
    );

    wait_arrived(&probes, &l_tag).await?;
    let thief = uuid::Uuid::new_v4().simple().to_string();
    let stolen_at = Instant::now();
    env.db.steal_lease(lost.id, &thief).await?;
    let before = env.db.attempts(lost.id).await?;
    // The next heartbeat (every 2 s) finds the lease gone: the guest is stopped and its
    // request dropped.
    let dropped = wait_for("the lease-lost request dropped", LIMIT, || async {
        Ok(probe_of(&probes, &l_tag).dropped)
    })
    .await?;
    let after_s = dropped.duration_since(stolen_at).as_secs_f64();
    eprintln!(
        "[{}] lease stolen → request dropped: {after_s:.2}s",
        env.server()
    );
    ensure!(
        after_s < 6.0,
        "the guest ran {after_s:.2}s after its lease was taken"
    );
    // Nothing is written by the old lease: the row keeps the thief's token, no result, and the
    // attempt is neither finished nor heartbeated again.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let row = env.db.lease_row(lost.id).await?;
    ensure!(
        row == [Some(format!("running|{thief}|NULL"))],
        "the old lease wrote to the row: {row:?}"
    );
    let attempts = env.db.attempts(lost.id).await?;
    ensure!(
        statuses(&attempts) == ["running"]
            && attempts[0].finished_at.is_none()
            && attempts[0].heartbeat_at == before[0].heartbeat_at,
        "the old lease wrote to its attempt: before {before:?}, after {attempts:?}"
    );
    ensure!(
        env.worker_logs().contains("lease lost"),
        "no lease loss in the log: {}",
        env.worker_logs()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_requests_end_by_the_attempts_timeout_and_by_a_lost_lease() -> Result<()> {
    let probes = Probes::default();
    let port = start_probe_server(Arc::clone(&probes)).await?;
    let dir = tempfile::tempdir()?;
    let config = write_slow_config(dir.path(), port)?;
    on_each_server(
        "http slow: timeout, lease loss",
        &config,
        Schedule::Concurrent,
        move |env| timeout_and_lease_loss_case(env, port, Arc::clone(&probes)),
    )
    .await
}

async fn drain_case(env: Arc<Env>, port: u16, probes: Probes) -> Result<()> {
    let mut first = env.spawn_worker("w1")?;
    let o_tag = tag(&env, "drain");
    let exec = env
        .submit(
            "fetch",
            json!({"url": format!("http://127.0.0.1:{port}/once/{o_tag}")}),
        )
        .await?;
    wait_arrived(&probes, &o_tag).await?;
    let signalled = Instant::now();
    first.signal("TERM")?;
    let code = first.wait_exit(Duration::from_secs(15))?;
    let took = signalled.elapsed().as_secs_f64();
    eprintln!(
        "[{}] SIGTERM during a slow request → exit: {took:.2}s",
        env.server()
    );
    ensure!(code == Some(0), "exit {code:?}: {}", first.log());
    // shutdown_timeout_s is 1 s; then the guest is stopped and its completion written.
    ensure!(took < 4.0, "the drain took {took:.2}s");
    // The server sees the connection close once the process is gone (a few ms later).
    wait_for(
        "the drained request dropped",
        Duration::from_secs(5),
        || async { Ok(probe_of(&probes, &o_tag).dropped) },
    )
    .await?;
    // Left for another worker: `retrying` with delay 0, kind `cancelled`.
    let left = env.get(exec.id).await?;
    ensure!(left.status == S::Retrying, "{left:?}");
    let attempts = env.db.attempts(exec.id).await?;
    ensure!(
        statuses(&attempts) == ["retrying"]
            && attempts[0].error_kind.as_deref() == Some("cancelled"),
        "{attempts:?}"
    );
    let _second = env.spawn_worker("w2")?;
    let done = env.wait_status(exec.id, &[S::Succeeded], LIMIT).await?;
    ensure!(
        done.result
            .as_ref()
            .is_some_and(|r| r["body_prefix"] == "second time"),
        "{done:?}"
    );
    let attempts = env.db.attempts(exec.id).await?;
    ensure!(
        statuses(&attempts) == ["retrying", "succeeded"]
            && attempts[0].worker_id == "w1"
            && attempts[1].worker_id == "w2",
        "{attempts:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_during_a_slow_request_exits_in_time_and_leaves_it_to_another_worker() -> Result<()>
{
    let probes = Probes::default();
    let port = start_probe_server(Arc::clone(&probes)).await?;
    let dir = tempfile::tempdir()?;
    let config = write_slow_config(dir.path(), port)?;
    on_each_server(
        "http slow: drain",
        &config,
        Schedule::Concurrent,
        move |env| drain_case(env, port, Arc::clone(&probes)),
    )
    .await
}

async fn huge_case(env: Arc<Env>, port: u16, probes: Probes) -> Result<()> {
    let worker = env.spawn_worker("w1")?;
    let pid = worker.pid();
    let base = format!("http://127.0.0.1:{port}");
    // Warm up (component instantiated, connection pooled) before the baseline.
    let warm = env
        .submit("fetch_capped", json!({"url": format!("{base}/ok")}))
        .await?;
    env.wait_status(warm.id, &[S::Succeeded], LIMIT).await?;
    let (baseline_kb, _) = memory_kb(pid)?;
    // Streamed without a length, the cap is hit while reading the body; with a declared
    // Content-Length over the cap, the request fails before the body is read.
    for (path, expect) in [
        ("huge", ["exceeds limit", "HttpResponseBodySize"]),
        (
            "huge-declared",
            ["HttpResponseBodySize", "HttpResponseBodySize"],
        ),
    ] {
        let h_tag = tag(&env, path);
        let exec = env
            .submit(
                "fetch_capped",
                json!({"url": format!("{base}/{path}/{h_tag}")}),
            )
            .await?;
        let mut peak_kb = baseline_kb;
        let started = Instant::now();
        let done = loop {
            peak_kb = peak_kb.max(memory_kb(pid)?.0);
            let now = env.get(exec.id).await?;
            if now.terminal() {
                break now;
            }
            ensure!(started.elapsed() < LIMIT, "{path}: not finished: {now:?}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        peak_kb = peak_kb.max(memory_kb(pid)?.0);
        let produced = probe_of(&probes, &h_tag).produced;
        let growth_mib = peak_kb.saturating_sub(baseline_kb) as f64 / 1024.0;
        eprintln!(
            "[{}] {path}: 200 MiB offered, {:.1} MiB produced by the server, worker RSS +{growth_mib:.1} MiB",
            env.server(),
            produced as f64 / f64::from(1u32 << 20)
        );
        ensure!(done.status == S::Failed, "{path}: {done:?}");
        ensure!(
            growth_mib < 50.0,
            "{path}: the worker's RSS grew by {growth_mib:.1} MiB"
        );
        ensure!(
            produced < HUGE_BYTES / 4,
            "{path}: the host read {produced} bytes of a response capped at {CAP_BYTES}"
        );
        let log = env.worker_logs();
        ensure!(
            log.lines().any(|l| l.contains(&exec.id.to_string())
                && l.contains("request failed")
                && expect.iter().any(|e| l.contains(e))),
            "{path}: no {expect:?} for {} in the log: {log}",
            exec.id
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_over_max_response_bytes_fails_and_the_worker_rss_stays_flat() -> Result<()> {
    let probes = Probes::default();
    let port = start_probe_server(Arc::clone(&probes)).await?;
    let dir = tempfile::tempdir()?;
    let config = write_slow_config(dir.path(), port)?;
    on_each_server(
        "http huge response",
        &config,
        Schedule::Concurrent,
        move |env| huge_case(env, port, Arc::clone(&probes)),
    )
    .await
}
