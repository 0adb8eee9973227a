//! Shared test plumbing: a fresh database file per test in a temporary directory, the backend
//! fixture factory and the SQL probe used by the conformance suite.
#![allow(dead_code)]

use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use onestep_core::components::ComponentDigest;
use onestep_core::{AttemptStatus, Limits};
use onestep_sqlite::rows::{opt_json, opt_time, opt_uuid, time, uuid};
use onestep_sqlite::{SqliteBackend, StoreOptions};
use onestep_testkit::ManualClock;
use onestep_testkit::suite::{
    AttemptRow, Fixture, FixtureError, FixtureFactory, LeaseColumns, LiveFixtures, Probe,
};
use rusqlite::{Connection, OptionalExtension, params};
use tempfile::TempDir;
use uuid::Uuid;

/// A new temporary directory and the DSN of a database file in it.
pub fn scratch() -> (TempDir, String) {
    let dir = tempfile::tempdir().expect("temp dir");
    let dsn = format!("sqlite://{}", dir.path().join("onestep.db").display());
    (dir, dsn)
}

pub async fn open(dsn: &str, clock: Arc<ManualClock>, limits: Limits) -> SqliteBackend {
    let mut o = StoreOptions::new(dsn);
    o.clock = clock;
    o.limits = limits;
    SqliteBackend::open(o).await.expect("open backend")
}

/// The SQL probe over a backend's default tables, on a connection of its own.
pub struct SqlProbe {
    pub conn: std::sync::Mutex<Connection>,
}

impl SqlProbe {
    pub fn of(b: &SqliteBackend) -> Self {
        SqlProbe {
            conn: std::sync::Mutex::new(b.test_connection().expect("probe connection")),
        }
    }
}

#[async_trait]
impl Probe for SqlProbe {
    async fn attempts(&self, execution_id: Uuid) -> Vec<AttemptRow> {
        let c = self.conn.lock().expect("probe lock");
        let mut st = c
            .prepare(
                "SELECT id, attempt_no, status, lease_token, worker_id, error, started_at, \
                 heartbeat_at, finished_at FROM onestep_execution_attempts \
                 WHERE execution_id = ?1 ORDER BY attempt_no",
            )
            .expect("prepare");
        st.query_map(params![execution_id.to_string()], |r| {
            Ok(AttemptRow {
                id: uuid(r, 0, "id").expect("id"),
                attempt_no: u32::try_from(r.get::<_, i64>(1)?).expect("attempt_no"),
                status: r
                    .get::<_, String>(2)?
                    .parse::<AttemptStatus>()
                    .expect("status"),
                lease_token: uuid(r, 3, "lease_token").expect("token"),
                worker_id: r.get(4)?,
                error: onestep_core::store::error_object(
                    opt_json(r, 5, "error").expect("json"),
                    "error",
                )
                .expect("error"),
                started_at: time(r, 6, "started_at").expect("started"),
                heartbeat_at: time(r, 7, "heartbeat_at").expect("heartbeat"),
                finished_at: opt_time(r, 8, "finished_at").expect("finished"),
            })
        })
        .expect("attempts")
        .collect::<Result<_, _>>()
        .expect("rows")
    }

    async fn lease_columns(&self, execution_id: Uuid) -> Option<LeaseColumns> {
        let c = self.conn.lock().expect("probe lock");
        c.query_row(
            "SELECT lease_token, lease_expires_at, worker_id, cancel_reason, updated_at \
             FROM onestep_executions WHERE id = ?1",
            params![execution_id.to_string()],
            |r| {
                Ok(LeaseColumns {
                    lease_token: opt_uuid(r, 0, "lease_token").expect("token"),
                    lease_expires_at: opt_time(r, 1, "lease_expires_at").expect("expiry"),
                    worker_id: r.get(2)?,
                    cancel_reason: r.get(3)?,
                    updated_at: time(r, 4, "updated_at").expect("updated"),
                })
            },
        )
        .optional()
        .expect("lease columns")
    }

    async fn insert_component_chunk(
        &self,
        digest: &ComponentDigest,
        seq: u32,
        bytes: &[u8],
    ) -> bool {
        let c = self.conn.lock().expect("probe lock");
        c.execute(
            "INSERT INTO onestep_executions_component_chunks (digest, seq, bytes) \
             VALUES (?1, ?2, ?3)",
            params![digest.as_str(), seq, bytes],
        )
        .expect("insert chunk");
        true
    }

    async fn corrupt_component_chunk(&self, digest: &ComponentDigest, seq: u32) -> bool {
        let c = self.conn.lock().expect("probe lock");
        let bytes: Option<Vec<u8>> = c
            .query_row(
                "SELECT bytes FROM onestep_executions_component_chunks \
                 WHERE digest = ?1 AND seq = ?2",
                params![digest.as_str(), seq],
                |r| r.get(0),
            )
            .optional()
            .expect("read chunk");
        let Some(mut bytes) = bytes else {
            return false;
        };
        bytes[0] ^= 1;
        c.execute(
            "UPDATE onestep_executions_component_chunks SET bytes = ?1 \
             WHERE digest = ?2 AND seq = ?3",
            params![bytes, digest.as_str(), seq],
        )
        .expect("corrupt chunk");
        true
    }

    async fn component_rows(&self, digest: &ComponentDigest) -> (u64, u64) {
        let c = self.conn.lock().expect("probe lock");
        let count = |table: &str| -> u64 {
            let n: i64 = c
                .query_row(
                    &format!("SELECT count(*) FROM {table} WHERE digest = ?1"),
                    params![digest.as_str()],
                    |r| r.get(0),
                )
                .expect("count");
            u64::try_from(n).expect("count")
        };
        (
            count("onestep_executions_components"),
            count("onestep_executions_component_chunks"),
        )
    }

    async fn count_executions(&self) -> u64 {
        let c = self.conn.lock().expect("probe lock");
        let n: i64 = c
            .query_row("SELECT count(*) FROM onestep_executions", [], |r| r.get(0))
            .expect("count");
        u64::try_from(n).expect("count")
    }

    async fn insert_without_schedule(
        &self,
        namespace: &str,
        task: &str,
        now: DateTime<Utc>,
    ) -> Option<Uuid> {
        let id = Uuid::now_v7();
        let c = self.conn.lock().expect("probe lock");
        let now = onestep_sqlite::rows::ts(now);
        c.execute(
            "INSERT INTO onestep_executions (id, namespace, task_name, status, payload, metadata, attempts, available_at, created_at, updated_at, version) \
             VALUES (?1, ?2, ?3, 'queued', '{}', '{}', 0, ?4, ?4, ?4, 0)",
            params![onestep_sqlite::rows::uid(id), namespace, task, now],
        )
        .expect("reference-style insert");
        Some(id)
    }
}

/// A fresh database file + backend per case.
#[derive(Default)]
pub struct SqliteFactory {
    pub live: LiveFixtures<(SqliteBackend, TempDir)>,
}

#[async_trait]
impl FixtureFactory for SqliteFactory {
    async fn create(&self, limits: Limits) -> Result<Fixture, FixtureError> {
        let (dir, dsn) = scratch();
        let clock = Arc::new(ManualClock::default());
        let backend = open(&dsn, clock.clone(), limits).await;
        let probe = Arc::new(SqlProbe::of(&backend));
        let handle = dir.path().display().to_string();
        self.live
            .insert(handle.clone(), (backend.clone(), dir))
            .await;
        Ok(Fixture::of(backend, probe, clock, limits, handle))
    }

    async fn destroy(&self, fixture: Fixture) {
        let entry = self.live.take(&fixture.handle).await;
        drop(fixture);
        if let Some((backend, dir)) = entry {
            let _ = backend.close().await;
            drop(dir);
        }
    }
}

/// Instant helper for tests.
pub fn at(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s)
        .expect("instant")
        .with_timezone(&Utc)
}
