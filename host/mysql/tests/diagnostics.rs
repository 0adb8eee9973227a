//! Attempt diagnostics on real servers (docs/observability.md#attempt-diagnostics): the shared
//! testkit cases (`onestep_testkit::diagnostics`, also run on PostgreSQL): the round trip of
//! live and final writes, reads and purge, and a store without the diagnostics table; plus the
//! insights check.
#![allow(clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;

use common::{Server, admin_pool, create_db, db_url, drop_db};
use mysql_async::prelude::Queryable;
use onestep_mysql::{MySqlBackend, StoreOptions};
use onestep_testkit::ManualClock;

async fn backend(url: &str, db: &str, clock: Arc<ManualClock>) -> MySqlBackend {
    let mut o = StoreOptions::new(db_url(url, db));
    o.clock = clock;
    MySqlBackend::open(o).await.expect("open backend")
}

async fn round_trip(server: Server) {
    let Some(url) = server.admin_url() else {
        return;
    };
    let admin = admin_pool(&url);
    let db = create_db(&admin).await;
    let clock = Arc::new(ManualClock::default());
    let b = backend(&url, &db, clock.clone()).await;
    assert!(b.schema_report().features.diagnostics_table);
    onestep_testkit::diagnostics::round_trip(&b, &clock).await;
    b.close().await.expect("close");
    drop_db(&admin, &db).await;
}

#[tokio::test]
async fn diagnostics_round_trip_mariadb() {
    round_trip(Server::MariaDb).await;
}

#[tokio::test]
async fn diagnostics_round_trip_mysql() {
    round_trip(Server::MySql).await;
}

/// Without the diagnostics table (dropped after the pair was created, as when the reference
/// created the tables and nobody ran `onestep migrate`): the shared testkit case.
async fn without_the_table(server: Server) {
    let Some(url) = server.admin_url() else {
        return;
    };
    let admin = admin_pool(&url);
    let db = create_db(&admin).await;
    let clock = Arc::new(ManualClock::default());
    {
        let b = backend(&url, &db, clock.clone()).await;
        let mut c = b.test_pool().get_conn().await.expect("conn");
        let table = b.tables().diagnostics();
        c.query_drop(format!("DROP TABLE `{table}`"))
            .await
            .expect("drop");
        drop(c);
        b.close().await.expect("close");
    }
    let mut o = StoreOptions::new(db_url(&url, &db));
    o.clock = clock.clone();
    o.auto_create = false;
    let b = MySqlBackend::open(o).await.expect("open without the table");
    assert!(!b.schema_report().features.diagnostics_table);
    onestep_testkit::diagnostics::without_the_table(&b, &clock).await;
    b.close().await.expect("close");
    drop_db(&admin, &db).await;
}

#[tokio::test]
async fn without_the_diagnostics_table_mariadb() {
    without_the_table(Server::MariaDb).await;
}

#[tokio::test]
async fn without_the_diagnostics_table_mysql() {
    without_the_table(Server::MySql).await;
}

/// The overview/gauge insights and the attempts read on our tables (the shared testkit check),
/// and the grouped count reads the `(namespace, task_name, status, …)` index alone.
async fn insights_on(server: Server) {
    let Some(url) = server.admin_url() else {
        return;
    };
    let admin = admin_pool(&url);
    let db = create_db(&admin).await;
    let b = MySqlBackend::open(StoreOptions::new(db_url(&url, &db)))
        .await
        .expect("open backend");
    onestep_testkit::insights::counts_recent_and_attempts(&b, &b).await;
    onestep_testkit::insights::rate_limit_states(&b, &b).await;
    let mut conn = admin.get_conn().await.expect("conn");
    // MySQL 9 defaults to the tree format; MariaDB knows only the traditional one.
    let explain = match server {
        Server::MariaDb => "EXPLAIN",
        Server::MySql => "EXPLAIN FORMAT=TRADITIONAL",
    };
    let plan: Vec<mysql_async::Row> = conn
        .query(format!(
            "{explain} SELECT namespace, task_name, status, COUNT(*) FROM `{db}`.onestep_executions \
             WHERE namespace IN ('ins-a', 'ins-b') GROUP BY namespace, task_name, status"
        ))
        .await
        .expect("explain");
    let text: Vec<(String, String)> = plan
        .into_iter()
        .map(|mut r| {
            let key: Option<String> = r.take("key");
            let extra: Option<String> = r.take("Extra");
            (key.unwrap_or_default(), extra.unwrap_or_default())
        })
        .collect();
    assert!(
        text.len() == 1
            && text[0].0 == "ix_onestep_executions_status"
            && text[0].1.contains("Using index"),
        "{}: index-only read of ix_<T>_status: {text:?}",
        server.label()
    );
    // The UUID columns have the type the reference gives them on this server (docs/schema.md).
    let types: Vec<(String, String, String)> = conn
        .exec(
            "SELECT TABLE_NAME, COLUMN_NAME, DATA_TYPE FROM information_schema.COLUMNS \
             WHERE TABLE_SCHEMA = ? AND COLUMN_NAME IN ('id', 'execution_id', 'lease_token') \
             AND TABLE_NAME IN ('onestep_executions', 'onestep_execution_attempts') \
             ORDER BY TABLE_NAME, COLUMN_NAME",
            (db.as_str(),),
        )
        .await
        .expect("columns");
    let want = match server {
        Server::MariaDb => "uuid",
        Server::MySql => "char",
    };
    assert_eq!(types.len(), 5, "{types:?}");
    assert!(
        types.iter().all(|(_, _, t)| t == want),
        "{}: {types:?}",
        server.label()
    );
    drop(conn);
    b.close().await.expect("close");
    drop_db(&admin, &db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insights_mariadb() {
    insights_on(Server::MariaDb).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insights_mysql() {
    insights_on(Server::MySql).await;
}
