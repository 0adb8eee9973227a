//! Read-only probes outside the execution protocol: [`Readiness`] for the API's `/readyz` (the
//! server answers and both tables exist, within a bounded wait) and [`StoreStats`] for the
//! figures `onestep bench` prints (per-execution timings, the server's status counters).

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use mysql_async::prelude::Queryable;
use mysql_async::{Params, Value as DbValue};
use onestep_core::ports::{ExecutionTiming, Readiness, StoreStats, TableFootprint};
use onestep_core::{ConnectorKind, ExecutionError};

use crate::backend::MySqlBackend;
use crate::errors::{OpError, backend_error};
use crate::rows::bind_time;

/// How long [`Readiness::ready`] waits for a connection and its two queries.
pub const READY_TIMEOUT: Duration = Duration::from_secs(5);

/// The server status counters [`StoreStats::server_counters`] reads.
const COUNTERS: &str = "SHOW GLOBAL STATUS WHERE Variable_name IN ('Questions', 'Com_select', \
     'Com_update', 'Com_insert', 'Com_begin', 'Com_commit', 'Com_savepoint', \
     'Com_release_savepoint', 'Com_stmt_prepare', 'Com_stmt_execute', 'Com_stmt_close', \
     'Innodb_rows_read', 'Innodb_rows_updated', 'Innodb_rows_inserted', \
     'Innodb_buffer_pool_reads', 'Innodb_buffer_pool_read_requests', 'Handler_read_first', \
     'Handler_read_key', 'Handler_read_last', 'Handler_read_next', 'Handler_read_prev', \
     'Handler_read_rnd', 'Handler_read_rnd_next')";

impl MySqlBackend {
    fn not_ready(&self, kind: ConnectorKind, message: &str) -> ExecutionError {
        backend_error("ready", kind, message, &self.inner.secrets)
    }
}

#[async_trait]
impl Readiness for MySqlBackend {
    /// `SELECT 1 FROM <table> LIMIT 0` on both tables over a pooled connection, within
    /// [`READY_TIMEOUT`]. A server error is `misconfigured` (with its code and message), any
    /// other driver failure `disconnected`, the timeout `transient`.
    async fn ready(&self) -> Result<(), ExecutionError> {
        let tables = self.tables();
        let probe = async {
            let mut conn = self.pool().get_conn().await?;
            for table in [&tables.executions, &tables.attempts] {
                // Table names are validated identifiers; quoting keeps them literal.
                let sql = format!("SELECT 1 FROM `{}` LIMIT 0", table.replace('`', "``"));
                conn.query_drop(sql).await?;
            }
            Ok::<_, mysql_async::Error>(())
        };
        match tokio::time::timeout(READY_TIMEOUT, probe).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(mysql_async::Error::Server(e))) => Err(self.not_ready(
                ConnectorKind::Misconfigured,
                &format!("server error {}: {}", e.code, e.message),
            )),
            Ok(Err(_)) => {
                Err(self.not_ready(ConnectorKind::Disconnected, "cannot reach the database"))
            }
            Err(_) => Err(self.not_ready(
                ConnectorKind::Transient,
                "timed out waiting for the database",
            )),
        }
    }
}

#[async_trait]
impl StoreStats for MySqlBackend {
    async fn execution_timings(
        &self,
        namespace: &str,
        created_since: Option<DateTime<Utc>>,
    ) -> Result<Vec<ExecutionTiming>, ExecutionError> {
        let since = created_since.map_or("", |_| " AND created_at >= ?");
        let sql = format!(
            "SELECT TIMESTAMPDIFF(MICROSECOND, available_at, started_at), \
             TIMESTAMPDIFF(MICROSECOND, started_at, finished_at), status = 'succeeded' \
             FROM `{}` WHERE namespace = ?{since}",
            self.t()
        );
        let mut params = vec![DbValue::from(namespace)];
        params.extend(created_since.map(bind_time));
        let rows = async {
            let mut conn = self.conn().await?;
            let rows: Vec<(Option<i64>, Option<i64>, i64)> =
                conn.exec(sql, Params::Positional(params)).await?;
            Ok::<_, OpError>(rows)
        }
        .await
        .map_err(|e| self.error(e, "stats"))?;
        Ok(rows
            .into_iter()
            .map(|(queued_us, running_us, succeeded)| ExecutionTiming {
                queued_us,
                running_us,
                succeeded: succeeded == 1,
            })
            .collect())
    }

    /// `Com_*` statement counters, `Questions`, the InnoDB row and buffer-pool read counters
    /// and the `Handler_read_*` counters of `SHOW GLOBAL STATUS`; a value that is not a number is left out.
    async fn server_counters(&self) -> Result<BTreeMap<String, f64>, ExecutionError> {
        let rows = async {
            let mut conn = self.conn().await?;
            let rows: Vec<(String, String)> = conn.query(COUNTERS).await?;
            Ok::<_, OpError>(rows)
        }
        .await
        .map_err(|e| self.error(e, "stats"))?;
        Ok(rows
            .into_iter()
            .filter_map(|(k, v)| v.parse().ok().map(|v| (k.to_ascii_lowercase(), v)))
            .collect())
    }

    /// `COUNT(*)` and `DATA_LENGTH + INDEX_LENGTH` of `information_schema.TABLES` after
    /// `ANALYZE TABLE` (MySQL caches those figures unless `information_schema_stats_expiry` is 0,
    /// which this session sets; MariaDB has no such cache).
    async fn table_footprint(&self) -> Result<Vec<TableFootprint>, ExecutionError> {
        let mut tables = vec![self.t().to_owned(), self.a().to_owned()];
        tables.extend(self.d());
        let flavor = self.server().flavor;
        let out = async {
            let mut conn = self.conn().await?;
            if flavor == crate::session::Flavor::MySql {
                conn.query_drop("SET SESSION information_schema_stats_expiry = 0")
                    .await?;
            }
            let mut out = Vec::new();
            for table in &tables {
                let _: Vec<mysql_async::Row> =
                    conn.query(format!("ANALYZE TABLE `{table}`")).await?;
                let rows: Option<u64> = conn
                    .query_first(format!("SELECT COUNT(*) FROM `{table}`"))
                    .await?;
                let bytes: Option<Option<u64>> = conn
                    .exec_first(
                        "SELECT DATA_LENGTH + INDEX_LENGTH FROM information_schema.TABLES \
                         WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?",
                        (table.as_str(),),
                    )
                    .await?;
                out.push(TableFootprint {
                    table: table.clone(),
                    rows: rows.unwrap_or(0),
                    bytes: bytes.flatten().unwrap_or(0),
                });
            }
            Ok::<_, OpError>(out)
        }
        .await
        .map_err(|e| self.error(e, "stats"))?;
        Ok(out)
    }
}
