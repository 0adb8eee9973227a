//! `onestep copy` (docs/cli.md#onestep-copy): [`Transfer`] for [`MySqlBackend`], raw rows of the four
//! tables out in id order and in with every column as given, one transaction per imported
//! page, multi-row inserts bounded in placeholders and bytes.

use std::collections::{BTreeMap, HashSet};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use mysql_async::prelude::Queryable;
use mysql_async::{Params, Row, Value as DbValue, from_value_opt};
use onestep_core::ExecutionError;
use onestep_core::store::DecodeError;
use onestep_core::transfer::{
    AttemptRow, ChildTables, DiagnosticsRow, ExecutionRecord, ExecutionRow, ImportCounts,
    TableCounts, TraceRow, Transfer, assemble, plan_import,
};
use serde_json::Value;
use uuid::Uuid;

use crate::backend::{MySqlBackend, begin, commit};
use crate::errors::{OpError, OpResult};
use crate::rows::{
    EXECUTION_COLUMN_COUNT, EXECUTION_COLUMNS, EXECUTION_COLUMNS_UNSCHEDULED, bind_opt_time,
    bind_time, bind_uuid, instant, json_column, opt_instant, opt_text, parse_uuid, placeholders,
    stored_execution, text,
};

/// The executions columns after [`EXECUTION_COLUMNS`] that a copy moves too.
const EXTRA_COLUMNS: &str = "idempotency_key, submission_digest, lease_token, lease_expires_at, \
     worker_id, cancel_reason, updated_at";
const EXECUTION_WIDTH: usize = EXECUTION_COLUMN_COUNT + 7;
const ATTEMPT_COLUMNS: &str = "id, execution_id, attempt_no, lease_token, worker_id, status, \
     error, started_at, heartbeat_at, finished_at";
const ATTEMPT_WIDTH: usize = 10;
const DIAGNOSTICS_COLUMNS: &str = "attempt_id, execution_id, is_final, message, progress_done, \
     progress_total, progress_note, progress_at, log_lines, log_tail, trap_kind, \
     component_digest, fuel_consumed, peak_memory_bytes, updated_at";
const DIAGNOSTICS_WIDTH: usize = 15;
const TRACE_COLUMNS: &str = "execution_id, traceparent, created_at";
const TRACE_WIDTH: usize = 3;
/// Placeholders per statement (the protocol's limit is 65,535).
const MAX_PARAMS: usize = 60_000;
/// Bytes of bound values per statement (MariaDB's default `max_allowed_packet` is 16 MiB).
const STATEMENT_BYTES: usize = 4 * 1024 * 1024;

fn undecodable(table: &str, e: DecodeError) -> OpError {
    OpError::Domain(ExecutionError::Undecodable(format!(
        "copy: cannot decode a row of {table}: {}",
        e.0
    )))
}

fn raw(row: Row) -> Vec<DbValue> {
    row.unwrap_raw()
        .into_iter()
        .map(|v| v.unwrap_or(DbValue::NULL))
        .collect()
}

fn uuid(v: DbValue, col: &str) -> Result<Uuid, DecodeError> {
    parse_uuid(&v).map_err(|e| DecodeError(format!("{col}: {}", e.0)))
}

fn opt_uuid(v: DbValue, col: &str) -> Result<Option<Uuid>, DecodeError> {
    match v {
        DbValue::NULL => Ok(None),
        v => uuid(v, col).map(Some),
    }
}

fn int(v: DbValue, col: &str) -> Result<i64, DecodeError> {
    from_value_opt::<i64>(v).map_err(|e| DecodeError(format!("{col}: {e}")))
}

fn opt_int(v: DbValue, col: &str) -> Result<Option<i64>, DecodeError> {
    match v {
        DbValue::NULL => Ok(None),
        v => int(v, col).map(Some),
    }
}

/// Takes the next value of a row (NULL past its end).
struct Cols(std::vec::IntoIter<DbValue>);

impl Cols {
    fn next(&mut self) -> DbValue {
        self.0.next().unwrap_or(DbValue::NULL)
    }
}

fn execution_row(mut values: Vec<DbValue>) -> Result<ExecutionRow, DecodeError> {
    if values.len() < EXECUTION_WIDTH {
        return Err(DecodeError(format!(
            "expected {EXECUTION_WIDTH} columns, got {}",
            values.len()
        )));
    }
    let extra = values.split_off(EXECUTION_COLUMN_COUNT);
    let stored = stored_execution(values)?;
    let mut c = Cols(extra.into_iter());
    Ok(ExecutionRow {
        stored,
        idempotency_key: opt_text(c.next(), "idempotency_key")?,
        submission_digest: opt_text(c.next(), "submission_digest")?,
        lease_token: opt_uuid(c.next(), "lease_token")?,
        lease_expires_at: opt_instant(c.next(), "lease_expires_at")?,
        worker_id: opt_text(c.next(), "worker_id")?,
        cancel_reason: opt_text(c.next(), "cancel_reason")?,
        updated_at: instant(c.next(), "updated_at")?,
    })
}

fn attempt_row(values: Vec<DbValue>) -> Result<AttemptRow, DecodeError> {
    let mut c = Cols(values.into_iter());
    Ok(AttemptRow {
        id: uuid(c.next(), "id")?,
        execution_id: uuid(c.next(), "execution_id")?,
        attempt_no: int(c.next(), "attempt_no")?,
        lease_token: uuid(c.next(), "lease_token")?,
        worker_id: text(c.next(), "worker_id")?,
        status: text(c.next(), "status")?,
        error: json_column(c.next(), "error")?,
        started_at: instant(c.next(), "started_at")?,
        heartbeat_at: instant(c.next(), "heartbeat_at")?,
        finished_at: opt_instant(c.next(), "finished_at")?,
    })
}

fn diagnostics_row(values: Vec<DbValue>) -> Result<DiagnosticsRow, DecodeError> {
    let mut c = Cols(values.into_iter());
    Ok(DiagnosticsRow {
        attempt_id: uuid(c.next(), "attempt_id")?,
        execution_id: uuid(c.next(), "execution_id")?,
        is_final: int(c.next(), "is_final")? != 0,
        message: opt_text(c.next(), "message")?,
        progress_done: opt_int(c.next(), "progress_done")?,
        progress_total: opt_int(c.next(), "progress_total")?,
        progress_note: opt_text(c.next(), "progress_note")?,
        progress_at: opt_instant(c.next(), "progress_at")?,
        log_lines: int(c.next(), "log_lines")?,
        log_tail: opt_text(c.next(), "log_tail")?,
        trap_kind: opt_text(c.next(), "trap_kind")?,
        component_digest: opt_text(c.next(), "component_digest")?,
        fuel_consumed: opt_int(c.next(), "fuel_consumed")?,
        peak_memory_bytes: opt_int(c.next(), "peak_memory_bytes")?,
        updated_at: instant(c.next(), "updated_at")?,
    })
}

fn trace_row(values: Vec<DbValue>) -> Result<TraceRow, DecodeError> {
    let mut c = Cols(values.into_iter());
    Ok(TraceRow {
        execution_id: uuid(c.next(), "execution_id")?,
        traceparent: text(c.next(), "traceparent")?,
        created_at: instant(c.next(), "created_at")?,
    })
}

fn json(v: Option<&Value>) -> DbValue {
    v.map_or(DbValue::NULL, |v| DbValue::from(v.to_string()))
}

fn opt_str(s: Option<&String>) -> DbValue {
    s.map_or(DbValue::NULL, |s| DbValue::from(s.as_str()))
}

fn opt_i64(v: Option<i64>) -> DbValue {
    v.map_or(DbValue::NULL, DbValue::from)
}

/// The values of one row; `priority` and `fairness_key` only when the target has them.
fn bind_execution(r: &ExecutionRow, scheduled: bool) -> Vec<DbValue> {
    let s = &r.stored;
    let mut v = vec![
        bind_uuid(s.id),
        DbValue::from(s.namespace.as_str()),
        DbValue::from(s.task_name.as_str()),
        DbValue::from(s.status.as_str()),
        json(s.payload.as_ref()),
        json(s.metadata.as_ref()),
        json(s.result.as_ref()),
        json(s.error.as_ref()),
        DbValue::from(s.attempts),
        bind_time(s.available_at),
        bind_opt_time(s.started_at),
        bind_opt_time(s.finished_at),
        bind_opt_time(s.cancel_requested_at),
        bind_opt_time(s.expires_at),
        bind_time(s.created_at),
        DbValue::from(s.version),
    ];
    if scheduled {
        v.push(DbValue::from(s.priority));
        v.push(opt_str(s.fairness_key.as_ref()));
    }
    v.extend([
        opt_str(r.idempotency_key.as_ref()),
        opt_str(r.submission_digest.as_ref()),
        r.lease_token.map_or(DbValue::NULL, bind_uuid),
        bind_opt_time(r.lease_expires_at),
        opt_str(r.worker_id.as_ref()),
        opt_str(r.cancel_reason.as_ref()),
        bind_time(r.updated_at),
    ]);
    v
}

fn bind_attempt(a: &AttemptRow) -> Vec<DbValue> {
    vec![
        bind_uuid(a.id),
        bind_uuid(a.execution_id),
        DbValue::from(a.attempt_no),
        bind_uuid(a.lease_token),
        DbValue::from(a.worker_id.as_str()),
        DbValue::from(a.status.as_str()),
        json(a.error.as_ref()),
        bind_time(a.started_at),
        bind_time(a.heartbeat_at),
        bind_opt_time(a.finished_at),
    ]
}

fn bind_diagnostics(d: &DiagnosticsRow) -> Vec<DbValue> {
    vec![
        bind_uuid(d.attempt_id),
        bind_uuid(d.execution_id),
        DbValue::from(i32::from(d.is_final)),
        opt_str(d.message.as_ref()),
        opt_i64(d.progress_done),
        opt_i64(d.progress_total),
        opt_str(d.progress_note.as_ref()),
        bind_opt_time(d.progress_at),
        DbValue::from(d.log_lines),
        opt_str(d.log_tail.as_ref()),
        opt_str(d.trap_kind.as_ref()),
        opt_str(d.component_digest.as_ref()),
        opt_i64(d.fuel_consumed),
        opt_i64(d.peak_memory_bytes),
        bind_time(d.updated_at),
    ]
}

fn bind_trace(t: &TraceRow) -> Vec<DbValue> {
    vec![
        bind_uuid(t.execution_id),
        DbValue::from(t.traceparent.as_str()),
        bind_time(t.created_at),
    ]
}

fn size(v: &DbValue) -> usize {
    match v {
        DbValue::Bytes(b) => b.len(),
        _ => 8,
    }
}

/// Multi-row `INSERT`s of `rows` (each `width` values) into `table`, as few statements as the
/// placeholder and byte bounds allow.
async fn insert_rows<Q: Queryable>(
    q: &mut Q,
    table: &str,
    columns: &str,
    width: usize,
    rows: Vec<Vec<DbValue>>,
) -> OpResult<()> {
    let one = format!("({})", placeholders(width));
    let mut rows = rows.into_iter().peekable();
    while rows.peek().is_some() {
        let (mut params, mut n, mut bytes) = (Vec::new(), 0usize, 0usize);
        while let Some(row) = rows
            .next_if(|_| n == 0 || (params.len() + width <= MAX_PARAMS && bytes < STATEMENT_BYTES))
        {
            bytes += row.iter().map(size).sum::<usize>();
            params.extend(row);
            n += 1;
        }
        q.exec_drop(
            format!(
                "INSERT INTO `{table}` ({columns}) VALUES {}",
                vec![one.as_str(); n].join(", ")
            ),
            Params::Positional(params),
        )
        .await?;
    }
    Ok(())
}

/// `SELECT <columns> FROM table WHERE <key> IN (ids)`, chunked, rows decoded by `decode`.
async fn select_by_ids<Q: Queryable, T>(
    q: &mut Q,
    table: &str,
    columns: &str,
    key: &str,
    ids: &[Uuid],
    decode: fn(Vec<DbValue>) -> Result<T, DecodeError>,
) -> OpResult<Vec<T>> {
    let mut out = Vec::new();
    for chunk in ids.chunks(MAX_PARAMS) {
        let rows: Vec<Row> = q
            .exec(
                format!(
                    "SELECT {columns} FROM `{table}` WHERE {key} IN ({})",
                    placeholders(chunk.len())
                ),
                Params::Positional(chunk.iter().map(|id| bind_uuid(*id)).collect()),
            )
            .await?;
        for row in rows {
            out.push(decode(raw(row)).map_err(|e| undecodable(table, e))?);
        }
    }
    Ok(out)
}

fn uuid_only(values: Vec<DbValue>) -> Result<Uuid, DecodeError> {
    uuid(Cols(values.into_iter()).next(), "id")
}

#[async_trait]
impl Transfer for MySqlBackend {
    async fn location(&self) -> Result<String, ExecutionError> {
        self.run("copy", || async {
            let mut conn = self.conn().await?;
            let row: Option<(Option<String>, Option<i64>, Option<String>)> = conn
                .query_first("SELECT @@hostname, @@port, DATABASE()")
                .await?;
            let (host, port, db) = row.unwrap_or_default();
            Ok(format!(
                "mysql server {}:{} database {} table {}",
                host.unwrap_or_default().to_lowercase(),
                port.unwrap_or_default(),
                db.unwrap_or_default(),
                self.t()
            ))
        })
        .await
    }

    async fn export_page(
        &self,
        after: Option<Uuid>,
        limit: u32,
    ) -> Result<Vec<ExecutionRecord>, ExecutionError> {
        let (t, a, d, tr) = (self.t(), self.a(), self.d(), self.tr_existing());
        self.run("copy", || async {
            let mut conn = self.conn().await?;
            let (keyset, mut params) = match after {
                Some(id) => (" WHERE id > ?", vec![bind_uuid(id)]),
                None => ("", Vec::new()),
            };
            params.push(DbValue::from(limit));
            let rows: Vec<Row> = conn
                .exec(
                    format!(
                        "SELECT {cols}, {EXTRA_COLUMNS} FROM `{t}`{keyset} \
                         ORDER BY id LIMIT ?",
                        cols = self.cols(),
                    ),
                    Params::Positional(params),
                )
                .await?;
            let executions = rows
                .into_iter()
                .map(|row| execution_row(raw(row)).map_err(|e| undecodable(t, e)))
                .collect::<Result<Vec<_>, _>>()?;
            let ids: Vec<Uuid> = executions.iter().map(|e| e.stored.id).collect();
            let attempts = select_by_ids(
                &mut conn,
                a,
                ATTEMPT_COLUMNS,
                "execution_id",
                &ids,
                attempt_row,
            )
            .await?;
            let diagnostics = match &d {
                Some(d) => {
                    select_by_ids(
                        &mut conn,
                        d,
                        DIAGNOSTICS_COLUMNS,
                        "execution_id",
                        &ids,
                        diagnostics_row,
                    )
                    .await?
                }
                None => Vec::new(),
            };
            let traces = match &tr {
                Some(tr) => {
                    select_by_ids(
                        &mut conn,
                        tr,
                        TRACE_COLUMNS,
                        "execution_id",
                        &ids,
                        trace_row,
                    )
                    .await?
                }
                None => Vec::new(),
            };
            let records = assemble(executions, attempts, diagnostics, traces);
            Ok(records)
        })
        .await
    }

    async fn import(&self, records: &[ExecutionRecord]) -> Result<ImportCounts, ExecutionError> {
        let (t, a, d, tr) = (self.t(), self.a(), self.d(), self.tr_existing());
        let scheduled = self.priority_columns();
        onestep_core::transfer::check_schedule_storable(records, scheduled)?;
        let (columns, width) = if scheduled {
            (EXECUTION_COLUMNS, EXECUTION_WIDTH)
        } else {
            (EXECUTION_COLUMNS_UNSCHEDULED, EXECUTION_WIDTH - 2)
        };
        self.run("copy", || async {
            let mut conn = self.conn().await?;
            let mut tx = begin(&mut conn).await?;
            let ids: Vec<Uuid> = records.iter().map(ExecutionRecord::id).collect();
            let existing: HashSet<Uuid> = select_by_ids(&mut tx, t, "id", "id", &ids, uuid_only)
                .await?
                .into_iter()
                .collect();
            let tables = ChildTables {
                diagnostics: d.is_some(),
                traces: tr.is_some(),
            };
            let plan = plan_import(records, &existing, tables);
            let e = plan
                .executions()
                .map(|r| bind_execution(r, scheduled))
                .collect();
            let at = plan.attempts().map(bind_attempt).collect();
            let all = format!("{columns}, {EXTRA_COLUMNS}");
            insert_rows(&mut tx, t, &all, width, e).await?;
            insert_rows(&mut tx, a, ATTEMPT_COLUMNS, ATTEMPT_WIDTH, at).await?;
            if let Some(d) = &d {
                let di = plan.diagnostics().map(bind_diagnostics).collect();
                insert_rows(&mut tx, d, DIAGNOSTICS_COLUMNS, DIAGNOSTICS_WIDTH, di).await?;
            }
            if let Some(tr) = &tr {
                let trs = plan.traces().map(bind_trace).collect();
                insert_rows(&mut tx, tr, TRACE_COLUMNS, TRACE_WIDTH, trs).await?;
            }
            let counts = plan.counts;
            commit(self, tx).await?;
            Ok(counts)
        })
        .await
    }

    async fn live_leases(
        &self,
        now: DateTime<Utc>,
    ) -> Result<BTreeMap<String, u64>, ExecutionError> {
        self.run("copy", || async {
            let mut conn = self.conn().await?;
            let rows: Vec<(String, u64)> = conn
                .exec(
                    format!(
                        "SELECT status, COUNT(*) FROM `{}` WHERE lease_expires_at > ? \
                         GROUP BY status",
                        self.t()
                    ),
                    (bind_time(now),),
                )
                .await?;
            Ok(rows.into_iter().collect())
        })
        .await
    }

    async fn counts(&self) -> Result<TableCounts, ExecutionError> {
        let (d, tr) = (self.d(), self.tr_existing());
        self.run("copy", || async {
            let mut conn = self.conn().await?;
            let mut count = async |table: Option<&str>| -> OpResult<u64> {
                let Some(table) = table else { return Ok(0) };
                let n: Option<u64> = conn
                    .query_first(format!("SELECT COUNT(*) FROM `{table}`"))
                    .await?;
                Ok(n.unwrap_or(0))
            };
            Ok(TableCounts {
                executions: count(Some(self.t())).await?,
                attempts: count(Some(self.a())).await?,
                diagnostics: count(d.as_deref()).await?,
                traces: count(tr.as_deref()).await?,
            })
        })
        .await
    }
}
