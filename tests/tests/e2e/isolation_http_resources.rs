//! Host memory held through `wasi:http` resources, through a real worker on MariaDB and MySQL
//! (docs/security.md#http-resources): a `fetch` task in a 32 MiB sandbox runs the guest's
//! `fields-hog` (3,000 `fields` of one 100 KB header: 300 MB of worker memory if the host let
//! it) and `body-hog` (20,000 open bodies of requests to an origin it may not reach), two at a
//! time, next to a victim `echo` task in the same worker. Every hog ends failed with a message
//! naming the limit, every victim succeeds at its first attempt, and the worker's RSS stays
//! under a stated ceiling during the attack and returns near its baseline after it.

use std::path::Path;
use std::time::Duration;

use anyhow::{Result, ensure};
use onestep_core::ExecutionStatus as S;
use onestep_e2e::{Schedule, guest, on_each_server};
use serde_json::json;

use crate::procfs::{memory_kb, victims_during};

const LIMIT: Duration = Duration::from_secs(120);
/// Peak RSS the worker may reach above its RSS before the attack: two hostile attempts at a
/// time, each held to 1 MiB of headers and 576 resources (≈ 30 MiB at worst), with a generous
/// margin. Before the limits, one `fields-hog` attempt alone took +289 MB and kept it.
const MAX_RSS_GROWTH_KB: u64 = 128 * 1024;
/// RSS the worker may keep above its baseline once the attack is over.
const MAX_RSS_KEPT_KB: u64 = 48 * 1024;

/// `guest(name)` of this checkout: the path is taken from this test file's crate, so a shared
/// target directory built from another checkout cannot point it at an older guest.
fn this_checkout_guest(name: &str) -> Result<std::path::PathBuf> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../guest-examples/out")
        .join(format!("{name}.wasm"));
    if path.is_file() {
        Ok(path)
    } else {
        guest(name)
    }
}

fn write_config(dir: &Path) -> Result<std::path::PathBuf> {
    let yaml = format!(
        r#"apiVersion: onestep/v1alpha1
kind: App
app:
  name: e2e-isolation-http-resources
  shutdown_timeout_s: 1.0
  logging: {{level: INFO, format: text}}
resources:
  db:
    type: "${{ONESTEP_E2E_BACKEND:-mysql}}"
    dsn: "${{ONESTEP_DSN}}"
  hog_jobs: &jobs
    type: "${{ONESTEP_E2E_BACKEND:-mysql}}_execution_source"
    connector: db
    namespace: e2e
    task_names: [hog]
    poll_interval_s: 0.1
    lease_duration_s: 6.0
    heartbeat_interval_s: 1.0
    worker_id: "${{ONESTEP_WORKER_ID}}"
    auto_create: true
  echo_jobs:
    <<: *jobs
    task_names: [echo]
tasks:
  - name: hog
    source: hog_jobs
    handler: {{component: {fetch}}}
    concurrency: 2
    timeout_s: 60.0
    sandbox:
      memory_limit_bytes: 33554432
      network:
        allow: ["http://127.0.0.1:9"]
  - name: echo
    source: echo_jobs
    handler: {{component: {echo}}}
    concurrency: 3
"#,
        fetch = this_checkout_guest("fetch")?.display(),
        echo = this_checkout_guest("echo")?.display(),
    );
    let path = dir.join("worker.yaml");
    std::fs::write(&path, yaml)?;
    Ok(path)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wasi_http_resources_are_bounded_next_to_a_neighbour() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let config = write_config(dir.path())?;
    on_each_server(
        "wasi:http resources",
        &config,
        Schedule::Exclusive,
        |env| async move {
            let mut worker = env.spawn_worker("w1")?;
            let pid = worker.pid();
            let warm = env.submit("echo", json!({"warm": true})).await?;
            env.wait_status(warm.id, &[S::Succeeded], LIMIT).await?;
            let (rss_before, _) = memory_kb(pid)?;

            let mut hogs = Vec::new();
            for _ in 0..2 {
                let fields = json!({"mode": "fields-hog", "n": 3000, "size": 100_000});
                hogs.push(env.submit("hog", fields).await?.id);
                let bodies =
                    json!({"mode": "body-hog", "n": 20_000, "url": "http://192.0.2.1:8080/"});
                hogs.push(env.submit("hog", bodies).await?.id);
            }
            let attack = victims_during(&env, &hogs, pid, 10, LIMIT).await?;
            for id in &attack.victims {
                let done = env.wait_status(*id, &[S::Succeeded], LIMIT).await?;
                ensure!(done.attempts == 1, "victim {done:?}");
            }
            for id in &hogs {
                let done = env.wait_status(*id, &[S::Failed], LIMIT).await?;
                let trapped = done.error.as_ref().map(|e| e.exception_type.as_str());
                ensure!(trapped == Some("Trap"), "hog {id}: {done:?}");
            }
            // The trap messages name the limits (on the attempts' end lines).
            let log = env.worker_logs();
            for limit in ["http_fields_limit_bytes", "sandbox.max_http_handles"] {
                ensure!(log.contains(limit), "no attempt ended naming {limit}");
            }
            // Give the allocator a moment, then read what the worker kept.
            tokio::time::sleep(Duration::from_millis(500)).await;
            let (rss_after, hwm) = memory_kb(pid)?;
            let peak = attack.peak_hwm_kb.max(hwm);
            let growth = peak.saturating_sub(rss_before);
            let kept = rss_after.saturating_sub(rss_before);
            eprintln!(
                "[{}] 4 wasi:http hogs, {} victims ok: worker RSS {} MB before, peak (VmHWM) {} MB \
                 (+{} MB), {} MB after (+{} MB)",
                env.server(),
                attack.victims.len(),
                rss_before / 1024,
                peak / 1024,
                growth / 1024,
                rss_after / 1024,
                kept / 1024,
            );
            ensure!(
                growth <= MAX_RSS_GROWTH_KB,
                "worker peak RSS grew by {} MB (bound {} MB)",
                growth / 1024,
                MAX_RSS_GROWTH_KB / 1024
            );
            ensure!(
                kept <= MAX_RSS_KEPT_KB,
                "worker kept {} MB after the attack (bound {} MB)",
                kept / 1024,
                MAX_RSS_KEPT_KB / 1024
            );
            ensure!(
                worker.wait_exit(Duration::from_millis(1)).is_err(),
                "the worker exited"
            );
            Ok(())
        },
    )
    .await
}
