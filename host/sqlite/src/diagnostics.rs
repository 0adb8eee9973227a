//! Attempt diagnostics (docs/sqlite.md#diagnostics-and-traces,
//! docs/observability.md#attempt-diagnostics): the final write inside a completion's
//! transaction (under a savepoint), the heartbeat's live write, and the reads behind
//! `GET /v1/executions/{id}/attempts` and `.../logs`. One row per attempt, upserted; the live
//! write never replaces a final row.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use onestep_core::diagnostics::{AttemptDiagnostics, LogTail, RunFacts};
use onestep_core::execution::LeaseRef;
use onestep_core::store::DecodeError;
use onestep_core::store::diagnostics::{
    AttemptReads, AttemptRows, DiagRow, StoredDiagnostics, StoredLog, final_kept, final_write,
};
use onestep_core::{ConnectorKind, ExecutionError};
use rusqlite::{Connection, OptionalExtension, Row, params};
use uuid::Uuid;

use crate::backend::SqliteBackend;
use crate::errors::{OpError, OpResult, classify};
use crate::rows::{opt_int, opt_text, opt_time, ots, ts, uid, uuid};

/// `INTEGER` holds what a `u64` counter reaches in practice; larger values are stored as the
/// largest `INTEGER`.
fn i64_of(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

pub(crate) fn u64_of(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

/// Writes `rows` to `table` (quoted); `live` keeps final rows.
fn write_rows(
    c: &Connection,
    table: &str,
    rows: &[DiagRow<'_>],
    now: DateTime<Utc>,
    live: bool,
) -> OpResult<()> {
    let keep_final = if live { " WHERE NOT is_final" } else { "" };
    let mut st = c.prepare_cached(&format!(
        "INSERT INTO {table} (attempt_id, execution_id, is_final, message, progress_done, \
         progress_total, progress_note, progress_at, log_lines, log_tail, trap_kind, \
         component_digest, fuel_consumed, peak_memory_bytes, updated_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15) \
         ON CONFLICT (attempt_id) DO UPDATE SET execution_id = excluded.execution_id, \
         is_final = excluded.is_final, message = excluded.message, \
         progress_done = excluded.progress_done, progress_total = excluded.progress_total, \
         progress_note = excluded.progress_note, progress_at = excluded.progress_at, \
         log_lines = excluded.log_lines, log_tail = excluded.log_tail, \
         trap_kind = excluded.trap_kind, component_digest = excluded.component_digest, \
         fuel_consumed = excluded.fuel_consumed, peak_memory_bytes = excluded.peak_memory_bytes, \
         updated_at = excluded.updated_at{keep_final}"
    ))?;
    let now = ts(now);
    for r in rows {
        let tail = r.log.map(LogTail::lines_json).transpose()?;
        st.execute(params![
            uid(r.lease.attempt_id),
            uid(r.lease.execution_id),
            r.is_final,
            r.message,
            r.progress.map(|p| i64_of(p.done)),
            r.progress.map(|p| i64_of(p.total)),
            r.progress.map(|p| p.note.as_str()),
            ots(r.progress.map(|p| p.at)),
            r.log.map_or(0, |t| i64_of(t.total_lines)),
            tail,
            r.facts.and_then(|f| f.trap_kind.as_deref()),
            r.facts.and_then(|f| f.component_digest.as_deref()),
            r.facts.and_then(|f| f.fuel_consumed).map(i64_of),
            r.facts.and_then(|f| f.peak_memory_bytes).map(i64_of),
            now,
        ])?;
    }
    Ok(())
}

impl SqliteBackend {
    /// The final diagnostics of the attempts completed in the open transaction, under a
    /// savepoint: a failure to write them is logged and costs the completion nothing.
    pub(crate) fn write_final_diagnostics(
        &self,
        c: &Connection,
        items: &[(&LeaseRef, &AttemptDiagnostics)],
        now: DateTime<Utc>,
    ) -> OpResult<()> {
        if let Some((table, rows)) = final_write(self.d(), items) {
            c.execute_batch("SAVEPOINT onestep_diagnostics")?;
            let written = write_rows(c, &table, &rows, now, false);
            if !final_kept(written, lost)? {
                c.execute_batch("ROLLBACK TO SAVEPOINT onestep_diagnostics")?;
            }
            c.execute_batch("RELEASE SAVEPOINT onestep_diagnostics")?;
        }
        Ok(())
    }

    /// One attempt at writing the live `rows` to `table` ([`onestep_core::impl_live_write!`]).
    async fn write_live_once(&self, table: &str, rows: &[DiagRow<'_>]) -> OpResult<()> {
        // The rows borrow the caller's items; the blocking task needs owned values.
        let owned: Vec<OwnedRow> = rows.iter().map(OwnedRow::of).collect();
        let table = table.to_owned();
        self.write(move |b, c| {
            let now = b.now();
            let rows: Vec<DiagRow<'_>> = owned.iter().map(OwnedRow::row).collect();
            write_rows(c, &table, &rows, now, true)
        })
        .await
    }
}

/// A live diagnostics row, owned.
struct OwnedRow {
    lease: LeaseRef,
    progress: Option<onestep_core::diagnostics::AttemptProgress>,
    log: Option<LogTail>,
}

impl OwnedRow {
    fn of(r: &DiagRow<'_>) -> Self {
        OwnedRow {
            lease: *r.lease,
            progress: r.progress.cloned(),
            log: r.log.cloned(),
        }
    }

    fn row(&self) -> DiagRow<'_> {
        DiagRow {
            lease: &self.lease,
            is_final: false,
            message: None,
            progress: self.progress.as_ref(),
            log: self.log.as_ref(),
            facts: None,
        }
    }
}

onestep_core::impl_live_write!(SqliteBackend);

/// A failure to write final diagnostics that costs the completion nothing, to be logged: a
/// domain error (bad values) or a permanent error.
fn lost(e: &OpError) -> Option<String> {
    match e {
        OpError::Domain(e) => Some(e.to_string()),
        OpError::Db(e) if classify(e) == ConnectorKind::Permanent => Some(e.to_string()),
        _ => None,
    }
}

#[async_trait]
impl AttemptReads for SqliteBackend {
    async fn attempt_rows(&self, id: Uuid) -> Result<AttemptRows, ExecutionError> {
        let sql = format!(
            "SELECT id, attempt_no, status, worker_id, error, started_at, heartbeat_at, \
             finished_at FROM {} WHERE execution_id = ?1 ORDER BY attempt_no",
            self.a()
        );
        let diag_sql = self.d().map(|d| {
            format!(
                "SELECT attempt_id, message, progress_done, progress_total, progress_note, \
                 progress_at, log_lines, trap_kind, component_digest, fuel_consumed, \
                 peak_memory_bytes FROM {d} WHERE execution_id = ?1"
            )
        });
        let (attempts, diags) = self
            .run("attempts", || {
                let (sql, diag_sql) = (sql.clone(), diag_sql.clone());
                self.read(move |_, c| {
                    let mut st = c.prepare_cached(&sql)?;
                    let attempts: Vec<_> = st
                        .query_map(params![uid(id)], |r| Ok(crate::rows::decode_attempt(r)))?
                        .collect::<Result<_, _>>()?;
                    let diags: Vec<_> = match &diag_sql {
                        Some(s) => c
                            .prepare_cached(s)?
                            .query_map(params![uid(id)], |r| Ok(decode_diag(r)))?
                            .collect::<Result<_, _>>()?,
                        None => Vec::new(),
                    };
                    Ok((attempts, diags))
                })
            })
            .await?;
        let diags = diags
            .into_iter()
            .map(|d| d.map(StoredDiagnostics::into_parts))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|reason| {
                ExecutionError::Encoding(format!("cannot decode diagnostics of {id}: {reason}"))
            })?;
        let attempts = attempts
            .into_iter()
            .collect::<Result<Vec<_>, _>>()
            .map_err(|reason| {
                ExecutionError::Encoding(format!("cannot decode an attempt of {id}: {reason}"))
            })?;
        Ok((attempts, diags))
    }

    async fn stored_log(&self, id: Uuid, attempt_no: u32) -> Result<StoredLog, ExecutionError> {
        let attempt_sql = format!(
            "SELECT id FROM {} WHERE execution_id = ?1 AND attempt_no = ?2",
            self.a()
        );
        let tail_sql = self
            .d()
            .map(|d| format!("SELECT log_lines, log_tail FROM {d} WHERE attempt_id = ?1"));
        let found: Option<Option<(i64, Option<String>)>> = self
            .run("attempt_log", || {
                let (attempt_sql, tail_sql) = (attempt_sql.clone(), tail_sql.clone());
                self.read(move |_, c| {
                    let attempt: Option<String> = c
                        .prepare_cached(&attempt_sql)?
                        .query_row(params![uid(id), i64::from(attempt_no)], |r| r.get(0))
                        .optional()?;
                    let Some(attempt_id) = attempt else {
                        return Ok(None);
                    };
                    let Some(tail_sql) = &tail_sql else {
                        return Ok(Some(None));
                    };
                    let tail = c
                        .prepare_cached(tail_sql)?
                        .query_row(params![attempt_id], |r| Ok((r.get(0)?, r.get(1)?)))
                        .optional()?;
                    Ok(Some(tail))
                })
            })
            .await?;
        Ok(found.map(|tail| tail.map(|(lines, text)| (u64_of(lines), text))))
    }
}

fn decode_diag(row: &Row<'_>) -> Result<StoredDiagnostics, DecodeError> {
    let count = |i: usize, col: &str| opt_int(row, i, col).map(|v| v.map(u64_of));
    Ok(StoredDiagnostics {
        attempt_id: uuid(row, 0, "attempt_id")?,
        message: opt_text(row, 1, "message")?,
        progress_done: count(2, "progress_done")?,
        progress_total: count(3, "progress_total")?,
        progress_note: opt_text(row, 4, "progress_note")?,
        progress_at: opt_time(row, 5, "progress_at")?,
        log_lines: count(6, "log_lines")?.unwrap_or(0),
        facts: RunFacts {
            trap_kind: opt_text(row, 7, "trap_kind")?,
            component_digest: opt_text(row, 8, "component_digest")?,
            fuel_consumed: count(9, "fuel_consumed")?,
            peak_memory_bytes: count(10, "peak_memory_bytes")?,
        },
    })
}
