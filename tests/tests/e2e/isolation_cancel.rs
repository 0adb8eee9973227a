//! Cancel latency does not depend on the heartbeat (docs/semantics.md#cancel-poll), measured
//! with the DEFAULT source settings (90 s lease, 30 s heartbeat, 1 s cancel poll): 20 busy
//! guests (misbehave `spin`, a CPU loop that never calls the host) are cancelled while they
//! run, four at a time, and the time from `cancel_requested_at` to `finished_at` is printed as
//! p50/p99. Beside them the same worker serves a victim task (`echo`): every victim execution
//! submitted during the attack succeeds, and the worker stays up.
//!
//! Only a generous bound is asserted (p99 < 5 s; a heartbeat-bound cancel takes up to 30 s at
//! these settings): the test checks the mechanism, not the machine's speed.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use onestep_core::ExecutionStatus as S;
use onestep_e2e::{Env, Schedule, guest, on_each_server, secs_between, statuses};
use serde_json::json;

/// Spinning executions cancelled in all, and how many run at once.
const EXECUTIONS: usize = 20;
const WAVE: usize = 4;
/// How long each wave spins before its cancel requests: 1 s plus 0.2 s more per wave, so the
/// requests fall at different phases of the poll (and heartbeat) timers.
fn spin_before_cancel(wave: usize) -> Duration {
    Duration::from_millis(1_000 + 200 * wave as u64)
}
/// Long enough for a heartbeat-bound cancel (30 s at the defaults), so a regression reports
/// its figures instead of timing out.
const LIMIT: Duration = Duration::from_secs(75);
/// The asserted bound on the p99 cancel latency at the defaults.
const P99_BOUND_S: f64 = 5.0;

/// A worker file with the defaults for everything about leases, heartbeats and cancel polls.
fn write_config(dir: &Path) -> Result<std::path::PathBuf> {
    let spin = guest("misbehave")?;
    let echo = guest("echo")?;
    let yaml = format!(
        r#"apiVersion: onestep/v1alpha1
kind: App
app:
  name: isolation-cancel
  shutdown_timeout_s: 1.0
  logging: {{level: INFO, format: text}}
resources:
  db:
    type: "${{ONESTEP_E2E_BACKEND:-mysql}}"
    dsn: "${{ONESTEP_DSN}}"
  spin_jobs:
    type: "${{ONESTEP_E2E_BACKEND:-mysql}}_execution_source"
    connector: db
    namespace: e2e
    task_names: [spin]
    worker_id: "${{ONESTEP_WORKER_ID:-w1}}"
  echo_jobs:
    type: "${{ONESTEP_E2E_BACKEND:-mysql}}_execution_source"
    connector: db
    namespace: e2e
    task_names: [echo]
    worker_id: "${{ONESTEP_WORKER_ID:-w1}}"
tasks:
  - name: spin
    source: spin_jobs
    handler: {{component: "{spin}"}}
    concurrency: {WAVE}
  - name: echo
    source: echo_jobs
    handler: {{component: "{echo}"}}
    concurrency: 2
"#,
        spin = spin.display(),
        echo = echo.display(),
    );
    let path = dir.join("isolation_cancel.yaml");
    std::fs::write(&path, yaml)?;
    Ok(path)
}

/// The `q`-quantile by nearest rank of sorted `v`.
fn quantile(v: &[f64], q: f64) -> f64 {
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

/// Whether process `pid` is alive (not exited, not a zombie), and its peak RSS in kB.
fn alive_with_peak_rss(pid: u32) -> (bool, Option<u64>) {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return (false, None);
    };
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::trim)
            .map(str::to_owned)
    };
    let zombie = field("State:").is_some_and(|s| s.starts_with('Z'));
    let hwm = field("VmHWM:")
        .and_then(|s| s.split_whitespace().next().map(str::to_owned))
        .and_then(|s| s.parse().ok());
    (!zombie, hwm)
}

async fn cancel_busy_guests(env: Arc<Env>) -> Result<()> {
    let worker = env.spawn_worker("w1")?;

    // The victim: one echo execution every 200 ms for as long as the attack lasts.
    let attacking = Arc::new(AtomicBool::new(true));
    let victim = {
        let env = Arc::clone(&env);
        let attacking = Arc::clone(&attacking);
        tokio::spawn(async move {
            let mut ids = Vec::new();
            let mut i = 0u64;
            while attacking.load(Ordering::SeqCst) {
                ids.push(env.submit("echo", json!({"victim": i})).await?.id);
                i += 1;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            anyhow::Ok(ids)
        })
    };

    let mut latencies = Vec::with_capacity(EXECUTIONS);
    for n in 0..EXECUTIONS / WAVE {
        let mut wave = Vec::with_capacity(WAVE);
        for _ in 0..WAVE {
            wave.push(env.submit("spin", json!({"mode": "spin"})).await?.id);
        }
        for id in &wave {
            env.wait_status(*id, &[S::Running], LIMIT).await?;
        }
        tokio::time::sleep(spin_before_cancel(n)).await;
        for id in &wave {
            let asked = env
                .client
                .cancel(*id, Some("isolation test"))
                .await?
                .context("cancel found nothing")?;
            ensure!(asked.status == S::CancelRequested, "{asked:?}");
        }
        for id in &wave {
            let done = env.wait_status(*id, &[S::Cancelled], LIMIT).await?;
            let asked = done.cancel_requested_at.context("cancel_requested_at")?;
            let finished = done.finished_at.context("finished_at")?;
            latencies.push(secs_between(asked.naive_utc(), finished.naive_utc()));
            let attempts = env.db.attempts(*id).await?;
            ensure!(statuses(&attempts) == ["cancelled"], "{attempts:?}");
            ensure!(
                attempts[0].error_kind.as_deref() == Some("cancelled"),
                "{attempts:?}"
            );
        }
    }
    attacking.store(false, Ordering::SeqCst);
    let victims = victim.await.context("victim task")??;

    latencies.sort_by(f64::total_cmp);
    let (p50, p99) = (quantile(&latencies, 0.5), quantile(&latencies, 0.99));
    let (alive, hwm_kb) = alive_with_peak_rss(worker.pid());
    eprintln!(
        "[{}] cancel-to-cancelled latency at the defaults (heartbeat 30 s, cancel poll 1 s), \
         {} busy guests: p50 {p50:.3} s, p99 {p99:.3} s, max {:.3} s; {} victim executions; \
         worker VmHWM {} kB",
        env.server(),
        latencies.len(),
        latencies.last().copied().unwrap_or(0.0),
        victims.len(),
        hwm_kb.map_or_else(|| "?".to_owned(), |k| k.to_string()),
    );
    ensure!(alive, "the worker exited during the attack");
    ensure!(!victims.is_empty(), "no victim execution was submitted");
    for id in &victims {
        env.wait_status(*id, &[S::Succeeded], Duration::from_secs(30))
            .await?;
    }
    ensure!(
        p99 < P99_BOUND_S,
        "p99 cancel latency {p99:.3} s at the defaults (bound {P99_BOUND_S} s): {latencies:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_stops_a_busy_guest_within_the_poll_interval_at_the_default_settings() -> Result<()>
{
    let dir = tempfile::tempdir()?;
    let config = write_config(dir.path())?;
    on_each_server(
        "isolation: cancel latency",
        &config,
        Schedule::Exclusive,
        cancel_busy_guests,
    )
    .await
}
