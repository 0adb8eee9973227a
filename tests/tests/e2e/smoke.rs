//! The minimal smoke checks of a deployment, each case on MariaDB and MySQL:
//! a short task goes `queued → running → succeeded` with its result; the same idempotency key
//! and payload give the same execution, a different payload a `Conflict`; a long cancellable
//! task ends `cancelled` and its guest stops at once; a worker restarted mid-run leaves a
//! `retrying` attempt and a new worker finishes the execution with a new attempt; two pages
//! of a list have no duplicate and no gap.

use std::collections::HashSet;
use std::time::Duration;

use anyhow::{Result, ensure};
use onestep_core::request::{ListQuery, SubmitRequest};
use onestep_core::{ExecutionError, ExecutionStatus as S};
use onestep_e2e::{Schedule, e2e_config, on_each_server, secs_between, statuses};
use serde_json::json;

const LIMIT: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_task_goes_queued_running_succeeded() -> Result<()> {
    let config = e2e_config("worker.yaml");
    on_each_server(
        "queued→running→succeeded",
        &config,
        Schedule::Concurrent,
        |env| async move {
            let payload = json!({"steps": 8, "step_ms": 100});
            let submitted = env.submit("countdown", payload.clone()).await?;
            ensure!(
                submitted.status == S::Queued,
                "submitted {:?}",
                submitted.status
            );
            ensure!(env.get(submitted.id).await?.status == S::Queued);

            let _worker = env.spawn_worker("w1")?;
            let running = env.wait_status(submitted.id, &[S::Running], LIMIT).await?;
            ensure!(running.attempts == 1 && running.started_at.is_some());
            let done = env
                .wait_status(submitted.id, &[S::Succeeded], LIMIT)
                .await?;
            ensure!(done.finished_at.is_some() && done.error.is_none());
            ensure!(
                done.result == Some(payload.clone()),
                "result {:?}",
                done.result
            );
            ensure!(env.client.result(submitted.id).await? == payload);

            let attempts = env.db.attempts(submitted.id).await?;
            ensure!(statuses(&attempts) == ["succeeded"], "{attempts:?}");
            ensure!(attempts[0].worker_id == "w1" && attempts[0].error_kind.is_none());
            Ok(())
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_key_same_execution_different_payload_conflicts() -> Result<()> {
    let config = e2e_config("worker.yaml");
    on_each_server(
        "idempotency",
        &config,
        Schedule::Concurrent,
        |env| async move {
            let request = SubmitRequest {
                task_name: "echo".into(),
                payload: json!({"order": 42, "items": ["a", "b"]}),
                idempotency_key: Some("request-42".into()),
                ..SubmitRequest::default()
            };
            let first = env.client.submit(&request).await?;
            // A retry of the same request (e.g. after a network timeout) before it ran.
            let again = env.client.submit(&request).await?;
            ensure!(again.id == first.id, "{} != {}", again.id, first.id);

            let _worker = env.spawn_worker("w1")?;
            env.wait_status(first.id, &[S::Succeeded], LIMIT).await?;
            // ... and after it ran: still the same execution, not a second run.
            let late = env.client.submit(&request).await?;
            ensure!(
                late.id == first.id && late.status == S::Succeeded,
                "{late:?}"
            );
            ensure!(env.db.attempts(first.id).await?.len() == 1);

            let other = SubmitRequest {
                payload: json!({"order": 43}),
                ..request.clone()
            };
            match env.client.submit(&other).await {
                Err(ExecutionError::Conflict { .. }) => {}
                outcome => anyhow::bail!("different payload, same key: {outcome:?}"),
            }
            let rows = env
                .db
                .query_strings("SELECT id FROM onestep_executions")
                .await?;
            ensure!(rows.len() == 1, "{rows:?}");
            Ok(())
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_task_is_cancelled_and_its_guest_stops() -> Result<()> {
    let config = e2e_config("worker.yaml");
    on_each_server(
        "cancel long task",
        &config,
        Schedule::Concurrent,
        |env| async move {
            let _worker = env.spawn_worker("w1")?;
            // 60 s of work in 50 ms steps.
            let long = env
                .submit("countdown", json!({"steps": 1200, "step_ms": 50}))
                .await?;
            env.wait_status(long.id, &[S::Running], LIMIT).await?;

            let requested = env.client.cancel(long.id, Some("smoke test")).await?;
            let requested = requested.ok_or_else(|| anyhow::anyhow!("cancel found nothing"))?;
            ensure!(
                requested.status == S::CancelRequested,
                "{:?}",
                requested.status
            );
            let cancelled = env.wait_status(long.id, &[S::Cancelled], LIMIT).await?;
            ensure!(cancelled.result.is_none());
            let asked = requested
                .cancel_requested_at
                .expect("cancel_requested_at")
                .naive_utc();

            // The guest really stopped: the attempt (whose completion is written only after the
            // handler call returned) ended within a heartbeat interval or two, not after 60 s.
            let attempts = env.db.attempts(long.id).await?;
            ensure!(statuses(&attempts) == ["cancelled"], "{attempts:?}");
            let finished = attempts[0].finished_at.expect("finished_at");
            let lag = secs_between(asked, finished);
            ensure!(
                (0.0..2.0).contains(&lag),
                "attempt finished {lag:.3}s after the cancel"
            );
            ensure!(
                attempts[0].error_kind.as_deref() == Some("cancelled"),
                "{attempts:?}"
            );

            // A guest blocked in an hour-long host call is stopped as promptly.
            let sleeper = env
                .submit("sleepy", json!({"mode": "sleep", "secs": 3600}))
                .await?;
            env.wait_status(sleeper.id, &[S::Running], LIMIT).await?;
            env.client.cancel(sleeper.id, None).await?;
            let stopped = env.wait_status(sleeper.id, &[S::Cancelled], LIMIT).await?;
            let asked = stopped.cancel_requested_at.expect("cancel_requested_at");
            let lag = secs_between(
                asked.naive_utc(),
                stopped.finished_at.expect("finished").naive_utc(),
            );
            ensure!(
                lag < 2.0,
                "the sleeping guest stopped {lag:.3}s after the cancel"
            );
            ensure!(statuses(&env.db.attempts(sleeper.id).await?) == ["cancelled"]);

            // No further attempt: the same worker goes on serving (a later execution succeeds)
            // and the cancelled one keeps its single attempt.
            let next = env.submit("echo", json!("after")).await?;
            env.wait_status(next.id, &[S::Succeeded], LIMIT).await?;
            let after = env.get(long.id).await?;
            ensure!(
                after.status == S::Cancelled && after.attempts == 1,
                "{after:?}"
            );
            ensure!(env.db.attempts(long.id).await?.len() == 1);
            Ok(())
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_restart_mid_run_gives_a_new_attempt() -> Result<()> {
    let config = e2e_config("worker.yaml");
    on_each_server(
        "worker restart",
        &config,
        Schedule::Concurrent,
        |env| async move {
            let mut first = env.spawn_worker("w1")?;
            let exec = env
                .submit("countdown", json!({"steps": 30, "step_ms": 100}))
                .await?;
            env.wait_status(exec.id, &[S::Running], LIMIT).await?;

            // SIGTERM: drain for shutdown_timeout_s (1 s), then the run is stopped and recorded
            // `retrying` with kind `cancelled`, and the process exits 0.
            first.signal("TERM")?;
            let code = first.wait_exit(Duration::from_secs(15))?;
            ensure!(code == Some(0), "exit {code:?}: {}", first.log());
            let attempts = env.db.attempts(exec.id).await?;
            ensure!(statuses(&attempts) == ["retrying"], "{attempts:?}");
            ensure!(attempts[0].error_kind.as_deref() == Some("cancelled"));
            ensure!(attempts[0].exception_type.as_deref() == Some("CancelledError"));
            ensure!(env.get(exec.id).await?.status == S::Retrying);

            let _second = env.spawn_worker("w2")?;
            let done = env.wait_status(exec.id, &[S::Succeeded], LIMIT).await?;
            ensure!(done.attempts == 2 && done.error.is_none(), "{done:?}");
            let attempts = env.db.attempts(exec.id).await?;
            ensure!(
                statuses(&attempts) == ["retrying", "succeeded"],
                "{attempts:?}"
            );
            ensure!(attempts[0].worker_id == "w1" && attempts[1].worker_id == "w2");
            Ok(())
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_pages_without_duplicates_or_gaps() -> Result<()> {
    let config = e2e_config("worker.yaml");
    on_each_server(
        "list two pages",
        &config,
        Schedule::Concurrent,
        |env| async move {
            let mut submitted = Vec::new();
            for i in 0..7 {
                submitted.push(env.submit("echo", json!({"i": i})).await?.id);
            }
            let query = ListQuery {
                limit: 4,
                ..ListQuery::default()
            };
            let first = env.client.list(&query).await?;
            ensure!(first.items.len() == 4, "page 1 has {}", first.items.len());
            let cursor = first.next_cursor.clone();
            ensure!(cursor.is_some(), "page 1 has no next cursor");
            let second = env
                .client
                .list(&ListQuery {
                    cursor,
                    ..query.clone()
                })
                .await?;
            ensure!(second.items.len() == 3, "page 2 has {}", second.items.len());
            ensure!(second.next_cursor.is_none(), "page 2 has a next cursor");

            let listed: Vec<_> = first
                .items
                .iter()
                .chain(&second.items)
                .map(|e| e.id)
                .collect();
            let unique: HashSet<_> = listed.iter().collect();
            ensure!(unique.len() == 7, "duplicates across pages: {listed:?}");
            // Newest first: exactly the submissions, in reverse order.
            let newest_first: Vec<_> = submitted.iter().rev().copied().collect();
            ensure!(listed == newest_first, "{listed:?} != {newest_first:?}");
            Ok(())
        },
    )
    .await
}
