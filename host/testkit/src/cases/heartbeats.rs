//! The set-based heartbeat (docs/semantics.md#heartbeat): `heartbeat_many` answers every lease
//! exactly as `heartbeat` would answer it alone — renewed with the new expiry and the cancel
//! flag, or stale on its own without failing the others — one answer per input, in input order.

use chrono::Duration;
use onestep_core::execution::{Completion, ExecutionLease, HeartbeatResult, LeaseRef};
use onestep_core::{ExecutionError, ExecutionStatus, StaleReason};
use serde_json::json;
use uuid::Uuid;

use super::{NS, TASK, assert_stale, case, check_invariants, claim, get, submit, success};
use crate::builders;
use crate::suite::{Case, Fixture, LeaseColumns};

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case("heartbeat_many_renews_every_lease_in_order", |fx| {
            Box::pin(renews(fx))
        }),
        case("heartbeat_many_stale_leases_reported_alone", |fx| {
            Box::pin(stale_alone(fx))
        }),
        case("heartbeat_many_cancel_requested_per_lease", |fx| {
            Box::pin(cancel_flags(fx))
        }),
        case("heartbeat_many_empty_duplicates_and_bad_duration", |fx| {
            Box::pin(empty_and_duplicates(fx))
        }),
        case("heartbeat_many_over_1000_leases", |fx| {
            Box::pin(over_1000(fx))
        }),
    ]
}

async fn submit_and_claim(
    fx: &Fixture,
    n: usize,
    lease_s: f64,
    worker: &str,
) -> Vec<ExecutionLease> {
    for i in 0..n {
        submit(fx, json!(i)).await;
    }
    let leases = claim(fx, n as u32, lease_s, worker).await;
    assert_eq!(leases.len(), n);
    leases
}

async fn beat(
    fx: &Fixture,
    leases: &[LeaseRef],
    lease_s: f64,
) -> Vec<Result<HeartbeatResult, ExecutionError>> {
    let out = fx
        .leases
        .heartbeat_many(leases, lease_s)
        .await
        .expect("heartbeat_many");
    assert_eq!(out.len(), leases.len(), "one answer per lease");
    out
}

fn renewed(r: &Result<HeartbeatResult, ExecutionError>) -> HeartbeatResult {
    match r {
        Ok(b) => *b,
        Err(e) => panic!("expected a renewed lease, got {e:?}"),
    }
}

async fn columns(fx: &Fixture, id: Uuid) -> LeaseColumns {
    fx.probe.lease_columns(id).await.expect("row")
}

/// Fresh leases, given in an order unlike the claim order: every one renewed from the same
/// "now", its row and running attempt stamped, no version bump.
async fn renews(fx: Fixture) {
    let leases = submit_and_claim(&fx, 5, 10.0, "w1").await;
    fx.clock.advance(3.0);
    let now = fx.clock.now_value();
    let order = [3, 0, 4, 1, 2];
    let refs: Vec<_> = order.iter().map(|&i| leases[i].lease_ref()).collect();
    let out = beat(&fx, &refs, 10.0).await;
    for (k, &i) in order.iter().enumerate() {
        let b = renewed(&out[k]);
        assert_eq!(b.lease_expires_at, now + Duration::seconds(10));
        assert!(!b.cancel_requested);
        let id = leases[i].execution.id;
        assert_eq!(
            columns(&fx, id).await.lease_expires_at,
            Some(b.lease_expires_at)
        );
        assert_eq!(fx.probe.attempts(id).await[0].heartbeat_at, now);
        assert_eq!(get(&fx, id).await.version, 1, "no version bump");
        check_invariants(&fx, id).await;
    }
    // Same microsecond again: matched, not changed, still renewed.
    let again = beat(&fx, &refs, 10.0).await;
    assert_eq!(
        again.iter().map(renewed).collect::<Vec<_>>(),
        out.iter().map(renewed).collect::<Vec<_>>()
    );
    // The renewed leases hold past their first expiry.
    fx.clock.advance(9.0);
    let later = beat(&fx, &refs, 10.0).await;
    assert!(later.iter().all(Result::is_ok), "{later:?}");
}

/// Stale leases of every kind in the middle of a batch: each is reported for itself and
/// changes nothing; the live leases around them are renewed.
async fn stale_alone(fx: Fixture) {
    // `reclaimed` gets a 1 s lease and is taken over by another worker after it runs out.
    submit(&fx, json!("reclaimed")).await;
    let reclaimed = claim(&fx, 1, 1.0, "w1").await.remove(0);
    let leases = submit_and_claim(&fx, 6, 30.0, "w1").await;
    fx.clock.advance(1.5);
    let thief = claim(&fx, 1, 30.0, "w2").await;
    assert_eq!(thief.len(), 1);
    assert_eq!(thief[0].execution.id, reclaimed.execution.id);
    // `done` is completed; `forged` has another token; `wrong_attempt` another attempt id.
    let done = leases[1].lease_ref();
    fx.leases
        .complete(&done, &success(json!("ok")))
        .await
        .expect("complete");
    let mut forged = leases[2].lease_ref();
    forged.lease_token = Uuid::new_v4();
    let mut wrong_attempt = leases[3].lease_ref();
    wrong_attempt.attempt_id = Uuid::new_v4();
    let missing = LeaseRef {
        execution_id: Uuid::new_v4(),
        attempt_id: Uuid::new_v4(),
        lease_token: Uuid::new_v4(),
    };
    let watched = [
        thief[0].execution.id,
        leases[1].execution.id,
        leases[2].execution.id,
        leases[3].execution.id,
    ];
    let mut before = Vec::new();
    for id in watched {
        before.push((columns(&fx, id).await, fx.probe.attempts(id).await));
    }
    fx.clock.advance(1.0);
    let now = fx.clock.now_value();
    let batch = [
        leases[0].lease_ref(),
        reclaimed.lease_ref(),
        done,
        forged,
        leases[4].lease_ref(),
        wrong_attempt,
        missing,
        leases[5].lease_ref(),
    ];
    let out = beat(&fx, &batch, 30.0).await;
    for k in [1, 2, 3, 5, 6] {
        assert_stale(out[k].clone(), StaleReason::LeaseInvalid);
    }
    for k in [0, 4, 7] {
        assert_eq!(
            renewed(&out[k]).lease_expires_at,
            now + Duration::seconds(30)
        );
    }
    for (id, before) in watched.iter().zip(before) {
        assert_eq!(
            (columns(&fx, *id).await, fx.probe.attempts(*id).await),
            before,
            "a stale lease persists nothing"
        );
    }
    // The thief's lease and the two leases whose ref was wrong are still intact and renew.
    let mine = [
        thief[0].lease_ref(),
        leases[2].lease_ref(),
        leases[3].lease_ref(),
    ];
    assert!(beat(&fx, &mine, 30.0).await.iter().all(Result::is_ok));
    // A lease that ran out with nobody taking over is stale too, even alone in its batch.
    fx.clock.advance(31.0);
    assert_stale(
        beat(&fx, &[leases[0].lease_ref()], 30.0).await.remove(0),
        StaleReason::LeaseInvalid,
    );
    for l in leases.iter().chain([&reclaimed]) {
        check_invariants(&fx, l.execution.id).await;
    }
}

/// `cancel_requested` is reported for each lease whose row has it (and that lease is still
/// renewed, T8 from `cancel_requested`); the others say false.
async fn cancel_flags(fx: Fixture) {
    let leases = submit_and_claim(&fx, 4, 30.0, "w1").await;
    for i in [1, 2] {
        let c = fx
            .store
            .cancel(NS, leases[i].execution.id, Some("stop".into()))
            .await
            .expect("cancel")
            .expect("row");
        assert_eq!(c.status, ExecutionStatus::CancelRequested);
    }
    fx.clock.advance(1.0);
    let refs: Vec<_> = leases.iter().map(|l| l.lease_ref()).collect();
    let out = beat(&fx, &refs, 30.0).await;
    let flags: Vec<bool> = out.iter().map(|r| renewed(r).cancel_requested).collect();
    assert_eq!(flags, [false, true, true, false]);
    let now = fx.clock.now_value();
    assert_eq!(
        columns(&fx, leases[1].execution.id).await.lease_expires_at,
        Some(now + Duration::seconds(30)),
        "a cancel-requested lease is extended too"
    );
    // Once the cancelled one completes, its lease is stale; the other flag stays.
    fx.leases
        .complete(&refs[1], &Completion::cancelled(None))
        .await
        .expect("cancelled");
    let out = beat(&fx, &refs, 30.0).await;
    assert_stale(out[1].clone(), StaleReason::LeaseInvalid);
    assert!(renewed(&out[2]).cancel_requested);
    assert!(!renewed(&out[0]).cancel_requested && !renewed(&out[3]).cancel_requested);
    for l in &leases {
        check_invariants(&fx, l.execution.id).await;
    }
}

/// An empty batch answers empty; a lease given twice gets the same answer twice, also next to
/// a stale lease of the same execution; a bad lease duration refuses the whole batch and
/// writes nothing.
async fn empty_and_duplicates(fx: Fixture) {
    assert!(beat(&fx, &[], 30.0).await.is_empty());
    let leases = submit_and_claim(&fx, 2, 30.0, "w1").await;
    let (a, b) = (leases[0].lease_ref(), leases[1].lease_ref());
    let mut forged_a = a;
    forged_a.lease_token = Uuid::new_v4();
    fx.clock.advance(2.0);
    let now = fx.clock.now_value();
    let out = beat(&fx, &[a, b, forged_a, a, b], 30.0).await;
    let expiry = now + Duration::seconds(30);
    for k in [0, 1, 3, 4] {
        let r = renewed(&out[k]);
        assert_eq!((r.lease_expires_at, r.cancel_requested), (expiry, false));
    }
    assert_stale(out[2].clone(), StaleReason::LeaseInvalid);
    assert_eq!(
        columns(&fx, a.execution_id).await.lease_expires_at,
        Some(expiry)
    );

    fx.clock.advance(1.0);
    for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        match fx.leases.heartbeat_many(&[a, b], bad).await {
            Err(ExecutionError::InvalidArgument(m)) => {
                assert!(m.contains("lease_duration_s"), "{m}")
            }
            other => panic!("lease_duration_s {bad}: expected InvalidArgument, got {other:?}"),
        }
        assert!(
            fx.leases.heartbeat_many(&[], bad).await.is_err(),
            "checked before the empty shortcut"
        );
    }
    assert_eq!(
        columns(&fx, a.execution_id).await.lease_expires_at,
        Some(expiry),
        "a refused batch writes nothing"
    );
    assert_eq!(fx.probe.attempts(b.execution_id).await[0].heartbeat_at, now);
}

/// More leases than one statement binds (1000 on the SQL backends): every lease answered, a
/// stale lease on each side of the boundary reported alone.
async fn over_1000(fx: Fixture) {
    let n = 1010;
    let batch: Vec<_> = (0..n)
        .map(|i| builders::prepared(NS, TASK, json!(i)))
        .collect();
    for chunk in batch.chunks(500) {
        let out = fx.store.submit_many(chunk.to_vec()).await.expect("seed");
        assert!(out.iter().all(Result::is_ok));
    }
    let leases = claim(&fx, n as u32, 30.0, "w1").await;
    assert_eq!(leases.len(), n);
    let mut refs: Vec<_> = leases.iter().map(|l| l.lease_ref()).collect();
    // Completed leases sort anywhere among the execution ids; take them from both ends of
    // the claim order and from the middle.
    let stale_at = [0, 505, 999, 1000, n - 1];
    for &i in &stale_at {
        fx.leases
            .complete(&refs[i], &success(json!("done")))
            .await
            .expect("complete");
    }
    refs.reverse();
    fx.clock.advance(1.0);
    let now = fx.clock.now_value();
    let out = beat(&fx, &refs, 30.0).await;
    let stale: Vec<usize> = stale_at.iter().map(|i| n - 1 - i).collect();
    for (k, r) in out.iter().enumerate() {
        if stale.contains(&k) {
            assert_stale(r.clone(), StaleReason::LeaseInvalid);
        } else {
            assert_eq!(
                renewed(r).lease_expires_at,
                now + Duration::seconds(30),
                "lease {k}"
            );
        }
    }
    let sample = leases[1].execution.id;
    assert_eq!(
        columns(&fx, sample).await.lease_expires_at,
        Some(now + Duration::seconds(30))
    );
    assert_eq!(
        get(&fx, leases[0].execution.id).await.status,
        ExecutionStatus::Succeeded
    );
    check_invariants(&fx, sample).await;
}
