//! Outbound connections cannot exhaust the worker's file descriptors (docs/security.md#network,
//! "Connections"), on MariaDB, MySQL and PostgreSQL: a worker whose open-files limit is set to
//! 256 (soft and hard, with `prlimit --pid` right after it starts) runs two attacker tasks
//! (the `fetch` guest looping requests to its one allowed origin spelled many ways: a distinct
//! userinfo per request, `u0@127.0.0.1:PORT`, `u1@…`, and the port with a growing number of
//! leading zeros, `127.0.0.1:0PORT`, `127.0.0.1:00PORT`, …) next to neighbour tasks in the same
//! worker: an `echo` with a preopen (a host descriptor on every attempt) and a `fetch` of the
//! same origin. A third attacker holds 40 responses unread (each keeps a connection busy): 16
//! succeed, the rest fail with `connection-limit-reached`. Every neighbour execution succeeds
//! while the attack runs; the userinfo requests are refused as an invalid URI; the zero-padded
//! ones all succeed (one origin, one pooled connection); the worker's descriptors stay far below
//! its limit. Peak descriptors and RSS are
//! printed (the figures in docs/security.md#network).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use axum::Router;
use axum::routing::get;
use onestep_core::ExecutionStatus as S;
use onestep_e2e::{Env, Schedule, guest, on_each_server};
use serde_json::json;

use crate::procfs::memory_kb;

const LIMIT: Duration = Duration::from_secs(90);
/// The worker's open-files limit, soft and hard.
const NOFILE: usize = 256;
/// Requests of one userinfo attacker execution.
const USERINFO_REQUESTS: usize = 1500;
/// Distinct zero-padded spellings of the port per attacker execution.
const SPELLINGS: usize = 300;
/// Responses the `hold` attacker asks for and keeps unread.
const HELD: usize = 40;

async fn start_server() -> Result<u16> {
    // `/big`: 8 MiB, streamed; a guest that holds the response unread keeps its connection busy.
    let big = || async {
        let chunks = (0..128).map(|_| Ok::<_, std::io::Error>(vec![b'x'; 64 * 1024]));
        axum::body::Body::from_stream(futures::stream::iter(chunks))
    };
    let app = Router::new()
        .route("/ok", get(|| async { "ok" }))
        .route("/big", get(big));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(port)
}

fn write_config(dir: &Path, port: u16) -> Result<std::path::PathBuf> {
    let fetch = guest("fetch")?;
    let echo = guest("echo")?;
    let files = dir.join("files");
    std::fs::create_dir_all(&files)?;
    let yaml = format!(
        r#"apiVersion: onestep/v1alpha1
kind: App
app:
  name: isolation-http
  shutdown_timeout_s: 1.0
  logging: {{level: INFO, format: text}}
resources:
  db:
    type: "${{ONESTEP_E2E_BACKEND:-mysql}}"
    dsn: "${{ONESTEP_DSN}}"
    engine_options: {{max_connections: 10}}
  jobs: &jobs
    type: "${{ONESTEP_E2E_BACKEND:-mysql}}_execution_source"
    connector: db
    namespace: e2e
    task_names: [attacker]
    worker_id: "${{ONESTEP_WORKER_ID:-w1}}"
    batch_size: 8
    lease_duration_s: 10.0
    heartbeat_interval_s: 2.0
    poll_interval_s: 0.1
  neighbour_fetch_jobs:
    <<: *jobs
    task_names: [neighbour_fetch]
  neighbour_files_jobs:
    <<: *jobs
    task_names: [neighbour_files]
tasks:
  - name: attacker
    source: jobs
    handler: {{component: "{fetch}"}}
    concurrency: 2
    timeout_s: 60
    sandbox:
      network:
        allow: ["http://127.0.0.1:{port}"]
  - name: neighbour_fetch
    source: neighbour_fetch_jobs
    handler: {{component: "{fetch}"}}
    concurrency: 2
    timeout_s: 20
    sandbox:
      network:
        allow: ["http://127.0.0.1:{port}"]
  - name: neighbour_files
    source: neighbour_files_jobs
    handler: {{component: "{echo}"}}
    concurrency: 2
    sandbox:
      preopens: [{{host: "{files}", guest: /ro}}]
"#,
        fetch = fetch.display(),
        echo = echo.display(),
        files = files.display(),
    );
    let path = dir.join("isolation_http.yaml");
    std::fs::write(&path, yaml)?;
    Ok(path)
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

async fn attack_case(env: Arc<Env>, port: u16) -> Result<()> {
    let server = env.server();
    let worker = env.spawn_worker("http-fd")?;
    let pid = worker.pid();
    let limited = std::process::Command::new("prlimit")
        .arg("--pid")
        .arg(pid.to_string())
        .arg(format!("--nofile={NOFILE}:{NOFILE}"))
        .status()
        .context("prlimit --pid")?;
    ensure!(limited.success(), "prlimit --pid {pid} failed");
    let base = format!("http://127.0.0.1:{port}");
    // The worker is up once a neighbour succeeds.
    let first = env.submit("neighbour_files", json!({"n": -1})).await?;
    env.wait_status(first.id, &[S::Succeeded], LIMIT).await?;
    let idle_fds = open_fds(pid);
    let idle_rss = memory_kb(pid)?.0;

    let mut attackers = Vec::new();
    for round in 0..2 {
        let url = format!("http://u{{i}}@127.0.0.1:{port}/ok");
        let payload = json!({"url": url, "repeat": USERINFO_REQUESTS});
        attackers.push(("userinfo", env.submit("attacker", payload).await?.id));
        let urls: Vec<String> = (0..SPELLINGS)
            .map(|k| {
                let zeros = "0".repeat(round * SPELLINGS + k + 1);
                format!("http://127.0.0.1:{zeros}{port}/ok")
            })
            .collect();
        attackers.push((
            "spelling",
            env.submit("attacker", json!({"urls": urls})).await?.id,
        ));
    }
    // Many connections at once: 40 responses held unread, each on a connection of its own.
    let held = vec![format!("{base}/big"); HELD];
    let payload = json!({"urls": held, "hold": true});
    attackers.push(("hold", env.submit("attacker", payload).await?.id));

    let started = Instant::now();
    let mut neighbours = Vec::new();
    let mut peak_fds = 0;
    let mut peak_rss = 0;
    loop {
        peak_fds = peak_fds.max(open_fds(pid));
        peak_rss = peak_rss.max(memory_kb(pid)?.0);
        let mut done = true;
        for (_, id) in &attackers {
            done &= env.get(*id).await?.terminal();
        }
        if done && neighbours.len() >= 20 {
            break;
        }
        if started.elapsed() > LIMIT {
            // Reported below: the attackers are "not finished".
            break;
        }
        let n = neighbours.len();
        neighbours.push(env.submit("neighbour_files", json!({"n": n})).await?.id);
        let ok = json!({"url": format!("{base}/ok")});
        neighbours.push(env.submit("neighbour_fetch", ok).await?.id);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let attack_s = started.elapsed().as_secs_f64();

    // One deadline for all the waits below (a worker out of descriptors may finish nothing).
    let until = Instant::now() + LIMIT;
    let left = || until.saturating_duration_since(Instant::now()) + Duration::from_millis(10);
    let mut failed = Vec::new();
    for id in &neighbours {
        match env
            .wait_status(*id, &[S::Succeeded, S::Failed], left())
            .await
        {
            Ok(done) if done.status == S::Succeeded => {}
            Ok(done) => failed.push(format!("{:?}", done.error)),
            Err(e) => failed.push(format!("{e:#}")),
        }
    }
    let mut outcomes = Vec::new();
    let mut wrong = Vec::new();
    for (kind, id) in &attackers {
        let out = match env
            .wait_status(*id, &[S::Succeeded, S::Failed], left())
            .await
        {
            Ok(done) => done.result.unwrap_or_default(),
            Err(e) => json!({"not finished": format!("{e:#}")}),
        };
        outcomes.push(format!("{kind}: ok {} errors {}", out["ok"], out["errors"]));
        let expected = if *kind == "userinfo" {
            // Refused as an invalid URI, never sent.
            out["ok"] == 0 && out["errors"]["HttpRequestUriInvalid"] == USERINFO_REQUESTS
        } else if *kind == "hold" {
            // At most max_concurrent_requests (16) in use, at most max_connections (16) open.
            out["ok"] == 16 && out["errors"]["ConnectionLimitReached"] == HELD - 16
        } else {
            // Every spelling of the allowed origin succeeds.
            out["ok"] == SPELLINGS
        };
        if !expected {
            wrong.push(format!("{kind}: {out}"));
        }
    }
    eprintln!(
        "[{server}] http fd attack ({attack_s:.1} s): {outcomes:?}; {} neighbours, {} failed; \
         worker fds idle {idle_fds}, peak {peak_fds} (limit {NOFILE}); RSS idle {idle_rss} kB, \
         peak {peak_rss} kB",
        neighbours.len(),
        failed.len()
    );
    ensure!(
        failed.is_empty(),
        "[{server}] neighbour executions failed during the attack: {failed:?}"
    );
    ensure!(wrong.is_empty(), "[{server}] attackers: {wrong:?}");
    ensure!(
        peak_fds < NOFILE / 2,
        "[{server}] the worker held {peak_fds} descriptors (limit {NOFILE})"
    );
    drop(worker);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outbound_connections_cannot_exhaust_the_workers_descriptors() -> Result<()> {
    let port = start_server().await?;
    let dir = tempfile::tempdir()?;
    let config = write_config(dir.path(), port)?;
    on_each_server(
        "http fd exhaustion",
        &config,
        Schedule::Concurrent,
        move |env| attack_case(env, port),
    )
    .await
}
