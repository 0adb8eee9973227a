//! Read-only probes outside the execution protocol: [`Readiness`] for the API's `/readyz` (the
//! file opens and both tables exist) and [`StoreStats`] for the figures `onestep bench` prints.

use std::collections::BTreeMap;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use onestep_core::ports::{ExecutionTiming, Readiness, StoreStats, TableFootprint};
use onestep_core::{ConnectorKind, ExecutionError};
use rusqlite::types::Value as Sql;

use crate::backend::SqliteBackend;
use crate::errors::{OpError, backend_error};
use crate::insights::micros_between;
use crate::rows::ts;

#[async_trait]
impl Readiness for SqliteBackend {
    /// `SELECT 1 FROM <table> LIMIT 0` on both tables over a reader connection. A library error
    /// is `misconfigured`, a closed backend `disconnected`.
    async fn ready(&self) -> Result<(), ExecutionError> {
        let out = self
            .read(|b, c| {
                for table in [b.t(), b.a()] {
                    c.prepare_cached(&format!("SELECT 1 FROM {table} LIMIT 0"))?
                        .query([])?
                        .next()?;
                }
                Ok(())
            })
            .await;
        match out {
            Ok(()) => Ok(()),
            Err(OpError::Db(e)) => Err(backend_error(
                "ready",
                ConnectorKind::Misconfigured,
                &format!("database error: {e}"),
                &[],
            )),
            Err(_) => Err(backend_error(
                "ready",
                ConnectorKind::Disconnected,
                "the database is closed",
                &[],
            )),
        }
    }
}

#[async_trait]
impl StoreStats for SqliteBackend {
    /// The file's page figures (`page_count`, `freelist_count`, `page_size`).
    async fn server_counters(&self) -> Result<BTreeMap<String, f64>, ExecutionError> {
        self.read(|_, c| {
            let mut out = BTreeMap::new();
            for name in ["page_count", "freelist_count", "page_size"] {
                let v: i64 = c.query_row(&format!("PRAGMA {name}"), [], |r| r.get(0))?;
                out.insert(name.to_owned(), v as f64);
            }
            Ok(out)
        })
        .await
        .map_err(|e| self.error(e, "stats"))
    }

    async fn execution_timings(
        &self,
        namespace: &str,
        created_since: Option<DateTime<Utc>>,
    ) -> Result<Vec<ExecutionTiming>, ExecutionError> {
        let mut params = vec![Sql::Text(namespace.to_owned())];
        let since = match created_since {
            Some(t) => {
                params.push(Sql::Text(ts(t)));
                " AND created_at >= ?2"
            }
            None => "",
        };
        self.read(move |b, c| {
            let mut st = c.prepare(&format!(
                "SELECT available_at, started_at, finished_at, status = 'succeeded' FROM {} \
                 WHERE namespace = ?1{since}",
                b.t()
            ))?;
            let rows = st.query_map(rusqlite::params_from_iter(params), |r| {
                let started: Option<String> = r.get(1)?;
                Ok(ExecutionTiming {
                    queued_us: micros_between(r.get(0)?, started.clone()),
                    running_us: micros_between(started, r.get(2)?),
                    succeeded: r.get(3)?,
                })
            })?;
            Ok(rows.collect::<Result<_, _>>()?)
        })
        .await
        .map_err(|e| self.error(e, "stats"))
    }

    /// `count(*)` of each table and the bytes of its pages (`dbstat` is not compiled in, so the
    /// bytes are the whole file's, given for the executions table).
    async fn table_footprint(&self) -> Result<Vec<TableFootprint>, ExecutionError> {
        let names = self.tables().clone();
        self.read(move |b, c| {
            let file_bytes: i64 = c.query_row(
                "SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()",
                [],
                |r| r.get(0),
            )?;
            let mut tables = vec![
                (names.executions.clone(), b.t().to_owned()),
                (names.attempts.clone(), b.a().to_owned()),
            ];
            if let Some(d) = b.d() {
                tables.push((crate::schema::diagnostics_table(&names), d));
            }
            let mut out = Vec::new();
            for (i, (table, quoted)) in tables.into_iter().enumerate() {
                let rows: i64 =
                    c.query_row(&format!("SELECT count(*) FROM {quoted}"), [], |r| r.get(0))?;
                out.push(TableFootprint {
                    table,
                    rows: u64::try_from(rows).unwrap_or(0),
                    bytes: if i == 0 {
                        u64::try_from(file_bytes).unwrap_or(0)
                    } else {
                        0
                    },
                });
            }
            Ok(out)
        })
        .await
        .map_err(|e| self.error(e, "stats"))
    }
}
