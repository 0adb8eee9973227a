//! Classification of driver errors into [`BackendError`](onestep_core::BackendError)s (docs/semantics.md#error-classification) and the crate's internal
//! operation error.
//!
//! Every message is redacted ([`crate::dsn::redact`]): it never carries the DSN or password.

use mysql_async::{DriverError, Error as DbError, IoError};
use onestep_core::store::tx::{Failure, TxError};
use onestep_core::{ConnectorKind, ExecutionError};

/// Backend label used in every [`BackendError`](onestep_core::BackendError) (docs/semantics.md#error-object `backend`).
pub const BACKEND: &str = "mysql";

/// MySQL/MariaDB server error codes the backend reacts to.
pub(crate) mod codes {
    /// `ER_DUP_ENTRY`: unique or primary key violation.
    pub const DUP_ENTRY: u16 = 1062;
    /// `ER_NO_SUCH_TABLE`.
    pub const NO_SUCH_TABLE: u16 = 1146;
    /// `ER_LOCK_WAIT_TIMEOUT`.
    pub const LOCK_WAIT_TIMEOUT: u16 = 1205;
    /// `ER_LOCK_DEADLOCK`.
    pub const DEADLOCK: u16 = 1213;
}

/// The error of one attempt at an operation, before it is turned into an [`ExecutionError`].
#[derive(Debug)]
pub(crate) enum OpError {
    /// The driver or server failed; classified by [`classify`].
    Db(DbError),
    /// The connection failed while COMMIT was in flight: the outcome is unknown.
    CommitUnknown(DbError),
    /// A domain outcome (stale lease, conflict, encoding…), returned as is.
    Domain(ExecutionError),
}

impl From<DbError> for OpError {
    fn from(e: DbError) -> Self {
        OpError::Db(e)
    }
}

impl From<ExecutionError> for OpError {
    fn from(e: ExecutionError) -> Self {
        OpError::Domain(e)
    }
}

/// Result alias for one attempt at an operation.
pub(crate) type OpResult<T> = Result<T, OpError>;

/// The server error code, if `e` is a server error.
pub(crate) fn server_code(e: &DbError) -> Option<u16> {
    match e {
        DbError::Server(s) => Some(s.code),
        _ => None,
    }
}

/// Classifies a driver error (docs/semantics.md#error-classification): connection problems are `disconnected`; deadlocks,
/// lock wait timeouts and other operational errors are `transient`; access/auth/unknown-database
/// are `misconfigured`; syntax and unknown-object errors are `permanent`.
pub fn classify(e: &DbError) -> ConnectorKind {
    match e {
        DbError::Io(IoError::Io(_)) => ConnectorKind::Disconnected,
        DbError::Driver(d) => match d {
            DriverError::ConnectionClosed
            | DriverError::PoolDisconnected
            | DriverError::PacketOutOfOrder
            | DriverError::UnexpectedPacket { .. } => ConnectorKind::Disconnected,
            DriverError::CantParseServerVersion { .. }
            | DriverError::UnknownAuthPlugin { .. }
            | DriverError::NoClientSslFlagFromServer
            | DriverError::CleartextPluginDisabled => ConnectorKind::Misconfigured,
            _ => ConnectorKind::Permanent,
        },
        DbError::Url(_) => ConnectorKind::Misconfigured,
        DbError::Server(s) => classify_server(s.code, &s.message),
        DbError::Other(_) => ConnectorKind::Transient,
    }
}

fn classify_server(code: u16, message: &str) -> ConnectorKind {
    let m = message.to_ascii_lowercase();
    match code {
        1053 | 1077 | 1152 | 1158..=1161 | 1927 | 2006 | 2013 | 4031 => {
            return ConnectorKind::Disconnected;
        }
        codes::DEADLOCK | codes::LOCK_WAIT_TIMEOUT | 3572 | 1637 => {
            return ConnectorKind::Transient;
        }
        // Operational states that pass (docs/semantics.md#error-classification): the server is
        // read-only for now (a failover, 1290 `--read-only`, 1792 read-only transaction, 1836
        // MariaDB read-only replica), the statement was interrupted or hit a statement time limit
        // (1317, MySQL 3024, MariaDB 1969), the disk or a table is full (1021, 1114).
        1290 | 1792 | 1836 | 1317 | 3024 | 1969 | 1021 | 1114 => {
            return ConnectorKind::Transient;
        }
        1040 | 1203 | 1226 => return ConnectorKind::Throttled,
        1044 | 1045 | 1049 | 1251 | 1698 | 2059 | 1142 | 1143 | 1227 => {
            return ConnectorKind::Misconfigured;
        }
        1054 | 1064 | 1109 | 1146 | 1149 => return ConnectorKind::Permanent,
        _ => {}
    }
    if m.contains("server has gone away")
        || m.contains("lost connection")
        || m.contains("connection refused")
    {
        ConnectorKind::Disconnected
    } else if m.contains("lock wait timeout") || m.contains("deadlock found") {
        ConnectorKind::Transient
    } else if m.contains("access denied")
        || m.contains("unknown database")
        || m.contains("authentication")
    {
        ConnectorKind::Misconfigured
    } else if m.contains("no such table")
        || m.contains("unknown table")
        || m.contains("unknown column")
        || m.contains("syntax error")
    {
        ConnectorKind::Permanent
    } else {
        // Constraint violations, data errors: retrying the same statement cannot help.
        ConnectorKind::Permanent
    }
}

/// True for failures that leave nothing half-done and are worth repeating: deadlocks, lock wait
/// timeouts, and connection losses before COMMIT.
pub(crate) fn is_retryable_before_commit(e: &DbError) -> bool {
    !matches!(e, DbError::Driver(DriverError::PoolDisconnected))
        && matches!(
            classify(e),
            ConnectorKind::Transient | ConnectorKind::Disconnected
        )
}

// backend_error(operation, kind, message, secrets): the public error, redacted.
onestep_core::backend_error_fn!(BACKEND);

/// How the shared transaction runner (`onestep_core::store::tx`) reads an [`OpError`].
impl TxError for OpError {
    const BACKEND: &'static str = BACKEND;

    fn is_retryable_before_commit(&self) -> bool {
        matches!(self, OpError::Db(db) if is_retryable_before_commit(db))
    }

    fn commit_unknown(&self) -> Option<&dyn std::fmt::Display> {
        match self {
            OpError::CommitUnknown(db) => Some(db),
            _ => None,
        }
    }

    fn ambiguous(message: &str) -> Self {
        OpError::CommitUnknown(DbError::Other(message.into()))
    }

    fn into_failure(self) -> Failure {
        match self {
            OpError::Domain(d) => Failure::Domain(d),
            OpError::Db(db) => Failure::Driver(classify(&db), db.to_string()),
            OpError::CommitUnknown(db) => Failure::CommitUnknown(db.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_codes_are_classified() {
        assert_eq!(
            classify_server(1213, "Deadlock found"),
            ConnectorKind::Transient
        );
        assert_eq!(
            classify_server(1205, "Lock wait timeout"),
            ConnectorKind::Transient
        );
        assert_eq!(
            classify_server(1045, "Access denied"),
            ConnectorKind::Misconfigured
        );
        assert_eq!(
            classify_server(1146, "Table x doesn't exist"),
            ConnectorKind::Permanent
        );
        assert_eq!(
            classify_server(2013, "Lost connection"),
            ConnectorKind::Disconnected
        );
        assert_eq!(
            classify_server(9999, "MySQL server has gone away"),
            ConnectorKind::Disconnected
        );
        for (code, message) in [
            (
                1290,
                "The MySQL server is running with the --read-only option",
            ),
            (1792, "Cannot execute statement in a READ ONLY transaction"),
            (1836, "Running in read-only mode"),
            (1317, "Query execution was interrupted"),
            (
                3024,
                "Query execution was interrupted, maximum statement execution time exceeded",
            ),
            (
                1969,
                "Query execution was interrupted (max_statement_time exceeded)",
            ),
            (1021, "Disk full"),
            (1114, "The table 'x' is full"),
        ] {
            assert_eq!(
                classify_server(code, message),
                ConnectorKind::Transient,
                "{code}"
            );
        }
        // A constraint violation stays permanent: the same statement fails the same way.
        assert_eq!(
            classify_server(1062, "Duplicate entry 'k' for key 'uq'"),
            ConnectorKind::Permanent
        );
    }
}
