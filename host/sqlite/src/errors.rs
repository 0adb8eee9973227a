//! Classification of SQLite errors into [`BackendError`](onestep_core::BackendError)s
//! (docs/semantics.md#error-classification, docs/sqlite.md#error-classification) and the
//! crate's internal operation error.
//!
//! `SQLITE_BUSY` and `SQLITE_LOCKED` (another process holds the write lock beyond
//! `busy_timeout`) are retried before COMMIT; a file that cannot be opened, is read-only or is
//! not a database is `misconfigured`; everything else repeats the same way (`permanent`).

use onestep_core::store::tx::{Failure, TxError};
use onestep_core::{ConnectorKind, ExecutionError};
use rusqlite::ErrorCode;

/// Backend label used in every [`BackendError`](onestep_core::BackendError).
pub const BACKEND: &str = "sqlite";

/// The error of one attempt at an operation, before it is turned into an [`ExecutionError`].
#[derive(Debug)]
pub(crate) enum OpError {
    /// The library failed; classified by [`classify`].
    Db(rusqlite::Error),
    /// The blocking task running the statement could not finish (runtime shutting down).
    Task(String),
    /// The connection pool is closed.
    Closed,
    /// A domain outcome (stale lease, conflict, encoding…), returned as is.
    Domain(ExecutionError),
}

impl From<rusqlite::Error> for OpError {
    fn from(e: rusqlite::Error) -> Self {
        OpError::Db(e)
    }
}

impl From<ExecutionError> for OpError {
    fn from(e: ExecutionError) -> Self {
        OpError::Domain(e)
    }
}

impl From<onestep_core::store::DecodeError> for OpError {
    fn from(e: onestep_core::store::DecodeError) -> Self {
        OpError::Domain(e.into())
    }
}

/// Result alias for one attempt at an operation.
pub(crate) type OpResult<T> = Result<T, OpError>;

/// The connector kind of a library error.
pub fn classify(e: &rusqlite::Error) -> ConnectorKind {
    match e.sqlite_error_code() {
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => ConnectorKind::Transient,
        Some(ErrorCode::OutOfMemory | ErrorCode::DiskFull | ErrorCode::SystemIoFailure) => {
            ConnectorKind::Transient
        }
        Some(
            ErrorCode::CannotOpen
            | ErrorCode::PermissionDenied
            | ErrorCode::ReadOnly
            | ErrorCode::NotADatabase
            | ErrorCode::DatabaseCorrupt
            | ErrorCode::AuthorizationForStatementDenied,
        ) => ConnectorKind::Misconfigured,
        _ => ConnectorKind::Permanent,
    }
}

/// True for failures that leave nothing half-done and are worth repeating: the write lock
/// held by another connection or process beyond `busy_timeout`.
pub(crate) fn is_retryable_before_commit(e: &OpError) -> bool {
    match e {
        OpError::Db(db) => matches!(
            db.sqlite_error_code(),
            Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
        ),
        OpError::Task(_) | OpError::Closed | OpError::Domain(_) => false,
    }
}

// backend_error(operation, kind, message, secrets): the public error, redacted.
onestep_core::backend_error_fn!(BACKEND);

impl TxError for OpError {
    const BACKEND: &'static str = BACKEND;

    fn is_retryable_before_commit(&self) -> bool {
        is_retryable_before_commit(self)
    }

    /// A failed SQLite COMMIT leaves the transaction rolled back (or still open, and then
    /// rolled back by us): the outcome is never unknown.
    fn commit_unknown(&self) -> Option<&dyn std::fmt::Display> {
        None
    }

    fn ambiguous(message: &str) -> Self {
        OpError::Task(message.to_owned())
    }

    fn into_failure(self) -> Failure {
        match self {
            OpError::Domain(d) => Failure::Domain(d),
            OpError::Db(db) => Failure::Driver(classify(&db), db.to_string()),
            OpError::Task(m) => Failure::Driver(ConnectorKind::Disconnected, m),
            OpError::Closed => {
                Failure::Driver(ConnectorKind::Disconnected, "the backend is closed".into())
            }
        }
    }
}

onestep_core::impl_domain_outcome!(OpError);

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(code: i32) -> rusqlite::Error {
        rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), None)
    }

    #[test]
    fn codes_are_classified() {
        assert_eq!(classify(&failure(5)), ConnectorKind::Transient); // BUSY
        assert_eq!(classify(&failure(6)), ConnectorKind::Transient); // LOCKED
        assert_eq!(classify(&failure(14)), ConnectorKind::Misconfigured); // CANTOPEN
        assert_eq!(classify(&failure(26)), ConnectorKind::Misconfigured); // NOTADB
        assert_eq!(classify(&failure(19)), ConnectorKind::Permanent); // CONSTRAINT
        assert!(is_retryable_before_commit(&OpError::Db(failure(5))));
        assert!(!is_retryable_before_commit(&OpError::Db(failure(19))));
    }
}
