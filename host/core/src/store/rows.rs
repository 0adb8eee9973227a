//! Stored executions as plain values (docs/semantics.md#value-encoding,
//! docs/semantics.md#undecodable-rows): each backend reads a row's columns with its driver into
//! a [`StoredExecution`], and the conversion into an [`Execution`] (status, decoded values, the
//! error object, ranges) and its error wording are written once, here. Also the assembly of a
//! windowed search page from its rows (docs/semantics.md#search-window).

use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

use crate::codec::decode_value;
use crate::cursor::Cursor;
use crate::error::ExecutionError;
use crate::error_object::ErrorObject;
use crate::execution::{Execution, ExecutionPage};
use crate::status::ExecutionStatus;
use crate::store::DecodeError;

/// One executions row as its driver reads it, before decoding: JSON columns parsed but not yet
/// decoded (`None` for SQL NULL), the status as stored text, counters as stored integers.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredExecution {
    /// `id`.
    pub id: Uuid,
    /// `namespace`.
    pub namespace: String,
    /// `task_name`.
    pub task_name: String,
    /// `status`, as stored.
    pub status: String,
    /// `payload`, parsed JSON (encoded form).
    pub payload: Option<Value>,
    /// `metadata`, parsed JSON (encoded form).
    pub metadata: Option<Value>,
    /// `result`, parsed JSON (encoded form).
    pub result: Option<Value>,
    /// `error`, parsed JSON.
    pub error: Option<Value>,
    /// `attempts`.
    pub attempts: i64,
    /// `available_at`.
    pub available_at: DateTime<Utc>,
    /// `started_at`.
    pub started_at: Option<DateTime<Utc>>,
    /// `finished_at`.
    pub finished_at: Option<DateTime<Utc>>,
    /// `cancel_requested_at`.
    pub cancel_requested_at: Option<DateTime<Utc>>,
    /// `expires_at`.
    pub expires_at: Option<DateTime<Utc>>,
    /// `created_at`.
    pub created_at: DateTime<Utc>,
    /// `version`.
    pub version: i64,
    /// `priority` (the default on tables without the column).
    pub priority: i64,
    /// `fairness_key`.
    pub fairness_key: Option<String>,
}

/// Number of columns of a stored execution, in [`StoredExecution`]'s field order.
pub const EXECUTION_COLUMN_COUNT: usize = 18;

/// The names of the executions columns every read selects, in [`StoredExecution`]'s field
/// order, as one comma-separated `&'static str`, each name led by the literal `$prefix` (`""`,
/// or a table alias such as `"e."`); a backend writes them into its SQL. With a second literal,
/// that literal follows `version` instead of `, priority, fairness_key`: `", 5, NULL"` selects
/// the defaults on tables without those columns, `""` names the sixteen columns such tables
/// have (docs/semantics.md#priority-and-fairness-key).
#[macro_export]
macro_rules! execution_columns {
    ($p:literal) => {
        $crate::execution_columns!($p, concat!(", ", $p, "priority, ", $p, "fairness_key"))
    };
    ($p:literal, $tail:expr) => {
        concat!(
            $p,
            "id, ",
            $p,
            "namespace, ",
            $p,
            "task_name, ",
            $p,
            "status, ",
            $p,
            "payload, ",
            $p,
            "metadata, ",
            $p,
            "result, ",
            $p,
            "error, ",
            $p,
            "attempts, ",
            $p,
            "available_at, ",
            $p,
            "started_at, ",
            $p,
            "finished_at, ",
            $p,
            "cancel_requested_at, ",
            $p,
            "expires_at, ",
            $p,
            "created_at, ",
            $p,
            "version",
            $tail
        )
    };
}

impl StoredExecution {
    /// The execution these columns hold: values decoded, the status and the error object
    /// checked; a failure names the column.
    pub fn into_execution(self) -> Result<Execution, DecodeError> {
        let status: ExecutionStatus = self
            .status
            .parse()
            .map_err(|_| DecodeError(format!("unknown status '{}'", self.status)))?;
        let payload = decode_value(&self.payload.unwrap_or(Value::Null))
            .map_err(|e| DecodeError(format!("payload: {e}")))?;
        let metadata = match self.metadata {
            None => serde_json::Map::new(),
            Some(m) => match decode_value(&m).map_err(|e| DecodeError(format!("metadata: {e}")))? {
                Value::Object(m) => m,
                _ => return Err("metadata is not an object".into()),
            },
        };
        let result = match self.result {
            None | Some(Value::Null) => None,
            Some(v) => Some(decode_value(&v).map_err(|e| DecodeError(format!("result: {e}")))?),
        };
        let error = error_object(self.error, "error")?;
        let attempts = u32::try_from(self.attempts)
            .map_err(|_| DecodeError(format!("attempts out of range: {}", self.attempts)))?;
        let priority = crate::schedule::stored_priority(self.priority)
            .ok_or_else(|| DecodeError(format!("priority out of range: {}", self.priority)))?;
        Ok(Execution {
            id: self.id,
            namespace: self.namespace,
            task_name: self.task_name,
            status,
            payload,
            metadata,
            result,
            error,
            attempts,
            created_at: self.created_at,
            available_at: self.available_at,
            started_at: self.started_at,
            finished_at: self.finished_at,
            cancel_requested_at: self.cancel_requested_at,
            expires_at: self.expires_at,
            version: self.version,
            priority,
            fairness_key: self.fairness_key,
        })
    }
}

/// A nullable error-object value (SQL NULL and JSON `null` are both absent).
pub fn error_object(v: Option<Value>, col: &str) -> Result<Option<ErrorObject>, DecodeError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(v) => serde_json::from_value(v)
            .map(Some)
            .map_err(|e| DecodeError(format!("{col} is not an error object: {e}"))),
    }
}

/// The public error of an execution row that does not decode: `cannot decode execution
/// <label>: <reason>` (docs/semantics.md#undecodable-rows).
pub fn undecodable_execution(label: &str, reason: DecodeError) -> ExecutionError {
    ExecutionError::Undecodable(format!("cannot decode execution {label}: {reason}"))
}

/// What a windowed search adds to each row it returns (docs/semantics.md#search-window):
/// whether the row matched, how many rows the window examined, and the row's list position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowMark {
    /// The row matched the residual condition.
    pub matched: bool,
    /// Rows the window examined.
    pub examined: i64,
    /// The row's list position.
    pub position: Cursor,
}

impl WindowMark {
    /// The mark read by `read`, or the public error naming the reason it does not decode.
    pub fn decoded(
        read: impl FnOnce() -> Result<WindowMark, DecodeError>,
    ) -> Result<WindowMark, ExecutionError> {
        read().map_err(|reason| {
            ExecutionError::Undecodable(format!("cannot decode a search window row: {reason}"))
        })
    }
}

/// The page of a windowed search from its rows in list order: each row's [`WindowMark`]
/// (`mark`), the executions of the matching rows (`decode`), and the position to go on from
/// when the window was full.
pub fn window_page<R>(
    rows: impl IntoIterator<Item = R>,
    window: u32,
    limit: usize,
    mark: impl Fn(&R) -> Result<WindowMark, ExecutionError>,
    decode: impl Fn(R) -> Result<Execution, ExecutionError>,
) -> Result<ExecutionPage, ExecutionError> {
    let mut matches = Vec::new();
    let mut boundary = None;
    for row in rows {
        let m = mark(&row)?;
        // A full window's rows all carry `w_rows = window`, so `boundary` ends as the last row
        // returned: the window's last row whenever `limit` or fewer rows matched (it is
        // returned after them); with more, the page is full and `from_window` ignores it.
        if m.examined >= i64::from(window) {
            boundary = Some(m.position);
        }
        if m.matched {
            matches.push(decode(row)?);
        }
    }
    Ok(ExecutionPage::from_window(matches, limit, boundary))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn execution_columns_are_counted_and_prefixed() {
        let plain: Vec<&str> = crate::execution_columns!("").split(", ").collect();
        assert_eq!(plain.len(), EXECUTION_COLUMN_COUNT);
        assert_eq!((plain[0], plain[15]), ("id", "version"));
        assert_eq!(
            crate::execution_columns!("e.").split(", ").nth(12),
            Some("e.cancel_requested_at")
        );
        assert_eq!((plain[16], plain[17]), ("priority", "fairness_key"));
        let defaults: Vec<&str> = crate::execution_columns!("e.", ", 5, NULL")
            .split(", ")
            .collect();
        assert_eq!(defaults.len(), EXECUTION_COLUMN_COUNT);
        assert_eq!((defaults[15], defaults[16]), ("e.version", "5"));
        assert_eq!(crate::execution_columns!("", "").split(", ").count(), 16);
    }

    fn stored() -> StoredExecution {
        let now = Utc::now();
        StoredExecution {
            id: Uuid::nil(),
            namespace: "ns".into(),
            task_name: "t".into(),
            status: "queued".into(),
            payload: None,
            metadata: None,
            result: Some(Value::Null),
            error: Some(Value::Null),
            attempts: 0,
            available_at: now,
            started_at: None,
            finished_at: None,
            cancel_requested_at: None,
            expires_at: None,
            created_at: now,
            version: 0,
            priority: 5,
            fairness_key: None,
        }
    }

    #[test]
    fn json_null_and_sql_null_are_both_absent() {
        let x = stored().into_execution().expect("decodes");
        assert_eq!((x.result, x.error, x.payload), (None, None, Value::Null));
        assert!(x.metadata.is_empty());
        assert_eq!(error_object(None, "error"), Ok(None));
    }

    #[test]
    fn a_bad_column_is_named() {
        let bad = StoredExecution {
            status: "nope".into(),
            ..stored()
        };
        assert_eq!(
            bad.into_execution().map(|_| ()),
            Err(DecodeError("unknown status 'nope'".into()))
        );
        let bad = StoredExecution {
            attempts: -1,
            ..stored()
        };
        assert_eq!(
            bad.into_execution().map(|_| ()),
            Err(DecodeError("attempts out of range: -1".into()))
        );
        let bad = StoredExecution {
            priority: 10,
            ..stored()
        };
        assert_eq!(
            bad.into_execution().map(|_| ()),
            Err(DecodeError("priority out of range: 10".into()))
        );
        let bad = StoredExecution {
            metadata: Some(Value::from(1)),
            ..stored()
        };
        assert_eq!(
            bad.into_execution().map(|_| ()),
            Err(DecodeError("metadata is not an object".into()))
        );
    }
}
