//! Worker-completion rows of the transition table (docs/semantics.md#transitions T9–T14) with their attempt
//! transitions (docs/semantics.md#attempt-transitions), replays and refusals.

use chrono::Duration;
use onestep_core::execution::Completion;
use onestep_core::{AttemptStatus, ExecutionStatus, StaleReason};
use serde_json::json;

use super::{NS, assert_stale, case, check_invariants, claim, claim_one, get, submit, success};
use crate::builders::{cancel_error, handler_error};
use crate::suite::{Case, Fixture};

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case("t9_success_and_replay", |fx| Box::pin(t9(fx))),
        case("t10_cancel_wins_over_success", |fx| Box::pin(t10(fx))),
        case("t11_cancelled_completion", |fx| Box::pin(t11(fx))),
        case("t12_retrying_with_delay", |fx| Box::pin(t12(fx))),
        case("t13_failed_and_refusals", |fx| Box::pin(t13(fx))),
        case("t14_release", |fx| Box::pin(t14(fx))),
    ]
}

async fn t9(fx: Fixture) {
    let e = submit(&fx, json!(1)).await;
    let lease = claim_one(&fx, 30.0).await;
    fx.clock.advance(1.0);
    let now = fx.clock.now_value();
    let done = fx
        .leases
        .complete(&lease.lease_ref(), &success(json!({"ok": true})))
        .await
        .expect("complete");
    assert_eq!(done.status, ExecutionStatus::Succeeded);
    assert_eq!(
        (done.result.clone(), done.error.clone()),
        (Some(json!({"ok": true})), None)
    );
    assert_eq!((done.finished_at, done.version), (Some(now), 2));
    let a = fx.probe.attempts(e.id).await;
    assert_eq!(
        (a[0].status, a[0].error.clone(), a[0].finished_at),
        (AttemptStatus::Succeeded, None, Some(now))
    );
    check_invariants(&fx, e.id).await;
    // Identical replay accepted, unchanged; different result refused.
    fx.clock.advance(100.0);
    let replay = fx
        .leases
        .complete(&lease.lease_ref(), &success(json!({"ok": true})))
        .await
        .expect("replay");
    assert_eq!(replay, done);
    assert_stale(
        fx.leases
            .complete(&lease.lease_ref(), &success(json!({"ok": false})))
            .await,
        StaleReason::LeaseInvalid,
    );
    assert_stale(
        fx.leases
            .complete(&lease.lease_ref(), &Completion::failed(handler_error("E")))
            .await,
        StaleReason::LeaseInvalid,
    );
    // Terminal rows never change: cancel is a no-op, claim does not take it.
    assert_eq!(
        fx.store.cancel(NS, e.id, None).await.expect("cancel"),
        Some(done.clone())
    );
    assert!(claim(&fx, 1, 5.0, "w").await.is_empty());
    // Missing execution.
    let mut missing = lease.lease_ref();
    missing.execution_id = uuid::Uuid::new_v4();
    assert_stale(
        fx.leases.complete(&missing, &success(json!(1))).await,
        StaleReason::ExecutionMissing,
    );
    assert_stale(
        fx.leases.release(&missing).await,
        StaleReason::ExecutionMissing,
    );
}

async fn t10(fx: Fixture) {
    let e = submit(&fx, json!(1)).await;
    let lease = claim_one(&fx, 30.0).await;
    fx.store.cancel(NS, e.id, None).await.expect("cancel");
    let done = fx
        .leases
        .complete(&lease.lease_ref(), &success(json!("late")))
        .await
        .expect("complete");
    assert_eq!(done.status, ExecutionStatus::Cancelled);
    assert_eq!((done.result.clone(), done.error.clone()), (None, None));
    let a = fx.probe.attempts(e.id).await;
    assert_eq!(
        (a[0].status, a[0].error.clone()),
        (AttemptStatus::Cancelled, None)
    );
    check_invariants(&fx, e.id).await;
    // retrying/failed completions are refused from cancel_requested (checked in t13 too).
}

async fn t11(fx: Fixture) {
    for cancel_first in [false, true] {
        let e = submit(&fx, json!(1)).await;
        let lease = claim_one(&fx, 30.0).await;
        if cancel_first {
            fx.store.cancel(NS, e.id, None).await.expect("cancel");
        }
        let done = fx
            .leases
            .complete(
                &lease.lease_ref(),
                &Completion::cancelled(Some(cancel_error())),
            )
            .await
            .expect("cancelled");
        assert_eq!(done.status, ExecutionStatus::Cancelled);
        assert_eq!(
            (done.result.clone(), done.error.clone()),
            (None, Some(cancel_error()))
        );
        let a = fx.probe.attempts(e.id).await;
        assert_eq!(
            (a[0].status, a[0].error.clone()),
            (AttemptStatus::Cancelled, Some(cancel_error()))
        );
        check_invariants(&fx, e.id).await;
        let replay = fx
            .leases
            .complete(
                &lease.lease_ref(),
                &Completion::cancelled(Some(cancel_error())),
            )
            .await
            .expect("replay");
        assert_eq!(replay, done);
    }
}

async fn t12(fx: Fixture) {
    let e = submit(&fx, json!(1)).await;
    let lease = claim_one(&fx, 30.0).await;
    let now = fx.clock.now_value();
    let r = fx
        .leases
        .complete(
            &lease.lease_ref(),
            &Completion::retrying(handler_error("E"), 2.5),
        )
        .await
        .expect("retrying");
    assert_eq!(r.status, ExecutionStatus::Retrying);
    assert_eq!(r.available_at, now + Duration::milliseconds(2500));
    assert_eq!(
        (r.finished_at, r.result.clone(), r.error.clone()),
        (None, None, Some(handler_error("E")))
    );
    let a = fx.probe.attempts(e.id).await;
    assert_eq!(
        (a[0].status, a[0].error.clone()),
        (AttemptStatus::Retrying, Some(handler_error("E")))
    );
    check_invariants(&fx, e.id).await;
    // A retrying completion is never an idempotent replay.
    assert_stale(
        fx.leases
            .complete(
                &lease.lease_ref(),
                &Completion::retrying(handler_error("E"), 2.5),
            )
            .await,
        StaleReason::LeaseInvalid,
    );
    assert!(
        claim(&fx, 1, 5.0, "w").await.is_empty(),
        "not available before the delay"
    );
    fx.clock.advance(2.5);
    let again = claim_one(&fx, 30.0).await;
    assert_eq!(
        again.execution.error,
        Some(handler_error("E")),
        "last error kept while running"
    );
    // Refused from cancel_requested.
    fx.store.cancel(NS, e.id, None).await.expect("cancel");
    assert_stale(
        fx.leases
            .complete(
                &again.lease_ref(),
                &Completion::retrying(handler_error("E"), 0.0),
            )
            .await,
        StaleReason::LeaseInvalid,
    );
    assert_eq!(
        get(&fx, e.id).await.status,
        ExecutionStatus::CancelRequested
    );
}

async fn t13(fx: Fixture) {
    let e = submit(&fx, json!(1)).await;
    let lease = claim_one(&fx, 30.0).await;
    let f = fx
        .leases
        .complete(
            &lease.lease_ref(),
            &Completion::failed(handler_error("KeyError")),
        )
        .await
        .expect("failed");
    assert_eq!(f.status, ExecutionStatus::Failed);
    assert_eq!(f.error, Some(handler_error("KeyError")));
    assert!(f.finished_at.is_some());
    let a = fx.probe.attempts(e.id).await;
    assert_eq!(a[0].status, AttemptStatus::Failed);
    let replay = fx
        .leases
        .complete(
            &lease.lease_ref(),
            &Completion::failed(handler_error("KeyError")),
        )
        .await
        .expect("replay");
    assert_eq!(replay, f);
    assert_stale(
        fx.leases
            .complete(
                &lease.lease_ref(),
                &Completion::failed(handler_error("Other")),
            )
            .await,
        StaleReason::LeaseInvalid,
    );
    // Refused from cancel_requested, then T6 finishes it once the lease runs out.
    let e2 = submit(&fx, json!(2)).await;
    let l2 = claim_one(&fx, 5.0).await;
    fx.store.cancel(NS, e2.id, None).await.expect("cancel");
    assert_stale(
        fx.leases
            .complete(&l2.lease_ref(), &Completion::failed(handler_error("E")))
            .await,
        StaleReason::LeaseInvalid,
    );
    fx.clock.advance(6.0);
    claim(&fx, 1, 5.0, "w").await;
    assert_eq!(get(&fx, e2.id).await.status, ExecutionStatus::Cancelled);
    // A wrong attempt id rolls the execution update back.
    let e3 = submit(&fx, json!(3)).await;
    let l3 = claim_one(&fx, 5.0).await;
    let mut wrong = l3.lease_ref();
    wrong.attempt_id = uuid::Uuid::new_v4();
    assert_stale(
        fx.leases.complete(&wrong, &success(json!(1))).await,
        StaleReason::AttemptInvalid,
    );
    let x = get(&fx, e3.id).await;
    assert_eq!((x.status, x.version), (ExecutionStatus::Running, 1));
    check_invariants(&fx, e3.id).await;
}

async fn t14(fx: Fixture) {
    let e = submit(&fx, json!(1)).await;
    let lease = claim_one(&fx, 30.0).await;
    fx.clock.advance(1.0);
    let now = fx.clock.now_value();
    let r = fx
        .leases
        .release(&lease.lease_ref())
        .await
        .expect("release");
    assert_eq!(r.status, ExecutionStatus::Queued);
    assert_eq!((r.attempts, r.version, r.available_at), (1, 2, now));
    let a = fx.probe.attempts(e.id).await;
    assert_eq!(
        (a[0].status, a[0].finished_at),
        (AttemptStatus::LeaseLost, Some(now))
    );
    check_invariants(&fx, e.id).await;
    assert_stale(
        fx.leases.release(&lease.lease_ref()).await,
        StaleReason::LeaseInvalid,
    );
    // Refused from cancel_requested and after expiry.
    let again = claim_one(&fx, 5.0).await;
    assert_eq!(again.attempt_no, 2);
    fx.store.cancel(NS, e.id, None).await.expect("cancel");
    assert_stale(
        fx.leases.release(&again.lease_ref()).await,
        StaleReason::LeaseInvalid,
    );
    let e2 = submit(&fx, json!(2)).await;
    let l2 = claim(&fx, 1, 5.0, "w").await;
    assert_eq!(l2[0].execution.id, e2.id);
    fx.clock.advance(5.0);
    assert_stale(
        fx.leases.release(&l2[0].lease_ref()).await,
        StaleReason::LeaseInvalid,
    );
}
