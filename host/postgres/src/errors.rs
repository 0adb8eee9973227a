//! Classification of driver and pool errors into [`BackendError`](onestep_core::BackendError)s
//! (docs/semantics.md#error-classification, docs/postgres.md#error-classification) and the
//! crate's internal operation error.
//!
//! Every message is redacted ([`crate::dsn::redact`]): it never carries the DSN or password.

use onestep_core::store::tx::{Failure, TxError};
use onestep_core::{ConnectorKind, ExecutionError};
use tokio_postgres::error::SqlState;

/// Backend label used in every [`BackendError`](onestep_core::BackendError) (docs/semantics.md#error-object `backend`).
pub const BACKEND: &str = "postgres";

/// The error of one attempt at an operation, before it is turned into an [`ExecutionError`].
#[derive(Debug)]
pub(crate) enum OpError {
    /// The driver or server failed; classified by [`classify`].
    Db(tokio_postgres::Error),
    /// The pool could not hand out a connection (timeout, closed, connect failure).
    Pool(ConnectorKind, String),
    /// The connection failed while COMMIT was in flight: the outcome is unknown.
    CommitUnknown(String),
    /// A domain outcome (stale lease, conflict, encoding…), returned as is.
    Domain(ExecutionError),
}

impl From<tokio_postgres::Error> for OpError {
    fn from(e: tokio_postgres::Error) -> Self {
        OpError::Db(e)
    }
}

impl From<ExecutionError> for OpError {
    fn from(e: ExecutionError) -> Self {
        OpError::Domain(e)
    }
}

impl From<deadpool_postgres::PoolError> for OpError {
    fn from(e: deadpool_postgres::PoolError) -> Self {
        use deadpool_postgres::PoolError;
        match e {
            PoolError::Backend(db) => OpError::Db(db),
            PoolError::Timeout(_) => OpError::Pool(
                ConnectorKind::Throttled,
                "timed out waiting for a pooled connection".into(),
            ),
            PoolError::Closed => {
                OpError::Pool(ConnectorKind::Disconnected, "the pool is closed".into())
            }
            other => OpError::Pool(ConnectorKind::Misconfigured, other.to_string()),
        }
    }
}

/// Result alias for one attempt at an operation.
pub(crate) type OpResult<T> = Result<T, OpError>;

/// Classifies a driver error (docs/postgres.md#error-classification) from its SQLSTATE, and
/// without one (the connection failed) as `disconnected`.
pub fn classify(e: &tokio_postgres::Error) -> ConnectorKind {
    match e.code() {
        Some(code) => classify_state(code),
        None if e.is_closed() => ConnectorKind::Disconnected,
        None => {
            let m = e.to_string().to_ascii_lowercase();
            if m.contains("password") || m.contains("authentication") || m.contains("tls") {
                ConnectorKind::Misconfigured
            } else if m.contains("error deserializing") || m.contains("error serializing") {
                ConnectorKind::Permanent
            } else {
                // Connect, I/O and timeout failures carry no SQLSTATE.
                ConnectorKind::Disconnected
            }
        }
    }
}

/// The connector kind of a SQLSTATE.
pub fn classify_state(code: &SqlState) -> ConnectorKind {
    let s = code.code();
    if *code == SqlState::T_R_SERIALIZATION_FAILURE
        || *code == SqlState::T_R_DEADLOCK_DETECTED
        || *code == SqlState::LOCK_NOT_AVAILABLE
        || *code == SqlState::QUERY_CANCELED
        || *code == SqlState::READ_ONLY_SQL_TRANSACTION
        || *code == SqlState::DISK_FULL
        || *code == SqlState::OUT_OF_MEMORY
        || *code == SqlState::T_R_STATEMENT_COMPLETION_UNKNOWN
        || *code == SqlState::IDLE_IN_TRANSACTION_SESSION_TIMEOUT
    {
        return ConnectorKind::Transient;
    }
    if *code == SqlState::ADMIN_SHUTDOWN
        || *code == SqlState::CRASH_SHUTDOWN
        || *code == SqlState::CANNOT_CONNECT_NOW
        || s.starts_with("08")
    {
        return ConnectorKind::Disconnected;
    }
    if *code == SqlState::TOO_MANY_CONNECTIONS || *code == SqlState::CONFIGURATION_LIMIT_EXCEEDED {
        return ConnectorKind::Throttled;
    }
    if s.starts_with("28")
        || *code == SqlState::INVALID_CATALOG_NAME
        || *code == SqlState::INSUFFICIENT_PRIVILEGE
    {
        return ConnectorKind::Misconfigured;
    }
    // Syntax, unknown objects, constraint and data errors: the same statement fails again.
    ConnectorKind::Permanent
}

/// True for failures that leave nothing half-done and are worth repeating: serialization
/// failures, deadlocks, lock timeouts, cancelled statements and connection losses before COMMIT.
pub(crate) fn is_retryable_before_commit(e: &OpError) -> bool {
    match e {
        OpError::Db(db) => matches!(
            classify(db),
            ConnectorKind::Transient | ConnectorKind::Disconnected
        ),
        OpError::Pool(kind, _) => *kind == ConnectorKind::Disconnected,
        OpError::CommitUnknown(_) | OpError::Domain(_) => false,
    }
}

// backend_error(operation, kind, message, secrets): the public error, redacted.
onestep_core::backend_error_fn!(BACKEND);

/// The message of a driver error: the server's own message and SQLSTATE when there is one.
pub(crate) fn db_message(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(d) => format!("{} (SQLSTATE {})", d.message(), d.code().code()),
        None => {
            let mut m = e.to_string();
            let mut src = std::error::Error::source(e);
            while let Some(s) = src {
                m.push_str(": ");
                m.push_str(&s.to_string());
                src = s.source();
            }
            m
        }
    }
}

/// How the shared transaction runner (`onestep_core::store::tx`) reads an [`OpError`].
impl TxError for OpError {
    const BACKEND: &'static str = BACKEND;

    fn is_retryable_before_commit(&self) -> bool {
        is_retryable_before_commit(self)
    }

    fn commit_unknown(&self) -> Option<&dyn std::fmt::Display> {
        match self {
            OpError::CommitUnknown(m) => Some(m),
            _ => None,
        }
    }

    fn ambiguous(message: &str) -> Self {
        OpError::CommitUnknown(message.to_owned())
    }

    fn into_failure(self) -> Failure {
        match self {
            OpError::Domain(d) => Failure::Domain(d),
            OpError::Db(db) => Failure::Driver(classify(&db), db_message(&db)),
            OpError::Pool(kind, m) => Failure::Driver(kind, m),
            OpError::CommitUnknown(m) => Failure::CommitUnknown(m),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlstates_are_classified() {
        for (state, kind) in [
            ("40001", ConnectorKind::Transient),
            ("40P01", ConnectorKind::Transient),
            ("55P03", ConnectorKind::Transient),
            ("57014", ConnectorKind::Transient),
            ("25006", ConnectorKind::Transient),
            ("53100", ConnectorKind::Transient),
            ("57P01", ConnectorKind::Disconnected),
            ("57P02", ConnectorKind::Disconnected),
            ("57P03", ConnectorKind::Disconnected),
            ("08006", ConnectorKind::Disconnected),
            ("53300", ConnectorKind::Throttled),
            ("28P01", ConnectorKind::Misconfigured),
            ("3D000", ConnectorKind::Misconfigured),
            ("42501", ConnectorKind::Misconfigured),
            ("42P01", ConnectorKind::Permanent),
            ("42601", ConnectorKind::Permanent),
            ("23505", ConnectorKind::Permanent),
        ] {
            assert_eq!(classify_state(&SqlState::from_code(state)), kind, "{state}");
        }
    }
}
