//! Result memory amplification, on MariaDB and MySQL: four 32 MiB guests each return a 30 MB
//! JSON array at once (the `big` task of `config/e2e/isolation_results.yaml`, 1 MiB result limit)
//! next to a victim `echo` task in the same worker. Every refused result fails its attempt
//! (`ExecutionEncodingError` at stage `result_validation`) under the task's retry policy (three
//! attempts, docs/semantics.md#storable-values), every victim execution submitted during the attack succeeds, the worker stays
//! up, and its peak RSS and its log stay under stated bounds. Results no backend can store
//! (too deep, a NUL) fail their one attempt and are never claimed again.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};

use crate::procfs::{cpu_s, memory_kb, victims_during};
use onestep_core::ExecutionStatus as S;
use onestep_e2e::{Schedule, e2e_config, on_each_server, statuses};
use serde_json::json;

const LIMIT: Duration = Duration::from_secs(60);
/// The attack: concurrent results of this many bytes (the `big` task's concurrency is 4).
const ATTACKERS: usize = 4;
const RESULT_BYTES: u64 = 30_000_000;
/// Peak RSS the worker may reach above its RSS before the attack. Each attacker's guest holds
/// its 30 MB result in its own memory (32 MiB limit) and the host copies it once out of the guest
/// before refusing it unparsed: 4 × (32 MiB + 30 MB) ≈ 250 MB, plus room for the allocator.
/// Before the fix the same attack (debug build) took the worker from 38 MB to 3.1 GB and did not
/// end within a minute.
const MAX_RSS_GROWTH_KB: u64 = 320 * 1024;
/// The worker's whole log during the case (a refused result is never logged).
const MAX_LOG_BYTES: u64 = 256 * 1024;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_results_are_refused_without_amplification() -> Result<()> {
    let config = e2e_config("isolation_results.yaml");
    on_each_server(
        "huge results next to a victim",
        &config,
        Schedule::Exclusive,
        |env| async move {
            let mut worker = env.spawn_worker("w1")?;
            let pid = worker.pid();
            // The worker is up and has run a victim once.
            let warm = env.submit("echo", json!({"warm": true})).await?;
            env.wait_status(warm.id, &[S::Succeeded], LIMIT).await?;
            let (rss_before, _) = memory_kb(pid)?;
            let cpu_before = cpu_s(pid)?;

            let started = Instant::now();
            let mut attacks = Vec::new();
            for _ in 0..ATTACKERS {
                let payload = json!({"mode": "big_result", "bytes": RESULT_BYTES});
                attacks.push(env.submit("big", payload).await?.id);
            }
            let attack = victims_during(&env, &attacks, pid, 10, LIMIT).await?;
            let (victims, mut peak_hwm) = (attack.victims, attack.peak_hwm_kb);
            let attack_s = started.elapsed().as_secs_f64();
            let cpu = cpu_s(pid)? - cpu_before;

            for id in &victims {
                let done = env.wait_status(*id, &[S::Succeeded], LIMIT).await?;
                ensure!(done.attempts == 1, "victim {done:?}");
            }
            for id in &attacks {
                let failed = env.wait_status(*id, &[S::Failed], LIMIT).await?;
                let error = failed.error.clone().context("error object")?;
                ensure!(
                    error.kind == "error" && error.exception_type == "ExecutionEncodingError",
                    "{error:?}"
                );
                ensure!(
                    error.stage.as_deref() == Some("result_validation"),
                    "{error:?}"
                );
                let attempts = env.db.attempts(*id).await?;
                ensure!(
                    statuses(&attempts) == ["retrying", "retrying", "failed"],
                    "a refused result follows the retry policy (3 attempts): {attempts:?}"
                );
            }
            let (_, hwm) = memory_kb(pid)?;
            peak_hwm = peak_hwm.max(hwm);
            let growth = peak_hwm.saturating_sub(rss_before);
            let log_bytes = std::fs::metadata(&worker.log_path)?.len();
            eprintln!(
                "[{}] {ATTACKERS} × {RESULT_BYTES} B results: RSS before {} MB, peak (VmHWM) {} MB \
                 (+{} MB), worker CPU {cpu:.2} s over {attack_s:.2} s, {} victims ok, log {log_bytes} B",
                env.server(),
                rss_before / 1024,
                peak_hwm / 1024,
                growth / 1024,
                victims.len(),
            );
            ensure!(
                growth <= MAX_RSS_GROWTH_KB,
                "worker peak RSS grew by {} MB (bound {} MB)",
                growth / 1024,
                MAX_RSS_GROWTH_KB / 1024
            );
            ensure!(
                log_bytes <= MAX_LOG_BYTES,
                "worker log is {log_bytes} B (bound {MAX_LOG_BYTES} B)"
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

/// Results no backend can store, from a real guest through a real worker: JSON nested 40 deep
/// (MariaDB's `json_valid` refuses 32 and deeper) and a string holding U+0000 (PostgreSQL's
/// `jsonb` refuses it). Each fails its one attempt at stage `result_validation` with a message
/// saying why, and is never claimed again: before, the completion failed in the database, the
/// lease expired and the execution was re-run until someone cancelled it (14 attempts in 2 min).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unstorable_result_fails_once_instead_of_looping() -> Result<()> {
    let config = e2e_config("isolation_results.yaml");
    on_each_server(
        "unstorable results",
        &config,
        Schedule::Concurrent,
        |env| async move {
            let _worker = env.spawn_worker("w1")?;
            let deep = format!("{}{}", "[".repeat(40), "]".repeat(40));
            let cases = [
                (deep, "nesting depth over 31"),
                ("\"a\\u0000b\"".to_owned(), "NUL character (U+0000)"),
            ];
            let mut ids = Vec::new();
            for (text, _) in &cases {
                let payload = json!({"mode": "result", "text": text});
                ids.push(env.submit("poison", payload).await?.id);
            }
            let ok = env.submit("echo", json!({"after": "poison"})).await?;
            env.wait_status(ok.id, &[S::Succeeded], LIMIT).await?;
            for (id, (_, why)) in ids.iter().zip(&cases) {
                let failed = env.wait_status(*id, &[S::Failed], LIMIT).await?;
                let error = failed.error.clone().context("error object")?;
                ensure!(
                    error.exception_type == "ExecutionEncodingError"
                        && error.stage.as_deref() == Some("result_validation"),
                    "[{}] {error:?}",
                    env.server()
                );
                // The attempt's message (and the worker's log line) says why.
                let log = env.worker_logs();
                ensure!(
                    log.lines()
                        .any(|l| l.contains(&id.to_string()) && l.contains(why)),
                    "[{}] no log line for {id} saying {why:?}:\n{log}",
                    env.server()
                );
            }
            // Three lease durations (2 s each) later, nothing was claimed again.
            tokio::time::sleep(Duration::from_secs(6)).await;
            for id in &ids {
                let e = env.get(*id).await?;
                let attempts = env.db.attempts(*id).await?;
                ensure!(
                    e.status == S::Failed && e.attempts == 1 && statuses(&attempts) == ["failed"],
                    "[{}] re-run after failing: {e:?} {attempts:?}",
                    env.server()
                );
            }
            Ok(())
        },
    )
    .await
}
