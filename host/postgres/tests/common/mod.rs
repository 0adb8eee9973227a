//! Shared test plumbing: the server URL from the environment, a database per test (created by
//! the test, dropped afterwards), the backend fixture factory and the SQL probe used by the
//! conformance suite.
//!
//! Environment: `ONESTEP_TEST_POSTGRES_URL` (default `postgres://postgres@127.0.0.1:5432/`,
//! printed by `scripts/test-db.sh up`). A server that cannot be reached FAILS the test.
#![allow(dead_code)]

pub mod reference;

use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use deadpool_postgres::Pool;
use onestep_core::components::ComponentDigest;
use onestep_core::names::TableNames;
use onestep_core::{AttemptStatus, Limits};
use onestep_postgres::rows::error_value;
use onestep_postgres::{PgBackend, ScratchDatabase, StoreOptions};
use onestep_testkit::ManualClock;
use onestep_testkit::suite::{
    AttemptRow, Fixture, FixtureError, FixtureFactory, LeaseColumns, LiveFixtures, Probe,
};
use uuid::Uuid;

/// The admin URL (no database needed).
pub fn admin_url() -> String {
    std::env::var("ONESTEP_TEST_POSTGRES_URL")
        .ok()
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/".to_owned())
}

/// A new empty database on the test server.
pub async fn scratch() -> ScratchDatabase {
    ScratchDatabase::create(&admin_url(), "onestep_t_")
        .await
        .expect("create test database (is PostgreSQL up? scripts/test-db.sh up)")
}

pub async fn open(
    dsn: &str,
    clock: Arc<ManualClock>,
    limits: Limits,
    auto_create: bool,
) -> PgBackend {
    let mut o = StoreOptions::new(dsn);
    o.clock = clock;
    o.limits = limits;
    o.auto_create = auto_create;
    o.pool_max = 24;
    PgBackend::open(o).await.expect("open backend")
}

/// The SQL probe over a backend's tables.
pub struct SqlProbe {
    pub pool: Pool,
    pub tables: TableNames,
}

#[async_trait]
impl Probe for SqlProbe {
    async fn attempts(&self, execution_id: Uuid) -> Vec<AttemptRow> {
        let c = self.pool.get().await.expect("conn");
        let rows = c
            .query(
                &format!(
                    "SELECT id, attempt_no, status, lease_token, worker_id, error, started_at, \
                     heartbeat_at, finished_at FROM \"{}\" WHERE execution_id = $1 \
                     ORDER BY attempt_no",
                    self.tables.attempts
                ),
                &[&execution_id],
            )
            .await
            .expect("attempts");
        rows.iter()
            .map(|r| AttemptRow {
                id: r.get(0),
                attempt_no: u32::try_from(r.get::<_, i32>(1)).expect("attempt_no"),
                status: r
                    .get::<_, String>(2)
                    .parse::<AttemptStatus>()
                    .expect("status"),
                lease_token: r.get(3),
                worker_id: r.get(4),
                error: error_value(r.get(5), "error").expect("error"),
                started_at: r.get(6),
                heartbeat_at: r.get(7),
                finished_at: r.get(8),
            })
            .collect()
    }

    async fn lease_columns(&self, execution_id: Uuid) -> Option<LeaseColumns> {
        let c = self.pool.get().await.expect("conn");
        let row = c
            .query_opt(
                &format!(
                    "SELECT lease_token, lease_expires_at, worker_id, cancel_reason, updated_at \
                     FROM \"{}\" WHERE id = $1",
                    self.tables.executions
                ),
                &[&execution_id],
            )
            .await
            .expect("lease columns");
        row.map(|r| LeaseColumns {
            lease_token: r.get(0),
            lease_expires_at: r.get::<_, Option<DateTime<Utc>>>(1),
            worker_id: r.get(2),
            cancel_reason: r.get(3),
            updated_at: r.get(4),
        })
    }

    async fn count_executions(&self) -> u64 {
        let c = self.pool.get().await.expect("conn");
        let row = c
            .query_one(
                &format!("SELECT count(*) FROM \"{}\"", self.tables.executions),
                &[],
            )
            .await
            .expect("count");
        u64::try_from(row.get::<_, i64>(0)).expect("count")
    }

    async fn insert_component_chunk(
        &self,
        digest: &ComponentDigest,
        seq: u32,
        bytes: &[u8],
    ) -> bool {
        let c = self.pool.get().await.expect("conn");
        let table = onestep_postgres::schema::component_chunks_table(&self.tables);
        c.execute(
            &format!("INSERT INTO \"{table}\" (digest, seq, bytes) VALUES ($1, $2, $3)"),
            &[&digest.as_str(), &(seq as i32), &bytes],
        )
        .await
        .expect("insert chunk");
        true
    }

    async fn corrupt_component_chunk(&self, digest: &ComponentDigest, seq: u32) -> bool {
        let c = self.pool.get().await.expect("conn");
        let table = onestep_postgres::schema::component_chunks_table(&self.tables);
        let n = c
            .execute(
                &format!(
                    "UPDATE \"{table}\" SET bytes = set_byte(bytes, 0, get_byte(bytes, 0) # 1) \
                     WHERE digest = $1 AND seq = $2"
                ),
                &[&digest.as_str(), &(seq as i32)],
            )
            .await
            .expect("corrupt chunk");
        n == 1
    }

    async fn component_rows(&self, digest: &ComponentDigest) -> (u64, u64) {
        let c = self.pool.get().await.expect("conn");
        let mut out = [0u64; 2];
        for (i, table) in [
            onestep_postgres::schema::components_table(&self.tables),
            onestep_postgres::schema::component_chunks_table(&self.tables),
        ]
        .iter()
        .enumerate()
        {
            let row = c
                .query_one(
                    &format!("SELECT count(*) FROM \"{table}\" WHERE digest = $1"),
                    &[&digest.as_str()],
                )
                .await
                .expect("count");
            out[i] = u64::try_from(row.get::<_, i64>(0)).expect("count");
        }
        (out[0], out[1])
    }

    async fn insert_without_schedule(
        &self,
        namespace: &str,
        task: &str,
        now: DateTime<Utc>,
    ) -> Option<Uuid> {
        let id = Uuid::now_v7();
        let c = self.pool.get().await.expect("conn");
        c.execute(
            &format!(
                "INSERT INTO \"{}\" (id, namespace, task_name, status, payload, metadata, attempts, available_at, created_at, updated_at, version) \
                 VALUES ($1, $2, $3, 'queued', '{{}}', '{{}}', 0, $4, $4, $4, 0)",
                self.tables.executions
            ),
            &[&id, &namespace, &task, &now],
        )
        .await
        .expect("reference-style insert");
        Some(id)
    }
}

/// Who creates the tables of a fixture.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tables {
    /// `PgBackend::open` with `auto_create` (our DDL).
    Ours,
    /// The reference's own code (`onestep-sql` in the venv), then opened without `auto_create`.
    Reference,
}

/// Fresh database + backend per case.
pub struct PgFactory {
    pub tables: Tables,
    /// The backend and database of each live fixture, by database name.
    pub live: LiveFixtures<(PgBackend, ScratchDatabase)>,
}

impl PgFactory {
    pub fn new(tables: Tables) -> Self {
        PgFactory {
            tables,
            live: LiveFixtures::default(),
        }
    }
}

#[async_trait]
impl FixtureFactory for PgFactory {
    async fn create(&self, limits: Limits) -> Result<Fixture, FixtureError> {
        let db = scratch().await;
        let clock = Arc::new(ManualClock::default());
        if self.tables == Tables::Reference {
            reference::create_tables(db.dsn()).await;
        }
        let backend = open(db.dsn(), clock.clone(), limits, self.tables == Tables::Ours).await;
        let probe = Arc::new(SqlProbe {
            pool: backend.test_pool().clone(),
            tables: TableNames::default(),
        });
        let handle = db.name().to_owned();
        self.live
            .insert(handle.clone(), (backend.clone(), db))
            .await;
        Ok(Fixture::of(backend, probe, clock, limits, handle))
    }

    async fn destroy(&self, fixture: Fixture) {
        let entry = self.live.take(&fixture.handle).await;
        drop(fixture);
        if let Some((backend, db)) = entry {
            let _ = backend.close().await;
            let _ = db.drop_database().await;
        }
    }
}
