//! Row ↔ domain conversions: the executions column list, decoding a row into an [`Execution`]
//! (docs/semantics.md#value-encoding, docs/semantics.md#execution-and-lease-objects), and the bound representations of UUIDs and instants (docs/semantics.md#stored-representations, docs/semantics.md#time).
//!
//! * UUIDs are bound as 32 lowercase hex digits (accepted by `CHAR(32)` and by MariaDB's native
//!   `uuid` type) and read in either textual form (or as 16 raw bytes).
//! * Instants are bound as naive UTC `DATETIME(6)` values and read back as UTC.
//! * SQL NULL and JSON `null` both mean "absent" for `result` and `error`.

use chrono::{DateTime, NaiveDateTime, Utc};
use mysql_async::{Row, Value as DbValue, from_value_opt};
use onestep_core::store::{
    DecodeError, StoredExecution, WindowMark, error_object, undecodable_execution,
};
use onestep_core::{ErrorObject, Execution, ExecutionError};
use serde_json::Value;
use uuid::Uuid;

/// The executions columns every read selects, in [`decode_execution`]'s order.
pub const EXECUTION_COLUMNS: &str = onestep_core::execution_columns!("");

/// [`EXECUTION_COLUMNS`] qualified with the alias `e.`.
pub const EXECUTION_COLUMNS_E: &str = onestep_core::execution_columns!("e.");

/// [`EXECUTION_COLUMNS`] for tables without `priority` and `fairness_key` (the reference's, an
/// older onestep's): their defaults stand in (docs/semantics.md#priority-and-fairness-key).
const EXECUTION_COLUMNS_DEFAULTS: &str = onestep_core::execution_columns!("", ", 5, NULL");

/// [`EXECUTION_COLUMNS_DEFAULTS`] qualified with the alias `e.`.
const EXECUTION_COLUMNS_E_DEFAULTS: &str = onestep_core::execution_columns!("e.", ", 5, NULL");

/// The sixteen columns of tables without `priority` and `fairness_key` (a copy's insert).
pub const EXECUTION_COLUMNS_UNSCHEDULED: &str = onestep_core::execution_columns!("", "");

impl crate::backend::MySqlBackend {
    /// Whether the opened tables have `priority` and `fairness_key`.
    pub(crate) fn priority_columns(&self) -> bool {
        self.schema_report().features.priority_columns
    }

    /// The select list of an execution on the opened tables.
    pub(crate) fn cols(&self) -> &'static str {
        if self.priority_columns() {
            EXECUTION_COLUMNS
        } else {
            EXECUTION_COLUMNS_DEFAULTS
        }
    }

    /// [`Self::cols`] qualified with the alias `e.`.
    pub(crate) fn cols_e(&self) -> &'static str {
        if self.priority_columns() {
            EXECUTION_COLUMNS_E
        } else {
            EXECUTION_COLUMNS_E_DEFAULTS
        }
    }
}

/// Number of columns in [`EXECUTION_COLUMNS`].
pub use onestep_core::store::EXECUTION_COLUMN_COUNT;

/// A UUID as bound in SQL: 32 lowercase hex digits.
pub fn bind_uuid(id: Uuid) -> DbValue {
    DbValue::from(id.simple().to_string())
}

/// An instant as bound in SQL: naive UTC wall time with microseconds.
pub fn bind_time(t: DateTime<Utc>) -> DbValue {
    DbValue::from(t.naive_utc())
}

/// An optional instant.
pub fn bind_opt_time(t: Option<DateTime<Utc>>) -> DbValue {
    t.map_or(DbValue::NULL, bind_time)
}

/// `?, ?, …` with `n` placeholders.
pub fn placeholders(n: usize) -> String {
    vec!["?"; n].join(", ")
}

/// The four columns a windowed search adds after [`EXECUTION_COLUMNS_E`]
/// (docs/semantics.md#search-window): whether the row matched, how many rows the window
/// examined, and the row's list position (`created_at`, `id`).
pub fn window_columns(row: &Row) -> Result<WindowMark, ExecutionError> {
    let col = |i: usize| {
        row.as_ref(EXECUTION_COLUMN_COUNT + i)
            .cloned()
            .unwrap_or(DbValue::NULL)
    };
    WindowMark::decoded(|| {
        let matched: i64 =
            from_value_opt(col(0)).map_err(|e| DecodeError(format!("w_match: {e}")))?;
        let examined: i64 =
            from_value_opt(col(1)).map_err(|e| DecodeError(format!("w_rows: {e}")))?;
        let created_at = instant(col(2), "w_created")?;
        let id = parse_uuid(&col(3))?;
        Ok(WindowMark {
            matched: matched != 0,
            examined,
            position: onestep_core::cursor::Cursor { created_at, id },
        })
    })
}

/// Parses a UUID column value (plain hex, hyphenated, or 16 raw bytes).
pub fn parse_uuid(v: &DbValue) -> Result<Uuid, DecodeError> {
    match v {
        DbValue::Bytes(b) if b.len() == 16 => {
            Uuid::from_slice(b).map_err(|e| DecodeError(e.to_string()))
        }
        DbValue::Bytes(b) => {
            let s = std::str::from_utf8(b).map_err(|e| DecodeError(e.to_string()))?;
            Uuid::parse_str(s.trim()).map_err(|e| DecodeError(format!("invalid uuid '{s}': {e}")))
        }
        other => Err(DecodeError(format!("unexpected uuid value {other:?}"))),
    }
}

pub(crate) fn text(v: DbValue, col: &str) -> Result<String, DecodeError> {
    from_value_opt::<String>(v).map_err(|e| DecodeError(format!("{col}: {e}")))
}

pub(crate) fn opt_text(v: DbValue, col: &str) -> Result<Option<String>, DecodeError> {
    match v {
        DbValue::NULL => Ok(None),
        v => text(v, col).map(Some),
    }
}

pub(crate) fn instant(v: DbValue, col: &str) -> Result<DateTime<Utc>, DecodeError> {
    from_value_opt::<NaiveDateTime>(v)
        .map(|n| n.and_utc())
        .map_err(|e| DecodeError(format!("{col}: {e}")))
}

pub(crate) fn opt_instant(v: DbValue, col: &str) -> Result<Option<DateTime<Utc>>, DecodeError> {
    match v {
        DbValue::NULL => Ok(None),
        v => instant(v, col).map(Some),
    }
}

/// Parses a JSON column; `None` for SQL NULL.
pub fn json_column(v: DbValue, col: &str) -> Result<Option<Value>, DecodeError> {
    match v {
        DbValue::NULL => Ok(None),
        DbValue::Bytes(b) => serde_json::from_slice(&b)
            .map(Some)
            .map_err(|e| DecodeError(format!("{col} is not valid JSON: {e}"))),
        other => Err(DecodeError(format!("{col}: unexpected value {other:?}"))),
    }
}

/// Parses a nullable error-object column (SQL NULL and JSON `null` are both absent).
pub fn error_column(v: DbValue, col: &str) -> Result<Option<ErrorObject>, DecodeError> {
    error_object(json_column(v, col)?, col)
}

/// Decodes rows selected with [`EXECUTION_COLUMNS`], in order ([`decode_execution`]).
pub fn decode_executions(rows: Vec<Row>) -> Result<Vec<Execution>, ExecutionError> {
    rows.into_iter().map(decode_execution).collect()
}

/// Decodes a row selected with [`EXECUTION_COLUMNS`]. Failures are
/// `cannot decode execution <id>: <reason>` ([`ExecutionError::Undecodable`],
/// docs/semantics.md#undecodable-rows).
pub fn decode_execution(row: Row) -> Result<Execution, ExecutionError> {
    let mut values: Vec<DbValue> = row
        .unwrap_raw()
        .into_iter()
        .map(|v| v.unwrap_or(DbValue::NULL))
        .collect();
    if values.len() < EXECUTION_COLUMN_COUNT {
        return Err(ExecutionError::Undecodable(format!(
            "cannot decode execution: expected {EXECUTION_COLUMN_COUNT} columns, got {}",
            values.len()
        )));
    }
    let raw_id = values[0].clone();
    let label = match (parse_uuid(&raw_id), &raw_id) {
        (Ok(id), _) => id.to_string(),
        (Err(_), DbValue::Bytes(b)) => String::from_utf8_lossy(b).into_owned(),
        (Err(_), other) => format!("{other:?}"),
    };
    values.truncate(EXECUTION_COLUMN_COUNT);
    stored_execution(values)
        .and_then(StoredExecution::into_execution)
        .map_err(|reason| undecodable_execution(&label, reason))
}

/// The columns of [`EXECUTION_COLUMNS`] as read, in order.
pub(crate) fn stored_execution(values: Vec<DbValue>) -> Result<StoredExecution, DecodeError> {
    let mut it = values.into_iter();
    let mut next = || it.next().unwrap_or(DbValue::NULL);
    let int = |v: DbValue, col: &str| {
        from_value_opt::<i64>(v).map_err(|e| DecodeError(format!("{col}: {e}")))
    };
    Ok(StoredExecution {
        id: parse_uuid(&next())?,
        namespace: text(next(), "namespace")?,
        task_name: text(next(), "task_name")?,
        status: text(next(), "status")?,
        payload: json_column(next(), "payload")?,
        metadata: json_column(next(), "metadata")?,
        result: json_column(next(), "result")?,
        error: json_column(next(), "error")?,
        attempts: int(next(), "attempts")?,
        available_at: instant(next(), "available_at")?,
        started_at: opt_instant(next(), "started_at")?,
        finished_at: opt_instant(next(), "finished_at")?,
        cancel_requested_at: opt_instant(next(), "cancel_requested_at")?,
        expires_at: opt_instant(next(), "expires_at")?,
        created_at: instant(next(), "created_at")?,
        version: int(next(), "version")?,
        priority: int(next(), "priority")?,
        fairness_key: opt_text(next(), "fairness_key")?,
    })
}

/// JSON text of an optional error object for binding (`NULL` when absent).
pub fn bind_error(error: Option<&ErrorObject>) -> Result<DbValue, ExecutionError> {
    match error {
        None => Ok(DbValue::NULL),
        Some(e) => serde_json::to_string(e)
            .map(DbValue::from)
            .map_err(|e| ExecutionError::Encoding(format!("cannot encode error object: {e}"))),
    }
}

/// `rows` extended to the next power of two by repeating its last row, for a statement whose
/// text lists one placeholder group per row and where a repeated row changes nothing (`IN`,
/// `CASE`; never an `INSERT`): fewer distinct texts, fewer server-side prepares
/// (`crate::complete_batch`); empty stays empty.
pub(crate) fn padded<T>(rows: &[T]) -> Vec<&T> {
    let mut out: Vec<&T> = rows.iter().collect();
    if let Some(last) = rows.last() {
        out.resize(rows.len().next_power_of_two(), last);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuids_parse_in_every_stored_form() {
        let id = Uuid::new_v4();
        for v in [
            DbValue::from(id.simple().to_string()),
            DbValue::from(id.hyphenated().to_string()),
            DbValue::Bytes(id.as_bytes().to_vec()),
        ] {
            assert_eq!(parse_uuid(&v), Ok(id));
        }
        assert_eq!(bind_uuid(id), DbValue::from(id.simple().to_string()));
    }

    #[test]
    fn json_null_and_sql_null_are_both_absent() {
        assert_eq!(error_column(DbValue::NULL, "error"), Ok(None));
        assert_eq!(error_column(DbValue::from("null"), "error"), Ok(None));
    }
}
