//! The worker's `/metrics`, `/healthz` and `/readyz` (docs/observability.md) through a real
//! worker on MariaDB and MySQL, read with `curl` and parsed with a Prometheus text-format
//! parser: after a known mix of executions (succeeded, retried then succeeded, failed, timed
//! out, cancelled) the counters have exactly the expected values; health is `ok` while the
//! worker runs and `degraded` (503) while it drains.

use std::net::TcpListener;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use onestep_core::ExecutionStatus as S;
use onestep_e2e::{Schedule, e2e_config, on_each_server, wait_for};
use prometheus_parse::{Scrape, Value};
use serde_json::json;

const LIMIT: Duration = Duration::from_secs(60);

/// `GET url` with curl: (status, body).
fn http_get(url: &str) -> Result<(u16, String)> {
    let out = Command::new("curl")
        .args(["-sS", "-o", "-", "-w", "\n%{http_code}", url])
        .output()
        .context("cannot run curl")?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", text.as_str()));
    Ok((code.trim().parse().unwrap_or(0), body.to_owned()))
}

/// The value of the sample `name` (or `name_total`) whose labels include `labels`; 0 if absent.
fn sample(scrape: &Scrape, name: &str, labels: &[(&str, &str)]) -> f64 {
    let total = format!("{name}_total");
    scrape
        .samples
        .iter()
        .filter(|s| s.metric == name || s.metric == total)
        .filter(|s| labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .map(|s| match s.value {
            Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => v,
            _ => 0.0,
        })
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_a_known_mix_and_health_follows_the_worker() -> Result<()> {
    let config = e2e_config("worker.yaml");
    on_each_server(
        "metrics and health",
        &config,
        Schedule::Concurrent,
        |env| async move {
            let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
            let addr = format!("127.0.0.1:{port}");
            let base = format!("http://{addr}");
            let mut worker = env.spawn_worker_with("w1", &["--metrics-addr", &addr])?;
            wait_for("/readyz to answer 200", LIMIT, || async {
                Ok((http_get(&format!("{base}/readyz"))?.0 == 200).then_some(()))
            })
            .await?;
            let (code, body) = http_get(&format!("{base}/healthz"))?;
            ensure!(code == 200, "healthz {code}: {body}");
            let health: serde_json::Value = serde_json::from_str(&body)?;
            ensure!(
                health["status"] == "ok" && health["stopping"] == false,
                "{health}"
            );
            ensure!(health["app"] == "e2e-worker", "{health}");

            let mut ids = Vec::new();
            for i in 0..3 {
                ids.push((env.submit("echo", json!({"n": i})).await?.id, S::Succeeded));
            }
            let flaky = env
                .submit("flaky", json!({"succeed_on_attempt": 2}))
                .await?;
            ids.push((flaky.id, S::Succeeded));
            let fatal = env.submit("misbehave", json!({"mode": "fatal"})).await?;
            ids.push((fatal.id, S::Failed));
            let spin = env.submit("misbehave", json!({"mode": "spin"})).await?;
            ids.push((spin.id, S::Failed));
            let sleeper = env
                .submit("sleepy", json!({"mode": "sleep", "secs": 3600}))
                .await?;
            env.wait_status(sleeper.id, &[S::Running], LIMIT).await?;
            env.client.cancel(sleeper.id, None).await?;
            ids.push((sleeper.id, S::Cancelled));
            for (id, status) in &ids {
                env.wait_status(*id, &[*status], LIMIT).await?;
            }

            // Completions are counted once written; scrape until the last one is in.
            let scrape = wait_for("/metrics to count every completion", LIMIT, || async {
                let (code, text) = http_get(&format!("{base}/metrics"))?;
                ensure!(code == 200, "metrics {code}: {text}");
                ensure!(text.ends_with("# EOF\n"), "not OpenMetrics text: {text}");
                let scrape = Scrape::parse(text.lines().map(|l| Ok(l.to_owned())))?;
                let done = sample(&scrape, "onestep_tasks_cancelled", &[("task", "sleepy")]);
                Ok((done >= 1.0).then_some(scrape))
            })
            .await?;
            let app = ("app", "e2e-worker");
            let processed = |task: &str, status: &str| {
                sample(
                    &scrape,
                    "onestep_tasks_processed",
                    &[app, ("task", task), ("status", status)],
                )
            };
            let expected = [
                (processed("echo", "succeeded"), 3.0, "echo succeeded"),
                (processed("flaky", "succeeded"), 1.0, "flaky succeeded"),
                (processed("misbehave", "failed"), 2.0, "misbehave failed"),
                (processed("echo", "failed"), 0.0, "echo failed"),
                (
                    sample(&scrape, "onestep_tasks_retried", &[app, ("task", "flaky")]),
                    1.0,
                    "flaky retried",
                ),
                (
                    sample(
                        &scrape,
                        "onestep_tasks_cancelled",
                        &[app, ("task", "sleepy")],
                    ),
                    1.0,
                    "sleepy cancelled",
                ),
                (
                    sample(
                        &scrape,
                        "onestep_task_failures",
                        &[
                            ("task", "misbehave"),
                            ("failure_kind", "timeout"),
                            ("exception_type", "TimeoutError"),
                        ],
                    ),
                    1.0,
                    "misbehave timeout",
                ),
                (
                    sample(
                        &scrape,
                        "onestep_task_failures",
                        &[
                            ("task", "misbehave"),
                            ("failure_kind", "error"),
                            ("exception_type", "HandlerError"),
                        ],
                    ),
                    1.0,
                    "misbehave fatal",
                ),
                (
                    sample(
                        &scrape,
                        "onestep_task_failures",
                        &[("task", "flaky"), ("exception_type", "HandlerError")],
                    ),
                    1.0,
                    "flaky's retried failure",
                ),
                (
                    sample(&scrape, "onestep_deliveries_fetched", &[("task", "echo")]),
                    3.0,
                    "echo fetched",
                ),
                (
                    sample(&scrape, "onestep_deliveries_fetched", &[("task", "flaky")]),
                    2.0,
                    "flaky fetched",
                ),
                (
                    sample(&scrape, "onestep_inflight_tasks", &[("task", "echo")]),
                    0.0,
                    "echo in flight",
                ),
                (
                    sample(
                        &scrape,
                        "onestep_wasm_traps",
                        &[("task", "misbehave"), ("kind", "timeout")],
                    ),
                    1.0,
                    "timeout trap",
                ),
                (
                    sample(
                        &scrape,
                        "onestep_wasm_traps",
                        &[("task", "sleepy"), ("kind", "cancelled")],
                    ),
                    1.0,
                    "cancel trap",
                ),
                (
                    sample(&scrape, "onestep_lease_lost", &[]),
                    0.0,
                    "no lease lost",
                ),
            ];
            for (got, want, what) in expected {
                ensure!(got == want, "{what}: {got}, expected {want}");
            }
            ensure!(
                sample(&scrape, "onestep_build_info", &[]) == 1.0,
                "build info"
            );
            ensure!(
                sample(
                    &scrape,
                    "onestep_task_duration_seconds_count",
                    &[("task", "echo")]
                ) == 3.0,
                "echo durations observed"
            );
            ensure!(
                sample(
                    &scrape,
                    "onestep_queue_wait_seconds_count",
                    &[("task", "misbehave")]
                ) == 2.0,
                "misbehave queue waits observed"
            );

            // Draining: health is degraded (503, stopping) until the worker is gone.
            let long = env
                .submit("sleepy", json!({"mode": "sleep", "secs": 3600}))
                .await?;
            env.wait_status(long.id, &[S::Running], LIMIT).await?;
            worker.signal("TERM")?;
            let started = Instant::now();
            let degraded = loop {
                let (code, body) = http_get(&format!("{base}/healthz"))?;
                if code == 503 {
                    break body;
                }
                ensure!(
                    started.elapsed() < Duration::from_secs(5),
                    "healthz stayed {code} after SIGTERM: {body}"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            };
            let doc: serde_json::Value = serde_json::from_str(&degraded)?;
            ensure!(
                doc["status"] == "degraded" && doc["stopping"] == true,
                "{doc}"
            );
            let code = worker.wait_exit(LIMIT)?;
            ensure!(code == Some(0), "worker exit {code:?}");
            Ok(())
        },
    )
    .await
}
