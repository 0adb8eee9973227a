//! Read-only probes outside the execution protocol: [`Readiness`] for the API's `/readyz` (the
//! server answers and both tables exist, within a bounded wait) and [`StoreStats`] for the
//! figures `onestep bench` prints (per-execution timings, the database's statistics counters).

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use onestep_core::ports::{ExecutionTiming, Readiness, StoreStats, TableFootprint};
use onestep_core::{ConnectorKind, ExecutionError};
use tokio_postgres::types::ToSql;

use crate::backend::PgBackend;
use crate::errors::{OpError, backend_error};
use crate::schema::q;

/// How long [`Readiness::ready`] waits for a connection and its two queries.
pub const READY_TIMEOUT: Duration = Duration::from_secs(5);

/// The counters of `pg_stat_database` (this database) that [`StoreStats::server_counters`]
/// reads, plus the WAL bytes written by the server.
const COUNTERS: &str = "SELECT xact_commit, xact_rollback, blks_read, blks_hit, tup_returned, \
     tup_fetched, tup_inserted, tup_updated, tup_deleted, pg_current_wal_lsn() - '0/0'::pg_lsn \
     FROM pg_stat_database WHERE datname = current_database()";

const COUNTER_NAMES: [&str; 10] = [
    "xact_commit",
    "xact_rollback",
    "blks_read",
    "blks_hit",
    "tup_returned",
    "tup_fetched",
    "tup_inserted",
    "tup_updated",
    "tup_deleted",
    "wal_bytes",
];

#[async_trait]
impl Readiness for PgBackend {
    /// `SELECT 1 FROM <table> LIMIT 0` on both tables over a pooled connection, within
    /// [`READY_TIMEOUT`]. A server error is `misconfigured` (with its SQLSTATE and message), any
    /// other failure `disconnected`, the timeout `transient`.
    async fn ready(&self) -> Result<(), ExecutionError> {
        let tables = self.tables();
        let probe = async {
            let conn = self.conn().await?;
            for table in [&tables.executions, &tables.attempts] {
                conn.simple_query(&format!("SELECT 1 FROM {} LIMIT 0", q(table)))
                    .await?;
            }
            Ok::<_, OpError>(())
        };
        let not_ready = |kind, m: &str| backend_error("ready", kind, m, &self.inner.secrets);
        match tokio::time::timeout(READY_TIMEOUT, probe).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(OpError::Db(e))) if e.as_db_error().is_some() => {
                let d = e
                    .as_db_error()
                    .map(|d| (d.code().code().to_owned(), d.message().to_owned()));
                let (code, message) = d.unwrap_or_default();
                Err(not_ready(
                    ConnectorKind::Misconfigured,
                    &format!("server error {code}: {message}"),
                ))
            }
            Ok(Err(_)) => Err(not_ready(
                ConnectorKind::Disconnected,
                "cannot reach the database",
            )),
            Err(_) => Err(not_ready(
                ConnectorKind::Transient,
                "timed out waiting for the database",
            )),
        }
    }
}

#[async_trait]
impl StoreStats for PgBackend {
    /// The transaction, block and tuple counters of this database's `pg_stat_database` row
    /// and the server's WAL position in bytes. `pg_stat_database` is updated by each backend
    /// when its transaction ends (and at most every `stats_fetch_consistency`/flush interval),
    /// so a reading can trail the work by up to a second.
    async fn server_counters(&self) -> Result<BTreeMap<String, f64>, ExecutionError> {
        let row = async {
            let conn = self.conn().await?;
            Ok::<_, OpError>(conn.query_opt(COUNTERS, &[]).await?)
        }
        .await
        .map_err(|e| self.error(e, "stats"))?;
        let mut out = BTreeMap::new();
        if let Some(row) = row {
            for (i, name) in COUNTER_NAMES.iter().enumerate() {
                let v: Option<f64> = match row.try_get::<_, Option<i64>>(i) {
                    Ok(v) => v.map(|v| v as f64),
                    Err(_) => row
                        .try_get::<_, Option<String>>(i)
                        .ok()
                        .flatten()
                        .and_then(|s| s.parse().ok()),
                };
                if let Some(v) = v {
                    out.insert((*name).to_owned(), v);
                }
            }
        }
        Ok(out)
    }

    async fn execution_timings(
        &self,
        namespace: &str,
        created_since: Option<DateTime<Utc>>,
    ) -> Result<Vec<ExecutionTiming>, ExecutionError> {
        let since = if created_since.is_some() {
            " AND created_at >= $2"
        } else {
            ""
        };
        let sql = format!(
            "SELECT (EXTRACT(EPOCH FROM (started_at - available_at)) * 1000000)::int8, \
             (EXTRACT(EPOCH FROM (finished_at - started_at)) * 1000000)::int8, \
             status = 'succeeded' FROM {} WHERE namespace = $1{since}",
            self.sql().t
        );
        let rows = async {
            let conn = self.conn().await?;
            let mut params: Vec<&(dyn ToSql + Sync)> = vec![&namespace];
            if let Some(t) = &created_since {
                params.push(t);
            }
            Ok::<_, OpError>(conn.query(&sql, &params).await?)
        }
        .await
        .map_err(|e| self.error(e, "stats"))?;
        rows.iter()
            .map(|r| {
                Ok(ExecutionTiming {
                    queued_us: r.try_get(0)?,
                    running_us: r.try_get(1)?,
                    succeeded: r.try_get(2)?,
                })
            })
            .collect::<Result<_, tokio_postgres::Error>>()
            .map_err(|e| self.error(OpError::Db(e), "stats"))
    }

    /// `count(*)` and `pg_total_relation_size` (heap, indexes and TOAST) of each table. Space
    /// of deleted rows is reused after (auto)vacuum; the file does not shrink.
    async fn table_footprint(&self) -> Result<Vec<TableFootprint>, ExecutionError> {
        let names = self.tables();
        let mut tables = vec![
            (names.executions.clone(), q(&names.executions)),
            (names.attempts.clone(), q(&names.attempts)),
        ];
        if let Some(d) = self.d() {
            tables.push((crate::schema::diagnostics_table(names), d));
        }
        let out = async {
            let conn = self.conn().await?;
            let mut out = Vec::new();
            for (table, quoted) in &tables {
                let row = conn
                    .query_one(
                        &format!(
                            "SELECT count(*), pg_total_relation_size($1::text::regclass) FROM {quoted}"
                        ),
                        &[quoted],
                    )
                    .await?;
                let rows: i64 = row.try_get(0)?;
                let bytes: i64 = row.try_get(1)?;
                out.push(TableFootprint {
                    table: table.clone(),
                    rows: u64::try_from(rows).unwrap_or(0),
                    bytes: u64::try_from(bytes).unwrap_or(0),
                });
            }
            Ok::<_, OpError>(out)
        }
        .await
        .map_err(|e| self.error(e, "stats"))?;
        Ok(out)
    }
}
