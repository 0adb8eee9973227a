//! Attempt diagnostics on PostgreSQL (docs/postgres.md#diagnostics-and-traces,
//! docs/observability.md#attempt-diagnostics): the final write inside a completion's
//! transaction, the heartbeat's live write of running attempts, the reads behind
//! `GET /v1/executions/{id}/attempts` and `.../logs` (purge: `crate::purge`).
//!
//! The table has one row per attempt that wrote diagnostics. Both writes are one array-bound
//! `INSERT … SELECT FROM unnest(…) ON CONFLICT (attempt_id) DO UPDATE` per chunk; the live
//! write's update carries `WHERE NOT is_final`, so it never replaces a final row, and the final
//! write replaces whatever is there.

use std::collections::HashMap;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use deadpool_postgres::{GenericClient, Transaction};
use onestep_core::diagnostics::{AttemptDiagnostics, LogTail, RunFacts};
use onestep_core::execution::LeaseRef;
use onestep_core::store::DecodeError;
use onestep_core::store::diagnostics::{
    AttemptReads, AttemptRows, DiagRow, StoredDiagnostics, StoredLog, final_kept, final_write,
};
use onestep_core::{ConnectorKind, ExecutionError};
use tokio_postgres::Row;
use uuid::Uuid;

use crate::backend::PgBackend;
use crate::errors::{OpError, OpResult, classify};
use crate::rows::get;
use crate::schema::q;

/// Rows per write statement (each log tail is capped at 64 KiB, so one statement stays in the
/// low megabytes).
const WRITE_CHUNK: usize = 200;

/// `BIGINT` holds what a `u64` counter reaches in practice; larger values are stored as the
/// largest `BIGINT` (docs/postgres.md#diagnostics-and-traces).
fn i64_of(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

pub(crate) fn u64_of(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

/// The upsert of `table` (quoted); `live` keeps final rows.
fn upsert_sql(table: &str, live: bool) -> String {
    let keep_final = if live { " WHERE NOT cur.is_final" } else { "" };
    format!(
        "INSERT INTO {table} AS cur (attempt_id, execution_id, is_final, message, progress_done, \
         progress_total, progress_note, progress_at, log_lines, log_tail, trap_kind, \
         component_digest, fuel_consumed, peak_memory_bytes, updated_at) \
         SELECT a, e, f, m, pd, pt, pn, pa, ll, lt, tk, cd, fc, pm, $15 FROM unnest(\
         $1::uuid[], $2::uuid[], $3::bool[], $4::text[], $5::int8[], $6::int8[], $7::text[], \
         $8::timestamptz[], $9::int8[], $10::text[], $11::text[], $12::text[], $13::int8[], \
         $14::int8[]) AS r(a, e, f, m, pd, pt, pn, pa, ll, lt, tk, cd, fc, pm) \
         ON CONFLICT (attempt_id) DO UPDATE SET execution_id = EXCLUDED.execution_id, \
         is_final = EXCLUDED.is_final, message = EXCLUDED.message, \
         progress_done = EXCLUDED.progress_done, progress_total = EXCLUDED.progress_total, \
         progress_note = EXCLUDED.progress_note, progress_at = EXCLUDED.progress_at, \
         log_lines = EXCLUDED.log_lines, log_tail = EXCLUDED.log_tail, \
         trap_kind = EXCLUDED.trap_kind, component_digest = EXCLUDED.component_digest, \
         fuel_consumed = EXCLUDED.fuel_consumed, peak_memory_bytes = EXCLUDED.peak_memory_bytes, \
         updated_at = EXCLUDED.updated_at{keep_final}"
    )
}

/// Writes `rows` (one per attempt: a later row for the same attempt wins, as one statement may
/// not update a row twice).
async fn write_rows<C: GenericClient>(
    c: &C,
    table: &str,
    rows: &[DiagRow<'_>],
    now: DateTime<Utc>,
    live: bool,
) -> OpResult<()> {
    let mut last: HashMap<Uuid, usize> = HashMap::with_capacity(rows.len());
    for (i, r) in rows.iter().enumerate() {
        last.insert(r.lease.attempt_id, i);
    }
    let distinct: Vec<&DiagRow<'_>> = rows
        .iter()
        .enumerate()
        .filter(|(i, r)| last.get(&r.lease.attempt_id) == Some(i))
        .map(|(_, r)| r)
        .collect();
    let st = c.prepare_cached(&upsert_sql(table, live)).await?;
    for chunk in distinct.chunks(WRITE_CHUNK) {
        let aids: Vec<Uuid> = chunk.iter().map(|r| r.lease.attempt_id).collect();
        let eids: Vec<Uuid> = chunk.iter().map(|r| r.lease.execution_id).collect();
        let fin: Vec<bool> = chunk.iter().map(|r| r.is_final).collect();
        let msg: Vec<Option<&str>> = chunk.iter().map(|r| r.message).collect();
        let done: Vec<Option<i64>> = chunk
            .iter()
            .map(|r| r.progress.map(|p| i64_of(p.done)))
            .collect();
        let total: Vec<Option<i64>> = chunk
            .iter()
            .map(|r| r.progress.map(|p| i64_of(p.total)))
            .collect();
        let note: Vec<Option<&str>> = chunk
            .iter()
            .map(|r| r.progress.map(|p| p.note.as_str()))
            .collect();
        let at: Vec<Option<DateTime<Utc>>> =
            chunk.iter().map(|r| r.progress.map(|p| p.at)).collect();
        let lines: Vec<i64> = chunk
            .iter()
            .map(|r| r.log.map_or(0, |t| i64_of(t.total_lines)))
            .collect();
        let tails: Vec<Option<String>> = chunk
            .iter()
            .map(|r| r.log.map(LogTail::lines_json).transpose())
            .collect::<Result<_, _>>()?;
        let trap: Vec<Option<&str>> = chunk
            .iter()
            .map(|r| r.facts.and_then(|f| f.trap_kind.as_deref()))
            .collect();
        let digest: Vec<Option<&str>> = chunk
            .iter()
            .map(|r| r.facts.and_then(|f| f.component_digest.as_deref()))
            .collect();
        let fuel: Vec<Option<i64>> = chunk
            .iter()
            .map(|r| r.facts.and_then(|f| f.fuel_consumed).map(i64_of))
            .collect();
        let mem: Vec<Option<i64>> = chunk
            .iter()
            .map(|r| r.facts.and_then(|f| f.peak_memory_bytes).map(i64_of))
            .collect();
        c.execute(
            &st,
            &[
                &aids, &eids, &fin, &msg, &done, &total, &note, &at, &lines, &tails, &trap,
                &digest, &fuel, &mem, &now,
            ],
        )
        .await?;
    }
    Ok(())
}

impl PgBackend {
    /// The final diagnostics of the attempts completed in `tx` (each `(lease, diagnostics)`),
    /// under a savepoint: a failure to write them is logged and costs the completion nothing.
    pub(crate) async fn write_final_diagnostics(
        &self,
        tx: &Transaction<'_>,
        items: &[(&LeaseRef, &AttemptDiagnostics)],
        now: DateTime<Utc>,
    ) -> OpResult<()> {
        if let Some((table, rows)) = final_write(self.d(), items) {
            tx.batch_execute("SAVEPOINT onestep_diagnostics").await?;
            let written = write_rows(tx, &table, &rows, now, false).await;
            let end = match final_kept(written, lost)? {
                true => "RELEASE SAVEPOINT onestep_diagnostics",
                false => "ROLLBACK TO SAVEPOINT onestep_diagnostics",
            };
            tx.batch_execute(end).await?;
        }
        Ok(())
    }

    /// One attempt at writing the live `rows` to `table` ([`onestep_core::impl_live_write!`]).
    async fn write_live_once(&self, table: &str, rows: &[DiagRow<'_>]) -> OpResult<()> {
        let now = self.now();
        write_rows(&self.conn().await?, table, rows, now, true).await
    }

    /// The stored traceparents of `ids` (docs/observability.md#traces): one primary-key lookup
    /// per claim batch, and none while traces are off.
    pub(crate) async fn trace_parents<C: GenericClient>(
        &self,
        c: &C,
        ids: &[Uuid],
    ) -> OpResult<HashMap<Uuid, String>> {
        let Some(table) = self.tr() else {
            return Ok(HashMap::new());
        };
        let rows = c
            .query(
                &format!(
                    "SELECT execution_id, traceparent FROM {table} WHERE execution_id = ANY($1)"
                ),
                &[&ids],
            )
            .await?;
        let mut out = HashMap::with_capacity(rows.len());
        for r in &rows {
            out.insert(r.try_get::<_, Uuid>(0)?, r.try_get::<_, String>(1)?);
        }
        Ok(out)
    }

    /// Stores the submit's traceparent of a newly created execution, in the submit's
    /// transaction (docs/observability.md#traces); nothing while traces are off.
    pub(crate) async fn store_trace_parent<C: GenericClient>(
        &self,
        c: &C,
        id: Uuid,
        traceparent: Option<&str>,
        now: DateTime<Utc>,
    ) -> OpResult<()> {
        if let (Some(table), Some(tp)) = (self.tr(), traceparent) {
            c.execute(
                &format!(
                    "INSERT INTO {table} (execution_id, traceparent, created_at) \
                     VALUES ($1, $2, $3)"
                ),
                &[&id, &tp, &now],
            )
            .await?;
        }
        Ok(())
    }
}

onestep_core::impl_live_write!(PgBackend);

/// A failure to write final diagnostics that costs the completion nothing, to be logged: a
/// domain error (bad values) or a permanent server error.
fn lost(e: &OpError) -> Option<String> {
    match e {
        OpError::Domain(e) => Some(e.to_string()),
        OpError::Db(e) if classify(e) == ConnectorKind::Permanent => Some(e.to_string()),
        _ => None,
    }
}

#[async_trait]
impl AttemptReads for PgBackend {
    async fn attempt_rows(&self, id: Uuid) -> Result<AttemptRows, ExecutionError> {
        let sql = format!(
            "SELECT id, attempt_no, status, worker_id, error, started_at, heartbeat_at, \
             finished_at FROM {} WHERE execution_id = $1 ORDER BY attempt_no",
            q(&self.tables().attempts)
        );
        let diag_sql = self.d().map(|d| {
            format!(
                "SELECT attempt_id, message, progress_done, progress_total, progress_note, \
                 progress_at, log_lines, trap_kind, component_digest, fuel_consumed, \
                 peak_memory_bytes FROM {d} WHERE execution_id = $1"
            )
        });
        let (rows, diags) = self
            .run("attempts", || async {
                let conn = self.conn().await?;
                let rows = conn.query(&sql, &[&id]).await?;
                let diags = match &diag_sql {
                    Some(s) => conn.query(s, &[&id]).await?,
                    None => Vec::new(),
                };
                Ok((rows, diags))
            })
            .await?;
        let diags = diags
            .iter()
            .map(|row| decode_diag(row).map(StoredDiagnostics::into_parts))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|reason| {
                ExecutionError::Encoding(format!("cannot decode diagnostics of {id}: {reason}"))
            })?;
        let attempts = rows
            .iter()
            .map(crate::rows::decode_attempt)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|reason| {
                ExecutionError::Encoding(format!("cannot decode an attempt of {id}: {reason}"))
            })?;
        Ok((attempts, diags))
    }

    async fn stored_log(&self, id: Uuid, attempt_no: u32) -> Result<StoredLog, ExecutionError> {
        let Ok(no) = i32::try_from(attempt_no) else {
            return Ok(None);
        };
        let attempt_sql = format!(
            "SELECT id FROM {} WHERE execution_id = $1 AND attempt_no = $2",
            q(&self.tables().attempts)
        );
        let tail_sql = self
            .d()
            .map(|d| format!("SELECT log_lines, log_tail FROM {d} WHERE attempt_id = $1"));
        let found: Option<Option<(i64, Option<String>)>> = self
            .run("attempt_log", || async {
                let conn = self.conn().await?;
                let Some(attempt) = conn.query_opt(&attempt_sql, &[&id, &no]).await? else {
                    return Ok(None);
                };
                let Some(tail_sql) = &tail_sql else {
                    return Ok(Some(None));
                };
                let attempt_id: Uuid = attempt.try_get(0)?;
                let tail = conn.query_opt(tail_sql, &[&attempt_id]).await?;
                let tail = tail
                    .map(|r| Ok::<_, OpError>((r.try_get(0)?, r.try_get(1)?)))
                    .transpose()?;
                Ok(Some(tail))
            })
            .await?;
        Ok(found.map(|tail| tail.map(|(lines, text)| (u64_of(lines), text))))
    }
}

fn decode_diag(row: &Row) -> Result<StoredDiagnostics, DecodeError> {
    let count = |i: usize, col: &str| get::<Option<i64>>(row, i, col).map(|v| v.map(u64_of));
    Ok(StoredDiagnostics {
        attempt_id: get(row, 0, "attempt_id")?,
        message: get(row, 1, "message")?,
        progress_done: count(2, "progress_done")?,
        progress_total: count(3, "progress_total")?,
        progress_note: get(row, 4, "progress_note")?,
        progress_at: get(row, 5, "progress_at")?,
        log_lines: u64_of(get(row, 6, "log_lines")?),
        facts: RunFacts {
            trap_kind: get(row, 7, "trap_kind")?,
            component_digest: get(row, 8, "component_digest")?,
            fuel_consumed: count(9, "fuel_consumed")?,
            peak_memory_bytes: count(10, "peak_memory_bytes")?,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_clamp_to_bigint() {
        assert_eq!(i64_of(u64::MAX), i64::MAX);
        assert_eq!(i64_of(7), 7);
        assert_eq!(u64_of(-1), 0);
    }

    #[test]
    fn live_upsert_keeps_final_rows() {
        assert!(upsert_sql("\"d\"", true).ends_with("WHERE NOT cur.is_final"));
        assert!(!upsert_sql("\"d\"", false).contains("WHERE NOT"));
    }
}
