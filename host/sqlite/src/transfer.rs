//! `onestep copy` on SQLite (docs/cli.md#onestep-copy): [`Transfer`] for [`SqliteBackend`], raw
//! rows of the four tables out in id order (stored UUID text, whose order is the UUIDs' order)
//! and in with every column as given, one `BEGIN IMMEDIATE` transaction on the writer per
//! imported page, executions whose id the file already holds skipped whole.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use onestep_core::ExecutionError;
use onestep_core::store::DecodeError;
use onestep_core::transfer::{
    AttemptRow, ChildTables, DiagnosticsRow, ExecutionRecord, ExecutionRow, ImportCounts,
    TableCounts, TraceRow, Transfer, assemble, plan_import,
};
use rusqlite::types::Value as Sql;
use rusqlite::{Connection, Row, params};
use uuid::Uuid;

use crate::backend::SqliteBackend;
use crate::client_ops::id_array;
use crate::diagnostics::u64_of;
use crate::errors::{OpError, OpResult};
use crate::rows::{
    EXECUTION_COLUMNS, EXECUTION_COLUMNS_UNSCHEDULED, int, json, opt_int, opt_json, opt_text,
    opt_time, opt_uuid, ots, text, time, ts, uid, uuid,
};

/// The executions columns after [`EXECUTION_COLUMNS`] that a copy moves too.
const EXTRA_COLUMNS: &str = "idempotency_key, submission_digest, lease_token, lease_expires_at, \
     worker_id, cancel_reason, updated_at";
const ATTEMPT_COLUMNS: &str = "id, execution_id, attempt_no, lease_token, worker_id, status, \
     error, started_at, heartbeat_at, finished_at";
const DIAGNOSTICS_COLUMNS: &str = "attempt_id, execution_id, is_final, message, progress_done, \
     progress_total, progress_note, progress_at, log_lines, log_tail, trap_kind, \
     component_digest, fuel_consumed, peak_memory_bytes, updated_at";
const TRACE_COLUMNS: &str = "execution_id, traceparent, created_at";

/// `?1, ?2, …, ?n`.
fn placeholders(n: usize) -> String {
    (1..=n)
        .map(|i| format!("?{i}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn undecodable(table: &str, e: DecodeError) -> OpError {
    OpError::Domain(ExecutionError::Undecodable(format!(
        "copy: cannot decode a row of {table}: {}",
        e.0
    )))
}

fn execution_row(row: &Row<'_>) -> Result<ExecutionRow, DecodeError> {
    let n = onestep_core::store::EXECUTION_COLUMN_COUNT;
    Ok(ExecutionRow {
        stored: onestep_core::store::StoredExecution {
            id: uuid(row, 0, "id")?,
            namespace: text(row, 1, "namespace")?,
            task_name: text(row, 2, "task_name")?,
            status: text(row, 3, "status")?,
            payload: opt_json(row, 4, "payload")?,
            metadata: opt_json(row, 5, "metadata")?,
            result: opt_json(row, 6, "result")?,
            error: opt_json(row, 7, "error")?,
            attempts: int(row, 8, "attempts")?,
            available_at: time(row, 9, "available_at")?,
            started_at: opt_time(row, 10, "started_at")?,
            finished_at: opt_time(row, 11, "finished_at")?,
            cancel_requested_at: opt_time(row, 12, "cancel_requested_at")?,
            expires_at: opt_time(row, 13, "expires_at")?,
            created_at: time(row, 14, "created_at")?,
            version: int(row, 15, "version")?,
            priority: int(row, 16, "priority")?,
            fairness_key: opt_text(row, 17, "fairness_key")?,
        },
        idempotency_key: opt_text(row, n, "idempotency_key")?,
        submission_digest: opt_text(row, n + 1, "submission_digest")?,
        lease_token: opt_uuid(row, n + 2, "lease_token")?,
        lease_expires_at: opt_time(row, n + 3, "lease_expires_at")?,
        worker_id: opt_text(row, n + 4, "worker_id")?,
        cancel_reason: opt_text(row, n + 5, "cancel_reason")?,
        updated_at: time(row, n + 6, "updated_at")?,
    })
}

fn attempt_row(row: &Row<'_>) -> Result<AttemptRow, DecodeError> {
    Ok(AttemptRow {
        id: uuid(row, 0, "id")?,
        execution_id: uuid(row, 1, "execution_id")?,
        attempt_no: int(row, 2, "attempt_no")?,
        lease_token: uuid(row, 3, "lease_token")?,
        worker_id: text(row, 4, "worker_id")?,
        status: text(row, 5, "status")?,
        error: opt_json(row, 6, "error")?,
        started_at: time(row, 7, "started_at")?,
        heartbeat_at: time(row, 8, "heartbeat_at")?,
        finished_at: opt_time(row, 9, "finished_at")?,
    })
}

fn diagnostics_row(row: &Row<'_>) -> Result<DiagnosticsRow, DecodeError> {
    Ok(DiagnosticsRow {
        attempt_id: uuid(row, 0, "attempt_id")?,
        execution_id: uuid(row, 1, "execution_id")?,
        is_final: int(row, 2, "is_final")? != 0,
        message: opt_text(row, 3, "message")?,
        progress_done: opt_int(row, 4, "progress_done")?,
        progress_total: opt_int(row, 5, "progress_total")?,
        progress_note: opt_text(row, 6, "progress_note")?,
        progress_at: opt_time(row, 7, "progress_at")?,
        log_lines: int(row, 8, "log_lines")?,
        log_tail: opt_text(row, 9, "log_tail")?,
        trap_kind: opt_text(row, 10, "trap_kind")?,
        component_digest: opt_text(row, 11, "component_digest")?,
        fuel_consumed: opt_int(row, 12, "fuel_consumed")?,
        peak_memory_bytes: opt_int(row, 13, "peak_memory_bytes")?,
        updated_at: time(row, 14, "updated_at")?,
    })
}

fn trace_row(row: &Row<'_>) -> Result<TraceRow, DecodeError> {
    Ok(TraceRow {
        execution_id: uuid(row, 0, "execution_id")?,
        traceparent: text(row, 1, "traceparent")?,
        created_at: time(row, 2, "created_at")?,
    })
}

fn t(v: DateTime<Utc>) -> Sql {
    Sql::Text(ts(v))
}

fn ot(v: Option<DateTime<Utc>>) -> Sql {
    ots(v).map_or(Sql::Null, Sql::Text)
}

fn os(v: Option<&str>) -> Sql {
    v.map_or(Sql::Null, |s| Sql::Text(s.to_owned()))
}

fn oi(v: Option<i64>) -> Sql {
    v.map_or(Sql::Null, Sql::Integer)
}

fn oj(v: Option<&serde_json::Value>) -> Sql {
    v.map_or(Sql::Null, |v| Sql::Text(json(v)))
}

/// The values of one row, `priority` and `fairness_key` only when the target has them.
fn execution_values(r: &ExecutionRow, scheduled: bool) -> Vec<Sql> {
    let s = &r.stored;
    let mut v = vec![
        Sql::Text(uid(s.id)),
        Sql::Text(s.namespace.clone()),
        Sql::Text(s.task_name.clone()),
        Sql::Text(s.status.clone()),
        oj(s.payload.as_ref()),
        oj(s.metadata.as_ref()),
        oj(s.result.as_ref()),
        oj(s.error.as_ref()),
        Sql::Integer(s.attempts),
        t(s.available_at),
        ot(s.started_at),
        ot(s.finished_at),
        ot(s.cancel_requested_at),
        ot(s.expires_at),
        t(s.created_at),
        Sql::Integer(s.version),
    ];
    if scheduled {
        v.push(Sql::Integer(s.priority));
        v.push(os(s.fairness_key.as_deref()));
    }
    v.extend([
        os(r.idempotency_key.as_deref()),
        os(r.submission_digest.as_deref()),
        r.lease_token.map_or(Sql::Null, |u| Sql::Text(uid(u))),
        ot(r.lease_expires_at),
        os(r.worker_id.as_deref()),
        os(r.cancel_reason.as_deref()),
        t(r.updated_at),
    ]);
    v
}

fn attempt_values(r: &AttemptRow) -> Vec<Sql> {
    vec![
        Sql::Text(uid(r.id)),
        Sql::Text(uid(r.execution_id)),
        Sql::Integer(r.attempt_no),
        Sql::Text(uid(r.lease_token)),
        Sql::Text(r.worker_id.clone()),
        Sql::Text(r.status.clone()),
        oj(r.error.as_ref()),
        t(r.started_at),
        t(r.heartbeat_at),
        ot(r.finished_at),
    ]
}

fn diagnostics_values(r: &DiagnosticsRow) -> Vec<Sql> {
    vec![
        Sql::Text(uid(r.attempt_id)),
        Sql::Text(uid(r.execution_id)),
        Sql::Integer(i64::from(r.is_final)),
        os(r.message.as_deref()),
        oi(r.progress_done),
        oi(r.progress_total),
        os(r.progress_note.as_deref()),
        ot(r.progress_at),
        Sql::Integer(r.log_lines),
        os(r.log_tail.as_deref()),
        os(r.trap_kind.as_deref()),
        os(r.component_digest.as_deref()),
        oi(r.fuel_consumed),
        oi(r.peak_memory_bytes),
        t(r.updated_at),
    ]
}

fn trace_values(r: &TraceRow) -> Vec<Sql> {
    vec![
        Sql::Text(uid(r.execution_id)),
        Sql::Text(r.traceparent.clone()),
        t(r.created_at),
    ]
}

/// Rows of `table` whose `execution_id` is one of `ids` (a [`id_array`]), decoded by `decode`.
fn select_by_ids<T>(
    c: &Connection,
    table: &str,
    columns: &str,
    ids: &str,
    decode: fn(&Row<'_>) -> Result<T, DecodeError>,
) -> OpResult<Vec<T>> {
    let mut st = c.prepare(&format!(
        "SELECT {columns} FROM {table} WHERE execution_id IN (SELECT value FROM json_each(?1))"
    ))?;
    let mut rows = st.query(params![ids])?;
    let mut out = Vec::new();
    while let Some(row) = rows.next()? {
        out.push(decode(row).map_err(|e| undecodable(table, e))?);
    }
    Ok(out)
}

/// One page of records after `after`, on a reader connection.
fn export(
    b: &SqliteBackend,
    c: &Connection,
    after: Option<Uuid>,
    limit: i64,
) -> OpResult<Vec<ExecutionRecord>> {
    let table = b.t();
    let cols = format!("{}, {EXTRA_COLUMNS}", b.cols());
    let (sql, args) = match after {
        Some(id) => (
            format!("SELECT {cols} FROM {table} WHERE id > ?1 ORDER BY id LIMIT ?2"),
            vec![Sql::Text(uid(id)), Sql::Integer(limit)],
        ),
        None => (
            format!("SELECT {cols} FROM {table} ORDER BY id LIMIT ?1"),
            vec![Sql::Integer(limit)],
        ),
    };
    let mut executions = Vec::new();
    {
        let mut st = c.prepare(&sql)?;
        let mut rows = st.query(rusqlite::params_from_iter(args))?;
        while let Some(row) = rows.next()? {
            executions.push(execution_row(row).map_err(|e| undecodable(table, e))?);
        }
    }
    if executions.is_empty() {
        return Ok(Vec::new());
    }
    let ids = id_array(executions.iter().map(|e| e.stored.id));
    let attempts = select_by_ids(c, b.a(), ATTEMPT_COLUMNS, &ids, attempt_row)?;
    let diagnostics = match b.d() {
        Some(d) => select_by_ids(c, &d, DIAGNOSTICS_COLUMNS, &ids, diagnostics_row)?,
        None => Vec::new(),
    };
    let traces = match b.tr_existing() {
        Some(tr) => select_by_ids(c, &tr, TRACE_COLUMNS, &ids, trace_row)?,
        None => Vec::new(),
    };
    Ok(assemble(executions, attempts, diagnostics, traces))
}

/// Writes the records whose id `table` lacks, inside the caller's `BEGIN IMMEDIATE`
/// transaction.
fn import(
    b: &SqliteBackend,
    c: &Connection,
    records: &[ExecutionRecord],
) -> OpResult<ImportCounts> {
    let table = b.t();
    let ids = id_array(records.iter().map(ExecutionRecord::id));
    let existing: HashSet<Uuid> = {
        let mut st = c.prepare(&format!(
            "SELECT id FROM {table} WHERE id IN (SELECT value FROM json_each(?1))"
        ))?;
        let mut rows = st.query(params![ids])?;
        let mut out = HashSet::new();
        while let Some(row) = rows.next()? {
            out.insert(uuid(row, 0, "id").map_err(|e| undecodable(table, e))?);
        }
        out
    };
    let (d, tr) = (b.d(), b.tr_existing());
    let tables = ChildTables {
        diagnostics: d.is_some(),
        traces: tr.is_some(),
    };
    let plan = plan_import(records, &existing, tables);
    let scheduled = b.schema_report().features.priority_columns;
    onestep_core::transfer::check_schedule_storable(records, scheduled)?;
    let (columns, width) = if scheduled {
        (EXECUTION_COLUMNS, 25)
    } else {
        (EXECUTION_COLUMNS_UNSCHEDULED, 23)
    };
    let mut insert_e = c.prepare(&format!(
        "INSERT INTO {table} ({columns}, {EXTRA_COLUMNS}) VALUES ({})",
        placeholders(width)
    ))?;
    for e in plan.executions() {
        insert_e.execute(rusqlite::params_from_iter(execution_values(e, scheduled)))?;
    }
    let mut insert_a = c.prepare(&format!(
        "INSERT INTO {} ({ATTEMPT_COLUMNS}) VALUES ({})",
        b.a(),
        placeholders(10)
    ))?;
    for a in plan.attempts() {
        insert_a.execute(rusqlite::params_from_iter(attempt_values(a)))?;
    }
    if let Some(d) = &d {
        let mut st = c.prepare(&format!(
            "INSERT INTO {d} ({DIAGNOSTICS_COLUMNS}) VALUES ({})",
            placeholders(15)
        ))?;
        for x in plan.diagnostics() {
            st.execute(rusqlite::params_from_iter(diagnostics_values(x)))?;
        }
    }
    if let Some(tr) = &tr {
        let mut st = c.prepare(&format!(
            "INSERT INTO {tr} ({TRACE_COLUMNS}) VALUES ({})",
            placeholders(3)
        ))?;
        for x in plan.traces() {
            st.execute(rusqlite::params_from_iter(trace_values(x)))?;
        }
    }
    Ok(plan.counts)
}

#[async_trait]
impl Transfer for SqliteBackend {
    async fn location(&self) -> Result<String, ExecutionError> {
        let path = self.path().to_path_buf();
        let table = self.tables().executions.clone();
        let canonical = tokio::task::spawn_blocking(move || std::fs::canonicalize(&path))
            .await
            .map_err(|e| ExecutionError::invalid(format!("copy: the file lookup failed: {e}")))?
            .map_err(|e| {
                ExecutionError::invalid(format!(
                    "copy: cannot resolve the database file '{}': {e}",
                    self.path().display()
                ))
            })?;
        Ok(format!("sqlite file {} table {table}", canonical.display()))
    }

    async fn export_page(
        &self,
        after: Option<Uuid>,
        limit: u32,
    ) -> Result<Vec<ExecutionRecord>, ExecutionError> {
        let limit = i64::from(limit);
        self.run("copy", || self.read(move |b, c| export(b, c, after, limit)))
            .await
    }

    async fn import(&self, records: &[ExecutionRecord]) -> Result<ImportCounts, ExecutionError> {
        if records.is_empty() {
            return Ok(ImportCounts::default());
        }
        let records: Arc<Vec<ExecutionRecord>> = Arc::new(records.to_vec());
        self.run("copy", || {
            let records = Arc::clone(&records);
            self.write(move |b, c| import(b, c, &records))
        })
        .await
    }

    async fn live_leases(
        &self,
        now: DateTime<Utc>,
    ) -> Result<BTreeMap<String, u64>, ExecutionError> {
        let now = ts(now);
        self.run("copy", || {
            let now = now.clone();
            self.read(move |b, c| {
                let mut st = c.prepare(&format!(
                    "SELECT status, count(*) FROM {} WHERE lease_expires_at > ?1 \
                     GROUP BY status",
                    b.t()
                ))?;
                let rows = st.query_map(params![now], |r| {
                    Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?))
                })?;
                let mut out = BTreeMap::new();
                for r in rows {
                    let (status, n) = r?;
                    out.insert(status, u64_of(n));
                }
                Ok(out)
            })
        })
        .await
    }

    async fn counts(&self) -> Result<TableCounts, ExecutionError> {
        self.run("copy", || {
            self.read(|b, c| {
                let (d, tr) = (b.d(), b.tr_existing());
                let mut n = [0u64; 4];
                for (i, table) in [Some(b.t()), Some(b.a()), d.as_deref(), tr.as_deref()]
                    .into_iter()
                    .enumerate()
                {
                    if let Some(table) = table {
                        let c: i64 =
                            c.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| {
                                r.get(0)
                            })?;
                        n[i] = u64_of(c);
                    }
                }
                Ok(TableCounts {
                    executions: n[0],
                    attempts: n[1],
                    diagnostics: n[2],
                    traces: n[3],
                })
            })
        })
        .await
    }
}
