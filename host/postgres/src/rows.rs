//! Row ↔ domain conversions (docs/postgres.md#stored-representations): the executions column
//! list and decoding a row into an [`Execution`] (docs/semantics.md#value-encoding).
//!
//! * UUIDs are native `uuid` values, instants `timestamptz` (bound and read as UTC), JSON
//!   columns `jsonb`, written from canonical JSON text through `$n::text::jsonb`.
//! * SQL NULL and JSON `null` both mean "absent" for `result` and `error`.

use onestep_core::store::{
    DecodeError, StoredExecution, WindowMark, error_object, undecodable_execution,
};
use onestep_core::{ErrorObject, Execution, ExecutionError};
use tokio_postgres::Row;
use uuid::Uuid;

/// The executions columns every read selects, in [`decode_execution`]'s order.
pub const EXECUTION_COLUMNS: &str = onestep_core::execution_columns!("");

/// [`EXECUTION_COLUMNS`] qualified with the alias `e.`.
pub const EXECUTION_COLUMNS_E: &str = onestep_core::execution_columns!("e.");

/// [`EXECUTION_COLUMNS`] for tables without `priority` and `fairness_key`: their defaults,
/// typed as the columns are (docs/semantics.md#priority-and-fairness-key).
pub const EXECUTION_COLUMNS_DEFAULTS: &str =
    onestep_core::execution_columns!("", ", 5::int2, NULL::varchar");

/// [`EXECUTION_COLUMNS_DEFAULTS`] qualified with the alias `e.`.
pub const EXECUTION_COLUMNS_E_DEFAULTS: &str =
    onestep_core::execution_columns!("e.", ", 5::int2, NULL::varchar");

/// The sixteen columns of tables without `priority` and `fairness_key` (a copy's insert).
pub const EXECUTION_COLUMNS_UNSCHEDULED: &str = onestep_core::execution_columns!("", "");

/// The select lists (plain, `e.`) on tables with or without the priority columns.
pub fn columns(priority_columns: bool) -> (&'static str, &'static str) {
    if priority_columns {
        (EXECUTION_COLUMNS, EXECUTION_COLUMNS_E)
    } else {
        (EXECUTION_COLUMNS_DEFAULTS, EXECUTION_COLUMNS_E_DEFAULTS)
    }
}

/// Number of columns in [`EXECUTION_COLUMNS`].
pub use onestep_core::store::EXECUTION_COLUMN_COUNT;

pub(crate) fn get<'a, T: tokio_postgres::types::FromSql<'a>>(
    row: &'a Row,
    idx: usize,
    col: &str,
) -> Result<T, DecodeError> {
    row.try_get::<_, T>(idx)
        .map_err(|e| DecodeError(format!("{col}: {e}")))
}

/// Parses a nullable error-object value (SQL NULL and JSON `null` are both absent).
pub use onestep_core::store::error_object as error_value;

/// The four columns a windowed search adds after [`EXECUTION_COLUMNS_E`]
/// (docs/semantics.md#search-window): whether the row matched, how many rows the window
/// examined, and the row's list position (`created_at`, `id`).
pub fn window_columns(row: &Row) -> Result<WindowMark, ExecutionError> {
    WindowMark::decoded(|| {
        Ok(WindowMark {
            matched: get(row, EXECUTION_COLUMN_COUNT, "w_match")?,
            examined: get(row, EXECUTION_COLUMN_COUNT + 1, "w_rows")?,
            position: onestep_core::cursor::Cursor {
                created_at: get(row, EXECUTION_COLUMN_COUNT + 2, "w_created")?,
                id: get(row, EXECUTION_COLUMN_COUNT + 3, "w_id")?,
            },
        })
    })
}

/// Decodes a row selected with [`EXECUTION_COLUMNS`] (at index 0). Failures are
/// `cannot decode execution <id>: <reason>` ([`ExecutionError::Undecodable`],
/// docs/semantics.md#undecodable-rows).
pub fn decode_execution(row: &Row) -> Result<Execution, ExecutionError> {
    let label = row
        .try_get::<_, Uuid>(0)
        .map(|u| u.to_string())
        .unwrap_or_else(|_| "?".into());
    stored_execution(row)
        .and_then(StoredExecution::into_execution)
        .map_err(|reason| undecodable_execution(&label, reason))
}

/// The columns of [`EXECUTION_COLUMNS`] as read, in order.
fn stored_execution(row: &Row) -> Result<StoredExecution, DecodeError> {
    if row.len() < EXECUTION_COLUMN_COUNT {
        return Err(DecodeError(format!(
            "expected {EXECUTION_COLUMN_COUNT} columns, got {}",
            row.len()
        )));
    }
    Ok(StoredExecution {
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
    })
}

/// JSON text of an optional error object for binding (`NULL` when absent).
pub fn error_text(error: Option<&ErrorObject>) -> Result<Option<String>, ExecutionError> {
    error
        .map(|e| {
            serde_json::to_value(e)
                .map(|v| crate::json_text::to_text(&v))
                .map_err(|e| ExecutionError::Encoding(format!("cannot encode error object: {e}")))
        })
        .transpose()
}

/// Decodes `id, attempt_no, status, worker_id, error, started_at, heartbeat_at, finished_at` of
/// the attempts table (diagnostics are joined in by the caller).
pub fn decode_attempt(row: &Row) -> Result<onestep_core::diagnostics::AttemptRecord, DecodeError> {
    let attempt_no: i32 = get(row, 1, "attempt_no")?;
    Ok(onestep_core::diagnostics::AttemptRecord {
        id: get(row, 0, "id")?,
        attempt_no: u32::try_from(attempt_no)
            .map_err(|_| DecodeError(format!("attempt_no {attempt_no} is negative")))?,
        status: get(row, 2, "status")?,
        worker_id: get(row, 3, "worker_id")?,
        error: error_object(get(row, 4, "error")?, "error")?,
        started_at: get(row, 5, "started_at")?,
        heartbeat_at: get(row, 6, "heartbeat_at")?,
        finished_at: get(row, 7, "finished_at")?,
        diagnostics: None,
    })
}
