//! Drain ordering on shutdown: no new claims, in-flight executions may finish within
//! `shutdown_timeout`, the remainder is cancelled and completes `retrying`, and leases claimed
//! while stopping are released.

use std::time::Duration;

use onestep_core::runner::RunOutcome;
use onestep_core::{AttemptStatus, ExecutionStatus};
use onestep_testkit::{Op, Step};
use onestep_worker::{WorkerSettings, cancel_error};
use serde_json::json;
use tokio::time::Instant;

use crate::harness::{Harness, task_settings};

#[tokio::test(start_paused = true)]
async fn shutdown_stops_claiming_lets_in_flight_finish_then_cancels_the_rest() {
    let mut h = Harness::new();
    h.runner.set_default(Step::block());
    let a = h.submit(json!("a")).await;
    let b = h.submit(json!("b")).await;
    let mut settings = task_settings();
    settings.concurrency = 3;
    let timeout = Duration::from_secs(5);
    h.start(
        settings,
        WorkerSettings {
            shutdown_timeout: Some(timeout),
            ..WorkerSettings::default()
        },
    );
    h.runner.wait_for_calls(2).await;
    let signalled = Instant::now();
    h.shutdown.cancel();
    let worker = h.take_worker();
    let claims = h.store.calls(Op::Claim);
    // Work submitted after the signal is never claimed, although a slot is free.
    let late = h.submit(json!("late")).await;
    // In-flight `a` finishes within the drain window.
    assert!(
        h.runner
            .release(a.id, RunOutcome::Succeeded(json!("a done")))
    );
    h.wait_status(a.id, ExecutionStatus::Succeeded).await;
    assert!(signalled.elapsed() < timeout);
    assert_eq!(h.store.status(b.id), Some(ExecutionStatus::Running));
    // `b` never finishes by itself: cancelled when the timeout passes, completed retrying.
    worker.await.expect("join").expect("clean stop");
    assert_eq!(
        signalled.elapsed(),
        timeout,
        "the remainder is cancelled at the timeout"
    );
    let calls = h.runner.calls_for(b.id);
    assert!(calls[0].cancelled);
    let x = h.execution(b.id);
    assert_eq!(x.status, ExecutionStatus::Retrying);
    assert_eq!(x.error, Some(cancel_error()));
    assert_eq!(x.available_at, h.clock.now_value(), "retry at once");
    assert_eq!(
        h.store.attempt_rows(b.id)[0].status,
        AttemptStatus::Retrying
    );
    assert_eq!(
        h.store.calls(Op::Claim),
        claims,
        "no claim after the signal"
    );
    let l = h.execution(late.id);
    assert_eq!((l.status, l.attempts), (ExecutionStatus::Queued, 0));
    assert_eq!(h.runner.call_count(), 2);
    // Completion order: `a` (in the window) before `b` (after the cancel).
    let done: Vec<_> = h
        .store
        .log()
        .into_iter()
        .filter(|r| matches!(r.op, Op::Complete | Op::CompleteMany))
        .collect();
    assert_eq!(done.len(), 2);
    assert_eq!((h.stats.succeeded(), h.stats.retried()), (1, 1));
}

#[tokio::test(start_paused = true)]
async fn leases_claimed_while_stopping_are_released_unstarted() {
    let mut h = Harness::new();
    h.store.pause(Op::Claim);
    h.start_default();
    h.store.wait_until(|s| s.waiting(Op::Claim) == 1).await;
    // The claim is under way when the signal arrives; it still returns a lease.
    let e = h.submit(json!(1)).await;
    h.shutdown.cancel();
    h.store.resume(Op::Claim);
    h.join().await.expect("clean stop");
    assert_eq!(h.runner.call_count(), 0, "never started");
    assert_eq!(h.stats.released(), 1);
    let x = h.execution(e.id);
    assert_eq!((x.status, x.attempts), (ExecutionStatus::Queued, 1));
    assert_eq!(
        h.store.attempt_rows(e.id)[0].status,
        AttemptStatus::LeaseLost
    );
}

#[tokio::test(start_paused = true)]
async fn without_a_timeout_the_drain_waits_for_every_execution() {
    let mut h = Harness::new();
    h.runner.set_default(Step::block());
    let e = h.submit(json!(1)).await;
    h.start(
        task_settings(),
        WorkerSettings {
            shutdown_timeout: None,
            ..WorkerSettings::default()
        },
    );
    h.runner.wait_for_calls(1).await;
    h.shutdown.cancel();
    let worker = h.take_worker();
    tokio::time::sleep(Duration::from_secs(3600)).await;
    assert!(!worker.is_finished(), "still draining after an hour");
    assert!(!h.runner.calls()[0].cancelled);
    assert!(h.runner.release(e.id, RunOutcome::Succeeded(json!(1))));
    worker.await.expect("join").expect("clean stop");
    assert_eq!(h.store.status(e.id), Some(ExecutionStatus::Succeeded));
}
