//! Attempt diagnostics (docs/observability.md#attempt-diagnostics, docs/schema.md#attempt-diagnostics):
//! the final write inside a completion's transaction, the heartbeat's live write of running
//! attempts, the reads behind `GET /v1/executions/{id}/attempts` and `.../logs`, and `purge`.
//!
//! The table has one row per attempt that wrote diagnostics. A live write never replaces a row
//! whose `is_final` is set; the final write replaces whatever is there. Both are a `DELETE` of
//! the attempts' rows then one multi-row `INSERT` (portable between MariaDB and MySQL, whose
//! upsert syntaxes differ), chunked so one statement stays far below `max_allowed_packet`.

use async_trait::async_trait;
use chrono::{DateTime, NaiveDateTime, Utc};
use mysql_async::prelude::Queryable;
use mysql_async::{Params, Row, Transaction, Value as DbValue, from_value_opt};
use onestep_core::diagnostics::{AttemptDiagnostics, AttemptRecord, LogLine, LogTail, RunFacts};
use onestep_core::execution::LeaseRef;
use onestep_core::store::DecodeError;
use onestep_core::store::diagnostics::{
    AttemptReads, AttemptRows, DiagRow, StoredDiagnostics, StoredLog, final_kept, final_write,
};
use onestep_core::{ConnectorKind, ExecutionError};
use uuid::Uuid;

use crate::backend::{MySqlBackend, begin};
use crate::errors::{OpError, OpResult};
use crate::rows::{bind_opt_time, bind_time, bind_uuid, error_column, parse_uuid, placeholders};

/// Columns of one diagnostics row, in insert order.
const COLUMNS: &str = "attempt_id, execution_id, is_final, message, progress_done, progress_total, \
     progress_note, progress_at, log_lines, log_tail, trap_kind, component_digest, fuel_consumed, \
     peak_memory_bytes, updated_at";
const COLUMN_COUNT: usize = 15;
/// Bytes of bound values per INSERT statement (MariaDB's default `max_allowed_packet` is 16 MiB).
const STATEMENT_BYTES: usize = 4 * 1024 * 1024;

fn tail_json(log: Option<&LogTail>) -> Result<(u64, DbValue), OpError> {
    match log {
        None => Ok((0, DbValue::NULL)),
        Some(t) => {
            let text = serde_json::to_string(&t.lines).map_err(|e| {
                OpError::Domain(ExecutionError::Undecodable(format!(
                    "cannot encode a log tail: {e}"
                )))
            })?;
            Ok((t.total_lines, DbValue::from(text)))
        }
    }
}

fn opt_text(s: Option<&str>) -> DbValue {
    s.map_or(DbValue::NULL, DbValue::from)
}

fn opt_u64(v: Option<u64>) -> DbValue {
    v.map_or(DbValue::NULL, DbValue::from)
}

fn bind_row(row: &DiagRow<'_>, now: DateTime<Utc>, out: &mut Vec<DbValue>) -> OpResult<usize> {
    let (lines, tail) = tail_json(row.log)?;
    let before = out.len();
    let p = row.progress;
    let f = row.facts;
    out.extend([
        bind_uuid(row.lease.attempt_id),
        bind_uuid(row.lease.execution_id),
        DbValue::from(i32::from(row.is_final)),
        opt_text(row.message),
        opt_u64(p.map(|p| p.done)),
        opt_u64(p.map(|p| p.total)),
        opt_text(p.map(|p| p.note.as_str())),
        bind_opt_time(p.map(|p| p.at)),
        DbValue::from(lines),
        tail,
        opt_text(f.and_then(|f| f.trap_kind.as_deref())),
        opt_text(f.and_then(|f| f.component_digest.as_deref())),
        opt_u64(f.and_then(|f| f.fuel_consumed)),
        opt_u64(f.and_then(|f| f.peak_memory_bytes)),
        bind_time(now),
    ]);
    Ok(out[before..]
        .iter()
        .map(|v| match v {
            DbValue::Bytes(b) => b.len(),
            _ => 8,
        })
        .sum())
}

/// Writes `rows` on `conn`: per chunk, delete the attempts' rows (only non-final ones for a live
/// write) and insert the new ones.
async fn write_rows<Q: Queryable>(
    q: &mut Q,
    table: &str,
    rows: &[DiagRow<'_>],
    now: DateTime<Utc>,
    live: bool,
) -> OpResult<()> {
    let mut start = 0;
    while start < rows.len() {
        let mut params = Vec::new();
        let mut bytes = 0usize;
        let mut end = start;
        while end < rows.len() && (end == start || bytes < STATEMENT_BYTES) {
            bytes += bind_row(&rows[end], now, &mut params)?;
            end += 1;
        }
        let chunk = &rows[start..end];
        let ids: Vec<DbValue> = chunk
            .iter()
            .map(|r| bind_uuid(r.lease.attempt_id))
            .collect();
        let keep_final = if live { " AND is_final = 0" } else { "" };
        q.exec_drop(
            format!(
                "DELETE FROM `{table}` WHERE attempt_id IN ({}){keep_final}",
                placeholders(ids.len())
            ),
            Params::Positional(ids),
        )
        .await?;
        let one = format!("({})", placeholders(COLUMN_COUNT));
        let values = vec![one; chunk.len()].join(", ");
        // A live write loses to a final row already there (IGNORE: duplicate key only; every
        // value is bounded and typed, so no other warning can arise).
        let ignore = if live { "IGNORE " } else { "" };
        q.exec_drop(
            format!("INSERT {ignore}INTO `{table}` ({COLUMNS}) VALUES {values}"),
            Params::Positional(params),
        )
        .await?;
        start = end;
    }
    Ok(())
}

impl MySqlBackend {
    /// The final diagnostics of the attempts completed in `tx` (each `(lease, diagnostics)`),
    /// under a savepoint: a failure to write them is logged and costs the completion nothing.
    pub(crate) async fn write_final_diagnostics(
        &self,
        tx: &mut Transaction<'_>,
        items: &[(&LeaseRef, &AttemptDiagnostics)],
        now: DateTime<Utc>,
    ) -> OpResult<()> {
        let Some((table, rows)) = final_write(self.d(), items) else {
            return Ok(());
        };
        tx.query_drop("SAVEPOINT onestep_diagnostics").await?;
        let written = write_rows(tx, &table, &rows, now, false).await;
        let kept = final_kept(written, |e| match e {
            OpError::Domain(e) => Some(e.to_string()),
            OpError::Db(e) if crate::errors::classify(e) == ConnectorKind::Permanent => {
                Some(e.to_string())
            }
            _ => None,
        })?;
        tx.query_drop(if kept {
            "RELEASE SAVEPOINT onestep_diagnostics"
        } else {
            "ROLLBACK TO SAVEPOINT onestep_diagnostics"
        })
        .await?;
        Ok(())
    }

    /// One attempt at writing the live `rows` to `table` ([`onestep_core::impl_live_write!`]).
    async fn write_live_once(&self, table: &str, rows: &[DiagRow<'_>]) -> OpResult<()> {
        let now = self.now();
        let mut conn = self.conn().await?;
        let mut tx = begin(&mut conn).await?;
        let r = write_rows(&mut tx, table, rows, now, true).await;
        self.finish(tx, r).await
    }
}

onestep_core::impl_live_write!(MySqlBackend);

#[async_trait]
impl AttemptReads for MySqlBackend {
    async fn attempt_rows(&self, id: Uuid) -> Result<AttemptRows, ExecutionError> {
        let table = self.d();
        let r = self
            .run("attempts", || async {
                let mut conn = self.conn().await?;
                let rows: Vec<Row> = conn
                    .exec(
                        format!(
                            "SELECT id, attempt_no, status, worker_id, error, started_at, \
                             heartbeat_at, finished_at FROM `{}` WHERE execution_id = ? \
                             ORDER BY attempt_no",
                            self.a()
                        ),
                        (bind_uuid(id),),
                    )
                    .await?;
                let diags: Vec<Row> = match &table {
                    Some(d) => {
                        conn.exec(
                            format!(
                                "SELECT attempt_id, message, progress_done, progress_total, \
                                 progress_note, progress_at, log_lines, trap_kind, \
                                 component_digest, fuel_consumed, peak_memory_bytes \
                                 FROM `{d}` WHERE execution_id = ?"
                            ),
                            (bind_uuid(id),),
                        )
                        .await?
                    }
                    None => Vec::new(),
                };
                Ok((rows, diags))
            })
            .await?;
        let (rows, diags) = r;
        let diags = diags
            .into_iter()
            .map(|row| decode_diag(row).map(StoredDiagnostics::into_parts))
            .collect::<Result<Vec<_>, _>>()?;
        let attempts = rows
            .into_iter()
            .map(decode_attempt)
            .collect::<Result<Vec<_>, _>>()?;
        Ok((attempts, diags))
    }

    async fn stored_log(&self, id: Uuid, attempt_no: u32) -> Result<StoredLog, ExecutionError> {
        let table = self.d();
        self.run("attempt_log", || async {
            let mut conn = self.conn().await?;
            let attempt: Option<Row> = conn
                .exec_first(
                    format!(
                        "SELECT id FROM `{}` WHERE execution_id = ? AND attempt_no = ?",
                        self.a()
                    ),
                    (bind_uuid(id), attempt_no),
                )
                .await?;
            let Some(attempt) = attempt else {
                return Ok(None);
            };
            let Some(d) = &table else {
                return Ok(Some(None));
            };
            let attempt_id = attempt.as_ref(0).map(parse_uuid).transpose().map_err(|e| {
                OpError::Domain(ExecutionError::Undecodable(format!("attempt id: {e}")))
            })?;
            let Some(attempt_id) = attempt_id else {
                return Ok(Some(None));
            };
            let tail: Option<(u64, Option<String>)> = conn
                .exec_first(
                    format!("SELECT log_lines, log_tail FROM `{d}` WHERE attempt_id = ?"),
                    (bind_uuid(attempt_id),),
                )
                .await?;
            Ok(Some(tail))
        })
        .await
    }

    fn log_tail(&self, total_lines: u64, text: &str) -> Result<LogTail, ExecutionError> {
        let lines: Vec<LogLine> = serde_json::from_str(text)
            .map_err(|e| ExecutionError::Undecodable(format!("cannot decode the log tail: {e}")))?;
        Ok(LogTail { total_lines, lines })
    }
}

fn col<T: mysql_async::prelude::FromValue>(
    row: &mut Row,
    i: usize,
    name: &str,
) -> Result<T, DecodeError> {
    let v = row
        .take::<DbValue, _>(i)
        .ok_or_else(|| format!("{name}: missing column"))?;
    from_value_opt::<T>(v).map_err(|e| DecodeError(format!("{name}: {e}")))
}

fn opt_time(v: Option<NaiveDateTime>) -> Option<DateTime<Utc>> {
    v.map(|n| n.and_utc())
}

fn decode_attempt(mut row: Row) -> Result<AttemptRecord, DecodeError> {
    let id = row
        .as_ref(0)
        .ok_or(DecodeError::from("id: missing column"))
        .and_then(parse_uuid)?;
    let error = error_column(row.take::<DbValue, _>(4).unwrap_or(DbValue::NULL), "error")?;
    Ok(AttemptRecord {
        id,
        attempt_no: col::<u32>(&mut row, 1, "attempt_no")?,
        status: col::<String>(&mut row, 2, "status")?,
        worker_id: col::<String>(&mut row, 3, "worker_id")?,
        error,
        started_at: col::<NaiveDateTime>(&mut row, 5, "started_at")?.and_utc(),
        heartbeat_at: col::<NaiveDateTime>(&mut row, 6, "heartbeat_at")?.and_utc(),
        finished_at: opt_time(col::<Option<NaiveDateTime>>(&mut row, 7, "finished_at")?),
        diagnostics: None,
    })
}

fn decode_diag(mut row: Row) -> Result<StoredDiagnostics, DecodeError> {
    let attempt_id = row
        .as_ref(0)
        .ok_or("attempt_id: missing column")
        .map_err(DecodeError::from)
        .and_then(parse_uuid)?;
    Ok(StoredDiagnostics {
        attempt_id,
        message: col(&mut row, 1, "message")?,
        progress_done: col(&mut row, 2, "progress_done")?,
        progress_total: col(&mut row, 3, "progress_total")?,
        progress_note: col(&mut row, 4, "progress_note")?,
        progress_at: opt_time(col(&mut row, 5, "progress_at")?),
        log_lines: col(&mut row, 6, "log_lines")?,
        facts: RunFacts {
            trap_kind: col(&mut row, 7, "trap_kind")?,
            component_digest: col(&mut row, 8, "component_digest")?,
            fuel_consumed: col(&mut row, 9, "fuel_consumed")?,
            peak_memory_bytes: col(&mut row, 10, "peak_memory_bytes")?,
        },
    })
}
