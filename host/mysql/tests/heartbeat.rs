//! The set-based heartbeat on real servers beyond the conformance cases
//! (docs/semantics.md#heartbeat): its statement count per call does not grow with the number
//! of leases (counted on the server, in the backend's own session), the per-lease fallback
//! taken when the set-based counts disagree gives the same answers, and a deadlocked batch is
//! retried as a whole. The statement test prints the figures it counted (statements and wall
//! time per call for 1, 100 and 1000 leases, next to one `heartbeat` per lease); the times are
//! figures from a debug build, never asserted.
// Test code: a helper that cannot set up its fixture panics, like an assertion (clippy.toml
// allows this inside #[test] functions; these helpers live outside them).
#![allow(clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use common::{Server, admin_pool, create_db, db_url, drop_db, server_version};
use mysql_async::prelude::Queryable;
use onestep_core::ports::{ExecutionStore, LeaseStore};
use onestep_core::{ExecutionError, LeaseRef, StaleReason};
use onestep_mysql::{MySqlBackend, StoreOptions};
use onestep_testkit::ManualClock;
use onestep_testkit::builders::{claim, prepared};
use serde_json::json;

const NS: &str = "ns";
const TASK: &str = "t";

/// A backend with ONE pooled connection, so that every statement it sends runs in one server
/// session whose counters [`questions`] reads.
async fn one_connection_backend(url: &str, db: &str, clock: Arc<ManualClock>) -> MySqlBackend {
    let mut o = StoreOptions::new(db_url(url, db));
    o.clock = clock;
    o.pool_max = 1;
    MySqlBackend::open(o).await.expect("open backend")
}

/// The session's `Questions` counter (statements the client sent) and connection id, read on
/// the backend's one connection without resetting it. The read itself counts as one.
async fn questions(b: &MySqlBackend) -> (u64, u64) {
    let mut c = b.test_pool().get_conn().await.expect("conn");
    c.reset_connection(false);
    let id: Option<u64> = c.query_first("SELECT CONNECTION_ID()").await.expect("id");
    let row: Option<(String, u64)> = c
        .query_first("SHOW SESSION STATUS LIKE 'Questions'")
        .await
        .expect("questions");
    (row.expect("Questions").1, id.expect("connection id"))
}

/// Statements `op` sent, counted on the server: the `Questions` delta minus the two statements
/// of the reading itself.
async fn statements_of<F: std::future::Future<Output = ()>>(b: &MySqlBackend, op: F) -> u64 {
    let (before, conn_before) = questions(b).await;
    op.await;
    let (after, conn_after) = questions(b).await;
    assert_eq!(conn_before, conn_after, "one session throughout");
    after - before - 2
}

async fn seed(b: &MySqlBackend, n: usize, worker: &str) -> Vec<LeaseRef> {
    let batch: Vec<_> = (0..n).map(|i| prepared(NS, TASK, json!(i))).collect();
    for chunk in batch.chunks(500) {
        let out = b.submit_many(chunk.to_vec()).await.expect("seed");
        assert!(out.iter().all(Result::is_ok));
    }
    let leases = b
        .claim(&claim(NS, TASK, n as u32, 600.0, worker))
        .await
        .expect("claim");
    assert_eq!(leases.len(), n);
    leases.iter().map(|l| l.lease_ref()).collect()
}

async fn statements_per_tick(server: Server) {
    let Some(url) = server.admin_url() else {
        return;
    };
    let admin = admin_pool(&url);
    let version = server_version(&admin).await;
    let clock = Arc::new(ManualClock::default());
    let mut per_batch = Vec::new();
    for n in [1usize, 100, 1000] {
        let db = create_db(&admin).await;
        let b = one_connection_backend(&url, &db, clock.clone()).await;
        let leases = seed(&b, n, &format!("w{n}")).await;
        // Warm the connection's statement cache, as a running worker's is.
        b.heartbeat_many(&leases, 600.0).await.expect("warm-up");
        for l in &leases[..1] {
            b.heartbeat(l, 600.0).await.expect("warm-up");
        }
        clock.advance(0.5);
        let started = Instant::now();
        let batch = statements_of(&b, async {
            let out = b.heartbeat_many(&leases, 600.0).await.expect("batch");
            assert!(out.iter().all(Result::is_ok), "every lease renewed");
        })
        .await;
        let batch_ms = started.elapsed().as_secs_f64() * 1e3;
        clock.advance(0.5);
        let started = Instant::now();
        let single = statements_of(&b, async {
            for l in &leases {
                b.heartbeat(l, 600.0).await.expect("single");
            }
        })
        .await;
        let single_ms = started.elapsed().as_secs_f64() * 1e3;
        eprintln!(
            "[{} {version}] {n:>4} leases in flight: heartbeat_many {batch} statements, \
             {batch_ms:.1} ms per tick; one heartbeat per lease {single} statements, \
             {single_ms:.1} ms (debug build)",
            server.label()
        );
        assert_eq!(single, 5 * n as u64, "a single heartbeat is 5 statements");
        per_batch.push(batch);
        b.close().await.expect("close");
        drop_db(&admin, &db).await;
    }
    assert!(
        per_batch.iter().all(|&s| s == per_batch[0]),
        "statements per tick do not depend on the leases in flight: {per_batch:?}"
    );
    assert_eq!(
        per_batch[0], 5,
        "BEGIN, locking read, two UPDATEs, COMMIT: {per_batch:?}"
    );
}

#[tokio::test]
async fn statements_per_tick_do_not_grow_with_leases_mariadb() {
    statements_per_tick(Server::MariaDb).await;
}

#[tokio::test]
async fn statements_per_tick_do_not_grow_with_leases_mysql() {
    statements_per_tick(Server::MySql).await;
}

/// Renewed/stale answers of `out` as booleans.
fn renewed(out: &[Result<onestep_core::HeartbeatResult, ExecutionError>]) -> Vec<bool> {
    out.iter().map(Result::is_ok).collect()
}

async fn fallback_and_retry(server: Server) {
    let Some(url) = server.admin_url() else {
        return;
    };
    let admin = admin_pool(&url);
    let db = create_db(&admin).await;
    let clock = Arc::new(ManualClock::default());
    let b = one_connection_backend(&url, &db, clock.clone()).await;
    let leases = seed(&b, 4, "w").await;
    let mut forged = leases[2];
    forged.lease_token = uuid::Uuid::new_v4();
    let batch = [leases[0], leases[1], forged, leases[2], leases[3]];
    let expected = [true, true, false, true, true];

    // The set-based counts "disagree": everything rolls back and each lease takes the single
    // heartbeat's path; the answers and the rows are the same.
    clock.advance(1.0);
    b.faults().heartbeat_set_mismatch.store(1, Ordering::SeqCst);
    let out = b.heartbeat_many(&batch, 30.0).await.expect("fallback");
    assert_eq!(b.faults().heartbeat_set_mismatch.load(Ordering::SeqCst), 0);
    assert_eq!(renewed(&out), expected);
    assert!(matches!(
        out[2],
        Err(ExecutionError::StaleLease(StaleReason::LeaseInvalid))
    ));
    let now = clock.now_value();
    for r in out.iter().flatten() {
        assert_eq!(r.lease_expires_at, now + chrono::Duration::seconds(30));
    }
    let mut c = b.test_pool().get_conn().await.expect("conn");
    let rows: Vec<(String, chrono::NaiveDateTime)> = c
        .query(format!(
            "SELECT status, heartbeat_at FROM `{}`",
            onestep_core::names::DEFAULT_ATTEMPTS_TABLE
        ))
        .await
        .expect("attempts");
    drop(c);
    assert_eq!(rows.len(), 4, "one attempt each, nothing written twice");
    assert!(
        rows.iter()
            .all(|(s, at)| s == "running" && at.and_utc() == now),
        "{rows:?}"
    );

    // A deadlock at COMMIT rolls the batch back and it is retried whole.
    clock.advance(1.0);
    b.faults().deadlock_before_commit.store(2, Ordering::SeqCst);
    let out = b.heartbeat_many(&batch, 30.0).await.expect("retried");
    assert_eq!(renewed(&out), expected);
    // One that keeps deadlocking fails the whole batch with a retryable error.
    b.faults()
        .deadlock_before_commit
        .store(100, Ordering::SeqCst);
    match b.heartbeat_many(&batch, 30.0).await {
        Err(e @ ExecutionError::Backend(_)) => assert!(e.is_transient(), "{e:?}"),
        other => panic!("expected a transient error, got {other:?}"),
    }
    b.faults().deadlock_before_commit.store(0, Ordering::SeqCst);
    b.close().await.expect("close");
    drop_db(&admin, &db).await;
}

#[tokio::test]
async fn fallback_and_retry_mariadb() {
    fallback_and_retry(Server::MariaDb).await;
}

#[tokio::test]
async fn fallback_and_retry_mysql() {
    fallback_and_retry(Server::MySql).await;
}
