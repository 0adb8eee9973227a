//! Shared test plumbing: server URLs from the environment, per-test databases, the backend
//! fixture factory and the SQL probe used by the conformance suite.
//!
//! Environment:
//! * `ONESTEP_TEST_MARIADB_URL` (e.g. `mysql://root@127.0.0.1:3306/`) and
//!   `ONESTEP_TEST_MYSQL_URL` (e.g. `mysql://root@127.0.0.1:3307/`): admin URLs (no database),
//!   printed by `scripts/test-db.sh up`. A missing variable FAILS the test.
//! * `ONESTEP_TEST_SKIP_MYSQL=1` / `ONESTEP_TEST_SKIP_MARIADB=1`: explicitly skip one server.
#![allow(dead_code)]

use std::sync::Arc;

use async_trait::async_trait;
use chrono::NaiveDateTime;
use mysql_async::prelude::Queryable;
use mysql_async::{Pool, Row, Value as DbValue};
use onestep_core::components::ComponentDigest;
use onestep_core::names::TableNames;
use onestep_core::{AttemptStatus, Limits};
use onestep_mysql::rows::{bind_uuid, error_column, parse_uuid};
use onestep_mysql::{DdlStyle, MySqlBackend, StoreOptions};
use onestep_testkit::ManualClock;
use onestep_testkit::suite::{
    AttemptRow, Fixture, FixtureError, FixtureFactory, LeaseColumns, LiveFixtures, Probe,
};
use uuid::Uuid;

/// A test server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Server {
    MariaDb,
    MySql,
}

impl Server {
    pub fn label(self) -> &'static str {
        match self {
            Server::MariaDb => "mariadb",
            Server::MySql => "mysql",
        }
    }

    fn env(self) -> (&'static str, &'static str) {
        match self {
            Server::MariaDb => ("ONESTEP_TEST_MARIADB_URL", "ONESTEP_TEST_SKIP_MARIADB"),
            Server::MySql => ("ONESTEP_TEST_MYSQL_URL", "ONESTEP_TEST_SKIP_MYSQL"),
        }
    }

    /// The admin URL, `None` when explicitly skipped; panics (fails) when unset.
    pub fn admin_url(self) -> Option<String> {
        let (var, skip) = self.env();
        if std::env::var(skip).is_ok_and(|v| v == "1") {
            eprintln!("{skip}=1: skipping {} tests", self.label());
            return None;
        }
        match std::env::var(var) {
            Ok(v) if !v.trim().is_empty() => Some(v.trim().trim_end_matches('/').to_owned()),
            _ => panic!(
                "{var} is not set: run `set -a; eval \"$(scripts/test-db.sh up)\"; set +a` \
                 (or set {skip}=1 to skip this server explicitly)"
            ),
        }
    }
}

/// Admin pool to create/drop databases.
pub fn admin_pool(url: &str) -> Pool {
    let opts = mysql_async::OptsBuilder::from_opts(
        mysql_async::Opts::from_url(&format!("{url}/")).expect("admin url"),
    )
    .prefer_socket(false);
    Pool::new(opts)
}

pub fn random_db() -> String {
    format!("onestep_t_{}", &Uuid::new_v4().simple().to_string()[..16])
}

pub async fn create_db(admin: &Pool) -> String {
    let name = random_db();
    let mut c = admin.get_conn().await.expect("admin connection");
    c.query_drop(format!("CREATE DATABASE `{name}` CHARACTER SET utf8mb4"))
        .await
        .expect("create database");
    name
}

pub async fn drop_db(admin: &Pool, name: &str) {
    if let Ok(mut c) = admin.get_conn().await {
        let _ = c
            .query_drop(format!("DROP DATABASE IF EXISTS `{name}`"))
            .await;
    }
}

pub fn db_url(admin_url: &str, db: &str) -> String {
    format!("{admin_url}/{db}")
}

pub async fn open(
    admin_url: &str,
    db: &str,
    clock: Arc<ManualClock>,
    limits: Limits,
    style: DdlStyle,
    tables: TableNames,
) -> MySqlBackend {
    let mut o = StoreOptions::new(db_url(admin_url, db));
    o.clock = clock;
    o.limits = limits;
    o.tables = tables;
    o.pool_max = 24;
    MySqlBackend::open_with_ddl(o, style)
        .await
        .expect("open backend")
}

/// The SQL probe over a backend's tables.
pub struct SqlProbe {
    pub pool: Pool,
    pub tables: TableNames,
}

fn naive(v: DbValue) -> chrono::DateTime<chrono::Utc> {
    mysql_async::from_value::<NaiveDateTime>(v).and_utc()
}

#[async_trait]
impl Probe for SqlProbe {
    async fn attempts(&self, execution_id: Uuid) -> Vec<AttemptRow> {
        let mut c = self.pool.get_conn().await.expect("conn");
        let rows: Vec<Row> = c
            .exec(
                format!(
                    "SELECT id, attempt_no, status, lease_token, worker_id, error, started_at, \
                     heartbeat_at, finished_at FROM `{}` WHERE execution_id = ? ORDER BY attempt_no",
                    self.tables.attempts
                ),
                (bind_uuid(execution_id),),
            )
            .await
            .expect("attempts");
        rows.into_iter()
            .map(|r| {
                let v = r.unwrap();
                let mut it = v.into_iter();
                let mut n = || it.next().expect("column");
                AttemptRow {
                    id: parse_uuid(&n()).expect("id"),
                    attempt_no: mysql_async::from_value(n()),
                    status: mysql_async::from_value::<String>(n())
                        .parse::<AttemptStatus>()
                        .expect("status"),
                    lease_token: parse_uuid(&n()).expect("token"),
                    worker_id: mysql_async::from_value(n()),
                    error: error_column(n(), "error").expect("error"),
                    started_at: naive(n()),
                    heartbeat_at: naive(n()),
                    finished_at: match n() {
                        DbValue::NULL => None,
                        v => Some(naive(v)),
                    },
                }
            })
            .collect()
    }

    async fn lease_columns(&self, execution_id: Uuid) -> Option<LeaseColumns> {
        let mut c = self.pool.get_conn().await.expect("conn");
        let row: Option<Row> = c
            .exec_first(
                format!(
                    "SELECT lease_token, lease_expires_at, worker_id, cancel_reason, updated_at \
                     FROM `{}` WHERE id = ?",
                    self.tables.executions
                ),
                (bind_uuid(execution_id),),
            )
            .await
            .expect("lease columns");
        row.map(|r| {
            let v = r.unwrap();
            let mut it = v.into_iter();
            let mut n = || it.next().expect("column");
            LeaseColumns {
                lease_token: match n() {
                    DbValue::NULL => None,
                    v => Some(parse_uuid(&v).expect("token")),
                },
                lease_expires_at: match n() {
                    DbValue::NULL => None,
                    v => Some(naive(v)),
                },
                worker_id: mysql_async::from_value(n()),
                cancel_reason: mysql_async::from_value(n()),
                updated_at: naive(n()),
            }
        })
    }

    async fn insert_component_chunk(
        &self,
        digest: &ComponentDigest,
        seq: u32,
        bytes: &[u8],
    ) -> bool {
        let mut c = self.pool.get_conn().await.expect("conn");
        let table = onestep_mysql::schema::component_chunks_table(&self.tables);
        c.exec_drop(
            format!("INSERT INTO `{table}` (digest, seq, bytes) VALUES (?, ?, ?)"),
            (digest.as_str(), seq, bytes.to_vec()),
        )
        .await
        .expect("insert chunk");
        true
    }

    async fn corrupt_component_chunk(&self, digest: &ComponentDigest, seq: u32) -> bool {
        let mut c = self.pool.get_conn().await.expect("conn");
        let table = onestep_mysql::schema::component_chunks_table(&self.tables);
        let bytes: Option<Vec<u8>> = c
            .exec_first(
                format!("SELECT bytes FROM `{table}` WHERE digest = ? AND seq = ?"),
                (digest.as_str(), seq),
            )
            .await
            .expect("read chunk");
        let Some(mut bytes) = bytes else {
            return false;
        };
        bytes[0] ^= 1;
        c.exec_drop(
            format!("UPDATE `{table}` SET bytes = ? WHERE digest = ? AND seq = ?"),
            (bytes, digest.as_str(), seq),
        )
        .await
        .expect("corrupt chunk");
        true
    }

    async fn component_rows(&self, digest: &ComponentDigest) -> (u64, u64) {
        let mut c = self.pool.get_conn().await.expect("conn");
        let mut out = [0u64; 2];
        for (i, table) in [
            onestep_mysql::schema::components_table(&self.tables),
            onestep_mysql::schema::component_chunks_table(&self.tables),
        ]
        .iter()
        .enumerate()
        {
            let n: Option<u64> = c
                .exec_first(
                    format!("SELECT COUNT(*) FROM `{table}` WHERE digest = ?"),
                    (digest.as_str(),),
                )
                .await
                .expect("count");
            out[i] = n.unwrap_or(0);
        }
        (out[0], out[1])
    }

    async fn count_executions(&self) -> u64 {
        let mut c = self.pool.get_conn().await.expect("conn");
        let n: Option<u64> = c
            .query_first(format!("SELECT COUNT(*) FROM `{}`", self.tables.executions))
            .await
            .expect("count");
        n.unwrap_or(0)
    }

    async fn insert_without_schedule(
        &self,
        namespace: &str,
        task: &str,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Option<Uuid> {
        let id = Uuid::now_v7();
        let mut c = self.pool.get_conn().await.expect("conn");
        c.exec_drop(
            format!(
                "INSERT INTO `{}` (id, namespace, task_name, status, payload, metadata, attempts, available_at, created_at, updated_at, version) \
                 VALUES (?, ?, ?, 'queued', '{{}}', '{{}}', 0, ?, ?, ?, 0)",
                self.tables.executions
            ),
            (bind_uuid(id), namespace, task, now.naive_utc(), now.naive_utc(), now.naive_utc()),
        )
        .await
        .expect("reference-style insert");
        Some(id)
    }
}

/// Fresh database + backend per case.
pub struct MySqlFactory {
    pub admin_url: String,
    pub admin: Pool,
    pub style: DdlStyle,
    /// Create reference-shaped tables, then run `MySqlBackend::upgrade` on them.
    pub upgrade: bool,
    /// The backend of each live fixture, by database name.
    pub backends: LiveFixtures<MySqlBackend>,
}

impl MySqlFactory {
    pub fn new(admin_url: &str, style: DdlStyle) -> Self {
        MySqlFactory {
            admin_url: admin_url.to_owned(),
            admin: admin_pool(admin_url),
            style,
            upgrade: false,
            backends: LiveFixtures::default(),
        }
    }

    /// Reference-created tables after `onestep migrate --upgrade`.
    pub fn upgraded(admin_url: &str) -> Self {
        MySqlFactory {
            upgrade: true,
            ..MySqlFactory::new(admin_url, DdlStyle::Reference)
        }
    }
}

#[async_trait]
impl FixtureFactory for MySqlFactory {
    async fn create(&self, limits: Limits) -> Result<Fixture, FixtureError> {
        let db = create_db(&self.admin).await;
        let clock = Arc::new(ManualClock::default());
        let tables = TableNames::default();
        if self.upgrade {
            let o = StoreOptions::new(db_url(&self.admin_url, &db));
            MySqlBackend::migrate_with_ddl(o, DdlStyle::Reference)
                .await
                .expect("reference tables");
            let report = MySqlBackend::upgrade(StoreOptions::new(db_url(&self.admin_url, &db)))
                .await
                .expect("upgrade");
            // The claimable column, the priority columns, the fair_key column, the claim and
            // expiry indexes, the three filtered-list indexes, the two fair-claim indexes and
            // the quota index, and the attempt status `parked`.
            assert_eq!(report.steps.len(), 12, "{report:?}");
        }
        let backend = open(
            &self.admin_url,
            &db,
            clock.clone(),
            limits,
            self.style,
            tables.clone(),
        )
        .await;
        if self.upgrade {
            assert!(
                backend.schema_report().features.claimable_column,
                "upgraded tables use the claimable query shapes"
            );
            assert!(
                backend.schema_report().features.list_indexes,
                "upgraded tables have both status indexes"
            );
            assert!(
                backend.schema_report().features.priority_columns
                    && backend.schema_report().features.claim_priority_index,
                "upgraded tables have the priority columns and claim index"
            );
            assert!(
                backend.schema_report().features.fair_keys,
                "upgraded tables have the fair claim's keys table, column and indexes"
            );
        }
        let probe = Arc::new(SqlProbe {
            pool: backend.test_pool().clone(),
            tables,
        });
        self.backends.insert(db.clone(), backend.clone()).await;
        Ok(Fixture::of(backend, probe, clock, limits, db))
    }

    async fn destroy(&self, fixture: Fixture) {
        let backend = self.backends.take(&fixture.handle).await;
        let handle = fixture.handle.clone();
        drop(fixture);
        if let Some(b) = backend {
            let _ = b.close().await;
        }
        drop_db(&self.admin, &handle).await;
    }
}

/// `SELECT VERSION()` of a server.
pub async fn server_version(admin: &Pool) -> String {
    let mut c = admin.get_conn().await.expect("admin connection");
    let v: Option<String> = c.query_first("SELECT VERSION()").await.expect("version");
    v.unwrap_or_default()
}
