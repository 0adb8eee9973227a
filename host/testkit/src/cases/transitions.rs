//! One case per row of the execution transition table (docs/semantics.md#transitions), with the attempt transitions
//! (docs/semantics.md#attempt-transitions), the lease-lost retry predicate (docs/semantics.md#lease-lost-retry) and invariants (docs/semantics.md#invariants).

use chrono::Duration;
use onestep_core::execution::Completion;
use onestep_core::request::SubmitRequest;
use onestep_core::{AttemptStatus, ExecutionStatus, StaleReason};
use serde_json::json;

use super::{
    NS, TASK, assert_stale, case, check_invariants, claim, claim_one, get, submit, success,
};
use crate::builders::{self, handler_error, prepare};
use crate::suite::{Case, Fixture};

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case("t2_claim_queued_and_retrying", |fx| Box::pin(t2(fx))),
        case("t3_t4_cancel_and_no_change_rows", |fx| Box::pin(t3_t4(fx))),
        case("t5_expiry_and_lease_lost_predicate", |fx| Box::pin(t5(fx))),
        case("t6_dead_cancel_request", |fx| Box::pin(t6(fx))),
        case("t7_reclaim_expired_lease", |fx| Box::pin(t7(fx))),
        case("t8_heartbeat", |fx| Box::pin(t8(fx))),
    ]
}

async fn t2(fx: Fixture) {
    let e = submit(&fx, json!({"a": 1})).await;
    let now = fx.clock.now_value();
    let lease = claim_one(&fx, 30.0).await;
    let x = &lease.execution;
    assert_eq!(x.id, e.id);
    assert_eq!(x.status, ExecutionStatus::Running);
    assert_eq!((x.attempts, x.version, lease.attempt_no), (1, 1, 1));
    assert_eq!(x.started_at, Some(now));
    assert_eq!(lease.lease_expires_at, now + Duration::seconds(30));
    let cols = fx.probe.lease_columns(e.id).await.expect("row");
    assert_eq!(cols.lease_token, Some(lease.lease_token));
    assert_eq!(cols.worker_id.as_deref(), Some("w1"));
    let attempts = fx.probe.attempts(e.id).await;
    assert_eq!(attempts.len(), 1);
    let a = &attempts[0];
    assert_eq!(
        (a.id, a.status, a.attempt_no),
        (lease.attempt_id, AttemptStatus::Running, 1)
    );
    assert_eq!(
        (a.started_at, a.heartbeat_at, a.finished_at),
        (now, now, None)
    );
    check_invariants(&fx, e.id).await;
    // Nothing else to claim; a running row is never claimed again.
    assert!(claim(&fx, 5, 30.0, "w2").await.is_empty());
    // retrying → running keeps started_at and increments attempts.
    fx.leases
        .complete(
            &lease.lease_ref(),
            &Completion::retrying(handler_error("E"), 0.0),
        )
        .await
        .expect("retrying");
    fx.clock.advance(5.0);
    let second = claim_one(&fx, 30.0).await;
    assert_eq!((second.attempt_no, second.execution.attempts), (2, 2));
    assert_eq!(second.execution.started_at, Some(now));
    assert_eq!(second.execution.version, 3);
    check_invariants(&fx, e.id).await;
    // Delayed, other-namespace and other-task rows are not claimed.
    fx.store
        .submit(prepare(
            NS,
            &SubmitRequest {
                task_name: TASK.into(),
                payload: json!(1),
                delay_s: Some(10.0),
                ..SubmitRequest::default()
            },
        ))
        .await
        .expect("delayed");
    fx.store
        .submit(builders::prepared("ns2", TASK, json!(1)))
        .await
        .expect("ns2");
    fx.store
        .submit(builders::prepared(NS, "other", json!(1)))
        .await
        .expect("other task");
    assert!(claim(&fx, 5, 30.0, "w2").await.is_empty());
    fx.clock.advance(10.0);
    assert_eq!(claim(&fx, 5, 30.0, "w2").await.len(), 1);
}

async fn t3_t4(fx: Fixture) {
    // T3 from queued.
    let q = submit(&fx, json!(1)).await;
    fx.clock.advance(1.0);
    let now = fx.clock.now_value();
    let c = fx
        .store
        .cancel(NS, q.id, Some("stop".into()))
        .await
        .expect("cancel")
        .expect("row");
    assert_eq!(c.status, ExecutionStatus::Cancelled);
    assert_eq!(
        (c.cancel_requested_at, c.finished_at, c.version),
        (Some(now), Some(now), 1)
    );
    assert_eq!(
        fx.probe
            .lease_columns(q.id)
            .await
            .expect("row")
            .cancel_reason
            .as_deref(),
        Some("stop")
    );
    // The port reads the stored reason in the execution's namespace only.
    assert_eq!(
        fx.store.cancel_reason(NS, q.id).await.expect("reason"),
        Some(Some("stop".into()))
    );
    assert_eq!(
        fx.store.cancel_reason("ns2", q.id).await.expect("reason"),
        None
    );
    // No change on a terminal row: reason kept, version unchanged.
    fx.clock.advance(1.0);
    let again = fx
        .store
        .cancel(NS, q.id, Some("other".into()))
        .await
        .expect("cancel")
        .expect("row");
    assert_eq!(again, c);
    assert_eq!(
        fx.probe
            .lease_columns(q.id)
            .await
            .expect("row")
            .cancel_reason
            .as_deref(),
        Some("stop")
    );
    // T4 from running, then no change from cancel_requested.
    let r = submit(&fx, json!(2)).await;
    assert_eq!(
        fx.store.cancel_reason(NS, r.id).await.expect("reason"),
        Some(None)
    );
    let lease = claim_one(&fx, 30.0).await;
    assert_eq!(lease.execution.id, r.id);
    let now = fx.clock.now_value();
    let cr = fx
        .store
        .cancel(NS, r.id, None)
        .await
        .expect("cancel")
        .expect("row");
    assert_eq!(cr.status, ExecutionStatus::CancelRequested);
    assert_eq!(
        (cr.cancel_requested_at, cr.finished_at, cr.version),
        (Some(now), None, 2)
    );
    let cols = fx.probe.lease_columns(r.id).await.expect("row");
    assert_eq!(
        cols.lease_token,
        Some(lease.lease_token),
        "lease untouched by T4"
    );
    fx.clock.advance(1.0);
    let same = fx
        .store
        .cancel(NS, r.id, Some("late".into()))
        .await
        .expect("cancel")
        .expect("row");
    assert_eq!(same, cr);
    check_invariants(&fx, r.id).await;
    // T3 from retrying keeps the last error.
    let y = submit(&fx, json!(3)).await;
    let l = claim_one(&fx, 30.0).await;
    assert_eq!(l.execution.id, y.id);
    fx.leases
        .complete(
            &l.lease_ref(),
            &Completion::retrying(handler_error("ValueError"), 60.0),
        )
        .await
        .expect("retrying");
    let c = fx
        .store
        .cancel(NS, y.id, None)
        .await
        .expect("cancel")
        .expect("row");
    assert_eq!(c.status, ExecutionStatus::Cancelled);
    assert_eq!(c.error, Some(handler_error("ValueError")));
    check_invariants(&fx, y.id).await;
    assert_eq!(
        fx.store
            .cancel(NS, uuid::Uuid::new_v4(), None)
            .await
            .expect("cancel"),
        None
    );
}

async fn t5(fx: Fixture) {
    let exp = fx.clock.now_value() + Duration::seconds(10);
    let with_expiry = |p: i32| {
        prepare(
            NS,
            &SubmitRequest {
                task_name: TASK.into(),
                payload: json!(p),
                expires_at: Some(exp.fixed_offset()),
                ..SubmitRequest::default()
            },
        )
    };
    // A lease that will be lost (T7 makes it a lease-lost retry).
    let lost = fx.store.submit(with_expiry(1)).await.expect("lost");
    assert_eq!(claim_one(&fx, 5.0).await.execution.id, lost.id);
    // A handler failure put back to retrying (not lease-lost: expires).
    let failed = fx.store.submit(with_expiry(2)).await.expect("failed");
    let l = claim_one(&fx, 30.0).await;
    assert_eq!(l.execution.id, failed.id);
    fx.leases
        .complete(
            &l.lease_ref(),
            &Completion::retrying(handler_error("E"), 1000.0),
        )
        .await
        .expect("retrying");
    // Released back to queued (not lease-lost: expires).
    let released = fx.store.submit(with_expiry(3)).await.expect("released");
    let l = claim_one(&fx, 30.0).await;
    assert_eq!(l.execution.id, released.id);
    fx.leases.release(&l.lease_ref()).await.expect("release");
    // Never claimed.
    let queued = fx.store.submit(with_expiry(4)).await.expect("queued");
    // Not yet expired at exactly expires_at - 1µs.
    fx.clock.set(exp - Duration::microseconds(1));
    fx.leases
        .claim(&builders::claim("ns-other", TASK, 1, 5.0, "w9"))
        .await
        .expect("claim");
    assert_eq!(get(&fx, queued.id).await.status, ExecutionStatus::Queued);
    fx.clock.set(exp);
    let now = fx.clock.now_value();
    // Maintenance is not namespace-scoped: a claim elsewhere expires these rows.
    let other = fx
        .leases
        .claim(&builders::claim("ns-other", TASK, 1, 5.0, "w9"))
        .await
        .expect("claim");
    assert!(other.is_empty());
    for id in [queued.id, failed.id, released.id] {
        let e = get(&fx, id).await;
        assert_eq!(e.status, ExecutionStatus::Expired, "{id} should expire");
        assert_eq!(e.finished_at, Some(now));
        check_invariants(&fx, id).await;
    }
    assert_eq!(
        get(&fx, failed.id).await.error,
        Some(handler_error("E")),
        "last error kept"
    );
    // The lost lease was reclaimed: a lease-lost retry, never expired, claimable past expires_at.
    let x = get(&fx, lost.id).await;
    assert_eq!(x.status, ExecutionStatus::Retrying);
    fx.clock.advance(100.0);
    fx.leases
        .claim(&builders::claim("ns-other", TASK, 1, 5.0, "w9"))
        .await
        .expect("claim");
    assert_eq!(get(&fx, lost.id).await.status, ExecutionStatus::Retrying);
    let again = claim_one(&fx, 5.0).await;
    assert_eq!((again.execution.id, again.attempt_no), (lost.id, 2));
    check_invariants(&fx, lost.id).await;
}

async fn t6(fx: Fixture) {
    let e = submit(&fx, json!(1)).await;
    let lease = claim_one(&fx, 5.0).await;
    fx.store.cancel(NS, e.id, None).await.expect("cancel");
    fx.clock.advance(5.0); // lease_expires_at <= now: expired exactly at the boundary
    let now = fx.clock.now_value();
    assert!(claim(&fx, 1, 5.0, "w2").await.is_empty());
    let x = get(&fx, e.id).await;
    assert_eq!(x.status, ExecutionStatus::Cancelled);
    assert_eq!((x.finished_at, x.version), (Some(now), 3));
    let a = fx.probe.attempts(e.id).await;
    assert_eq!(
        (a[0].status, a[0].finished_at),
        (AttemptStatus::Cancelled, Some(now))
    );
    check_invariants(&fx, e.id).await;
    assert_stale(
        fx.leases.heartbeat(&lease.lease_ref(), 5.0).await,
        StaleReason::LeaseInvalid,
    );
}

async fn t7(fx: Fixture) {
    let e = submit(&fx, json!(1)).await;
    let first = claim_one(&fx, 5.0).await;
    fx.clock.advance(4.999_999);
    assert!(
        claim(&fx, 1, 5.0, "w2").await.is_empty(),
        "lease still valid"
    );
    fx.clock.advance(0.000_001);
    let now = fx.clock.now_value();
    // Reclaimed (T7) and claimed again within the same claim.
    let second = claim(&fx, 1, 5.0, "w2").await;
    assert_eq!(second.len(), 1);
    assert_eq!((second[0].execution.id, second[0].attempt_no), (e.id, 2));
    assert_eq!(second[0].execution.version, 3);
    let a = fx.probe.attempts(e.id).await;
    assert_eq!(
        (a[0].status, a[0].finished_at),
        (AttemptStatus::LeaseLost, Some(now))
    );
    assert_eq!(a[1].status, AttemptStatus::Running);
    check_invariants(&fx, e.id).await;
    // The old token is fenced everywhere.
    assert_stale(
        fx.leases.heartbeat(&first.lease_ref(), 5.0).await,
        StaleReason::LeaseInvalid,
    );
    assert_stale(
        fx.leases
            .complete(&first.lease_ref(), &success(json!(1)))
            .await,
        StaleReason::LeaseInvalid,
    );
    assert_stale(
        fx.leases.release(&first.lease_ref()).await,
        StaleReason::LeaseInvalid,
    );
    let done = fx
        .leases
        .complete(&second[0].lease_ref(), &success(json!("ok")))
        .await
        .expect("complete");
    assert_eq!(done.status, ExecutionStatus::Succeeded);
    let a = fx.probe.attempts(e.id).await;
    assert_eq!(
        (a[0].status, a[1].status),
        (AttemptStatus::LeaseLost, AttemptStatus::Succeeded)
    );
}

async fn t8(fx: Fixture) {
    let e = submit(&fx, json!(1)).await;
    let lease = claim_one(&fx, 10.0).await;
    fx.clock.advance(3.0);
    let now = fx.clock.now_value();
    let hb = fx
        .leases
        .heartbeat(&lease.lease_ref(), 10.0)
        .await
        .expect("heartbeat");
    assert_eq!(hb.lease_expires_at, now + Duration::seconds(10));
    assert!(!hb.cancel_requested);
    // Same-microsecond heartbeat changes nothing yet must succeed (rows matched, not changed).
    let hb2 = fx
        .leases
        .heartbeat(&lease.lease_ref(), 10.0)
        .await
        .expect("idempotent heartbeat");
    assert_eq!(hb2, hb);
    let x = get(&fx, e.id).await;
    assert_eq!(x.version, 1, "heartbeat does not bump version");
    assert_eq!(
        fx.probe
            .lease_columns(e.id)
            .await
            .expect("row")
            .lease_expires_at,
        Some(hb.lease_expires_at)
    );
    assert_eq!(fx.probe.attempts(e.id).await[0].heartbeat_at, now);
    fx.store.cancel(NS, e.id, None).await.expect("cancel");
    let hb3 = fx
        .leases
        .heartbeat(&lease.lease_ref(), 10.0)
        .await
        .expect("heartbeat");
    assert!(hb3.cancel_requested);
    // Wrong attempt id: rolled back entirely.
    let mut wrong = lease.lease_ref();
    wrong.attempt_id = uuid::Uuid::new_v4();
    fx.clock.advance(1.0);
    assert_stale(
        fx.leases.heartbeat(&wrong, 10.0).await,
        StaleReason::LeaseInvalid,
    );
    assert_eq!(
        fx.probe
            .lease_columns(e.id)
            .await
            .expect("row")
            .lease_expires_at,
        Some(hb3.lease_expires_at),
        "a failed heartbeat persists nothing"
    );
    // After expiry the heartbeat fails even though nobody took over.
    fx.clock.advance(10.0);
    assert_stale(
        fx.leases.heartbeat(&lease.lease_ref(), 10.0).await,
        StaleReason::LeaseInvalid,
    );
    assert!(fx.leases.heartbeat(&lease.lease_ref(), 0.0).await.is_err());
}
