//! PostgreSQL backend behaviour on the real server. One undecodable row (a payload no decoder
//! accepts, written with raw SQL) among good ones:
//! `get` and `list` report it as `Undecodable` naming the row, `claim` leaves it alone and
//! claims the rest, `heartbeat_many` and `complete_many` answer for that item alone, and no
//! row lock outlives the calls (docs/semantics.md#undecodable-rows,
//! docs/lease-protocol.md#refused-writes). And the classification of a statement timeout and
//! of an administrator's termination of the session.
// Test code: a helper that cannot set up its fixture panics, like an assertion.
#![allow(clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;

use common::{open, scratch};
use onestep_core::ConnectorKind;
use onestep_core::execution::{Completion, LeaseRef};
use onestep_core::ports::{ExecutionStore, LeaseStore};
use onestep_core::request::ListFilter;
use onestep_core::{ExecutionError, Limits, StaleReason};
use onestep_postgres::errors::classify;
use onestep_testkit::ManualClock;
use onestep_testkit::builders::{claim, prepared};
use serde_json::json;
use uuid::Uuid;

const NS: &str = "ns";
const BAD: &str = r#"{"$onestep": 1}"#;

type Pool = deadpool_postgres::Pool;

async fn corrupt(pool: &Pool, id: Uuid) {
    let c = pool.get().await.expect("conn");
    c.execute(
        "UPDATE onestep_executions SET payload = $1::text::jsonb WHERE id = $2",
        &[&BAD, &id],
    )
    .await
    .expect("corrupt");
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

/// `FOR UPDATE NOWAIT` on `id` from a connection of its own: fails while any transaction
/// still holds the row.
async fn lockable(pool: &Pool, id: Uuid) {
    let mut c = pool.get().await.expect("conn");
    let tx = c.transaction().await.expect("begin");
    let r = tx
        .query(
            "SELECT id FROM onestep_executions WHERE id = $1 FOR UPDATE NOWAIT",
            &[&id],
        )
        .await;
    assert!(r.is_ok(), "row {id} is still locked: {r:?}");
    tx.rollback().await.expect("rollback");
}

async fn status(pool: &Pool, id: Uuid) -> String {
    let c = pool.get().await.expect("conn");
    c.query_one(
        "SELECT status FROM onestep_executions WHERE id = $1",
        &[&id],
    )
    .await
    .expect("status")
    .get(0)
}

#[tokio::test]
async fn one_undecodable_row_alone() {
    let db = scratch().await;
    let clock = Arc::new(ManualClock::default());
    let b = open(db.dsn(), clock.clone(), Limits::default(), true).await;
    let pool = b.test_pool().clone();
    for i in 0..3 {
        b.submit(prepared(NS, "t", json!({ "i": i })))
            .await
            .expect("submit");
    }
    let leases = b.claim(&claim(NS, "t", 3, 30.0, "w")).await.expect("claim");
    assert_eq!(leases.len(), 3);
    let bad = leases[1].execution.id;
    corrupt(&pool, bad).await;

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
    assert_eq!(status(&pool, bad).await, "running");
    assert_eq!(status(&pool, leases[2].execution.id).await, "running");
    for l in &leases {
        lockable(&pool, l.execution.id).await;
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
    corrupt(&pool, fresh[0]).await;
    let got = b
        .claim(&claim(NS, "u", 10, 30.0, "w"))
        .await
        .expect("claim");
    let mut ids: Vec<Uuid> = got.iter().map(|l| l.execution.id).collect();
    ids.sort();
    let mut want = vec![fresh[1], fresh[2]];
    want.sort();
    assert_eq!(ids, want);
    assert_eq!(status(&pool, fresh[0]).await, "queued");
    lockable(&pool, fresh[0]).await;
    // Deferred, so that it does not take a place at the head of the queue in every claim.
    let deferred: i64 = pool
        .get()
        .await
        .expect("conn")
        .query_one(
            "SELECT EXTRACT(EPOCH FROM available_at - created_at)::bigint FROM onestep_executions \
             WHERE id = $1",
            &[&fresh[0]],
        )
        .await
        .expect("available_at")
        .get(0);
    assert!(
        (899..=901).contains(&deferred),
        "available_at moved on by {deferred} s, not UNDECODABLE_DEFER_S"
    );

    let _ = b.close().await;
    db.drop_database().await.expect("drop database");
}

/// docs/postgres.md#error-classification on the real server: a statement cancelled by
/// `statement_timeout` (57014) is transient, a backend ended by `pg_terminate_backend`
/// (57P01 admin shutdown, or the closed connection after it) is disconnected; both are retried.
#[tokio::test]
async fn timeouts_and_admin_shutdown_are_retryable() {
    let db = scratch().await;
    let (c, conn) = tokio_postgres::connect(db.dsn(), tokio_postgres::NoTls)
        .await
        .expect("connect");
    let driver = tokio::spawn(conn);
    let e = c
        .batch_execute("SET statement_timeout = '20ms'; SELECT pg_sleep(2)")
        .await
        .expect_err("statement timeout");
    assert_eq!(e.code().map(|s| s.code()), Some("57014"), "{e}");
    assert_eq!(classify(&e), ConnectorKind::Transient);
    assert!(classify(&e).is_retryable());
    c.batch_execute("SET statement_timeout = 0")
        .await
        .expect("reset");
    let pid: i32 = c
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .expect("pid")
        .get(0);
    let (killer, kconn) = tokio_postgres::connect(db.dsn(), tokio_postgres::NoTls)
        .await
        .expect("connect");
    let kdriver = tokio::spawn(kconn);
    killer
        .execute("SELECT pg_terminate_backend($1)", &[&pid])
        .await
        .expect("terminate");
    let e = c.simple_query("SELECT 1").await.expect_err("terminated");
    assert!(
        matches!(e.code().map(|s| s.code()), None | Some("57P01")),
        "{e}"
    );
    assert_eq!(classify(&e), ConnectorKind::Disconnected, "{e}");
    assert!(classify(&e).is_retryable());
    drop((c, killer));
    let _ = (driver.await, kdriver.await);
    db.drop_database().await.expect("drop database");
}

/// The backend on `dsn` with a fresh clock and default limits.
async fn reopen(dsn: &str, auto_create: bool) -> onestep_postgres::PgBackend {
    open(
        dsn,
        Arc::new(ManualClock::default()),
        Limits::default(),
        auto_create,
    )
    .await
}

/// `onestep migrate --upgrade` on `dsn`: what each step added.
async fn upgrade_steps(dsn: &str) -> Vec<String> {
    let report = onestep_postgres::PgBackend::upgrade(onestep_postgres::StoreOptions::new(dsn))
        .await
        .expect("upgrade");
    report.steps.into_iter().map(|s| s.added).collect()
}

/// Runs `sql` on a connection of the backend, then closes it.
async fn alter(b: onestep_postgres::PgBackend, sql: &str) {
    let c = b.test_pool().get().await.expect("conn");
    c.batch_execute(sql).await.expect("alter");
    drop(c);
    b.close().await.expect("close");
}

/// Tables an older onestep created have `ix_<T>_status` over (namespace, task_name, status)
/// only and no `ix_<T>_status_list`: open reports the upgrade command; `migrate --upgrade`
/// builds the wide index concurrently, drops the narrow one, renames the new one into its
/// place and adds the status-list index; an upgrade interrupted between the drop and the
/// rename resumes with the rename; a last upgrade does nothing.
#[tokio::test]
async fn upgrade_widens_status_index() {
    let db = scratch().await;
    let b = reopen(db.dsn(), true).await;
    assert!(b.schema_report().features.list_indexes);
    let id = b
        .submit(prepared(NS, "t", json!({"n": 1})))
        .await
        .expect("submit")
        .id;
    let narrow = "DROP INDEX ix_onestep_executions_status_list; \
                  DROP INDEX ix_onestep_executions_status; \
                  CREATE INDEX ix_onestep_executions_status \
                  ON onestep_executions (namespace, task_name, status)";
    alter(b, narrow).await;

    let older = reopen(db.dsn(), false).await;
    assert!(!older.schema_report().features.list_indexes);
    assert!(older.schema_report().upgrade_command.is_some());
    older.close().await.expect("close");

    let widened = "index ix_onestep_executions_status (widened to namespace, task_name, \
                   status, created_at DESC, id DESC)";
    assert_eq!(
        upgrade_steps(db.dsn()).await,
        [widened, "index ix_onestep_executions_status_list"]
    );

    // Interrupted after the drop: only the wide index under its temporary name is left.
    let b = reopen(db.dsn(), false).await;
    alter(
        b,
        "ALTER INDEX ix_onestep_executions_status RENAME TO ix_onestep_executions_status_wide",
    )
    .await;
    assert_eq!(upgrade_steps(db.dsn()).await, [widened], "resumed");
    assert!(upgrade_steps(db.dsn()).await.is_empty(), "idempotent");

    let b = reopen(db.dsn(), false).await;
    assert!(b.schema_report().features.list_indexes);
    assert!(b.schema_report().upgrade_command.is_none());
    assert!(b.get(NS, id).await.expect("get").is_some(), "rows kept");
    let c = b.test_pool().get().await.expect("conn");
    let row = c
        .query_one(
            "SELECT pg_get_indexdef('ix_onestep_executions_status'::regclass), \
             (SELECT count(*) FROM pg_indexes WHERE indexname = 'ix_onestep_executions_status_wide')",
            &[],
        )
        .await
        .expect("indexdef");
    let def: String = row.get(0);
    assert!(
        def.ends_with("(namespace, task_name, status, created_at DESC, id DESC)"),
        "{def}"
    );
    assert_eq!(row.get::<_, i64>(1), 0);
    drop(c);
    b.close().await.expect("close");
}
