//! Instance-pool isolation through a real worker, on MariaDB and MySQL: a component that
//! declares 52 tables (52 one-table core instances, the "table hog") runs twice at once in a
//! task whose sandbox allows it, next to a victim `echo` task in the same worker; every victim
//! execution submitted during the attack succeeds (the pool holds every task's concurrency at
//! its own limits, docs/configuration.md#sandbox-instance-limits) and the worker stays up.
//! With the default limits the same component is refused when the worker loads it, with a
//! message naming the task, the component, the needs and the limits: its task is quarantined,
//! the neighbour runs. And a component that grows
//! 64 tables by a million elements each (512 MB of host memory if it were free) in a 32 MiB
//! sandbox gets only the growths its memory limit covers, with the worker's RSS bounded.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use onestep_core::ExecutionStatus as S;
use onestep_e2e::{Schedule, guest, on_each_server};

use crate::procfs::{memory_kb, victims_during};
use serde_json::json;

#[path = "../../../host/wasm/tests/runtime/table_hog.rs"]
#[allow(dead_code)]
mod table_hog;

const LIMIT: Duration = Duration::from_secs(60);
/// Victim executions submitted while the hogs hold their slots.
const VICTIMS: usize = 20;
/// Loop iterations of each hog call (a few seconds of guest CPU).
const HOG_SPIN: u64 = 4_000_000_000;

/// A worker file with the hog task (component `hog_component`, `sandbox` as given, concurrency
/// 2) and the victim `echo` task (concurrency 3), the hog component written next to it.
fn write_config(dir: &Path, hog_component: &[u8], hog_sandbox: &str) -> Result<std::path::PathBuf> {
    let hog = dir.join("hog.wasm");
    std::fs::write(&hog, hog_component)?;
    let echo = guest("echo")?;
    let yaml = format!(
        r#"apiVersion: onestep/v1alpha1
kind: App
app:
  name: e2e-isolation-pool
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
    handler: {{component: {hog}}}
    concurrency: 2
    timeout_s: 60.0
    sandbox: {hog_sandbox}
  - name: echo
    source: echo_jobs
    handler: {{component: {echo}}}
    concurrency: 3
"#,
        hog = hog.display(),
        echo = echo.display(),
    );
    let path = dir.join("worker.yaml");
    std::fs::write(&path, yaml)?;
    Ok(path)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_holding_52_tables_per_attempt_cannot_starve_a_neighbour() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let hog = table_hog::table_hog(52, 0, 0, HOG_SPIN);
    let config = write_config(dir.path(), &hog, "{max_instances: 60, max_tables: 52}")?;
    on_each_server(
        "pool isolation",
        &config,
        Schedule::Exclusive,
        |env| async move {
            let mut worker = env.spawn_worker("w1")?;
            let hogs = [
                env.submit("hog", json!({})).await?,
                env.submit("hog", json!({})).await?,
            ];
            // Both hogs are running (holding 2 × 53 instances and 2 × 52 tables).
            for h in &hogs {
                env.wait_status(h.id, &[S::Running], LIMIT).await?;
            }
            let started = Instant::now();
            let mut victims = Vec::new();
            for i in 0..VICTIMS {
                victims.push(env.submit("echo", json!({ "victim": i })).await?);
            }
            // Every victim was submitted during the attack.
            for h in &hogs {
                let status = env.get(h.id).await?.status;
                ensure!(status == S::Running, "a hog ended before the victims were in: {status}");
            }
            for v in &victims {
                let done = env
                    .wait_status(v.id, &[S::Succeeded], LIMIT)
                    .await
                    .with_context(|| format!("victim {}", v.id))?;
                ensure!(done.attempts == 1, "{done:?}");
            }
            let victims_done = started.elapsed();
            // The hogs succeed too (how many still ran when the last victim was done is shown).
            let mut overlapped = 0;
            for h in &hogs {
                if env.get(h.id).await?.status == S::Running {
                    overlapped += 1;
                }
            }
            for h in &hogs {
                let done = env.wait_status(h.id, &[S::Succeeded], LIMIT).await?;
                ensure!(done.attempts == 1, "{done:?}");
                ensure!(done.result == Some(json!(0)), "{done:?}");
            }
            eprintln!(
                "[{}] {VICTIMS} victims succeeded in {:.2}s next to 2 hogs ({overlapped} still running then)",
                env.server(),
                victims_done.as_secs_f64()
            );
            ensure!(
                !env.worker_logs().contains("concurrent limit"),
                "pool exhausted:\n{}",
                env.worker_logs()
            );
            ensure!(
                worker.wait_exit(Duration::ZERO).is_err(),
                "the worker exited"
            );
            Ok(())
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_component_over_its_task_limits_is_refused_when_the_worker_loads_it() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let config = write_config(dir.path(), &table_hog::table_hog(52, 0, 0, HOG_SPIN), "{}")?;
    on_each_server(
        "refused at load",
        &config,
        Schedule::Concurrent,
        |env| async move {
            // The component over its limits quarantines its task (docs/security.md#one-tenants-bad-deploy):
            // the worker keeps serving the neighbour, the hog's execution stays queued.
            let mut worker = env.spawn_worker("w1")?;
            let hog = env.submit("hog", json!({})).await?;
            let echo = env.submit("echo", json!({"n": 1})).await?;
            env.wait_status(echo.id, &[S::Succeeded], Duration::from_secs(30))
                .await
                .with_context(|| format!("worker log:\n{}", worker.log()))?;
            let log = worker.log();
            for part in [
                "task quarantined",
                "task 'hog': cannot load",
                "component hog.wasm exceeds its sandbox",
                "it needs 53 core instances per attempt but the task's sandbox allows max_instances: 32",
                "it needs 52 tables per attempt but the task's sandbox allows max_tables: 8",
            ] {
                ensure!(log.contains(part), "missing {part:?} in: {log}");
            }
            let hog = env.get(hog.id).await?;
            ensure!(hog.status == S::Queued, "the quarantined task's execution is {:?}", hog.status);
            worker.signal("TERM")?;
            let code = worker.wait_exit(Duration::from_secs(30))?;
            ensure!(code == Some(0), "exit {code:?}: {}", worker.log());
            Ok(())
        },
    )
    .await
}

/// Growths of 999,999 elements that fit in a 32 MiB sandbox next to 64 KiB of linear memory
/// and the 64 tables' first elements (8 bytes each, host/wasm/src/needs.rs).
const TABLE_GROWTHS_THAT_FIT: u64 = 4;
/// Peak RSS the worker may reach above its RSS before the attack: two hogs at a time, each
/// held to its 32 MiB, plus room for the allocator. Before table elements were charged, one
/// such attempt took +50 MB pooled and +492 MB with on-demand allocation.
const MAX_TABLE_RSS_GROWTH_KB: u64 = 160 * 1024;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn table_growth_is_held_to_the_memory_limit_next_to_a_neighbour() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let hog = table_hog::table_hog(0, 64, 999_999, 200_000_000);
    let config = write_config(
        dir.path(),
        &hog,
        "{memory_limit_bytes: 33554432, max_tables: 64, max_table_elements: 1000000}",
    )?;
    on_each_server(
        "table memory",
        &config,
        Schedule::Exclusive,
        |env| async move {
            let mut worker = env.spawn_worker("w1")?;
            let pid = worker.pid();
            let warm = env.submit("echo", json!({"warm": true})).await?;
            env.wait_status(warm.id, &[S::Succeeded], LIMIT).await?;
            let (rss_before, _) = memory_kb(pid)?;
            let mut hogs = Vec::new();
            for _ in 0..4 {
                hogs.push(env.submit("hog", json!({})).await?.id);
            }
            let attack = victims_during(&env, &hogs, pid, VICTIMS, LIMIT).await?;
            let (victims, peak) = (attack.victims, attack.peak_hwm_kb);
            for id in &victims {
                let done = env.wait_status(*id, &[S::Succeeded], LIMIT).await?;
                ensure!(done.attempts == 1, "{done:?}");
            }
            for id in &hogs {
                let done = env.wait_status(*id, &[S::Succeeded], LIMIT).await?;
                ensure!(
                    done.result == Some(json!(TABLE_GROWTHS_THAT_FIT)),
                    "only the growths the memory limit covers succeed: {done:?}"
                );
            }
            let growth = peak.saturating_sub(rss_before);
            eprintln!(
                "[{}] 4 table hogs (64 tables x 1M elements asked, 32 MiB sandbox): RSS before {} MB, \
                 peak (VmHWM) {} MB (+{} MB); {} victims ok",
                env.server(),
                rss_before / 1024,
                peak / 1024,
                growth / 1024,
                victims.len()
            );
            ensure!(
                growth <= MAX_TABLE_RSS_GROWTH_KB,
                "worker peak RSS grew by {} MB (bound {} MB)",
                growth / 1024,
                MAX_TABLE_RSS_GROWTH_KB / 1024
            );
            ensure!(
                worker.wait_exit(Duration::ZERO).is_err(),
                "the worker exited"
            );
            Ok(())
        },
    )
    .await
}
