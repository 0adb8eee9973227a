//! Row ↔ domain conversions (docs/sqlite.md#stored-representations).
//!
//! * UUIDs are `TEXT` in hyphenated lower case; instants `TEXT` in UTC as
//!   `YYYY-MM-DD HH:MM:SS.ffffff` (fixed width, so text order is time order); JSON columns
//!   `TEXT` holding the canonical JSON as `serde_json` writes it (numbers kept digit for digit).
//! * SQL NULL and JSON `null` both mean "absent" for `result` and `error`.

use chrono::{DateTime, NaiveDateTime, Utc};
use onestep_core::store::{DecodeError, StoredExecution, undecodable_execution};
use onestep_core::{ErrorObject, Execution, ExecutionError};
use rusqlite::Row;
use serde_json::Value;
use uuid::Uuid;

/// The executions columns every read selects, in [`decode_execution`]'s order.
pub const EXECUTION_COLUMNS: &str = onestep_core::execution_columns!("");

/// [`EXECUTION_COLUMNS`] for tables without `priority` and `fairness_key`: their defaults
/// stand in (docs/semantics.md#priority-and-fairness-key).
const EXECUTION_COLUMNS_DEFAULTS: &str = onestep_core::execution_columns!("", ", 5, NULL");

/// The sixteen columns of tables without `priority` and `fairness_key` (a copy's insert).
pub const EXECUTION_COLUMNS_UNSCHEDULED: &str = onestep_core::execution_columns!("", "");

impl crate::backend::SqliteBackend {
    /// The select list of an execution on the opened tables ([`EXECUTION_COLUMNS`], or its
    /// defaults form before `onestep migrate --upgrade`).
    pub(crate) fn cols(&self) -> &'static str {
        if self.schema_report().features.priority_columns {
            EXECUTION_COLUMNS
        } else {
            EXECUTION_COLUMNS_DEFAULTS
        }
    }
}

pub use onestep_core::store::EXECUTION_COLUMN_COUNT;

/// The stored form of an instant.
const TIME_FORMAT: &str = "%Y-%m-%d %H:%M:%S%.6f";

/// An instant as stored.
pub fn ts(t: DateTime<Utc>) -> String {
    t.format(TIME_FORMAT).to_string()
}

/// An optional instant as stored.
pub fn ots(t: Option<DateTime<Utc>>) -> Option<String> {
    t.map(ts)
}

/// A UUID as stored.
pub fn uid(u: Uuid) -> String {
    u.hyphenated().to_string()
}

/// A JSON value as stored.
pub fn json(v: &Value) -> String {
    v.to_string()
}

/// Parses a stored instant.
pub fn parse_time(s: &str, col: &str) -> Result<DateTime<Utc>, DecodeError> {
    NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S%.f")
        .map(|n| n.and_utc())
        .map_err(|e| DecodeError(format!("{col}: '{s}' is not an instant: {e}")))
}

fn raw<T: rusqlite::types::FromSql>(row: &Row<'_>, i: usize, col: &str) -> Result<T, DecodeError> {
    row.get::<_, T>(i)
        .map_err(|e| DecodeError(format!("{col}: {e}")))
}

/// A `TEXT` column.
pub fn text(row: &Row<'_>, i: usize, col: &str) -> Result<String, DecodeError> {
    raw(row, i, col)
}

/// A nullable `TEXT` column.
pub fn opt_text(row: &Row<'_>, i: usize, col: &str) -> Result<Option<String>, DecodeError> {
    raw(row, i, col)
}

/// An `INTEGER` column.
pub fn int(row: &Row<'_>, i: usize, col: &str) -> Result<i64, DecodeError> {
    raw(row, i, col)
}

/// A nullable `INTEGER` column.
pub fn opt_int(row: &Row<'_>, i: usize, col: &str) -> Result<Option<i64>, DecodeError> {
    raw(row, i, col)
}

/// A UUID column.
pub fn uuid(row: &Row<'_>, i: usize, col: &str) -> Result<Uuid, DecodeError> {
    let s = text(row, i, col)?;
    Uuid::parse_str(&s).map_err(|e| DecodeError(format!("{col}: '{s}' is not a UUID: {e}")))
}

/// A nullable UUID column.
pub fn opt_uuid(row: &Row<'_>, i: usize, col: &str) -> Result<Option<Uuid>, DecodeError> {
    opt_text(row, i, col)?
        .map(|s| {
            Uuid::parse_str(&s).map_err(|e| DecodeError(format!("{col}: '{s}' is not a UUID: {e}")))
        })
        .transpose()
}

/// An instant column.
pub fn time(row: &Row<'_>, i: usize, col: &str) -> Result<DateTime<Utc>, DecodeError> {
    parse_time(&text(row, i, col)?, col)
}

/// A nullable instant column.
pub fn opt_time(row: &Row<'_>, i: usize, col: &str) -> Result<Option<DateTime<Utc>>, DecodeError> {
    opt_text(row, i, col)?
        .map(|s| parse_time(&s, col))
        .transpose()
}

/// A nullable JSON column, parsed.
pub fn opt_json(row: &Row<'_>, i: usize, col: &str) -> Result<Option<Value>, DecodeError> {
    opt_text(row, i, col)?
        .map(|s| {
            serde_json::from_str(&s).map_err(|e| DecodeError(format!("{col}: invalid JSON: {e}")))
        })
        .transpose()
}

/// Decodes a row selected with [`EXECUTION_COLUMNS`] (at index 0). Failures are
/// `cannot decode execution <id>: <reason>` (docs/semantics.md#undecodable-rows).
pub fn decode_execution(row: &Row<'_>) -> Result<Execution, ExecutionError> {
    let label = row.get::<_, String>(0).unwrap_or_else(|_| "?".to_owned());
    stored_execution(row)
        .and_then(StoredExecution::into_execution)
        .map_err(|reason| undecodable_execution(&label, reason))
}

fn stored_execution(row: &Row<'_>) -> Result<StoredExecution, DecodeError> {
    Ok(StoredExecution {
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
    })
}

/// JSON text of an optional error object for binding (`NULL` when absent).
pub fn error_text(error: Option<&ErrorObject>) -> Result<Option<String>, ExecutionError> {
    error
        .map(|e| {
            serde_json::to_value(e)
                .map(|v| json(&v))
                .map_err(|e| ExecutionError::Encoding(format!("cannot encode error object: {e}")))
        })
        .transpose()
}

/// Decodes `id, attempt_no, status, worker_id, error, started_at, heartbeat_at, finished_at` of
/// the attempts table (diagnostics are joined in by the caller).
pub fn decode_attempt(
    row: &Row<'_>,
) -> Result<onestep_core::diagnostics::AttemptRecord, DecodeError> {
    let attempt_no = int(row, 1, "attempt_no")?;
    Ok(onestep_core::diagnostics::AttemptRecord {
        id: uuid(row, 0, "id")?,
        attempt_no: u32::try_from(attempt_no)
            .map_err(|_| DecodeError(format!("attempt_no {attempt_no} is out of range")))?,
        status: text(row, 2, "status")?,
        worker_id: text(row, 3, "worker_id")?,
        error: onestep_core::store::error_object(opt_json(row, 4, "error")?, "error")?,
        started_at: time(row, 5, "started_at")?,
        heartbeat_at: time(row, 6, "heartbeat_at")?,
        finished_at: opt_time(row, 7, "finished_at")?,
        diagnostics: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instants_are_fixed_width_and_round_trip() {
        let t = DateTime::parse_from_rfc3339("2024-01-02T03:04:05.000007Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(ts(t), "2024-01-02 03:04:05.000007");
        assert_eq!(parse_time(&ts(t), "x").unwrap(), t);
        assert!(parse_time("nope", "x").is_err());
    }
}
