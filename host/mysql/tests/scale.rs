//! Costs that must not grow with history: with 100,000 finished executions (and their attempts)
//! in the table pair, every maintenance read and the claim read is served by an index range that
//! excludes the finished rows. Checked with EXPLAIN (no full scan, an index is used) and with the
//! session `Handler_read_*` counters of the statement (bounded rows examined).
// Test code: a helper that cannot set up its fixture panics, like an assertion (clippy.toml
// allows this inside #[test] functions; these helpers live outside them).
#![allow(clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;

use common::{Server, admin_pool, create_db, drop_db, open, server_version};
use mysql_async::Row;
use mysql_async::prelude::Queryable;
use onestep_core::Limits;
use onestep_core::names::TableNames;
use onestep_core::ports::{ExecutionStore, LeaseStore};
use onestep_mysql::DdlStyle;
use onestep_testkit::ManualClock;
use onestep_testkit::builders::{claim, prepared};
use serde_json::json;

const DIGITS: &str = "(SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 \
    UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 \
    UNION ALL SELECT 9)";

fn seq_100k() -> String {
    format!(
        "(SELECT a.d + 10*b.d + 100*c.d + 1000*d.d + 10000*e.d AS n FROM {DIGITS} a, {DIGITS} b, \
         {DIGITS} c, {DIGITS} d, {DIGITS} e) s"
    )
}

/// Replaces each `?` with the next literal.
fn bind_literals(sql: &str, literals: &[String]) -> String {
    let mut out = String::new();
    let mut it = literals.iter();
    for ch in sql.chars() {
        if ch == '?' {
            out.push_str(it.next().map(String::as_str).unwrap_or("NULL"));
        } else {
            out.push(ch);
        }
    }
    out
}

async fn history_does_not_cost(server: Server) {
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
    let clock = Arc::new(ManualClock::default());
    let b = open(
        &url,
        &db,
        clock.clone(),
        Limits::default(),
        DdlStyle::Onestep,
        TableNames::default(),
    )
    .await;
    let (t, a) = (b.tables().executions.clone(), b.tables().attempts.clone());
    let mut c = b.test_pool().get_conn().await.expect("conn");
    // 100,000 finished rows of the same namespace and task, expired in the past, plus attempts.
    c.query_drop(format!(
        "INSERT INTO `{t}` (id, namespace, task_name, status, payload, metadata, attempts, \
         available_at, lease_token, expires_at, created_at, updated_at, finished_at, version) \
         SELECT CONCAT('e', LPAD(HEX(n), 31, '0')), 'ns', 't', 'succeeded', '1', '{{}}', 1, '2026-01-01', NULL, \
         '2026-01-02', '2026-01-01', '2026-01-01', '2026-01-01', 2 FROM {}",
        seq_100k()
    ))
    .await
    .expect("history");
    c.query_drop(format!(
        "INSERT INTO `{a}` (id, execution_id, attempt_no, lease_token, worker_id, status, \
         started_at, heartbeat_at, finished_at) SELECT CONCAT('a', LPAD(HEX(n), 31, '0')), CONCAT('e', LPAD(HEX(n), 31, '0')), \
         1, CONCAT('b', LPAD(HEX(n), 31, '0')), 'w', 'succeeded', '2026-01-01', '2026-01-01', '2026-01-01' FROM {}",
        seq_100k()
    ))
    .await
    .expect("attempts");
    c.query_drop(format!("ANALYZE TABLE `{t}`, `{a}`"))
        .await
        .expect("analyze");
    // A little live work.
    for i in 0..5 {
        b.submit(prepared("ns", "t", json!(i)))
            .await
            .expect("submit");
    }
    let now = format!(
        "'{}'",
        clock
            .now_value()
            .naive_utc()
            .format("%Y-%m-%d %H:%M:%S%.6f")
    );
    for (label, sql) in b.claim_read_statements(1, 10) {
        let literals: Vec<String> = if label == "claim" {
            vec!["'ns'".into(), "'t'".into(), now.clone(), now.clone()]
        } else {
            vec![now.clone()]
        };
        let sql = bind_literals(&sql, &literals);
        let explain = match b.server().flavor {
            onestep_mysql::Flavor::MySql => "EXPLAIN FORMAT=TRADITIONAL",
            onestep_mysql::Flavor::MariaDb => "EXPLAIN",
        };
        let plan: Vec<Row> = c.query(format!("{explain} {sql}")).await.expect("explain");
        let mut lines = Vec::new();
        for r in &plan {
            let table: Option<String> = r.get("table").flatten();
            let access: Option<String> = r.get("type").flatten();
            let key: Option<String> = r.get("key").flatten();
            let rows: Option<String> = r.get::<Option<String>, _>("rows").flatten();
            let extra: Option<String> = r.get("Extra").flatten();
            lines.push(format!(
                "{table:?} type={access:?} key={key:?} rows={rows:?} extra={extra:?}"
            ));
            assert_ne!(
                access.as_deref(),
                Some("ALL"),
                "[{label}] full scan: {lines:?}"
            );
            if table.as_deref() == Some("e") || table.as_deref() == Some(t.as_str()) {
                assert!(key.is_some(), "[{label}] no index: {lines:?}");
            }
        }
        assert!(
            lines.iter().any(|l| l.starts_with("Some(")),
            "[{label}] EXPLAIN returned no table rows: {lines:?}"
        );
        // Rows examined by the statement itself (session handler counters).
        c.query_drop("FLUSH STATUS").await.expect("flush status");
        let sql_run = sql.replace(" FOR UPDATE SKIP LOCKED", "");
        let _: Vec<Row> = c.query(sql_run).await.expect("run");
        let counters: Vec<(String, String)> = c
            .query("SHOW SESSION STATUS LIKE 'Handler_read%'")
            .await
            .expect("status");
        let total: u64 = counters
            .iter()
            .map(|(_, v)| v.parse::<u64>().unwrap_or(0))
            .sum();
        eprintln!(
            "[{}] {label}: handler reads {total}; plan {lines:?}",
            server.label()
        );
        assert!(
            total < 1_000,
            "[{label}] examined {total} rows with 100k finished rows: {counters:?}"
        );
    }
    // And the real claim works with the history in place.
    let got = b
        .claim(&claim("ns", "t", 10, 30.0, "w"))
        .await
        .expect("claim");
    assert_eq!(got.len(), 5);
    drop(c);
    b.close().await.expect("close");
    drop_db(&admin, &db).await;
}

#[tokio::test]
async fn history_does_not_cost_mariadb() {
    history_does_not_cost(Server::MariaDb).await;
}

#[tokio::test]
async fn history_does_not_cost_mysql() {
    history_does_not_cost(Server::MySql).await;
}
