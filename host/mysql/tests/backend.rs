//! MySQL/MariaDB-specific behaviour: session pinning across pool resets, concurrent `open()`,
//! long table names, `auto_create = false`, injected faults (deadlock, lost connection, ambiguous
//! commit), secret redaction, `caching_sha2_password` over plain TCP, and the server gate.
// Test code: a helper that cannot set up its fixture panics, like an assertion (clippy.toml
// allows this inside #[test] functions; these helpers live outside them).
#![allow(clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;

use common::{Server, admin_pool, create_db, db_url, drop_db, open, server_version};
use futures::future::join_all;
use mysql_async::prelude::Queryable;
use onestep_core::names::TableNames;
use onestep_core::ports::{ExecutionStore, LeaseStore};
use onestep_core::{ConnectorKind, ExecutionError, Limits};
use onestep_mysql::{DdlStyle, MySqlBackend, StoreOptions};
use onestep_testkit::ManualClock;
use onestep_testkit::builders::{claim, keyed, prepared};
use serde_json::json;
use std::sync::atomic::Ordering;

async fn with_db<F, Fut>(server: Server, f: F)
where
    F: FnOnce(String, String) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let Some(url) = server.admin_url() else {
        return;
    };
    let admin = admin_pool(&url);
    eprintln!(
        "[{}] VERSION() = {}",
        server.label(),
        server_version(&admin).await
    );
    let db = create_db(&admin).await;
    f(url, db.clone()).await;
    drop_db(&admin, &db).await;
}

async fn default_backend(url: &str, db: &str) -> MySqlBackend {
    open(
        url,
        db,
        Arc::new(ManualClock::default()),
        Limits::default(),
        DdlStyle::Onestep,
        TableNames::default(),
    )
    .await
}

async fn session_pinned(server: Server) {
    with_db(server, |url, db| async move {
        let mut o = StoreOptions::new(db_url(&url, &db));
        o.pool_max = 1;
        let b = MySqlBackend::open(o).await.expect("open");
        let first = b.session_state().await.expect("state");
        assert_eq!(first.time_zone, "+00:00");
        assert_eq!(first.isolation, "READ-COMMITTED");
        // Dirty the session of the only pooled connection, give it back, read again.
        {
            let mut c = b.test_pool().get_conn().await.expect("conn");
            c.query_drop("SET time_zone = '+05:00'").await.expect("set");
            c.query_drop("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                .await
                .expect("set");
        }
        let again = b.session_state().await.expect("state");
        assert!(
            b.test_pool()
                .metrics()
                .resetting_connection
                .load(Ordering::Relaxed)
                >= 1
        );
        assert_eq!(
            again.connection_id, first.connection_id,
            "the connection was reused"
        );
        assert_eq!(
            again.time_zone, "+00:00",
            "setup re-ran after the pool reset"
        );
        assert_eq!(again.isolation, "READ-COMMITTED");
        b.close().await.expect("close");
    })
    .await;
}

#[tokio::test]
async fn session_pinned_mariadb() {
    session_pinned(Server::MariaDb).await;
}

#[tokio::test]
async fn session_pinned_mysql() {
    session_pinned(Server::MySql).await;
}

async fn concurrent_open(server: Server) {
    with_db(server, |url, db| async move {
        let opens = (0..8).map(|_| {
            let mut o = StoreOptions::new(db_url(&url, &db));
            o.pool_max = 2;
            tokio::spawn(MySqlBackend::open(o))
        });
        let backends: Vec<_> = join_all(opens)
            .await
            .into_iter()
            .map(|r| r.expect("task").expect("concurrent open"))
            .collect();
        let created: usize = backends
            .iter()
            .map(|b| b.schema_report().created.len())
            .sum();
        assert_eq!(
            created, 16,
            "each table (executions, attempts, diagnostics, keys, quotas, traces, buckets, \
             callbacks, deliveries, component chunks, components, component holders, \
             deployments, deployment events, deployment revision, steps) created exactly once"
        );
        assert!(backends.iter().all(|b| {
            let f = b.schema_report().features;
            f.claimable_column
                && f.fair_keys
                && f.buckets_table
                && f.callbacks_tables
                && f.components_tables
                && f.deployments_tables
                && f.steps_table
        }));
        for b in backends {
            b.close().await.expect("close");
        }
        // auto_create=false now finds them.
        let mut o = StoreOptions::new(db_url(&url, &db));
        o.auto_create = false;
        MySqlBackend::open(o)
            .await
            .expect("existing tables")
            .close()
            .await
            .expect("close");
    })
    .await;
}

#[tokio::test]
async fn concurrent_open_mariadb() {
    concurrent_open(Server::MariaDb).await;
}

#[tokio::test]
async fn concurrent_open_mysql() {
    concurrent_open(Server::MySql).await;
}

async fn long_names_and_missing_tables(server: Server) {
    with_db(server, |url, db| async move {
        let mut o = StoreOptions::new(db_url(&url, &db));
        o.auto_create = false;
        o.tables = TableNames::new("ex_x", "at_x").expect("names");
        match MySqlBackend::open(o).await {
            Err(ExecutionError::Backend(e)) => {
                assert_eq!(e.kind, ConnectorKind::Misconfigured);
                assert_eq!(e.message, "missing execution tables: ex_x, at_x");
            }
            other => panic!("expected missing tables, got {other:?}"),
        }
        for (t, a) in [
            ("e".repeat(58), "a".repeat(58)),
            ("e".repeat(64), "a".repeat(64)),
        ] {
            let tables = TableNames::new(t, a).expect("names");
            let clock = Arc::new(ManualClock::default());
            let b = open(
                &url,
                &db,
                clock,
                Limits::default(),
                DdlStyle::Onestep,
                tables.clone(),
            )
            .await;
            let e = b
                .submit(prepared("ns", "t", json!(1)))
                .await
                .expect("submit");
            let l = b
                .claim(&claim("ns", "t", 1, 10.0, "w"))
                .await
                .expect("claim");
            assert_eq!(l[0].execution.id, e.id);
            let done = b
                .complete(
                    &l[0].lease_ref(),
                    &onestep_core::Completion::succeeded(json!(2)),
                )
                .await
                .expect("complete");
            assert_eq!(done.result, Some(json!(2)));
            b.close().await.expect("close");
        }
    })
    .await;
}

#[tokio::test]
async fn long_names_and_missing_tables_mariadb() {
    long_names_and_missing_tables(Server::MariaDb).await;
}

#[tokio::test]
async fn long_names_and_missing_tables_mysql() {
    long_names_and_missing_tables(Server::MySql).await;
}

async fn faults(server: Server) {
    with_db(server, |url, db| async move {
        let b = default_backend(&url, &db).await;
        // Deadlocks and connection losses before COMMIT are retried.
        b.faults().deadlock_before_commit.store(2, Ordering::SeqCst);
        b.submit(prepared("ns", "t", json!(1)))
            .await
            .expect("retried after deadlocks");
        b.faults().lost_before_commit.store(1, Ordering::SeqCst);
        b.submit(prepared("ns", "t", json!(2)))
            .await
            .expect("retried after lost connection");
        // An ambiguous commit is resolved by re-reading (with and without a key).
        b.faults().commit_ack_lost.store(1, Ordering::SeqCst);
        let k = keyed("ns", "t", "amb", json!(3));
        let e = b.submit(k.clone()).await.expect("resolved through the key");
        assert_eq!(e.id, k.id);
        b.faults().commit_ack_lost.store(1, Ordering::SeqCst);
        let p = prepared("ns", "t", json!(4));
        assert_eq!(
            b.submit(p.clone())
                .await
                .expect("resolved through the id")
                .id,
            p.id
        );
        b.faults().commit_ack_lost.store(1, Ordering::SeqCst);
        let batch = vec![
            prepared("ns", "t", json!(5)),
            keyed("ns", "t", "amb", json!(3)),
        ];
        let out = b.submit_many(batch).await.expect("batch resolved");
        assert_eq!(out[1].as_ref().expect("replay").id, k.id);
        let page = b
            .list(
                "ns",
                &onestep_core::request::ListQuery::default()
                    .validate()
                    .expect("q"),
            )
            .await
            .expect("list");
        assert_eq!(page.items.len(), 5, "nothing written twice");
        // A claim that keeps deadlocking gives up with a transient error.
        b.faults()
            .deadlock_before_commit
            .store(100, Ordering::SeqCst);
        match b.claim(&claim("ns", "t", 1, 10.0, "w")).await {
            Err(ExecutionError::Backend(e)) => {
                assert_eq!((e.kind, e.operation), (ConnectorKind::Transient, "fetch"))
            }
            other => panic!("expected a transient error, got {other:?}"),
        }
        b.faults().deadlock_before_commit.store(0, Ordering::SeqCst);
        b.close().await.expect("close");
    })
    .await;
}

#[tokio::test]
async fn faults_mariadb() {
    faults(Server::MariaDb).await;
}

#[tokio::test]
async fn faults_mysql() {
    faults(Server::MySql).await;
}

/// `caching_sha2_password` (MySQL 9's default) on a cold cache over plain TCP needs the RSA
/// exchange; a wrong password fails as `misconfigured` without leaking the password.
#[tokio::test]
async fn caching_sha2_cold_cache_and_redaction_mysql() {
    with_db(Server::MySql, |url, db| async move {
        let admin = admin_pool(&url);
        let user = format!("u_{}", &db[10..20]);
        let pw = "Sup3r-secret-pw";
        let mut c = admin.get_conn().await.expect("admin");
        c.query_drop(format!(
            "CREATE USER '{user}'@'%' IDENTIFIED WITH caching_sha2_password BY '{pw}'"
        ))
        .await
        .expect("create user");
        c.query_drop(format!("GRANT ALL ON `{db}`.* TO '{user}'@'%'"))
            .await
            .expect("grant");
        c.query_drop("FLUSH PRIVILEGES").await.expect("flush");
        let hostport = url
            .trim_start_matches("mysql://")
            .rsplit('@')
            .next()
            .unwrap_or_default()
            .to_owned();
        let dsn = format!("mysql+asyncmy://{user}:{pw}@{hostport}/{db}");
        let b = MySqlBackend::open(StoreOptions::new(dsn))
            .await
            .expect("cold-cache RSA login");
        b.submit(prepared("ns", "t", json!(1)))
            .await
            .expect("submit");
        b.close().await.expect("close");
        let bad = format!("mysql://{user}:wrong-{pw}@{hostport}/{db}");
        match MySqlBackend::open(StoreOptions::new(bad)).await {
            Err(ExecutionError::Backend(e)) => {
                assert_eq!(e.kind, ConnectorKind::Misconfigured);
                assert!(!e.message.contains(pw), "{e}");
                assert!(!format!("{e:?}").contains(pw));
            }
            other => panic!("expected access denied, got {other:?}"),
        }
        let _ = c.query_drop(format!("DROP USER '{user}'@'%'")).await;
    })
    .await;
}

async fn unreachable_server_is_disconnected(server: Server) {
    let Some(_url) = server.admin_url() else {
        return;
    };
    let mut o = StoreOptions::new("mysql+pymysql://me:hunter2@127.0.0.1:1/db");
    o.pool_max = 1;
    match MySqlBackend::open(o).await {
        Err(ExecutionError::Backend(e)) => {
            assert_eq!(e.kind, ConnectorKind::Disconnected);
            assert!(!e.message.contains("hunter2"));
        }
        other => panic!("expected a connection error, got {other:?}"),
    }
}

#[tokio::test]
async fn unreachable_server_is_disconnected_mariadb() {
    unreachable_server_is_disconnected(Server::MariaDb).await;
}

/// Tables an older onestep created have the status index over (namespace, task_name, status)
/// only and no `ix_<T>_status_list`: open reports the upgrade command, `migrate --upgrade`
/// widens the one and adds the other in place (keeping every row), and a second upgrade does
/// nothing.
async fn upgrade_widens_status_index(server: Server) {
    with_db(server, |url, db| async move {
        let dsn = db_url(&url, &db);
        let b = MySqlBackend::open(StoreOptions::new(&dsn))
            .await
            .expect("open");
        assert!(b.schema_report().features.list_indexes);
        let sub = prepared("ns", "t", json!({"n": 1}));
        let id = b.submit(sub).await.expect("submit").id;
        let mut c = b.test_pool().get_conn().await.expect("conn");
        c.query_drop(
            "ALTER TABLE onestep_executions DROP INDEX ix_onestep_executions_status_list, \
             DROP INDEX ix_onestep_executions_status, \
             ADD INDEX ix_onestep_executions_status (namespace, task_name, status)",
        )
        .await
        .expect("older onestep's index");
        drop(c);
        b.close().await.expect("close");

        let mut o = StoreOptions::new(&dsn);
        o.auto_create = false;
        let old = MySqlBackend::open(o.clone())
            .await
            .expect("open older tables");
        let features = old.schema_report().features;
        assert!(features.claimable_column && !features.list_indexes);
        let command = old.schema_report().upgrade_command.clone();
        assert!(
            command
                .as_deref()
                .is_some_and(|c| c.starts_with("onestep migrate --upgrade --dsn ")),
            "{command:?}"
        );
        old.close().await.expect("close");

        let report = MySqlBackend::upgrade(StoreOptions::new(&dsn))
            .await
            .expect("upgrade");
        let added: Vec<&str> = report.steps.iter().map(|s| s.added.as_str()).collect();
        assert_eq!(
            added,
            [
                "index ix_onestep_executions_status (widened to namespace, task_name, status, \
                 created_at DESC, id DESC)",
                "index ix_onestep_executions_status_list"
            ],
            "{report:?}"
        );
        for s in &report.steps {
            assert_eq!(s.form, "ALGORITHM=INPLACE, LOCK=NONE", "{report:?}");
        }
        let again = MySqlBackend::upgrade(StoreOptions::new(&dsn))
            .await
            .expect("second upgrade");
        assert!(again.steps.is_empty(), "idempotent: {again:?}");

        let b = MySqlBackend::open(o).await.expect("open upgraded");
        assert!(b.schema_report().features.list_indexes);
        assert_eq!(b.schema_report().upgrade_command, None);
        let row = b.get("ns", id).await.expect("get").expect("kept");
        assert_eq!(row.status, onestep_core::ExecutionStatus::Queued);
        let mut c = b.test_pool().get_conn().await.expect("conn");
        let columns: Vec<String> = c
            .query(
                "SELECT COLUMN_NAME FROM information_schema.STATISTICS \
                 WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'onestep_executions' \
                 AND INDEX_NAME = 'ix_onestep_executions_status' ORDER BY SEQ_IN_INDEX",
            )
            .await
            .expect("columns");
        assert_eq!(
            columns,
            ["namespace", "task_name", "status", "created_at", "id"]
        );
        drop(c);
        b.close().await.expect("close");
    })
    .await;
}

#[tokio::test]
async fn upgrade_widens_status_index_mariadb() {
    upgrade_widens_status_index(Server::MariaDb).await;
}

#[tokio::test]
async fn upgrade_widens_status_index_mysql() {
    upgrade_widens_status_index(Server::MySql).await;
}

/// Tables an older onestep created have the priority columns but not the fair claim's
/// `fair_key` column, indexes and keys table (docs/schema.md#fair-claim-keys): open reports the
/// upgrade command and the claim refuses a request that needs the fair claim; `migrate
/// --upgrade` adds the column, both indexes and the keys table, after which the same request
/// is served round-robin over the keys of the rows written before the upgrade.
async fn upgrade_adds_fair_claim(server: Server) {
    use onestep_core::request::{ClaimRequest, NamespaceScope, SubmitRequest};
    use onestep_core::schedule::FairShare;
    with_db(server, |url, db| async move {
        let dsn = db_url(&url, &db);
        let b = MySqlBackend::open(StoreOptions::new(&dsn))
            .await
            .expect("open");
        assert!(b.schema_report().features.fair_keys);
        for key in ["a", "a", "a", "b"] {
            let req = SubmitRequest {
                task_name: "t".into(),
                payload: json!({"key": key}),
                fairness_key: Some(key.into()),
                ..SubmitRequest::default()
            };
            b.submit(onestep_testkit::builders::prepare("ns", &req))
                .await
                .expect("submit");
        }
        let mut c = b.test_pool().get_conn().await.expect("conn");
        c.query_drop("DROP TABLE onestep_executions_keys")
            .await
            .expect("no keys table");
        c.query_drop(
            "ALTER TABLE onestep_executions DROP INDEX ix_onestep_executions_fair, \
             DROP INDEX ix_onestep_executions_fair_running, DROP COLUMN fair_key",
        )
        .await
        .expect("older onestep's tables");
        drop(c);
        b.close().await.expect("close");

        let request = ClaimRequest {
            namespaces: NamespaceScope::All,
            task_names: vec!["t".into()],
            limit: 2,
            lease_duration_s: 30.0,
            worker_id: "w".into(),
            fair: FairShare::default(),
            max_running: None,
        };
        let mut o = StoreOptions::new(&dsn);
        o.auto_create = false;
        let old = MySqlBackend::open(o.clone())
            .await
            .expect("open older tables");
        assert!(!old.schema_report().features.fair_keys);
        assert!(old.schema_report().upgrade_command.is_some());
        let refused = old.claim(&request).await.expect_err("no fair claim yet");
        assert!(
            refused
                .to_string()
                .contains(onestep_core::store::fair::FAIR_CLAIM_UNSUPPORTED),
            "{refused}"
        );
        old.close().await.expect("close");

        let report = MySqlBackend::upgrade(StoreOptions::new(&dsn))
            .await
            .expect("upgrade");
        assert_eq!(report.created, ["onestep_executions_keys"], "{report:?}");
        let added: Vec<&str> = report.steps.iter().map(|s| s.added.as_str()).collect();
        assert_eq!(
            added,
            [
                "column fair_key",
                "index ix_onestep_executions_fair",
                "index ix_onestep_executions_fair_running"
            ],
            "{report:?}"
        );
        assert_eq!(report.steps[0].form, "ALGORITHM=INSTANT", "{report:?}");
        for s in &report.steps[1..] {
            assert_eq!(s.form, "ALGORITHM=INPLACE, LOCK=NONE", "{report:?}");
        }
        let again = MySqlBackend::upgrade(StoreOptions::new(&dsn))
            .await
            .expect("second upgrade");
        assert!(
            again.steps.is_empty() && again.created.is_empty(),
            "{again:?}"
        );

        let b = MySqlBackend::open(o).await.expect("open upgraded");
        assert!(b.schema_report().features.fair_keys);
        assert_eq!(b.schema_report().upgrade_command, None);
        let got = b.claim(&request).await.expect("fair claim");
        let mut keys: Vec<&str> = got
            .iter()
            .map(|l| l.execution.effective_fairness_key())
            .collect();
        keys.sort_unstable();
        assert_eq!(keys, ["a", "b"], "one of each key, not two of a's backlog");
        b.close().await.expect("close");
    })
    .await;
}

#[tokio::test]
async fn upgrade_adds_fair_claim_mariadb() {
    upgrade_adds_fair_claim(Server::MariaDb).await;
}

#[tokio::test]
async fn upgrade_adds_fair_claim_mysql() {
    upgrade_adds_fair_claim(Server::MySql).await;
}
