//! `PgBackend::seed_history` (docs/benchmarks.md#history) on the real server: the seeded rows are
//! finished executions with one attempt each, ids of the asked version (v7 ids in creation order,
//! carrying their millisecond), created before the given instant; they are invisible to claims,
//! readable by get and list, and new work on top of them runs as usual. Over more than one
//! statement's chunk for v7. The shared testkit case (`onestep_testkit::backend_cases::history`,
//! also run on MariaDB and MySQL); the checks of the stored rows by SQL are here.
// Test code: a helper that cannot set up its fixture panics, like an assertion.
#![allow(clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;

use async_trait::async_trait;
use common::{open, scratch};
use onestep_core::ExecutionError;
use onestep_postgres::PgBackend;
use onestep_postgres::history::{HISTORY_CHUNK, HistoryIds, HistorySeed};
use onestep_testkit::ManualClock;
use onestep_testkit::backend_cases::history::{self, HistoryRows};

/// The seeder and the stored rows of the backend.
struct Rows<'a>(&'a PgBackend);

#[async_trait]
impl HistoryRows for Rows<'_> {
    async fn check_rows(&self, seed: &HistorySeed) {
        let (ids, count) = (seed.ids, seed.count);
        let c = self.0.test_pool().get().await.expect("conn");
        let t = &self.0.tables().executions;
        let a = &self.0.tables().attempts;
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
    }

    async fn seed(&self, seed: &HistorySeed) -> Result<u64, ExecutionError> {
        self.0.seed_history(seed).await
    }
}

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
    history::seeded(&b, &clock, &Rows(&b), ids, count).await;
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
