//! T15, the park of a sleeping handler (docs/steps.md#sleep, docs/state-machine.md): back to
//! `queued` until the wake time, lease cleared, attempts kept, the attempt `parked`; fenced by
//! the lease like a completion; a cancel requested before it wins; a parked execution is
//! cancelled at once, never expired, and its parked attempts are counted for the retry policy.
//!
//! On tables whose attempts' status `CHECK` predates `parked` (the reference's own, before
//! `onestep migrate --upgrade`) every park is refused with
//! [`PARKED_STATUS_REFUSED`](onestep_core::park::PARKED_STATUS_REFUSED) and writes nothing;
//! each case checks that and stops there.

use chrono::Duration;
use onestep_core::execution::ExecutionLease;
use onestep_core::park::{PARKED_STATUS_REFUSED, Park};
use onestep_core::request::SubmitRequest;
use onestep_core::{AttemptStatus, Execution, ExecutionError, ExecutionStatus, StaleReason};
use serde_json::json;

use super::{
    NS, TASK, assert_stale, case, check_invariants, claim, claim_one, get, submit, success,
};
use crate::builders::{cancel_error, prepare};
use crate::suite::{Case, Fixture};

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case("t15_park_until_the_wake_time", |fx| Box::pin(t15(fx))),
        case("t15_park_is_fenced_by_the_lease", |fx| {
            Box::pin(t15_fenced(fx))
        }),
        case("t15_cancel_before_the_park_wins", |fx| {
            Box::pin(t15_cancel_wins(fx))
        }),
        case("t15_parked_execution_cancelled_at_once", |fx| {
            Box::pin(t15_cancel_parked(fx))
        }),
        case("t15_parked_execution_never_expires", |fx| {
            Box::pin(t15_no_expiry(fx))
        }),
    ]
}

/// Parks `lease` until `seconds` from now: `Some` the parked execution, `None` when the tables
/// refuse the status (then nothing may have changed: checked here).
async fn park(fx: &Fixture, lease: &ExecutionLease, seconds: i64) -> Option<Execution> {
    let wake = fx.clock.now_value() + Duration::seconds(seconds);
    let before = get(fx, lease.execution.id).await;
    match fx.leases.park(&lease.lease_ref(), &Park::until(wake)).await {
        Ok(e) => Some(e),
        Err(ExecutionError::Backend(b)) if b.message.contains(PARKED_STATUS_REFUSED) => {
            assert_eq!(b.operation, "park");
            let after = get(fx, lease.execution.id).await;
            assert_eq!(after, before, "a refused park writes nothing");
            let a = fx.probe.attempts(lease.execution.id).await;
            assert_eq!(a.last().map(|a| a.status), Some(AttemptStatus::Running));
            None
        }
        Err(e) => panic!("park: {e}"),
    }
}

async fn t15(fx: Fixture) {
    let e = submit(&fx, json!(1)).await;
    let lease = claim_one(&fx, 30.0).await;
    fx.clock.advance(1.0);
    let now = fx.clock.now_value();
    let Some(parked) = park(&fx, &lease, 10).await else {
        return;
    };
    let wake = now + Duration::seconds(10);
    assert_eq!(parked.status, ExecutionStatus::Queued);
    assert_eq!(
        (parked.attempts, parked.version, parked.available_at),
        (1, 2, wake)
    );
    assert_eq!((parked.finished_at, parked.result.clone()), (None, None));
    assert_eq!(parked.started_at, lease.execution.started_at, "kept");
    assert!(!parked.terminal());
    let a = fx.probe.attempts(e.id).await;
    assert_eq!(
        (a.len(), a[0].status, a[0].finished_at, a[0].error.clone()),
        (1, AttemptStatus::Parked, Some(now), None)
    );
    let cols = fx.probe.lease_columns(e.id).await.expect("row");
    assert_eq!(
        (cols.lease_token, cols.lease_expires_at, cols.worker_id),
        (None, None, None)
    );
    check_invariants(&fx, e.id).await;
    assert_eq!(fx.leases.parked_attempts(e.id).await.expect("count"), 1);
    // Not claimable before the wake time, claimable at it.
    fx.clock.advance(9.0);
    assert!(claim(&fx, 10, 30.0, "w2").await.is_empty(), "still asleep");
    fx.clock.advance(1.0);
    let woke = claim_one(&fx, 30.0).await;
    assert_eq!((woke.execution.id, woke.attempt_no), (e.id, 2));
    // The same lease cannot park twice; the new one parks again, then succeeds.
    assert_stale(
        fx.leases
            .park(&lease.lease_ref(), &Park::until(fx.clock.now_value()))
            .await,
        StaleReason::LeaseInvalid,
    );
    park(&fx, &woke, 5).await.expect("second park");
    fx.clock.advance(5.0);
    let third = claim_one(&fx, 30.0).await;
    assert_eq!(third.attempt_no, 3);
    let done = fx
        .leases
        .complete(&third.lease_ref(), &success(json!("done")))
        .await
        .expect("complete");
    assert_eq!(done.status, ExecutionStatus::Succeeded);
    let statuses: Vec<_> = fx
        .probe
        .attempts(e.id)
        .await
        .into_iter()
        .map(|a| a.status)
        .collect();
    assert_eq!(
        statuses,
        [
            AttemptStatus::Parked,
            AttemptStatus::Parked,
            AttemptStatus::Succeeded
        ]
    );
    assert_eq!(fx.leases.parked_attempts(e.id).await.expect("count"), 2);
    assert_eq!(
        fx.leases
            .parked_attempts(uuid::Uuid::new_v4())
            .await
            .expect("count"),
        0
    );
    check_invariants(&fx, e.id).await;
}

async fn t15_fenced(fx: Fixture) {
    // A lease that ran out (nobody took over yet) cannot park.
    let e = submit(&fx, json!(1)).await;
    let lease = claim_one(&fx, 5.0).await;
    fx.clock.advance(5.0);
    let before = get(&fx, e.id).await;
    assert_stale(
        fx.leases
            .park(&lease.lease_ref(), &Park::until(fx.clock.now_value()))
            .await,
        StaleReason::LeaseInvalid,
    );
    assert_eq!(get(&fx, e.id).await, before, "nothing written");
    // After a reclaim the stale attempt cannot park the new one's execution.
    let newer = claim_one(&fx, 30.0).await;
    assert_eq!(newer.attempt_no, 2);
    assert_stale(
        fx.leases
            .park(&lease.lease_ref(), &Park::until(fx.clock.now_value()))
            .await,
        StaleReason::LeaseInvalid,
    );
    let now = get(&fx, e.id).await;
    assert_eq!(
        (now.status, now.attempts),
        (ExecutionStatus::Running, 2),
        "the newer attempt still runs"
    );
    let a = fx.probe.attempts(e.id).await;
    assert_eq!(
        (a[0].status, a[1].status),
        (AttemptStatus::LeaseLost, AttemptStatus::Running)
    );
    // A finished execution cannot be parked, nor a missing one.
    fx.leases
        .complete(&newer.lease_ref(), &success(json!(1)))
        .await
        .expect("complete");
    assert_stale(
        fx.leases
            .park(&newer.lease_ref(), &Park::until(fx.clock.now_value()))
            .await,
        StaleReason::LeaseInvalid,
    );
    let mut missing = newer.lease_ref();
    missing.execution_id = uuid::Uuid::new_v4();
    assert_stale(
        fx.leases
            .park(&missing, &Park::until(fx.clock.now_value()))
            .await,
        StaleReason::ExecutionMissing,
    );
    // A wake time no backend stores is refused before anything is written.
    let other = submit(&fx, json!(2)).await;
    let l = claim_one(&fx, 30.0).await;
    assert_eq!(l.execution.id, other.id);
    let far = chrono::DateTime::parse_from_rfc3339("9999-12-31T23:59:59Z")
        .expect("instant")
        .to_utc()
        + Duration::days(2);
    assert!(matches!(
        fx.leases.park(&l.lease_ref(), &Park::until(far)).await,
        Err(ExecutionError::InvalidArgument(_))
    ));
    assert_eq!(get(&fx, other.id).await.status, ExecutionStatus::Running);
    check_invariants(&fx, e.id).await;
}

async fn t15_cancel_wins(fx: Fixture) {
    let e = submit(&fx, json!(1)).await;
    let lease = claim_one(&fx, 30.0).await;
    fx.store.cancel(NS, e.id, None).await.expect("cancel");
    fx.clock.advance(1.0);
    let now = fx.clock.now_value();
    let ended = fx
        .leases
        .park(
            &lease.lease_ref(),
            &Park::until(now + Duration::seconds(60)),
        )
        .await
        .expect("park on cancel_requested");
    assert_eq!(ended.status, ExecutionStatus::Cancelled);
    assert_eq!(ended.finished_at, Some(now));
    let a = fx.probe.attempts(e.id).await;
    assert_eq!(
        (a[0].status, a[0].error.clone()),
        (AttemptStatus::Cancelled, Some(cancel_error()))
    );
    check_invariants(&fx, e.id).await;
    fx.clock.advance(120.0);
    assert!(claim(&fx, 10, 30.0, "w").await.is_empty(), "nobody runs it");
}

async fn t15_cancel_parked(fx: Fixture) {
    let e = submit(&fx, json!(1)).await;
    let lease = claim_one(&fx, 30.0).await;
    if park(&fx, &lease, 3600).await.is_none() {
        return;
    }
    fx.clock.advance(1.0);
    let now = fx.clock.now_value();
    let c = fx
        .store
        .cancel(NS, e.id, Some("no longer needed".into()))
        .await
        .expect("cancel")
        .expect("exists");
    assert_eq!(c.status, ExecutionStatus::Cancelled, "T3: at once");
    assert_eq!(
        (c.finished_at, c.cancel_requested_at),
        (Some(now), Some(now))
    );
    let a = fx.probe.attempts(e.id).await;
    assert_eq!(
        a[0].status,
        AttemptStatus::Parked,
        "the parked attempt stays"
    );
    fx.clock.advance(3600.0);
    assert!(claim(&fx, 10, 30.0, "w").await.is_empty(), "nobody runs it");
    check_invariants(&fx, e.id).await;
}

async fn t15_no_expiry(fx: Fixture) {
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
    let sleeper = fx.store.submit(with_expiry(1)).await.expect("sleeper");
    let lease = claim_one(&fx, 30.0).await;
    assert_eq!(lease.execution.id, sleeper.id);
    if park(&fx, &lease, 60).await.is_none() {
        return;
    }
    // Released back to queued and never started: these expire.
    let released = fx.store.submit(with_expiry(2)).await.expect("released");
    let l = claim_one(&fx, 30.0).await;
    assert_eq!(l.execution.id, released.id);
    fx.leases.release(&l.lease_ref()).await.expect("release");
    let waiting = fx.store.submit(with_expiry(3)).await.expect("waiting");
    // Past expires_at and the wake time: the claim's maintenance expires the others and hands
    // out the parked one.
    fx.clock.advance(61.0);
    let woke = claim(&fx, 10, 30.0, "w").await;
    let ids: Vec<_> = woke.iter().map(|l| l.execution.id).collect();
    assert_eq!(ids, [sleeper.id], "only the parked execution runs on");
    assert_eq!(woke[0].attempt_no, 2);
    for id in [released.id, waiting.id] {
        assert_eq!(get(&fx, id).await.status, ExecutionStatus::Expired);
    }
    check_invariants(&fx, sleeper.id).await;
}
