//! The set-based heartbeat (docs/semantics.md#heartbeat): one `heartbeat_many` call per tick
//! carries every in-flight lease of the task, whatever their number; each delivery acts on its
//! own answer only; a call that failed with a retryable error is retried as one call, one that
//! failed otherwise stops every handler in it (they complete `retrying`); and a delivery that
//! finishes waits for a heartbeat call carrying its lease before it writes its completion.

use std::time::Duration;

use onestep_core::ports::LeaseStore;
use onestep_core::runner::RunOutcome;
use onestep_core::{AttemptStatus, ExecutionStatus, LeaseRef};
use onestep_testkit::{Op, OpRecord, Step, builders};
use serde_json::json;
use tokio::time::Instant;
use uuid::Uuid;

use crate::harness::{
    Harness, LEASE_S, NS, TASK, bounded, disconnected, let_time_pass, task_settings,
};
use onestep_worker::WorkerSettings;

/// The heartbeat calls logged after the first `skip`.
fn beats(h: &Harness, skip: usize) -> Vec<OpRecord> {
    h.store
        .log()
        .into_iter()
        .filter(|r| r.op == Op::HeartbeatMany)
        .skip(skip)
        .collect()
}

/// Waits until `n` heartbeat calls have been logged.
async fn wait_beats(h: &Harness, n: usize) {
    bounded(
        h.store
            .wait_until(|s| s.log().iter().filter(|r| r.op == Op::HeartbeatMany).count() >= n),
    )
    .await;
}

/// Starts a worker with `concurrency` on `n` blocked executions and waits until all run.
async fn start_blocked(h: &mut Harness, concurrency: u32, n: usize) -> Vec<Uuid> {
    h.runner.set_default(Step::block());
    let mut ids = Vec::new();
    for i in 0..n {
        ids.push(h.submit(json!(i)).await.id);
    }
    let mut settings = task_settings();
    settings.concurrency = concurrency;
    settings.batch_size = concurrency;
    h.start(settings, WorkerSettings::default());
    bounded(h.runner.wait_for_calls(n)).await;
    ids
}

/// The lease of execution `id` as the store holds it (for a test acting as another party).
fn current_lease(h: &Harness, id: Uuid) -> LeaseRef {
    let cols = h.store.lease_columns_of(id).expect("row");
    let attempt = h
        .store
        .attempt_rows(id)
        .into_iter()
        .find(|a| a.status == AttemptStatus::Running)
        .expect("a running attempt");
    LeaseRef {
        execution_id: id,
        attempt_id: attempt.id,
        lease_token: cols.lease_token.expect("leased"),
    }
}

#[tokio::test(start_paused = true)]
async fn one_call_per_tick_renews_every_lease_in_flight_and_an_idle_task_sends_none() {
    let mut h = Harness::new();
    let started = Instant::now();
    let ids = start_blocked(&mut h, 1000, 1000).await;
    let interval = h.settings.heartbeat_interval;
    for k in 1..=3usize {
        wait_beats(&h, k).await;
        assert_eq!(started.elapsed(), interval * k as u32, "tick {k}");
        let now = h.clock.now_value();
        for id in [ids[0], ids[499], ids[999]] {
            let cols = h.store.lease_columns_of(id).expect("row");
            assert_eq!(
                cols.lease_expires_at,
                Some(now + chrono::TimeDelta::seconds(LEASE_S as i64))
            );
        }
        h.clock.advance(interval.as_secs_f64());
    }
    let calls = beats(&h, 0);
    assert_eq!(calls.len(), 3, "{calls:?}");
    assert!(
        calls
            .iter()
            .all(|r| r.ok && r.items == 1000 && r.refused == 0),
        "each tick is one call carrying all 1000 leases: {calls:?}"
    );
    assert_eq!(h.store.calls(Op::Heartbeat), 0, "never one lease at a time");

    // Finished deliveries leave the set: the next tick carries the rest.
    for id in &ids[..400] {
        assert!(h.runner.release(*id, RunOutcome::Succeeded(json!("ok"))));
    }
    for id in &ids[..400] {
        bounded(h.wait_status(*id, ExecutionStatus::Succeeded)).await;
    }
    wait_beats(&h, 4).await;
    let last = beats(&h, 3);
    assert_eq!(last.len(), 1, "{last:?}");
    assert_eq!(last[0].items, 600);

    assert_eq!(
        h.runner.release_all(RunOutcome::Succeeded(json!("ok"))),
        600
    );
    for id in &ids[400..] {
        bounded(h.wait_status(*id, ExecutionStatus::Succeeded)).await;
    }
    let after = h.store.calls(Op::HeartbeatMany);
    let_time_pass(interval * 3).await;
    assert_eq!(
        h.store.calls(Op::HeartbeatMany),
        after,
        "nothing in flight: no call"
    );
    assert_eq!(h.stats.succeeded(), 1000);
    assert_eq!(h.stats.lease_lost(), 0);
    h.stop().await.expect("clean stop");
}

#[tokio::test(start_paused = true)]
async fn one_stale_lease_among_many_stops_only_its_own_handler() {
    let mut h = Harness::new();
    let ids = start_blocked(&mut h, 10, 10).await;
    // Another party takes execution 3 over: its lease is released (T14) and claimed by a
    // thief, so the worker's token for it is stale; the nine others are untouched.
    let stolen = ids[3];
    h.store
        .release(&current_lease(&h, stolen))
        .await
        .expect("release");
    let thief = h
        .store
        .claim(&builders::claim(NS, TASK, 1, LEASE_S, "thief"))
        .await
        .expect("claim");
    assert_eq!(thief.len(), 1);
    assert_eq!(thief[0].execution.id, stolen);

    bounded(h.runner.wait_for_finished(1)).await;
    let calls = beats(&h, 0);
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!((calls[0].items, calls[0].refused), (10, 1));
    let finished: Vec<_> = h
        .runner
        .calls()
        .into_iter()
        .filter(|c| c.outcome.is_some())
        .collect();
    assert_eq!(finished.len(), 1);
    assert_eq!(finished[0].invocation.execution_id, stolen);
    assert!(
        finished[0].cancelled,
        "the stale lease's handler was stopped"
    );
    assert!(
        h.runner
            .calls()
            .iter()
            .filter(|c| c.invocation.execution_id != stolen)
            .all(|c| !c.cancelled && c.outcome.is_none()),
        "the other nine run on"
    );

    // The next tick renews the nine only.
    wait_beats(&h, 2).await;
    let calls = beats(&h, 1);
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!((calls[0].items, calls[0].refused), (9, 0));

    assert_eq!(h.runner.release_all(RunOutcome::Succeeded(json!("ok"))), 9);
    for id in ids.iter().filter(|id| **id != stolen) {
        bounded(h.wait_status(*id, ExecutionStatus::Succeeded)).await;
    }
    h.stop().await.expect("clean stop");
    assert_eq!(h.stats.succeeded(), 9);
    assert_eq!(h.stats.lease_lost(), 1, "the stolen delivery wrote nothing");
    let x = h.execution(stolen);
    assert_eq!(
        x.status,
        ExecutionStatus::Running,
        "the thief's attempt runs on"
    );
    let cols = h.store.lease_columns_of(stolen).expect("row");
    assert_eq!(cols.worker_id.as_deref(), Some("thief"));
    let a = h.store.attempt_rows(stolen);
    assert_eq!(
        (a[0].status, a[1].status),
        (AttemptStatus::LeaseLost, AttemptStatus::Running)
    );
}

#[tokio::test(start_paused = true)]
async fn a_failed_call_is_retried_as_one_call_for_every_lease_in_it() {
    let mut h = Harness::new();
    let started = Instant::now();
    let ids = start_blocked(&mut h, 5, 5).await;
    h.store
        .fail_times(Op::HeartbeatMany, 2, disconnected("heartbeat"));
    // The 30 s tick fails; it is retried after min(30 s, 90 s left / 4) = 22.5 s.
    wait_beats(&h, 2).await;
    assert_eq!(started.elapsed(), Duration::from_millis(52_500));
    bounded(
        h.store
            .wait_until(|s| s.log().iter().any(|r| r.op == Op::HeartbeatMany && r.ok)),
    )
    .await;
    let calls = beats(&h, 0);
    assert_eq!(
        calls.iter().map(|r| r.ok).collect::<Vec<_>>(),
        [false, false, true],
        "{calls:?}"
    );
    // The retry fails too; the next regular tick (60 s) carries the five and succeeds.
    assert_eq!(started.elapsed(), Duration::from_secs(60));
    assert_eq!(calls[2].items, 5, "one call for all five leases");
    assert!(
        h.runner.calls().iter().all(|c| c.outcome.is_none()),
        "every handler still runs"
    );
    assert_eq!(h.runner.release_all(RunOutcome::Succeeded(json!(1))), 5);
    for id in &ids {
        bounded(h.wait_status(*id, ExecutionStatus::Succeeded)).await;
    }
    h.stop().await.expect("clean stop");
}

#[tokio::test(start_paused = true)]
async fn a_delivery_writes_its_completion_only_after_the_heartbeat_carrying_its_lease() {
    let mut h = Harness::new();
    let ids = start_blocked(&mut h, 2, 2).await;
    // Hold the first tick's call inside the store, then let one handler finish.
    h.store.pause(Op::HeartbeatMany);
    bounded(h.store.wait_until(|s| s.waiting(Op::HeartbeatMany) == 1)).await;
    assert!(h.runner.release(ids[0], RunOutcome::Succeeded(json!("ok"))));
    bounded(h.runner.wait_for_finished(1)).await;
    let_time_pass(Duration::from_secs(5)).await;
    assert_eq!(
        h.completion_writes(),
        0,
        "no completion while a heartbeat carrying the lease is in flight"
    );
    h.store.resume(Op::HeartbeatMany);
    bounded(h.wait_status(ids[0], ExecutionStatus::Succeeded)).await;
    let log = h.store.log();
    let beat = log
        .iter()
        .position(|r| r.op == Op::HeartbeatMany)
        .expect("a heartbeat");
    let write = log
        .iter()
        .position(|r| matches!(r.op, Op::Complete | Op::CompleteMany))
        .expect("a completion");
    assert!(beat < write, "heartbeat before completion: {log:?}");
    assert_eq!(log[beat].items, 2);
    // The finished lease is not carried again.
    wait_beats(&h, 2).await;
    assert_eq!(beats(&h, 1)[0].items, 1);
    assert!(h.runner.release(ids[1], RunOutcome::Succeeded(json!("ok"))));
    bounded(h.wait_status(ids[1], ExecutionStatus::Succeeded)).await;
    h.stop().await.expect("clean stop");
}

#[tokio::test(start_paused = true)]
async fn a_non_retryable_failure_of_the_call_stops_every_handler_in_it_and_they_retry() {
    let mut h = Harness::new();
    let ids = start_blocked(&mut h, 3, 3).await;
    h.store.fail_next(
        Op::HeartbeatMany,
        onestep_core::ExecutionError::Backend(onestep_core::BackendError {
            backend: "memory",
            operation: "heartbeat",
            kind: onestep_core::ConnectorKind::Permanent,
            message: "injected".into(),
        }),
    );
    bounded(h.runner.wait_for_finished(3)).await;
    // Each completes `retrying` after 0 s and is claimed again at once.
    bounded(h.runner.wait_for_calls(6)).await;
    let calls = h.runner.calls();
    assert!(
        calls
            .iter()
            .filter(|c| c.invocation.attempt_no == 1)
            .all(|c| c.cancelled && c.outcome == Some(RunOutcome::Cancelled)),
        "every handler in the failed call was stopped: {calls:?}"
    );
    for id in &ids {
        let a = h.store.attempt_rows(*id);
        assert_eq!(a[0].status, AttemptStatus::Retrying);
        assert_eq!(a[0].error, Some(onestep_worker::cancel_error()));
        assert_eq!(a[1].status, AttemptStatus::Running);
    }
    assert_eq!(h.stats.retried(), 3);
    assert_eq!(h.stats.lease_lost(), 0, "the leases were not lost");
    assert_eq!(h.runner.release_all(RunOutcome::Succeeded(json!("ok"))), 3);
    for id in &ids {
        bounded(h.wait_status(*id, ExecutionStatus::Succeeded)).await;
    }
    h.stop().await.expect("clean stop");
}
