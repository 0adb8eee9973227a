//! `MySqlBackend::seed_history` (docs/benchmarks.md#history) on a real server, the shared
//! testkit case (`onestep_testkit::backend_cases::history`, also run on PostgreSQL): the seeded
//! rows are finished executions with one attempt each, ids of the asked version, created before
//! the given instant; they are invisible to claims, readable by get and list, and new work on top
//! of them runs as usual. On our tables (more than one 100,000-row chunk) and on
//! reference-created ones. The checks of the stored rows by SQL are here.
// Test code: a helper that cannot set up its fixture panics, like an assertion (clippy.toml
// allows this inside #[test] functions; these helpers live outside them).
#![allow(clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;

use async_trait::async_trait;
use common::{Server, admin_pool, create_db, drop_db, open};
use mysql_async::prelude::Queryable;
use onestep_core::ExecutionError;
use onestep_core::names::TableNames;
use onestep_mysql::MySqlBackend;
use onestep_mysql::history::{HistoryIds, HistorySeed};
use onestep_mysql::schema::DdlStyle;
use onestep_testkit::ManualClock;
use onestep_testkit::backend_cases::history::{self, HistoryRows};

/// The seeder and the stored rows of one backend.
struct Rows<'a>(&'a MySqlBackend);

#[async_trait]
impl HistoryRows for Rows<'_> {
    async fn seed(&self, seed: &HistorySeed) -> Result<u64, ExecutionError> {
        self.0.seed_history(seed).await
    }

    async fn check_rows(&self, seed: &HistorySeed) {
        let count = seed.count;
        let mut c = self.0.test_pool().get_conn().await.expect("conn");
        let t = &self.0.tables().executions;
        let a = &self.0.tables().attempts;
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
    }
}

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
    history::seeded(&b, &clock, &Rows(&b), ids, count).await;
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
