//! `PgBackend::seed_history` (docs/benchmarks.md#history) on the real server: the seeded rows are
//! finished executions with one attempt each, ids of the asked version (v7 ids in creation order,
//! carrying their millisecond), created before the given instant; they are invisible to claims,
//! readable by get and list, and new work on top of them runs as usual. Over more than one
//! statement's chunk for v7.
// Test code: a helper that cannot set up its fixture panics, like an assertion.
#![allow(clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;

use common::{open, scratch};
use onestep_core::ExecutionStatus;
use onestep_core::execution::Completion;
use onestep_core::ports::{ExecutionStore, LeaseStore, StoreStats};
use onestep_core::request::ListQuery;
use onestep_postgres::history::{HISTORY_CHUNK, HistoryIds, HistorySeed, MAX_HISTORY_ROWS};
use onestep_testkit::ManualClock;
use onestep_testkit::builders::{claim, prepared};
use serde_json::json;

async fn seeded(ids: HistoryIds, count: u64) {
    let db = scratch().await;
    let clock = Arc::new(ManualClock::default());
    let b = open(
        db.dsn(),
        clock.clone(),
        onestep_core::Limits::default(),
        true,
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

    let c = b.test_pool().get().await.expect("conn");
    let t = &b.tables().executions;
    let a = &b.tables().attempts;
    let version = match ids {
        HistoryIds::V7 => "7",
        HistoryIds::V4 => "4",
    };
    let row = c
        .query_one(
            &format!(
                "SELECT count(*), \
                 count(*) FILTER (WHERE status = 'succeeded' AND attempts = 1 AND version = 2 \
                   AND lease_token IS NULL AND finished_at > started_at), \
                 count(*) FILTER (WHERE namespace = 'bench' AND task_name = 'bench.noop'), \
                 count(*) FILTER (WHERE substr(id::text, 15, 1) = $1), \
                 (SELECT count(*) FROM \"{a}\" x JOIN \"{t}\" e ON e.id = x.execution_id \
                   WHERE x.attempt_no = 1 AND x.status = 'succeeded' \
                   AND substr(x.id::text, 15, 1) = $1) \
                 FROM \"{t}\""
            ),
            &[&version],
        )
        .await
        .expect("count");
    let n = count as i64;
    let got: Vec<i64> = (0..5).map(|i| row.get(i)).collect();
    assert_eq!(
        got,
        vec![n; 5],
        "every row finished, of the asked id version, one attempt each"
    );
    // Idempotency keys: distinct 32-hex keys with digests on every row, or none at all.
    let keys = c
        .query_one(
            &format!(
                "SELECT count(DISTINCT idempotency_key), \
                 count(*) FILTER (WHERE length(idempotency_key) = 32 \
                   AND length(submission_digest) = 64) FROM \"{t}\""
            ),
            &[],
        )
        .await
        .expect("keys");
    let keyed = if seed.idempotency_keys { n } else { 0 };
    assert_eq!(
        (keys.get::<_, i64>(0), keys.get::<_, i64>(1)),
        (keyed, keyed)
    );
    if ids == HistoryIds::V7 {
        // Id order is creation order, and each id carries its row's millisecond.
        let row = c
            .query_one(
                &format!(
                    "SELECT count(*) FILTER (WHERE prev > id), \
                     count(*) FILTER (WHERE ('x' || substr(replace(id::text, '-', ''), 1, 12))\
                       ::bit(48)::bigint <> (extract(epoch FROM created_at) * 1000)::bigint) \
                     FROM (SELECT id, created_at, lag(id) OVER (ORDER BY created_at) AS prev \
                       FROM \"{t}\") s"
                ),
                &[],
            )
            .await
            .expect("order");
        assert_eq!((row.get::<_, i64>(0), row.get::<_, i64>(1)), (0, 0));
    }
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
    db.drop_database().await.expect("drop database");
}

#[tokio::test]
async fn history_two_chunks_v7() {
    seeded(HistoryIds::V7, HISTORY_CHUNK + 250).await;
}

#[tokio::test]
async fn history_v4() {
    seeded(HistoryIds::V4, 5_000).await;
}

#[tokio::test]
async fn history_v7_small() {
    seeded(HistoryIds::V7, 5_000).await;
}
