//! A backend's history seeder (`seed_history`, docs/benchmarks.md#history) on a real server:
//! the seeded rows are finished executions with one attempt each, ids of the asked version,
//! created before the given instant; they are invisible to claims, readable by get and list,
//! and new work on top of them runs as usual; a seed over the limit is refused. The seeder and
//! the checks of the stored rows by SQL are the backend's ([`HistoryRows`]).

use async_trait::async_trait;
use onestep_core::ExecutionStatus;
use onestep_core::error::ExecutionError;
use onestep_core::execution::Completion;
use onestep_core::history::{HistoryIds, HistorySeed, MAX_HISTORY_ROWS};
use onestep_core::ports::{ExecutionStore, LeaseStore, StoreStats};
use onestep_core::request::ListQuery;
use serde_json::json;

use crate::ManualClock;
use crate::builders::{claim, prepared};

/// The backend's seeder and its raw view of the seeded rows.
#[async_trait]
pub trait HistoryRows: Send + Sync {
    /// The backend's `seed_history`.
    async fn seed(&self, seed: &HistorySeed) -> Result<u64, ExecutionError>;
    /// Checks by SQL what `seed` (just written, on empty tables) stored: every row finished
    /// with one attempt, in its namespace and task, idempotency keys as asked.
    async fn check_rows(&self, seed: &HistorySeed);
}

/// Seeds `count` rows with `ids` into the empty store `b` (clock `clock`) through `rows`, then
/// checks them through the ports.
pub async fn seeded<B>(
    b: &B,
    clock: &ManualClock,
    rows: &dyn HistoryRows,
    ids: HistoryIds,
    count: u64,
) where
    B: ExecutionStore + LeaseStore + StoreStats,
{
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
    assert_eq!(rows.seed(&seed).await.expect("seed"), count);
    rows.check_rows(&seed).await;

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
    let e = rows.seed(&over).await.expect_err("over the limit");
    assert!(e.to_string().contains("over the limit"), "{e}");
}
