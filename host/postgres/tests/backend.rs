//! PostgreSQL backend behaviour on the real server. One undecodable row (a payload no decoder
//! accepts, written with raw SQL) among good ones, the shared testkit case:
//! `get` and `list` report it as `Undecodable` naming the row, `claim` leaves it alone and
//! claims the rest, `heartbeat_many` and `complete_many` answer for that item alone, and no
//! row lock outlives the calls (docs/semantics.md#undecodable-rows,
//! docs/lease-protocol.md#refused-writes). And the classification of a statement timeout and
//! of an administrator's termination of the session, and the upgrade of the status index.
// Test code: a helper that cannot set up its fixture panics, like an assertion.
#![allow(clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;

use async_trait::async_trait;
use common::{open, scratch};
use onestep_core::ports::ExecutionStore;
use onestep_core::{ConnectorKind, Limits};
use onestep_postgres::errors::classify;
use onestep_testkit::ManualClock;
use onestep_testkit::backend_cases::undecodable::{self, RawRows};
use onestep_testkit::builders::prepared;
use serde_json::json;
use uuid::Uuid;

const NS: &str = "ns";

type Pool = deadpool_postgres::Pool;

/// The raw SQL of the shared undecodable-row case.
struct Rows(Pool);

#[async_trait]
impl RawRows for Rows {
    async fn set_payload(&self, id: Uuid, payload: &str) {
        let c = self.0.get().await.expect("conn");
        c.execute(
            "UPDATE onestep_executions SET payload = $1::text::jsonb WHERE id = $2",
            &[&payload, &id],
        )
        .await
        .expect("corrupt");
    }

    async fn status(&self, id: Uuid) -> String {
        let c = self.0.get().await.expect("conn");
        c.query_one(
            "SELECT status FROM onestep_executions WHERE id = $1",
            &[&id],
        )
        .await
        .expect("status")
        .get(0)
    }

    async fn lock_nowait(&self, id: Uuid) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let mut c = self.0.get().await.expect("conn");
        let tx = c.transaction().await.expect("begin");
        let r = tx
            .query(
                "SELECT id FROM onestep_executions WHERE id = $1 FOR UPDATE NOWAIT",
                &[&id],
            )
            .await;
        tx.rollback().await.expect("rollback");
        r.map(drop).map_err(Into::into)
    }

    async fn deferred_s(&self, id: Uuid) -> i64 {
        let c = self.0.get().await.expect("conn");
        c.query_one(
            "SELECT EXTRACT(EPOCH FROM available_at - created_at)::bigint FROM onestep_executions \
             WHERE id = $1",
            &[&id],
        )
        .await
        .expect("available_at")
        .get(0)
    }
}

/// The shared testkit case (`onestep_testkit::backend_cases::undecodable`, also run on MariaDB
/// and MySQL).
#[tokio::test]
async fn one_undecodable_row_alone() {
    let db = scratch().await;
    let clock = Arc::new(ManualClock::default());
    let b = open(db.dsn(), clock.clone(), Limits::default(), true).await;
    let rows = Rows(b.test_pool().clone());
    undecodable::one_undecodable_row_alone(&b, &clock, &rows).await;
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

/// docs/benchmarks.md#deployments: the follower's revision read, every `poll_s` on every
/// worker, is a statement prepared once per connection (one Bind/Execute/Sync round trip a
/// poll), not a Parse/Describe/Sync before each read and a Close after it.
#[tokio::test]
async fn the_revision_read_is_prepared_once_per_connection() {
    use onestep_core::backend::Backend;
    let db = scratch().await;
    let mut o = onestep_postgres::StoreOptions::new(db.dsn());
    o.auto_create = true;
    o.pool_max = 1;
    let b = onestep_postgres::PgBackend::open(o)
        .await
        .expect("open backend");
    for _ in 0..5 {
        assert_eq!(b.deployments().revision().await.expect("revision"), 0);
    }
    // The pool's one connection: the statement is still prepared there, once.
    let c = b.test_pool().get().await.expect("conn");
    let prepared: i64 = c
        .query_one(
            "SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE $1",
            &[&"SELECT revision FROM %"],
        )
        .await
        .expect("prepared statements")
        .get(0);
    assert_eq!(prepared, 1, "one prepared revision read on the connection");
    drop(c);
    b.close().await.expect("close");
    db.drop_database().await.expect("drop database");
}
