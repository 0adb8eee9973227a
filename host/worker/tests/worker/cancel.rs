//! Cancel propagation: a cancel requested in the store reaches the handler's token at the next
//! cancel poll (docs/semantics.md#cancel-poll) — about a second at the defaults, not the 30 s
//! heartbeat — or, when the poll fails, at the next heartbeat; either way the execution ends
//! `cancelled`. One poll per tick covers every in-flight execution of the task, and an idle
//! task polls nothing.

use std::time::Duration;

use onestep_core::ports::ExecutionStore;
use onestep_core::retry::FailureKind;
use onestep_core::runner::RunOutcome;
use onestep_core::settings::{DEFAULT_CANCEL_POLL_INTERVAL, DEFAULT_HEARTBEAT_INTERVAL};
use onestep_core::{AttemptStatus, ExecutionStatus};
use onestep_testkit::{Op, Step, runner};
use onestep_worker::{WorkerSettings, cancel_error};
use serde_json::json;
use tokio::time::Instant;

use crate::harness::{Harness, NS, bounded, disconnected, let_time_pass, task_settings};

/// Starts a default worker on one blocked execution, requests its cancel and waits for
/// `cancelled`; returns how long that took on the worker's timers.
async fn cancel_one(h: &mut Harness, on_cancel: RunOutcome) -> (uuid::Uuid, Duration) {
    h.runner.set_default(Step::Block { on_cancel });
    let e = h.submit(json!(1)).await;
    h.start_default();
    h.runner.wait_for_calls(1).await;
    let asked = Instant::now();
    let c = ExecutionStore::cancel(&*h.store, NS, e.id, Some("stop".into()))
        .await
        .expect("cancel")
        .expect("row");
    assert_eq!(c.status, ExecutionStatus::CancelRequested);
    bounded(h.wait_status(e.id, ExecutionStatus::Cancelled)).await;
    let took = asked.elapsed();
    assert!(h.runner.calls()[0].cancelled, "the handler's token fired");
    (e.id, took)
}

async fn cancel_while_running(on_cancel: RunOutcome) -> (Harness, uuid::Uuid) {
    let mut h = Harness::new();
    let (id, took) = cancel_one(&mut h, on_cancel).await;
    assert_eq!(
        (
            h.settings.heartbeat_interval,
            h.settings.cancel_poll_interval
        ),
        (DEFAULT_HEARTBEAT_INTERVAL, DEFAULT_CANCEL_POLL_INTERVAL),
        "the defaults: a 30 s heartbeat, a 1 s cancel poll"
    );
    assert_eq!(
        took, h.settings.cancel_poll_interval,
        "seen at the next cancel poll"
    );
    assert_eq!(h.heartbeats(), 0, "no heartbeat was needed to see it");
    assert_eq!(h.store.calls(Op::CancelPoll), 1);
    h.stop().await.expect("clean stop");
    (h, id)
}

#[tokio::test(start_paused = true)]
async fn a_cancel_request_stops_the_handler_and_the_execution_is_cancelled() {
    let (h, id) = cancel_while_running(RunOutcome::Cancelled).await;
    let x = h.execution(id);
    assert_eq!(x.error, Some(cancel_error()));
    assert_eq!(x.result, None);
    let a = h.store.attempt_rows(id);
    assert_eq!(a[0].status, AttemptStatus::Cancelled);
    assert_eq!(h.stats.cancelled(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_handler_error_after_the_cancel_is_a_cancellation() {
    let failed = RunOutcome::Failed(runner::failure(FailureKind::Error, true));
    let (h, id) = cancel_while_running(failed).await;
    assert_eq!(h.execution(id).error, Some(cancel_error()));
}

#[tokio::test(start_paused = true)]
async fn a_success_after_the_cancel_request_loses_to_the_cancel() {
    let (h, id) = cancel_while_running(RunOutcome::Succeeded(json!("late"))).await;
    let x = h.execution(id);
    assert_eq!((x.result, x.error), (None, None), "cancel wins: no result");
}

#[tokio::test(start_paused = true)]
async fn a_failing_cancel_poll_falls_back_to_the_heartbeat() {
    let mut h = Harness::new();
    h.store
        .fail_times(Op::CancelPoll, 1_000, disconnected("cancel_poll"));
    let (id, took) = cancel_one(&mut h, RunOutcome::Cancelled).await;
    assert_eq!(took, h.settings.heartbeat_interval, "seen at the heartbeat");
    assert_eq!(h.heartbeats(), 1);
    assert!(h.store.calls(Op::CancelPoll) >= 29, "the poll kept trying");
    h.stop().await.expect("clean stop");
    let x = h.execution(id);
    assert_eq!(x.error, Some(cancel_error()));
    assert_eq!(h.store.attempt_rows(id)[0].status, AttemptStatus::Cancelled);
}

#[tokio::test(start_paused = true)]
async fn one_poll_per_tick_covers_every_in_flight_execution_and_an_idle_task_polls_nothing() {
    let mut h = Harness::new();
    h.runner.set_default(Step::block());
    let mut settings = task_settings();
    settings.concurrency = 5;
    h.start(settings, WorkerSettings::default());
    // Idle: no statement at all.
    let_time_pass(Duration::from_secs(10)).await;
    assert_eq!(h.store.calls(Op::CancelPoll), 0, "nothing in flight");

    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(h.submit(json!(i)).await.id);
    }
    bounded(h.runner.wait_for_calls(5)).await;
    // Claims and poll ticks both fall on whole seconds here: count from half-way between.
    let_time_pass(Duration::from_millis(500)).await;
    let polls_before = h.store.calls(Op::CancelPoll);
    let_time_pass(Duration::from_secs(3)).await;
    let polls: Vec<_> = h
        .store
        .log()
        .into_iter()
        .filter(|r| r.op == Op::CancelPoll)
        .skip(polls_before)
        .collect();
    assert_eq!(polls.len(), 3, "one poll per second: {polls:?}");
    assert!(
        polls.iter().all(|r| r.items == 5 && r.ok),
        "each poll asks about all five: {polls:?}"
    );

    for id in &ids[..2] {
        ExecutionStore::cancel(&*h.store, NS, *id, None)
            .await
            .expect("cancel")
            .expect("row");
    }
    for id in &ids[..2] {
        bounded(h.wait_status(*id, ExecutionStatus::Cancelled)).await;
    }
    for id in &ids[2..] {
        assert_eq!(h.store.status(*id), Some(ExecutionStatus::Running));
    }
    let_time_pass(Duration::from_millis(1_500)).await;
    let last = h
        .store
        .log()
        .into_iter()
        .rfind(|r| r.op == Op::CancelPoll)
        .expect("a poll");
    assert_eq!(last.items, 3, "finished executions are no longer polled");
    assert_eq!(h.heartbeats(), 0, "all within the first heartbeat interval");

    assert_eq!(h.runner.release_all(RunOutcome::Succeeded(json!("ok"))), 3);
    for id in &ids[2..] {
        bounded(h.wait_status(*id, ExecutionStatus::Succeeded)).await;
    }
    let after = h.store.calls(Op::CancelPoll);
    let_time_pass(Duration::from_secs(10)).await;
    assert_eq!(h.store.calls(Op::CancelPoll), after, "idle again: no poll");
    h.stop().await.expect("clean stop");
}

#[tokio::test(start_paused = true)]
async fn a_cancel_poll_longer_than_the_heartbeat_is_refused() {
    let mut s = task_settings();
    s.cancel_poll_interval = s.heartbeat_interval + Duration::from_secs(1);
    let e = s.validate().expect_err("poll > heartbeat");
    assert!(
        e.to_string()
            .contains("cancel_poll_interval_s must be > 0 and <= heartbeat_interval_s"),
        "{e}"
    );
    s.cancel_poll_interval = Duration::ZERO;
    assert!(s.validate().is_err(), "zero poll");
    s.cancel_poll_interval = s.heartbeat_interval;
    s.validate().expect("poll == heartbeat is allowed");
}
