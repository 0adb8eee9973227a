//! One undecodable row (a payload no decoder accepts, written with raw SQL) among good ones, on
//! a real server (docs/semantics.md#undecodable-rows, docs/lease-protocol.md#refused-writes):
//! `get` and `list` report it as `Undecodable` naming the row, `claim` leaves it alone (and
//! defers it) and claims the rest, `heartbeat_many` and `complete_many` answer for that item
//! alone, and no row lock outlives the calls. The raw writes and reads are the backend's
//! ([`RawRows`]).

use async_trait::async_trait;
use onestep_core::execution::{Completion, LeaseRef};
use onestep_core::ports::{ExecutionStore, LeaseStore};
use onestep_core::request::ListFilter;
use onestep_core::{ExecutionError, StaleReason};
use serde_json::json;
use uuid::Uuid;

use crate::ManualClock;
use crate::builders::{claim, prepared};

const NS: &str = "ns";
/// A payload no decoder accepts (an `$onestep` marker without a kind).
pub const BAD_PAYLOAD: &str = r#"{"$onestep": 1}"#;

/// Raw SQL on the default tables (`onestep_executions`) of the backend under test.
#[async_trait]
pub trait RawRows: Send + Sync {
    /// Overwrites the stored payload of execution `id` with the JSON text `payload`.
    async fn set_payload(&self, id: Uuid, payload: &str);
    /// The stored status of execution `id`.
    async fn status(&self, id: Uuid) -> String;
    /// Locks the row of `id` with `FOR UPDATE NOWAIT` in a transaction of a connection of its
    /// own, then rolls back: the driver's error while any other transaction holds the row.
    async fn lock_nowait(&self, id: Uuid) -> Result<(), Box<dyn std::error::Error + Send + Sync>>;
    /// Whole seconds from `created_at` to `available_at` of execution `id`.
    async fn deferred_s(&self, id: Uuid) -> i64;
}

fn undecodable(e: &ExecutionError, id: Uuid) {
    match e {
        ExecutionError::Undecodable(m) => {
            assert!(m.contains(&id.to_string()), "{m}");
            assert!(m.contains("payload"), "{m}");
        }
        other => panic!("expected Undecodable for {id}, got {other:?}"),
    }
}

/// Fails while any transaction still holds the row of `id`.
async fn lockable(rows: &dyn RawRows, id: Uuid) {
    let r = rows.lock_nowait(id).await;
    assert!(r.is_ok(), "row {id} is still locked: {r:?}");
}

/// The case, on an empty store `b` whose clock is `clock` and whose rows `rows` reaches.
pub async fn one_undecodable_row_alone<B>(b: &B, clock: &ManualClock, rows: &dyn RawRows)
where
    B: ExecutionStore + LeaseStore,
{
    for i in 0..3 {
        b.submit(prepared(NS, "t", json!({ "i": i })))
            .await
            .expect("submit");
    }
    let leases = b.claim(&claim(NS, "t", 3, 30.0, "w")).await.expect("claim");
    assert_eq!(leases.len(), 3);
    let bad = leases[1].execution.id;
    rows.set_payload(bad, BAD_PAYLOAD).await;

    // Client reads: the row alone is an error that names it.
    undecodable(&b.get(NS, bad).await.expect_err("get bad"), bad);
    assert!(
        b.get(NS, leases[0].execution.id)
            .await
            .expect("get")
            .is_some()
    );
    let filter = ListFilter {
        task_name: None,
        status: None,
        limit: 10,
        after: None,
        search: Default::default(),
        window: onestep_core::request::SEARCH_WINDOW_ROWS,
    };
    undecodable(&b.list(NS, &filter).await.expect_err("list"), bad);

    // Heartbeat reads no payload: every lease is renewed from the injected clock.
    clock.advance(5.0);
    let refs: Vec<LeaseRef> = leases.iter().map(|l| l.lease_ref()).collect();
    let beats = b.heartbeat_many(&refs, 30.0).await.expect("heartbeat");
    for r in &beats {
        let beat = r.as_ref().expect("renewed");
        assert_eq!(
            beat.lease_expires_at,
            clock.now_value() + chrono::Duration::seconds(30)
        );
    }

    // complete_many: the undecodable item fails alone, a stale item is refused alone, the
    // rest are written.
    let mut stale = leases[2].lease_ref();
    stale.lease_token = Uuid::new_v4();
    let items = vec![
        (leases[0].lease_ref(), Completion::succeeded(json!(0))),
        (leases[1].lease_ref(), Completion::succeeded(json!(1))),
        (stale, Completion::succeeded(json!(2))),
    ];
    let out = b.complete_many(&items).await.expect("complete_many");
    assert_eq!(out[0].as_ref().expect("item 0").result, Some(json!(0)));
    undecodable(out[1].as_ref().expect_err("item 1"), bad);
    assert!(
        matches!(
            out[2],
            Err(ExecutionError::StaleLease(StaleReason::LeaseInvalid))
        ),
        "{:?}",
        out[2]
    );
    assert_eq!(rows.status(bad).await, "running");
    assert_eq!(rows.status(leases[2].execution.id).await, "running");
    for l in &leases {
        lockable(rows, l.execution.id).await;
    }

    // Claim: the undecodable row is not claimed (but deferred), the others are claimed.
    let mut fresh = Vec::new();
    for i in 0..3 {
        fresh.push(
            b.submit(prepared(NS, "u", json!({ "j": i })))
                .await
                .expect("submit")
                .id,
        );
    }
    rows.set_payload(fresh[0], BAD_PAYLOAD).await;
    let got = b
        .claim(&claim(NS, "u", 10, 30.0, "w"))
        .await
        .expect("claim");
    let mut ids: Vec<Uuid> = got.iter().map(|l| l.execution.id).collect();
    ids.sort();
    let mut want = vec![fresh[1], fresh[2]];
    want.sort();
    assert_eq!(ids, want);
    assert_eq!(rows.status(fresh[0]).await, "queued");
    lockable(rows, fresh[0]).await;
    // Deferred, so that it does not take a place at the head of the queue in every claim.
    let deferred = rows.deferred_s(fresh[0]).await;
    assert!(
        (899..=901).contains(&deferred),
        "available_at moved on by {deferred} s, not UNDECODABLE_DEFER_S"
    );
}
