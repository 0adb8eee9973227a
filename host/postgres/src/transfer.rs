//! `onestep copy` on PostgreSQL (docs/cli.md#onestep-copy): [`Transfer`] for [`PgBackend`], raw rows of
//! the four tables out in id order and in with every column as given, one transaction per
//! imported page, one `INSERT … SELECT FROM UNNEST(arrays)` per table.

use std::collections::{BTreeMap, HashSet};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use onestep_core::ExecutionError;
use onestep_core::store::DecodeError;
use onestep_core::transfer::{
    AttemptRow, ChildTables, DiagnosticsRow, ExecutionRecord, ExecutionRow, ImportCounts,
    TableCounts, TraceRow, Transfer, assemble, plan_import,
};
use tokio_postgres::Row;
use uuid::Uuid;

use crate::backend::{PgBackend, commit};
use crate::diagnostics::u64_of;
use crate::errors::OpError;
use crate::rows::{EXECUTION_COLUMNS, EXECUTION_COLUMNS_UNSCHEDULED, get};
use crate::schema::q;
use crate::transfer_params::{
    ATTEMPT_TYPES, DIAGNOSTICS_TYPES, TRACE_TYPES, attempt_params, diagnostics_params,
    execution_params, execution_types, refs, trace_params,
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

fn undecodable(table: &str, e: DecodeError) -> OpError {
    OpError::Domain(ExecutionError::Undecodable(format!(
        "copy: cannot decode a row of {table}: {}",
        e.0
    )))
}

fn execution_row(row: &Row) -> Result<ExecutionRow, DecodeError> {
    let n = onestep_core::store::EXECUTION_COLUMN_COUNT;
    Ok(ExecutionRow {
        stored: onestep_core::store::StoredExecution {
            id: get(row, 0, "id")?,
            namespace: get(row, 1, "namespace")?,
            task_name: get(row, 2, "task_name")?,
            status: get(row, 3, "status")?,
            payload: get(row, 4, "payload")?,
            metadata: get(row, 5, "metadata")?,
            result: get(row, 6, "result")?,
            error: get(row, 7, "error")?,
            attempts: i64::from(get::<i32>(row, 8, "attempts")?),
            available_at: get(row, 9, "available_at")?,
            started_at: get(row, 10, "started_at")?,
            finished_at: get(row, 11, "finished_at")?,
            cancel_requested_at: get(row, 12, "cancel_requested_at")?,
            expires_at: get(row, 13, "expires_at")?,
            created_at: get(row, 14, "created_at")?,
            version: get(row, 15, "version")?,
            priority: i64::from(get::<i16>(row, 16, "priority")?),
            fairness_key: get(row, 17, "fairness_key")?,
        },
        idempotency_key: get(row, n, "idempotency_key")?,
        submission_digest: get(row, n + 1, "submission_digest")?,
        lease_token: get(row, n + 2, "lease_token")?,
        lease_expires_at: get(row, n + 3, "lease_expires_at")?,
        worker_id: get(row, n + 4, "worker_id")?,
        cancel_reason: get(row, n + 5, "cancel_reason")?,
        updated_at: get(row, n + 6, "updated_at")?,
    })
}

fn attempt_row(row: &Row) -> Result<AttemptRow, DecodeError> {
    Ok(AttemptRow {
        id: get(row, 0, "id")?,
        execution_id: get(row, 1, "execution_id")?,
        attempt_no: i64::from(get::<i32>(row, 2, "attempt_no")?),
        lease_token: get(row, 3, "lease_token")?,
        worker_id: get(row, 4, "worker_id")?,
        status: get(row, 5, "status")?,
        error: get(row, 6, "error")?,
        started_at: get(row, 7, "started_at")?,
        heartbeat_at: get(row, 8, "heartbeat_at")?,
        finished_at: get(row, 9, "finished_at")?,
    })
}

fn diagnostics_row(row: &Row) -> Result<DiagnosticsRow, DecodeError> {
    Ok(DiagnosticsRow {
        attempt_id: get(row, 0, "attempt_id")?,
        execution_id: get(row, 1, "execution_id")?,
        is_final: get(row, 2, "is_final")?,
        message: get(row, 3, "message")?,
        progress_done: get(row, 4, "progress_done")?,
        progress_total: get(row, 5, "progress_total")?,
        progress_note: get(row, 6, "progress_note")?,
        progress_at: get(row, 7, "progress_at")?,
        log_lines: get(row, 8, "log_lines")?,
        log_tail: get(row, 9, "log_tail")?,
        trap_kind: get(row, 10, "trap_kind")?,
        component_digest: get(row, 11, "component_digest")?,
        fuel_consumed: get(row, 12, "fuel_consumed")?,
        peak_memory_bytes: get(row, 13, "peak_memory_bytes")?,
        updated_at: get(row, 14, "updated_at")?,
    })
}

fn trace_row(row: &Row) -> Result<TraceRow, DecodeError> {
    Ok(TraceRow {
        execution_id: get(row, 0, "execution_id")?,
        traceparent: get(row, 1, "traceparent")?,
        created_at: get(row, 2, "created_at")?,
    })
}

/// JSON text that survives `jsonb` (docs/postgres.md#json-numbers).
/// `INSERT INTO table (columns) SELECT <select> FROM UNNEST($1::t1[], …) AS u(c1, …)`: one
/// statement whatever the number of rows; `types` are the arrays' element types and `select`
/// the expressions over `u.cN` (casts of JSON text to `jsonb`).
fn unnest_insert(table: &str, columns: &str, types: &[&str], select: &[String]) -> String {
    let arrays: Vec<String> = types
        .iter()
        .enumerate()
        .map(|(i, t)| format!("${}::{t}[]", i + 1))
        .collect();
    let names: Vec<String> = (1..=types.len()).map(|i| format!("c{i}")).collect();
    format!(
        "INSERT INTO {table} ({columns}) SELECT {} FROM UNNEST({}) AS u({})",
        select.join(", "),
        arrays.join(", "),
        names.join(", ")
    )
}

/// `u.cN` for each column, `u.cN::jsonb` for the (1-based) `json` ones.
fn select_list(n: usize, json: &[usize]) -> Vec<String> {
    (1..=n)
        .map(|i| {
            if json.contains(&i) {
                format!("u.c{i}::jsonb")
            } else {
                format!("u.c{i}")
            }
        })
        .collect()
}

/// Rows of `table` whose `key` is one of `ids`, decoded by `decode`.
async fn select_by_ids<C: tokio_postgres::GenericClient, T>(
    c: &C,
    table: &str,
    columns: &str,
    key: &str,
    ids: &[Uuid],
    decode: fn(&Row) -> Result<T, DecodeError>,
) -> Result<Vec<T>, OpError> {
    let rows = c
        .query(
            &format!("SELECT {columns} FROM {table} WHERE {key} = ANY($1)"),
            &[&ids],
        )
        .await?;
    rows.iter()
        .map(|r| decode(r).map_err(|e| undecodable(table, e)))
        .collect()
}

#[async_trait]
impl Transfer for PgBackend {
    async fn location(&self) -> Result<String, ExecutionError> {
        self.run("copy", || async {
            let conn = self.conn().await?;
            let row = conn
                .query_one(
                    "SELECT pg_postmaster_start_time()::text, current_setting('port'), \
                     current_database()",
                    &[],
                )
                .await?;
            let started: String = row.try_get(0)?;
            let port: String = row.try_get(1)?;
            let db: String = row.try_get(2)?;
            Ok(format!(
                "postgres server on port {port} started {started} database {db} table {}",
                self.tables().executions
            ))
        })
        .await
    }

    async fn export_page(
        &self,
        after: Option<Uuid>,
        limit: u32,
    ) -> Result<Vec<ExecutionRecord>, ExecutionError> {
        let t = self.sql().t.clone();
        let a = q(&self.tables().attempts);
        let (d, tr) = (self.d(), self.tr_existing());
        let limit = i64::from(limit);
        self.run("copy", || async {
            let conn = self.conn().await?;
            let cols = format!(
                "{}, {EXTRA_COLUMNS}",
                crate::rows::columns(self.sql().priority_columns).0
            );
            let rows = match after {
                Some(id) => {
                    conn.query(
                        &format!("SELECT {cols} FROM {t} WHERE id > $1 ORDER BY id LIMIT $2"),
                        &[&id, &limit],
                    )
                    .await?
                }
                None => {
                    conn.query(
                        &format!("SELECT {cols} FROM {t} ORDER BY id LIMIT $1"),
                        &[&limit],
                    )
                    .await?
                }
            };
            let executions = rows
                .iter()
                .map(|row| execution_row(row).map_err(|e| undecodable(&t, e)))
                .collect::<Result<Vec<_>, _>>()?;
            let ids: Vec<Uuid> = executions.iter().map(|e| e.stored.id).collect();
            let attempts = select_by_ids(
                &**conn,
                &a,
                ATTEMPT_COLUMNS,
                "execution_id",
                &ids,
                attempt_row,
            )
            .await?;
            let diagnostics = match &d {
                Some(d) => {
                    select_by_ids(
                        &**conn,
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
                    select_by_ids(&**conn, tr, TRACE_COLUMNS, "execution_id", &ids, trace_row)
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
        let t = self.sql().t.clone();
        let a = q(&self.tables().attempts);
        let (d, tr) = (self.d(), self.tr_existing());
        let scheduled = self.sql().priority_columns;
        onestep_core::transfer::check_schedule_storable(records, scheduled)?;
        let columns = if scheduled {
            EXECUTION_COLUMNS
        } else {
            EXECUTION_COLUMNS_UNSCHEDULED
        };
        let types = execution_types(scheduled);
        let insert_e = unnest_insert(
            &t,
            &format!("{columns}, {EXTRA_COLUMNS}"),
            &types,
            &select_list(types.len(), &[5, 6, 7, 8]),
        );
        let insert_a = unnest_insert(
            &a,
            ATTEMPT_COLUMNS,
            &ATTEMPT_TYPES,
            &select_list(ATTEMPT_TYPES.len(), &[7]),
        );
        self.run("copy", || async {
            let mut conn = self.conn().await?;
            let tx = conn.transaction().await?;
            let ids: Vec<Uuid> = records.iter().map(ExecutionRecord::id).collect();
            let existing: HashSet<Uuid> = tx
                .query(&format!("SELECT id FROM {t} WHERE id = ANY($1)"), &[&ids])
                .await?
                .iter()
                .map(|r| r.try_get::<_, Uuid>(0))
                .collect::<Result<_, _>>()?;
            let tables = ChildTables {
                diagnostics: d.is_some(),
                traces: tr.is_some(),
            };
            let plan = plan_import(records, &existing, tables);
            if plan.fresh.is_empty() {
                tx.rollback().await?;
                return Ok(plan.counts);
            }
            let e: Vec<&ExecutionRow> = plan.executions().collect();
            tx.execute(&insert_e, &refs(&execution_params(&e, scheduled)?))
                .await?;
            let at: Vec<&AttemptRow> = plan.attempts().collect();
            tx.execute(&insert_a, &refs(&attempt_params(&at)?)).await?;
            if let Some(d) = &d {
                let sql = unnest_insert(
                    d,
                    DIAGNOSTICS_COLUMNS,
                    &DIAGNOSTICS_TYPES,
                    &select_list(DIAGNOSTICS_TYPES.len(), &[]),
                );
                let di: Vec<&DiagnosticsRow> = plan.diagnostics().collect();
                tx.execute(&sql, &refs(&diagnostics_params(&di))).await?;
            }
            if let Some(tr) = &tr {
                let sql = unnest_insert(
                    tr,
                    TRACE_COLUMNS,
                    &TRACE_TYPES,
                    &select_list(TRACE_TYPES.len(), &[]),
                );
                let trs: Vec<&TraceRow> = plan.traces().collect();
                tx.execute(&sql, &refs(&trace_params(&trs))).await?;
            }
            let counts = plan.counts;
            commit(tx).await?;
            Ok(counts)
        })
        .await
    }

    async fn live_leases(
        &self,
        now: DateTime<Utc>,
    ) -> Result<BTreeMap<String, u64>, ExecutionError> {
        let t = self.sql().t.clone();
        self.run("copy", || async {
            let conn = self.conn().await?;
            let rows = conn
                .query(
                    &format!(
                        "SELECT status, count(*) FROM {t} WHERE lease_expires_at > $1 \
                         GROUP BY status"
                    ),
                    &[&now],
                )
                .await?;
            let mut out = BTreeMap::new();
            for r in &rows {
                out.insert(r.try_get::<_, String>(0)?, u64_of(r.try_get(1)?));
            }
            Ok(out)
        })
        .await
    }

    async fn counts(&self) -> Result<TableCounts, ExecutionError> {
        let t = self.sql().t.clone();
        let a = q(&self.tables().attempts);
        let (d, tr) = (self.d(), self.tr_existing());
        self.run("copy", || async {
            let conn = self.conn().await?;
            let mut n = [0u64; 4];
            for (i, table) in [Some(&t), Some(&a), d.as_ref(), tr.as_ref()]
                .into_iter()
                .enumerate()
            {
                if let Some(table) = table {
                    let c: i64 = conn
                        .query_one(&format!("SELECT count(*) FROM {table}"), &[])
                        .await?
                        .try_get(0)?;
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
        .await
    }
}
