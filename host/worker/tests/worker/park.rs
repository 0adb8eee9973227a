//! A handler that sleeps (docs/steps.md#sleep): the delivery parks the attempt (T15) — the
//! execution waits `queued` until its wake time and its slot is free for other work at once —,
//! parks do not count against the retry policy's `max_attempts`, a cancel requested before the
//! park wins, and `max_duration_s` bounds the whole execution: a sleep past it, a claim after
//! it and an attempt still running at it all fail the execution with `MaxDurationExceeded`.

use std::time::Duration;

use chrono::TimeDelta;
use onestep_core::park::max_duration_error;
use onestep_core::ports::ExecutionStore;
use onestep_core::retry::{FailureKind, RetryPolicy};
use onestep_core::runner::RunOutcome;
use onestep_core::{AttemptStatus, ExecutionStatus};
use onestep_testkit::Step;
use onestep_worker::WorkerSettings;
use serde_json::json;

use crate::harness::{Harness, NS, bounded, let_time_pass, task_settings};

fn parked(h: &Harness, seconds: i64) -> Step {
    Step::Return(RunOutcome::Parked {
        wake_at: h.clock.now_value() + TimeDelta::seconds(seconds),
    })
}

fn statuses(h: &Harness, id: uuid::Uuid) -> Vec<AttemptStatus> {
    h.store
        .attempt_rows(id)
        .into_iter()
        .map(|a| a.status)
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_sleep_parks_the_attempt_and_frees_the_slot_at_once() {
    let mut h = Harness::new();
    let sleeper = h.submit(json!("sleeper")).await;
    let other = h.submit(json!("other")).await;
    let wake = h.clock.now_value() + TimeDelta::seconds(60);
    h.runner
        .script(sleeper.id, [parked(&h, 60), Step::succeed(json!("woke"))]);
    h.runner.set_default(Step::succeed(json!("done")));
    let mut s = task_settings();
    s.concurrency = 1;
    h.start(s, WorkerSettings::default());
    // With one slot, the other execution runs while the sleeper sleeps.
    bounded(h.wait_status(other.id, ExecutionStatus::Succeeded)).await;
    let x = h.execution(sleeper.id);
    assert_eq!(
        (x.status, x.available_at, x.attempts),
        (ExecutionStatus::Queued, wake, 1)
    );
    assert_eq!(statuses(&h, sleeper.id), [AttemptStatus::Parked]);
    assert_eq!(h.stats.parked(), 1);
    assert_eq!(h.stats.succeeded(), 1);
    // At the wake time it is claimed again and goes on.
    h.clock.advance(60.0);
    bounded(h.wait_status(sleeper.id, ExecutionStatus::Succeeded)).await;
    let calls = h.runner.calls_for(sleeper.id);
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[1].invocation.attempt_no, 2);
    assert_eq!(
        statuses(&h, sleeper.id),
        [AttemptStatus::Parked, AttemptStatus::Succeeded]
    );
    h.stop().await.expect("clean stop");
}

#[tokio::test(start_paused = true)]
async fn parks_do_not_count_against_max_attempts() {
    let mut h = Harness::new();
    let e = h.submit(json!(1)).await;
    h.runner.script(
        e.id,
        [
            parked(&h, 0),
            Step::fail(FailureKind::Error, true),
            Step::fail(FailureKind::Error, true),
        ],
    );
    let mut s = task_settings();
    s.retry = RetryPolicy::MaxAttempts {
        max_attempts: 2,
        delay_s: None,
    };
    h.start(s, WorkerSettings::default());
    bounded(h.wait_status(e.id, ExecutionStatus::Failed)).await;
    // Two failed runs (the policy's two attempts) after one park: three attempts in all.
    assert_eq!(h.execution(e.id).attempts, 3);
    assert_eq!(
        statuses(&h, e.id),
        [
            AttemptStatus::Parked,
            AttemptStatus::Retrying,
            AttemptStatus::Failed
        ]
    );
    h.stop().await.expect("clean stop");
}

#[tokio::test(start_paused = true)]
async fn a_cancel_requested_before_the_park_wins() {
    let mut h = Harness::new();
    let e = h.submit(json!(1)).await;
    // A handler stopped by the cancel that sleeps instead of returning an error.
    h.runner.set_default(Step::Block {
        on_cancel: RunOutcome::Parked {
            wake_at: h.clock.now_value() + TimeDelta::seconds(3600),
        },
    });
    h.start_default();
    h.runner.wait_for_calls(1).await;
    ExecutionStore::cancel(&*h.store, NS, e.id, None)
        .await
        .expect("cancel")
        .expect("row");
    bounded(h.wait_status(e.id, ExecutionStatus::Cancelled)).await;
    assert_eq!(statuses(&h, e.id), [AttemptStatus::Cancelled]);
    assert_eq!(h.stats.parked(), 0);
    h.stop().await.expect("clean stop");
}

#[tokio::test(start_paused = true)]
async fn a_cancel_during_a_sleep_ends_it_without_running_the_guest_again() {
    let mut h = Harness::new();
    let e = h.submit(json!(1)).await;
    // Were it ever claimed again, the second call would succeed: the test would see it.
    h.runner
        .script(e.id, [parked(&h, 60), Step::succeed(json!("woke"))]);
    h.start_default();
    bounded(async {
        while h.stats.parked() < 1 {
            let_time_pass(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert_eq!(h.execution(e.id).status, ExecutionStatus::Queued);
    assert_eq!(statuses(&h, e.id), [AttemptStatus::Parked]);
    // The cancel of a sleeping (queued) execution ends it at once (T3).
    let cancelled = ExecutionStore::cancel(&*h.store, NS, e.id, Some("no longer needed".into()))
        .await
        .expect("cancel")
        .expect("row");
    assert_eq!(cancelled.status, ExecutionStatus::Cancelled);
    // Past the wake time the worker keeps polling, and nobody runs the handler again.
    h.clock.advance(120.0);
    let_time_pass(Duration::from_secs(30)).await;
    let x = h.execution(e.id);
    assert_eq!((x.status, x.attempts), (ExecutionStatus::Cancelled, 1));
    assert!(x.finished_at.is_some());
    assert_eq!(h.runner.calls_for(e.id).len(), 1);
    assert_eq!(statuses(&h, e.id), [AttemptStatus::Parked]);
    assert_eq!(h.stats.parked(), 1);
    h.stop().await.expect("clean stop");
}

/// The worker with `max_duration_s` = 30 s.
fn start_bounded(h: &mut Harness, retry: RetryPolicy) {
    let mut s = task_settings();
    s.max_duration = Some(Duration::from_secs(30));
    s.retry = retry;
    h.start(s, WorkerSettings::default());
}

#[tokio::test(start_paused = true)]
async fn a_sleep_past_max_duration_fails_the_execution() {
    let mut h = Harness::new();
    let e = h.submit(json!(1)).await;
    h.runner.script(e.id, [parked(&h, 60)]);
    start_bounded(&mut h, RetryPolicy::NoRetry);
    bounded(h.wait_status(e.id, ExecutionStatus::Failed)).await;
    assert_eq!(h.execution(e.id).error, Some(max_duration_error()));
    assert_eq!(statuses(&h, e.id), [AttemptStatus::Failed]);
    assert_eq!(h.stats.parked(), 0);
    h.stop().await.expect("clean stop");
}

#[tokio::test(start_paused = true)]
async fn a_claim_past_max_duration_fails_without_running() {
    let mut h = Harness::new();
    let e = h.submit(json!(1)).await;
    // Parks within the bound (wake 10 s after the start, the deadline 30 s after it) …
    h.runner.script(e.id, [parked(&h, 10)]);
    h.runner.set_default(Step::succeed(json!("too late")));
    start_bounded(&mut h, RetryPolicy::NoRetry);
    bounded(h.store.wait_until(|s| {
        s.status(e.id) == Some(ExecutionStatus::Queued) && s.attempt_rows(e.id).len() == 1
    }))
    .await;
    // … but is claimed again only after the deadline (no worker had a slot).
    h.clock.advance(40.0);
    bounded(h.wait_status(e.id, ExecutionStatus::Failed)).await;
    assert_eq!(h.runner.call_count(), 1, "the handler did not run again");
    assert_eq!(h.execution(e.id).error, Some(max_duration_error()));
    assert_eq!(
        statuses(&h, e.id),
        [AttemptStatus::Parked, AttemptStatus::Failed]
    );
    h.stop().await.expect("clean stop");
}

#[tokio::test(start_paused = true)]
async fn the_deadline_bounds_each_attempt_and_is_not_retried() {
    let mut h = Harness::new();
    let e = h.submit(json!(1)).await;
    // The runner reports the timeout the invocation's limit would have caused.
    h.runner.set_default(Step::fail(FailureKind::Timeout, true));
    start_bounded(
        &mut h,
        RetryPolicy::MaxAttempts {
            max_attempts: 5,
            delay_s: None,
        },
    );
    bounded(h.wait_status(e.id, ExecutionStatus::Failed)).await;
    let calls = h.runner.calls();
    assert_eq!(calls.len(), 1, "not retried");
    assert_eq!(
        calls[0].invocation.timeout,
        Some(Duration::from_secs(30)),
        "no timeout_s: the time left before the deadline"
    );
    assert_eq!(h.execution(e.id).error, Some(max_duration_error()));
    h.stop().await.expect("clean stop");
}
