//! Outbound HTTP through a real worker (docs/security.md#network): the `fetch` guest (world
//! `onestep:handler@0.2.0`) against a loopback axum server started by the test, with the
//! task's `sandbox.network` allowing only that server. An allowed request succeeds with what
//! the guest computed from the response; a request to an origin not allowed fails as the
//! handler decides (a fatal handler error; the log names `HttpRequestDenied` and the origin); the host-injected header
//! reaches the server and is in no line of the worker's log; a cancel while the guest waits on
//! a slow server ends the execution `cancelled`.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use axum::Router;
use axum::http::HeaderMap;
use axum::routing::get;
use onestep_core::ExecutionStatus as S;
use onestep_e2e::{Env, Schedule, guest, on_each_server, statuses};
use serde_json::json;

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
    type: mysql
    dsn: "${{ONESTEP_DSN}}"
  fetch_jobs:
    type: mysql_execution_source
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
    env.wait_status(slow.id, &[S::Cancelled], LIMIT).await?;
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
