//! The conformance cases (docs/semantics.md#transitions, docs/semantics.md#client-operations, docs/semantics.md#worker-operations) and the helpers they share.

use onestep_core::execution::{Completion, ExecutionLease};
use onestep_core::{Execution, ExecutionError, Limits, StaleReason};
use serde_json::Value;
use uuid::Uuid;

use crate::builders;
use crate::suite::{Case, CaseFn, Fixture};

mod buckets;
mod callbacks;
mod cap;
mod client;
mod completions;
mod components;
mod concurrency;
mod deployments;
mod fair;
mod heartbeats;
mod listing;
mod park;
mod quota;
mod schedule;
mod steps;
mod storable;
mod transitions;
mod worker;

/// Namespace used by most cases.
pub(crate) const NS: &str = "ns";
/// Task name used by most cases.
pub(crate) const TASK: &str = "t";

pub(crate) fn case(name: &'static str, run: CaseFn) -> Case {
    Case {
        name,
        limits: Limits::default(),
        run,
    }
}

pub(crate) fn all() -> Vec<Case> {
    let mut v = Vec::new();
    v.extend(client::cases());
    v.extend(transitions::cases());
    v.extend(completions::cases());
    v.extend(worker::cases());
    v.extend(heartbeats::cases());
    v.extend(concurrency::cases());
    v.extend(storable::cases());
    v.extend(schedule::cases());
    v.extend(fair::cases());
    v.extend(buckets::cases());
    v.extend(components::cases());
    v.extend(deployments::cases());
    v.extend(quota::cases());
    v.extend(callbacks::cases());
    v.extend(cap::cases());
    v.extend(steps::cases());
    v.extend(park::cases());
    v
}

pub(crate) async fn submit(fx: &Fixture, payload: Value) -> Execution {
    fx.store
        .submit(builders::prepared(NS, TASK, payload))
        .await
        .expect("submit")
}

pub(crate) async fn claim(
    fx: &Fixture,
    limit: u32,
    lease_s: f64,
    worker: &str,
) -> Vec<ExecutionLease> {
    fx.leases
        .claim(&builders::claim(NS, TASK, limit, lease_s, worker))
        .await
        .expect("claim")
}

pub(crate) async fn claim_one(fx: &Fixture, lease_s: f64) -> ExecutionLease {
    let mut v = claim(fx, 1, lease_s, "w1").await;
    assert_eq!(v.len(), 1, "expected exactly one lease");
    v.remove(0)
}

pub(crate) async fn get(fx: &Fixture, id: Uuid) -> Execution {
    fx.store
        .get(NS, id)
        .await
        .expect("get")
        .expect("execution exists")
}

pub(crate) fn assert_stale<T: std::fmt::Debug>(r: Result<T, ExecutionError>, reason: StaleReason) {
    match r {
        Err(ExecutionError::StaleLease(got)) => assert_eq!(got, reason),
        other => panic!("expected StaleLease({reason:?}), got {other:?}"),
    }
}

pub(crate) fn success(v: Value) -> Completion {
    Completion::succeeded(v)
}

/// docs/semantics.md#invariants, items 3–5 for one execution.
pub(crate) async fn check_invariants(fx: &Fixture, id: Uuid) {
    let e = get(fx, id).await;
    let attempts = fx.probe.attempts(id).await;
    let cols = fx.probe.lease_columns(id).await.expect("row");
    assert_eq!(
        e.attempts as usize,
        attempts.len(),
        "attempts = attempt rows"
    );
    assert_eq!(
        attempts.iter().map(|a| a.attempt_no).max().unwrap_or(0),
        e.attempts,
        "attempts = highest attempt_no"
    );
    let running: Vec<_> = attempts
        .iter()
        .filter(|a| a.status == onestep_core::AttemptStatus::Running)
        .collect();
    assert!(running.len() <= 1, "at most one running attempt");
    if e.status.holds_lease() {
        let token = cols.lease_token.expect("leased row has a token");
        assert!(cols.lease_expires_at.is_some());
        assert_eq!(running.len(), 1, "leased row has one running attempt");
        assert_eq!(running[0].lease_token, token);
    } else {
        assert_eq!(
            cols.lease_token, None,
            "no lease outside running/cancel_requested"
        );
        assert_eq!(cols.lease_expires_at, None);
        assert_eq!(cols.worker_id, None);
        assert!(
            running.is_empty(),
            "no running attempt outside leased statuses"
        );
    }
}
