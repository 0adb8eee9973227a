//! `MySqlBackend::seed_history` (docs/benchmarks.md#history) on a real server: the seeded rows are
//! finished executions with one attempt each, ids of the asked version, created before the given
//! instant; they are invisible to claims, readable by get and list, and new work on top of them
//! runs as usual. On our tables (more than one 100,000-row chunk) and on reference-created ones.
// Test code: a helper that cannot set up its fixture panics, like an assertion (clippy.toml
// allows this inside #[test] functions; these helpers live outside them).
#![allow(clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;

use common::{Server, admin_pool, create_db, drop_db, open};
use mysql_async::prelude::Queryable;
use onestep_core::ExecutionStatus;
use onestep_core::execution::Completion;
use onestep_core::names::TableNames;
use onestep_core::ports::{ExecutionStore, LeaseStore, StoreStats};
use onestep_core::request::ListQuery;
use onestep_mysql::history::{HistoryIds, HistorySeed, MAX_HISTORY_ROWS};
use onestep_mysql::schema::DdlStyle;
use onestep_testkit::ManualClock;
use onestep_testkit::builders::{claim, prepared};
use serde_json::json;

async fn seeded(server: Server, style: DdlStyle, ids: HistoryIds, count: u64) {
    let Some(url) = server.admin_url() else {
        return;
    };
    let admin = admin_pool(&url);
    let db = create_db(&admin).await;
    let clock = Arc::new(ManualClock::default());
    let b = open(
        &url,
        &db,
        clock.clone(),
        onestep_core::Limits::default(),
        style,
        TableNames::default(),
    )
    .await;
    let before = clock.now_value();
    let seed = HistorySeed {
        namespace: "bench".into(),
        task_name: "bench.noop".into(),
        count,
        ids,
        before,
        // Both shapes are covered: keys with the v4 seeds, none with the v7 ones.
        idempotency_keys: ids == HistoryIds::V4,
    };
    assert_eq!(b.seed_history(&seed).await.expect("seed"), count);

    let mut c = b.test_pool().get_conn().await.expect("conn");
    let t = &b.tables().executions;
    let a = &b.tables().attempts;
    let row: Option<(u64, u64, u64, u64)> = c
        .query_first(format!(
            "SELECT COUNT(*), SUM(status = 'succeeded' AND attempts = 1 AND version = 2 \
             AND lease_token IS NULL AND finished_at > started_at), \
             SUM(namespace = 'bench' AND task_name = 'bench.noop'), \
             (SELECT COUNT(*) FROM `{a}` x JOIN `{t}` e ON e.id = x.execution_id \
              WHERE x.attempt_no = 1 AND x.status = 'succeeded') FROM `{t}`"
        ))
        .await
        .expect("count");
    assert_eq!(
        row,
        Some((count, count, count, count)),
        "every row finished, one attempt each"
    );
    // Idempotency keys: distinct 32-hex keys with digests on every row, or none at all.
    let keys: Option<(u64, u64)> = c
        .query_first(format!(
            "SELECT COUNT(DISTINCT idempotency_key), \
             COALESCE(SUM(LENGTH(idempotency_key) = 32 AND LENGTH(submission_digest) = 64), 0) \
             FROM `{t}`"
        ))
        .await
        .expect("keys");
    let keyed = if seed.idempotency_keys { count } else { 0 };
    assert_eq!(keys, Some((keyed, keyed)));
    drop(c);

    // Newest first, all before `before`, ids of the asked version; get reads a row.
    let page = b
        .list(
            "bench",
            &ListQuery {
                limit: 200,
                ..ListQuery::default()
            }
            .validate()
            .expect("query"),
        )
        .await
        .expect("list");
    assert_eq!(page.items.len() as u64, count.min(200));
    assert_eq!(page.next_cursor.is_some(), count > 200);
    let want = match ids {
        HistoryIds::V7 => 7,
        HistoryIds::V4 => 4,
    };
    for e in &page.items {
        assert_eq!(e.id.get_version_num(), want, "{}", e.id);
        assert!(e.created_at < before);
        assert_eq!(e.status, ExecutionStatus::Succeeded);
        assert_eq!(e.result, Some(e.payload.clone()));
    }
    let newest = &page.items[0];
    assert_eq!(
        newest.created_at,
        before - chrono::Duration::milliseconds(1)
    );
    if ids == HistoryIds::V7 {
        // The id carries its creation millisecond.
        let (secs, nanos) = newest.id.get_timestamp().expect("v7 timestamp").to_unix();
        assert_eq!(
            secs * 1000 + u64::from(nanos / 1_000_000),
            newest.created_at.timestamp_millis() as u64
        );
    }
    let got = b
        .get("bench", newest.id)
        .await
        .expect("get")
        .expect("found");
    assert_eq!(got.id, newest.id);

    // History is invisible to claims; new work on top runs as usual.
    let none = b
        .claim(&claim("bench", "bench.noop", 10, 30.0, "w"))
        .await
        .expect("claim on history");
    assert!(none.is_empty(), "finished history is never claimed");
    let fresh = b
        .submit(prepared("bench", "bench.noop", json!("new")))
        .await
        .expect("submit");
    let leases = b
        .claim(&claim("bench", "bench.noop", 10, 30.0, "w"))
        .await
        .expect("claim");
    assert_eq!(leases.len(), 1);
    assert_eq!(leases[0].execution.id, fresh.id);
    b.complete(&leases[0].lease_ref(), &Completion::succeeded(json!(1)))
        .await
        .expect("complete");
    let timings = b
        .execution_timings("bench", Some(before))
        .await
        .expect("timings");
    assert_eq!(timings.len(), 1, "only the new execution is created since");

    let over = HistorySeed {
        count: MAX_HISTORY_ROWS + 1,
        ..seed
    };
    let e = b.seed_history(&over).await.expect_err("over the limit");
    assert!(e.to_string().contains("over the limit"), "{e}");

    b.close().await.expect("close");
    drop_db(&admin, &db).await;
}

#[tokio::test]
async fn history_two_chunks_v7_mariadb() {
    seeded(Server::MariaDb, DdlStyle::Onestep, HistoryIds::V7, 100_250).await;
}

#[tokio::test]
async fn history_two_chunks_v7_mysql() {
    seeded(Server::MySql, DdlStyle::Onestep, HistoryIds::V7, 100_250).await;
}

#[tokio::test]
async fn history_v4_mariadb() {
    seeded(Server::MariaDb, DdlStyle::Onestep, HistoryIds::V4, 500).await;
}

#[tokio::test]
async fn history_reference_tables_v4_mariadb() {
    seeded(Server::MariaDb, DdlStyle::Reference, HistoryIds::V4, 300).await;
}

#[tokio::test]
async fn history_reference_tables_v7_mysql() {
    seeded(Server::MySql, DdlStyle::Reference, HistoryIds::V7, 300).await;
}
