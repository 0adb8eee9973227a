//! The lease arithmetic both storage backends share for claim and heartbeat, with no SQL and
//! no driver types (docs/semantics.md#worker-operations): the instants of a transaction that
//! grants leases ([`LeaseWindow`]), the lease a claim hands out for a locked row ([`claimed`],
//! [`claim_rows`]) and the answer of the set-based heartbeat for one lease
//! ([`heartbeat_answer`]).

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::error::{ExecutionError, StaleReason};
use crate::execution::{Execution, ExecutionLease, HeartbeatResult};
use crate::ids::IdVersion;
use crate::status::ExecutionStatus;
use crate::time::add_seconds;

/// The instants of one worker transaction that grants or extends leases: its "now" (read once
/// from the injected clock, per attempt) and the lease expiry it grants, `now +
/// lease_duration_s` (docs/semantics.md#time).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseWindow {
    /// The transaction's "now".
    pub now: DateTime<Utc>,
    /// The lease expiry granted at `now`.
    pub expires_at: DateTime<Utc>,
}

impl LeaseWindow {
    /// The window of a lease of `lease_duration_s` seconds from `now`; fails like any
    /// `lease_duration_s` out of range.
    pub fn new(now: DateTime<Utc>, lease_duration_s: f64) -> Result<Self, ExecutionError> {
        let expires_at = add_seconds(now, "lease_duration_s", lease_duration_s)?;
        Ok(LeaseWindow { now, expires_at })
    }
}

/// The answer of the set-based heartbeat for one lease: `Some(cancel_requested)` when its
/// lease was renewed to `new_expiry`, `None` when it no longer holds (a stale lease).
pub fn heartbeat_answer(
    renewed: Option<bool>,
    new_expiry: DateTime<Utc>,
) -> Result<HeartbeatResult, ExecutionError> {
    match renewed {
        Some(cancel_requested) => Ok(HeartbeatResult {
            lease_expires_at: new_expiry,
            cancel_requested,
        }),
        None => Err(ExecutionError::StaleLease(StaleReason::LeaseInvalid)),
    }
}

/// The lease a claim hands out for the locked row `execution` (no read-back): a new attempt id
/// of `attempt_ids` (docs/semantics.md#time-ordered-ids) and a new lease token, and exactly the
/// columns the claim's write changes — `status = 'running'`, `attempts + 1`, `started_at` kept
/// or set to `now`, `version + 1`. The trace parent is read separately.
pub fn claimed(
    mut execution: Execution,
    attempt_ids: IdVersion,
    lease_expires_at: DateTime<Utc>,
    now: DateTime<Utc>,
) -> ExecutionLease {
    let attempt_no = execution.attempts.saturating_add(1);
    execution.status = ExecutionStatus::Running;
    execution.attempts = attempt_no;
    execution.started_at = execution.started_at.or(Some(now));
    execution.version += 1;
    ExecutionLease {
        execution,
        attempt_id: attempt_ids.new_id(),
        attempt_no,
        lease_token: Uuid::new_v4(),
        lease_expires_at,
        trace_parent: None,
    }
}

/// The rows of a claim's locking read, each as its stored key and its decoding: the leases of
/// the decodable rows ([`claimed`]) and the keys of the others, which the claim defers instead
/// (docs/semantics.md#undecodable-rows: an undecodable row is not claimed; its `available_at`
/// moves on so that it cannot hold a place at the head of the queue; the rest of the batch is
/// claimed). `skipped` is told of each undecodable row (the backend logs it).
pub fn claim_rows<K, E>(
    rows: impl ExactSizeIterator<Item = (Option<K>, Result<Execution, E>)>,
    attempt_ids: IdVersion,
    lease_expires_at: DateTime<Utc>,
    now: DateTime<Utc>,
    mut skipped: impl FnMut(&E),
) -> (Vec<ExecutionLease>, Vec<K>) {
    let mut leases = Vec::with_capacity(rows.len());
    let mut deferred = Vec::new();
    for (key, decoded) in rows {
        match decoded {
            Ok(execution) => leases.push(claimed(execution, attempt_ids, lease_expires_at, now)),
            Err(e) => {
                skipped(&e);
                deferred.extend(key);
            }
        }
    }
    (leases, deferred)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn execution(now: DateTime<Utc>) -> Execution {
        Execution {
            id: Uuid::now_v7(),
            namespace: "ns".into(),
            task_name: "t".into(),
            status: ExecutionStatus::Queued,
            payload: json!({}),
            metadata: serde_json::Map::new(),
            result: None,
            error: None,
            attempts: 1,
            created_at: now,
            available_at: now,
            started_at: None,
            finished_at: None,
            cancel_requested_at: None,
            expires_at: None,
            version: 2,
            priority: 5,
            fairness_key: None,
        }
    }

    #[test]
    fn a_claimed_lease_applies_the_claim_write() {
        let now = Utc::now();
        let lease = claimed(execution(now), IdVersion::V7, now, now);
        assert_eq!(lease.attempt_no, 2);
        assert_eq!(lease.execution.attempts, 2);
        assert_eq!(lease.execution.version, 3);
        assert_eq!(lease.execution.status, ExecutionStatus::Running);
        assert_eq!(lease.attempt_id.get_version_num(), 7);
        assert!(heartbeat_answer(None, now).is_err());
        assert!(heartbeat_answer(Some(true), now).is_ok_and(|h| h.cancel_requested));
    }

    #[test]
    fn undecodable_rows_are_deferred_and_the_rest_claimed() {
        let now = Utc::now();
        let rows = vec![
            (Some(1), Ok(execution(now))),
            (Some(2), Err("bad")),
            (None, Err("no key")),
            (Some(4), Ok(execution(now))),
        ];
        let mut skipped = Vec::new();
        let (leases, deferred) = claim_rows(rows.into_iter(), IdVersion::V4, now, now, |e| {
            skipped.push(*e)
        });
        assert_eq!(leases.len(), 2);
        assert_eq!(deferred, [2]);
        assert_eq!(skipped, ["bad", "no key"]);
        let w = LeaseWindow::new(now, 30.0).map(|w| w.expires_at - w.now);
        assert_eq!(w.ok(), Some(chrono::Duration::seconds(30)));
        assert!(LeaseWindow::new(now, -1.0).is_err());
    }
}
