//! Lease loss: when the store no longer honours the lease (stolen by another worker, or run
//! out), the heartbeat's stale answer cancels the handler and the delivery writes nothing.

use onestep_core::ports::LeaseStore;
use onestep_core::runner::RunOutcome;
use onestep_core::{AttemptStatus, ExecutionStatus};
use onestep_testkit::{Op, Step, builders};
use serde_json::json;

use crate::harness::{Harness, LEASE_S, NS, TASK, bounded};

#[tokio::test(start_paused = true)]
async fn a_stolen_lease_stops_the_handler_and_nothing_is_written() {
    let mut h = Harness::new();
    h.runner.set_default(Step::block());
    let e = h.submit(json!(1)).await;
    h.start_default();
    h.runner.wait_for_calls(1).await;
    // The lease runs out on the store's clock and another worker reclaims and takes the row.
    h.clock.advance(LEASE_S);
    let stolen = h
        .store
        .claim(&builders::claim(NS, TASK, 1, LEASE_S, "thief"))
        .await
        .expect("claim");
    assert_eq!(stolen.len(), 1);
    assert_eq!(stolen[0].attempt_no, 2);
    bounded(h.runner.wait_for_finished(1)).await;
    let call = &h.runner.calls()[0];
    assert!(call.cancelled, "the handler's token fired");
    assert!(
        h.store
            .log()
            .iter()
            .any(|r| r.op == Op::HeartbeatMany && r.refused == 1),
        "stopped by a stale heartbeat"
    );
    h.stop().await.expect("clean stop");
    assert_eq!(h.completion_writes(), 0, "a lost lease writes nothing");
    assert_eq!(h.stats.lease_lost(), 1);
    assert_eq!(h.runner.call_count(), 1);
    let x = h.execution(e.id);
    assert_eq!(
        x.status,
        ExecutionStatus::Running,
        "the thief's attempt runs on"
    );
    let cols = h.store.lease_columns_of(e.id).expect("row");
    assert_eq!(cols.lease_token, Some(stolen[0].lease_token));
    assert_eq!(cols.worker_id.as_deref(), Some("thief"));
    let a = h.store.attempt_rows(e.id);
    assert_eq!(
        (a[0].status, a[1].status),
        (AttemptStatus::LeaseLost, AttemptStatus::Running)
    );
}

#[tokio::test(start_paused = true)]
async fn a_lease_that_ran_out_stops_the_handler_and_the_execution_is_retried() {
    let mut h = Harness::new();
    h.runner.set_default(Step::block());
    let e = h.submit(json!(1)).await;
    h.start_default();
    h.runner.wait_for_calls(1).await;
    h.clock.advance(LEASE_S);
    // The next heartbeat is refused; the handler stops without a write; the worker's next claim
    // reclaims the row (maintenance) and runs attempt 2.
    bounded(h.runner.wait_for_calls(2)).await;
    let calls = h.runner.calls();
    assert!(calls[0].cancelled);
    assert_eq!(calls[0].outcome, Some(RunOutcome::Cancelled));
    assert_eq!(calls[1].invocation.attempt_no, 2);
    assert_eq!(h.completion_writes(), 0);
    assert_eq!(h.stats.lease_lost(), 1);
    assert_eq!(
        h.store.attempt_rows(e.id)[0].status,
        AttemptStatus::LeaseLost
    );
    assert!(h.runner.release(e.id, RunOutcome::Succeeded(json!(2))));
    h.wait_status(e.id, ExecutionStatus::Succeeded).await;
    h.stop().await.expect("clean stop");
}
