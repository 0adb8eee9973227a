//! The worker runtime under failures and load, on MariaDB and MySQL: a flaky handler is
//! retried and succeeds; the backoff policy's delays grow (0.2, 0.4, 0.8 s); a fatal error
//! fails at once, and so do deterministic guest failures (memory limit, panic) despite a retry
//! policy; spinning guests are stopped by `timeout_s` (kind `timeout`, `TimeoutError`)
//! while the same worker keeps heartbeating another execution; and four CPU-bound guests on a
//! 2-core machine do not make any lease expire.

use std::time::{Duration, Instant};

use anyhow::{Result, bail, ensure};
use chrono::NaiveDateTime;
use onestep_core::ExecutionStatus as S;
use onestep_e2e::{Env, Schedule, e2e_config, on_each_server, secs_between, statuses};
use serde_json::json;
use uuid::Uuid;

const LIMIT: Duration = Duration::from_secs(30);
/// `lease_duration_s` of `config/e2e/worker.yaml`.
const LEASE_S: f64 = 2.0;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flaky_handler_is_retried_then_succeeds() -> Result<()> {
    let config = e2e_config("worker.yaml");
    on_each_server(
        "flaky retried",
        &config,
        Schedule::Concurrent,
        |env| async move {
            let _worker = env.spawn_worker("w1")?;
            let exec = env
                .submit("flaky", json!({"succeed_on_attempt": 3}))
                .await?;
            let done = env.wait_status(exec.id, &[S::Succeeded], LIMIT).await?;
            ensure!(done.attempts == 3 && done.error.is_none(), "{done:?}");
            ensure!(done.result == Some(json!({"attempt": 3, "succeeded": true})));
            let attempts = env.db.attempts(exec.id).await?;
            ensure!(
                statuses(&attempts) == ["retrying", "retrying", "succeeded"],
                "{attempts:?}"
            );
            for a in &attempts[..2] {
                ensure!(a.error_kind.as_deref() == Some("error"), "{a:?}");
                ensure!(a.exception_type.as_deref() == Some("HandlerError"), "{a:?}");
            }
            // The guest asks for 10 ms (retry-after), which replaces the policy's delay.
            for pair in attempts.windows(2) {
                let gap = secs_between(pair[0].finished_at.expect("finished"), pair[1].started_at);
                ensure!(
                    gap >= 0.009,
                    "attempt {} began {gap:.3}s after",
                    pair[1].attempt_no
                );
            }
            Ok(())
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exponential_backoff_delays_grow_until_failed() -> Result<()> {
    let config = e2e_config("worker.yaml");
    on_each_server("backoff", &config, Schedule::Concurrent, |env| async move {
        let _worker = env.spawn_worker("w1")?;
        let exec = env.submit("panicky", json!({"mode": "retryable"})).await?;
        let failed = env.wait_status(exec.id, &[S::Failed], LIMIT).await?;
        ensure!(failed.attempts == 4, "{failed:?}");
        let error = failed.error.clone().expect("error object");
        ensure!(
            error.kind == "error" && error.exception_type == "HandlerError",
            "{error:?}"
        );
        let attempts = env.db.attempts(exec.id).await?;
        ensure!(
            statuses(&attempts) == ["retrying", "retrying", "retrying", "failed"],
            "{attempts:?}"
        );
        // exponential_backoff min 0.2 s × 2^n, no jitter: available_at = finished + delay.
        for (pair, delay) in attempts.windows(2).zip([0.2, 0.4, 0.8]) {
            let gap = secs_between(pair[0].finished_at.expect("finished"), pair[1].started_at);
            ensure!(
                gap >= delay - 0.001 && gap < delay + 1.5,
                "attempt {} began {gap:.3}s after the previous one (delay {delay}s)",
                pair[1].attempt_no
            );
        }
        Ok(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deterministic_guest_failures_are_not_retried() -> Result<()> {
    let config = e2e_config("worker.yaml");
    on_each_server(
        "deterministic failures",
        &config,
        Schedule::Concurrent,
        |env| async move {
            let _worker = env.spawn_worker("w1")?;
            // `panicky` retries up to 4 attempts; these fail the same way every time.
            for (mode, exception_type) in
                [("alloc", "MemoryLimitExceeded"), ("panic", "GuestPanic")]
            {
                let exec = env.submit("panicky", json!({"mode": mode})).await?;
                let failed = env.wait_status(exec.id, &[S::Failed], LIMIT).await?;
                ensure!(failed.attempts == 1, "{mode}: {failed:?}");
                let error = failed.error.clone().expect("error object");
                ensure!(
                    error.kind == "error" && error.exception_type == exception_type,
                    "{mode}: {error:?}"
                );
                ensure!(error.stage.as_deref() == Some("handler"), "{error:?}");
                let attempts = env.db.attempts(exec.id).await?;
                ensure!(statuses(&attempts) == ["failed"], "{mode}: {attempts:?}");
            }
            Ok(())
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fatal_error_fails_at_once() -> Result<()> {
    let config = e2e_config("worker.yaml");
    on_each_server(
        "fatal error",
        &config,
        Schedule::Concurrent,
        |env| async move {
            let _worker = env.spawn_worker("w1")?;
            let exec = env.submit("misbehave", json!({"mode": "fatal"})).await?;
            let failed = env.wait_status(exec.id, &[S::Failed], LIMIT).await?;
            ensure!(failed.attempts == 1, "{failed:?}");
            let error = failed.error.clone().expect("error object");
            ensure!(
                error.kind == "error" && error.exception_type == "HandlerError",
                "{error:?}"
            );
            ensure!(error.stage.as_deref() == Some("handler"), "{error:?}");
            let attempts = env.db.attempts(exec.id).await?;
            ensure!(statuses(&attempts) == ["failed"], "{attempts:?}");
            ensure!(attempts[0].error_kind.as_deref() == Some("error"));
            Ok(())
        },
    )
    .await
}

/// Watches the heartbeats of `watched` until every execution of `until` is terminal; returns
/// the largest gap between successive heartbeats seen (a heartbeat that never came counts
/// until the end) and how many heartbeats were seen.
async fn watch_heartbeats(env: &Env, watched: Uuid, until: &[Uuid]) -> Result<(f64, usize)> {
    let deadline = Instant::now() + LIMIT;
    let mut seen: Vec<NaiveDateTime> = Vec::new();
    loop {
        let rows = env.db.attempts(watched).await?;
        let beat = match rows.as_slice() {
            [a] if a.status == "running" => a.heartbeat_at,
            other => bail!("the watched execution's attempts changed: {other:?}"),
        };
        if seen.last() != Some(&beat) {
            seen.push(beat);
        }
        let mut all_done = true;
        for id in until {
            all_done &= env.get(*id).await?.terminal();
        }
        if all_done {
            let now = chrono::Utc::now().naive_utc();
            let mut gaps: Vec<f64> = seen.windows(2).map(|w| secs_between(w[0], w[1])).collect();
            gaps.push(secs_between(beat, now));
            return Ok((gaps.into_iter().fold(0.0, f64::max), seen.len()));
        }
        if Instant::now() > deadline {
            bail!("the watched executions did not finish within {LIMIT:?}");
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spinning_guest_times_out_while_heartbeats_go_on() -> Result<()> {
    let config = e2e_config("worker.yaml");
    on_each_server(
        "spin timeout + heartbeat",
        &config,
        Schedule::Concurrent,
        |env| async move {
            let _worker = env.spawn_worker("w1")?;
            let steady = env
                .submit("countdown", json!({"steps": 40, "step_ms": 100}))
                .await?;
            env.wait_status(steady.id, &[S::Running], LIMIT).await?;
            // Two spinners (the task's concurrency): both cores busy for the 1 s timeout.
            let mut spins = Vec::new();
            for _ in 0..2 {
                spins.push(env.submit("misbehave", json!({"mode": "spin"})).await?.id);
            }
            let (max_gap, beats) = watch_heartbeats(&env, steady.id, &spins).await?;
            eprintln!(
                "[{}] heartbeats while spinning: {beats}, max gap {max_gap:.2}s",
                env.server()
            );
            ensure!(max_gap < LEASE_S * 0.75, "heartbeat gap {max_gap:.2}s");

            for id in &spins {
                let failed = env.wait_status(*id, &[S::Failed], LIMIT).await?;
                let error = failed.error.clone().expect("error object");
                ensure!(
                    error.kind == "timeout" && error.exception_type == "TimeoutError",
                    "{error:?}"
                );
                let attempts = env.db.attempts(*id).await?;
                ensure!(statuses(&attempts) == ["failed"], "{attempts:?}");
                ensure!(attempts[0].error_kind.as_deref() == Some("timeout"));
                let ran = secs_between(
                    attempts[0].started_at,
                    attempts[0].finished_at.expect("end"),
                );
                ensure!(
                    (1.0..3.0).contains(&ran),
                    "the spinner ran {ran:.2}s with timeout_s 1"
                );
            }

            let done = env.wait_status(steady.id, &[S::Succeeded], LIMIT).await?;
            ensure!(done.attempts == 1, "{done:?}");
            let attempts = env.db.attempts(steady.id).await?;
            ensure!(statuses(&attempts) == ["succeeded"], "{attempts:?}");
            // Heartbeats went on for the whole 4 s run (every 0.5 s).
            let span = secs_between(attempts[0].started_at, attempts[0].heartbeat_at);
            ensure!(span >= 2.5, "last heartbeat {span:.2}s after the start");
            ensure!(
                env.db
                    .count_status("execution_attempts", "lease_lost")
                    .await?
                    == 0
            );
            Ok(())
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_busy_guests_lose_no_lease() -> Result<()> {
    let config = e2e_config("worker.yaml");
    on_each_server(
        "4 busy guests",
        &config,
        Schedule::Exclusive,
        |env| async move {
            let _worker = env.spawn_worker("w1")?;
            let normal = env
                .submit("countdown", json!({"steps": 50, "step_ms": 100}))
                .await?;
            env.wait_status(normal.id, &[S::Running], LIMIT).await?;
            let mut spins = Vec::new();
            for _ in 0..4 {
                spins.push(env.submit("busy", json!({"mode": "spin"})).await?.id);
            }
            let (max_gap, beats) = watch_heartbeats(&env, normal.id, &spins).await?;
            eprintln!(
                "[{}] heartbeats under 4 spinners: {beats}, max gap {max_gap:.2}s",
                env.server()
            );
            ensure!(max_gap < LEASE_S * 0.75, "heartbeat gap {max_gap:.2}s");

            for id in &spins {
                let failed = env.wait_status(*id, &[S::Failed], LIMIT).await?;
                let error = failed.error.clone().expect("error object");
                ensure!(error.kind == "timeout", "{error:?}");
                let attempts = env.db.attempts(*id).await?;
                ensure!(statuses(&attempts) == ["failed"], "{attempts:?}");
                let ran = secs_between(
                    attempts[0].started_at,
                    attempts[0].finished_at.expect("end"),
                );
                ensure!(
                    (4.0..7.0).contains(&ran),
                    "a spinner ran {ran:.2}s with timeout_s 4"
                );
            }
            let done = env.wait_status(normal.id, &[S::Succeeded], LIMIT).await?;
            ensure!(done.attempts == 1, "{done:?}");
            ensure!(statuses(&env.db.attempts(normal.id).await?) == ["succeeded"]);
            ensure!(
                env.db
                    .count_status("execution_attempts", "lease_lost")
                    .await?
                    == 0
            );
            Ok(())
        },
    )
    .await
}
