//! Row ↔ domain conversions (docs/postgres.md#stored-representations): the executions column
//! list and decoding a row into an [`Execution`] (docs/semantics.md#value-encoding).
//!
//! * UUIDs are native `uuid` values, instants `timestamptz` (bound and read as UTC), JSON
//!   columns `jsonb`, written from canonical JSON text through `$n::text::jsonb`.
//! * SQL NULL and JSON `null` both mean "absent" for `result` and `error`.

use chrono::{DateTime, Utc};
use onestep_core::codec::decode_value;
use onestep_core::store::DecodeError;
use onestep_core::{ErrorObject, Execution, ExecutionError, ExecutionStatus};
use serde_json::Value;
use tokio_postgres::Row;
use uuid::Uuid;

/// The executions columns every read selects, in [`decode_execution`]'s order.
pub const EXECUTION_COLUMNS: &str = "id, namespace, task_name, status, payload, metadata, \
    result, error, attempts, available_at, started_at, finished_at, cancel_requested_at, \
    expires_at, created_at, version";

/// [`EXECUTION_COLUMNS`] qualified with the alias `e.`.
pub const EXECUTION_COLUMNS_E: &str = "e.id, e.namespace, e.task_name, e.status, e.payload, \
    e.metadata, e.result, e.error, e.attempts, e.available_at, e.started_at, e.finished_at, \
    e.cancel_requested_at, e.expires_at, e.created_at, e.version";

/// Number of columns in [`EXECUTION_COLUMNS`].
pub const EXECUTION_COLUMN_COUNT: usize = 16;

pub(crate) fn get<'a, T: tokio_postgres::types::FromSql<'a>>(
    row: &'a Row,
    idx: usize,
    col: &str,
) -> Result<T, DecodeError> {
    row.try_get::<_, T>(idx)
        .map_err(|e| DecodeError(format!("{col}: {e}")))
}

/// Parses a nullable error-object value (SQL NULL and JSON `null` are both absent).
pub fn error_value(v: Option<Value>, col: &str) -> Result<Option<ErrorObject>, DecodeError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(v) => serde_json::from_value(v)
            .map(Some)
            .map_err(|e| DecodeError(format!("{col} is not an error object: {e}"))),
    }
}

/// The four columns a windowed search adds after [`EXECUTION_COLUMNS_E`]
/// (docs/semantics.md#search-window): whether the row matched, how many rows the window
/// examined, and the row's list position (`created_at`, `id`).
pub fn window_columns(
    row: &Row,
) -> Result<(bool, i64, onestep_core::cursor::Cursor), ExecutionError> {
    let read = || -> Result<(bool, i64, onestep_core::cursor::Cursor), DecodeError> {
        let matched: bool = get(row, EXECUTION_COLUMN_COUNT, "w_match")?;
        let examined: i64 = get(row, EXECUTION_COLUMN_COUNT + 1, "w_rows")?;
        let created_at = get(row, EXECUTION_COLUMN_COUNT + 2, "w_created")?;
        let id = get(row, EXECUTION_COLUMN_COUNT + 3, "w_id")?;
        Ok((
            matched,
            examined,
            onestep_core::cursor::Cursor { created_at, id },
        ))
    };
    read().map_err(|reason| {
        ExecutionError::Undecodable(format!("cannot decode a search window row: {reason}"))
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
    decode_values(row).map_err(|reason| {
        ExecutionError::Undecodable(format!("cannot decode execution {label}: {reason}"))
    })
}

fn decode_values(row: &Row) -> Result<Execution, DecodeError> {
    if row.len() < EXECUTION_COLUMN_COUNT {
        return Err(DecodeError(format!(
            "expected {EXECUTION_COLUMN_COUNT} columns, got {}",
            row.len()
        )));
    }
    let id: Uuid = get(row, 0, "id")?;
    let namespace: String = get(row, 1, "namespace")?;
    let task_name: String = get(row, 2, "task_name")?;
    let status_text: String = get(row, 3, "status")?;
    let status: ExecutionStatus = status_text
        .parse()
        .map_err(|_| DecodeError(format!("unknown status '{status_text}'")))?;
    let payload: Option<Value> = get(row, 4, "payload")?;
    let payload = decode_value(&payload.unwrap_or(Value::Null))
        .map_err(|e| DecodeError(format!("payload: {e}")))?;
    let metadata = match get::<Option<Value>>(row, 5, "metadata")? {
        None => serde_json::Map::new(),
        Some(m) => match decode_value(&m).map_err(|e| DecodeError(format!("metadata: {e}")))? {
            Value::Object(m) => m,
            _ => return Err("metadata is not an object".into()),
        },
    };
    let result = match get::<Option<Value>>(row, 6, "result")? {
        None | Some(Value::Null) => None,
        Some(v) => Some(decode_value(&v).map_err(|e| DecodeError(format!("result: {e}")))?),
    };
    let error = error_value(get(row, 7, "error")?, "error")?;
    let attempts: i32 = get(row, 8, "attempts")?;
    let available_at: DateTime<Utc> = get(row, 9, "available_at")?;
    let started_at: Option<DateTime<Utc>> = get(row, 10, "started_at")?;
    let finished_at: Option<DateTime<Utc>> = get(row, 11, "finished_at")?;
    let cancel_requested_at: Option<DateTime<Utc>> = get(row, 12, "cancel_requested_at")?;
    let expires_at: Option<DateTime<Utc>> = get(row, 13, "expires_at")?;
    let created_at: DateTime<Utc> = get(row, 14, "created_at")?;
    let version: i64 = get(row, 15, "version")?;
    Ok(Execution {
        id,
        namespace,
        task_name,
        status,
        payload,
        metadata,
        result,
        error,
        attempts: u32::try_from(attempts)
            .map_err(|_| DecodeError(format!("attempts out of range: {attempts}")))?,
        created_at,
        available_at,
        started_at,
        finished_at,
        cancel_requested_at,
        expires_at,
        version,
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
        error: error_value(get(row, 4, "error")?, "error")?,
        started_at: get(row, 5, "started_at")?,
        heartbeat_at: get(row, 6, "heartbeat_at")?,
        finished_at: get(row, 7, "finished_at")?,
        diagnostics: None,
    })
}
