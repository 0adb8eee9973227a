//! Heartbeat cadence, retried heartbeat failures, and the lease time left measured on the
//! injected clock.

use chrono::TimeDelta;
use onestep_core::runner::RunOutcome;
use onestep_core::{AttemptStatus, ExecutionStatus};
use onestep_testkit::{Op, Step};
use serde_json::json;
use tokio::time::Instant;

use crate::harness::{Harness, LEASE_S, bounded, disconnected, let_time_pass};

fn at_year(year: i32) -> chrono::DateTime<chrono::Utc> {
    use chrono::TimeZone;
    chrono::Utc
        .with_ymd_and_hms(year, 1, 1, 0, 0, 0)
        .single()
        .expect("valid instant")
}

fn lease() -> TimeDelta {
    TimeDelta::microseconds((LEASE_S * 1e6) as i64)
}

#[tokio::test(start_paused = true)]
async fn heartbeats_every_interval_and_stop_with_the_completion() {
    let mut h = Harness::new();
    h.runner.set_default(Step::block());
    let e = h.submit(json!(1)).await;
    h.start_default();
    h.runner.wait_for_calls(1).await;
    let started = Instant::now();
    let interval = h.settings.heartbeat_interval;
    for k in 1..=3u32 {
        h.store
            .wait_until(|s| {
                s.log().iter().filter(|r| r.op == Op::HeartbeatMany).count() >= k as usize
            })
            .await;
        assert_eq!(
            started.elapsed(),
            interval * k,
            "heartbeat {k} one interval after the last"
        );
        // Each beat extends the lease from the store clock's now.
        let cols = h.store.lease_columns_of(e.id).expect("row");
        assert_eq!(cols.lease_expires_at, Some(h.clock.now_value() + lease()));
        assert_eq!(
            h.store.attempt_rows(e.id)[0].heartbeat_at,
            h.clock.now_value()
        );
        h.clock.advance(interval.as_secs_f64());
    }
    assert_eq!(h.heartbeats(), 3);
    assert!(h.runner.release(e.id, RunOutcome::Succeeded(json!("done"))));
    h.wait_status(e.id, ExecutionStatus::Succeeded).await;
    let_time_pass(interval * 5).await;
    assert_eq!(h.heartbeats(), 3, "no heartbeat after the completion");
    assert_eq!(h.execution(e.id).result, Some(json!("done")));
    h.stop().await.expect("clean stop");
}

#[tokio::test(start_paused = true)]
async fn a_transient_heartbeat_failure_is_retried_and_the_handler_keeps_running() {
    let mut h = Harness::new();
    // Far before the wall clock: the lease is only "still valid" on the injected clock.
    h.clock.set(at_year(2000));
    h.runner.set_default(Step::block());
    let e = h.submit(json!(1)).await;
    h.start_default();
    h.runner.wait_for_calls(1).await;
    h.store
        .fail_times(Op::HeartbeatMany, 2, disconnected("heartbeat"));
    bounded(
        h.store
            .wait_until(|s| s.log().iter().any(|r| r.op == Op::HeartbeatMany && r.ok)),
    )
    .await;
    let beats: Vec<_> = h
        .store
        .log()
        .into_iter()
        .filter(|r| r.op == Op::HeartbeatMany)
        .map(|r| r.ok)
        .collect();
    assert_eq!(beats, [false, false, true]);
    let calls = h.runner.calls();
    assert_eq!(calls[0].outcome, None, "the handler still runs");
    assert_eq!(h.store.status(e.id), Some(ExecutionStatus::Running));
    assert!(h.runner.release(e.id, RunOutcome::Succeeded(json!(1))));
    h.wait_status(e.id, ExecutionStatus::Succeeded).await;
    h.stop().await.expect("clean stop");
}

/// The lease time left after a failed heartbeat is read from the worker's injected clock (the
/// store's clock here): once it says the lease has run out, the handler is stopped and nothing
/// is written — whatever the wall clock says.
#[tokio::test(start_paused = true)]
async fn heartbeat_failures_past_the_lease_on_the_injected_clock_stop_the_handler() {
    let mut h = Harness::new();
    // Far after the wall clock: the lease has "run out" only on the injected clock.
    h.clock.set(at_year(3000));
    h.runner.set_default(Step::block());
    let e = h.submit(json!(1)).await;
    h.start_default();
    h.runner.wait_for_calls(1).await;
    h.store
        .fail_times(Op::HeartbeatMany, 1000, disconnected("heartbeat"));
    h.clock.advance(LEASE_S + 1.0);
    bounded(h.runner.wait_for_finished(1)).await;
    let call = &h.runner.calls()[0];
    assert!(call.cancelled, "the handler's token fired");
    assert_eq!(call.outcome, Some(RunOutcome::Cancelled));
    assert_eq!(
        h.store.calls(Op::HeartbeatMany),
        1,
        "no retry once the lease has run out"
    );
    // The delivery ended without a write; the worker's next claim reclaims the expired lease
    // (attempt 1 becomes lease_lost through maintenance, not through a completion).
    h.store.clear_failures();
    h.store
        .wait_until(|s| s.attempt_rows(e.id).len() == 2)
        .await;
    assert_eq!(h.completion_writes(), 0, "a lost lease writes nothing");
    assert_eq!(h.stats.lease_lost(), 1);
    let attempts = h.store.attempt_rows(e.id);
    assert_eq!(attempts[0].status, AttemptStatus::LeaseLost);
    assert_eq!(attempts[1].status, AttemptStatus::Running);
    h.runner.wait_for_calls(2).await;
    assert!(h.runner.release(e.id, RunOutcome::Succeeded(json!(2))));
    h.wait_status(e.id, ExecutionStatus::Succeeded).await;
    h.stop().await.expect("clean stop");
}
