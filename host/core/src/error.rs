//! Typed errors of the domain (docs/semantics.md#error-types) and of backends (docs/semantics.md#error-classification).

use std::fmt;

use uuid::Uuid;

use crate::error_object::ErrorObject;
use crate::status::ExecutionStatus;

/// Why a worker's lease is no longer authoritative (docs/semantics.md#lease-fencing). The `Display` texts are the reference's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StaleReason {
    /// `execution lease is no longer valid`: token, status or expiry no longer match.
    LeaseInvalid,
    /// `execution attempt is no longer valid`: the attempt row is no longer `running` with this token.
    AttemptInvalid,
    /// `execution does not exist`.
    ExecutionMissing,
}

impl fmt::Display for StaleReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StaleReason::LeaseInvalid => "execution lease is no longer valid",
            StaleReason::AttemptInvalid => "execution attempt is no longer valid",
            StaleReason::ExecutionMissing => "execution does not exist",
        })
    }
}

/// Classification of a storage/connector failure (docs/semantics.md#error-classification).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectorKind {
    /// Connection lost/refused/gone away; safe to retry after reconnecting.
    Disconnected,
    /// Deadlock, lock wait timeout, driver timeout or other operational error; safe to retry.
    Transient,
    /// The server asked us to slow down.
    Throttled,
    /// Access denied, unknown database, authentication, unsupported server, missing tables.
    Misconfigured,
    /// Syntax error, unknown column or table: retrying cannot help.
    Permanent,
    /// The outcome of the operation is unknown (e.g. the connection died during COMMIT).
    Uncertain,
}

impl ConnectorKind {
    /// Wire name used in the error object's `connector_kind` (docs/semantics.md#error-object).
    pub fn as_str(self) -> &'static str {
        match self {
            ConnectorKind::Disconnected => "disconnected",
            ConnectorKind::Transient => "transient",
            ConnectorKind::Throttled => "throttled",
            ConnectorKind::Misconfigured => "misconfigured",
            ConnectorKind::Permanent => "permanent",
            ConnectorKind::Uncertain => "uncertain",
        }
    }

    /// Retryable kinds are `disconnected`, `transient` and `throttled` (docs/semantics.md#error-classification), plus
    /// `uncertain`: the operation may have committed, and every operation is safe to repeat (a
    /// claim's unknown leases expire, heartbeats are idempotent, completions accept identical
    /// replays, submits resolve through the idempotency key).
    pub fn is_retryable(self) -> bool {
        matches!(
            self,
            ConnectorKind::Disconnected
                | ConnectorKind::Transient
                | ConnectorKind::Throttled
                | ConnectorKind::Uncertain
        )
    }
}

impl fmt::Display for ConnectorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A storage failure, already classified and redacted: `message` never carries a DSN or password.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendError {
    /// Backend label, e.g. `mysql`.
    pub backend: &'static str,
    /// Operation label, e.g. `open`, `fetch`, `heartbeat`, `ack`, `submit` (docs/semantics.md#error-object `operation`).
    pub operation: &'static str,
    /// How the failure is classified.
    pub kind: ConnectorKind,
    /// Redacted, human-readable cause (at most 500 characters).
    pub message: String,
}

impl fmt::Display for BackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} failed ({}): {}",
            self.backend, self.operation, self.kind, self.message
        )
    }
}

/// Every error a client or worker-side operation can return (docs/semantics.md#error-types).
#[derive(Debug, Clone, thiserror::Error)]
pub enum ExecutionError {
    /// A plain argument error (HTTP 422): the message names the field and the rule.
    #[error("{0}")]
    InvalidArgument(String),
    /// `result()` of an id absent from the client's namespace.
    #[error("execution {id} was not found")]
    NotFound {
        /// The id asked for.
        id: Uuid,
    },
    /// `result()` of a non-terminal execution.
    #[error("execution {id} is {status}")]
    NotReady {
        /// The id asked for.
        id: Uuid,
        /// Its current (non-terminal) status.
        status: ExecutionStatus,
    },
    /// `result()` of a failed execution; carries the structured error object.
    #[error("execution {id} failed")]
    Failed {
        /// The id asked for.
        id: Uuid,
        /// The stored error object, if any (boxed to keep `Result`s small).
        error: Option<Box<ErrorObject>>,
    },
    /// `result()` of a cancelled execution.
    #[error("execution {id} was cancelled")]
    Cancelled {
        /// The id asked for.
        id: Uuid,
    },
    /// `result()` of an expired execution.
    #[error("execution {id} expired")]
    Expired {
        /// The id asked for.
        id: Uuid,
    },
    /// `retry` of an execution that is not `failed`, `cancelled` or `expired`
    /// (docs/semantics.md#retrying-an-execution).
    #[error(
        "execution {id} is {status}; only failed, cancelled or expired executions can be retried"
    )]
    NotRetryable {
        /// The id asked for.
        id: Uuid,
        /// Its current status.
        status: ExecutionStatus,
    },
    /// Idempotency key reused with a different submission (docs/semantics.md#submission-digest).
    #[error("idempotency key was already used with a different submission")]
    Conflict {
        /// The id of the execution that already holds the key.
        existing_id: Uuid,
    },
    /// Unencodable value or size limit exceeded: the caller's input (docs/semantics.md#value-encoding).
    #[error("{0}")]
    Encoding(String),
    /// A stored row the backend cannot decode (bad JSON, unknown status, bad id): the store's
    /// fault, not the caller's; batches report it for that row alone
    /// (docs/semantics.md#undecodable-rows).
    #[error("{0}")]
    Undecodable(String),
    /// The worker's lease/attempt is no longer authoritative (docs/semantics.md#lease-fencing).
    #[error("{0}")]
    StaleLease(StaleReason),
    /// A new submission over its namespace's or fairness key's quota (docs/semantics.md#quotas):
    /// nothing was written; submitting again later may succeed.
    #[error("{0}")]
    QuotaExceeded(Box<crate::quota::QuotaRefusal>),
    /// The storage layer failed; see [`BackendError`].
    #[error("{0}")]
    Backend(BackendError),
}

impl ExecutionError {
    /// Shorthand for [`ExecutionError::InvalidArgument`].
    pub fn invalid(msg: impl Into<String>) -> Self {
        ExecutionError::InvalidArgument(msg.into())
    }

    /// True when repeating the operation may succeed (a retryable backend failure).
    pub fn is_transient(&self) -> bool {
        matches!(self, ExecutionError::Backend(b) if b.kind.is_retryable())
    }

    /// A stable machine code for APIs and CLIs (`invalid_argument`, `not_found`, …).
    pub fn code(&self) -> &'static str {
        match self {
            ExecutionError::InvalidArgument(_) => "invalid_argument",
            ExecutionError::NotFound { .. } => "not_found",
            ExecutionError::NotReady { .. } => "not_ready",
            ExecutionError::Failed { .. } => "failed",
            ExecutionError::Cancelled { .. } => "cancelled",
            ExecutionError::Expired { .. } => "expired",
            ExecutionError::NotRetryable { .. } => "not_retryable",
            ExecutionError::Conflict { .. } => "conflict",
            ExecutionError::QuotaExceeded(_) => "quota_exceeded",
            ExecutionError::Encoding(_) => "encoding_error",
            ExecutionError::Undecodable(_) => "undecodable_row",
            ExecutionError::StaleLease(_) => "stale_lease",
            ExecutionError::Backend(_) => "backend_error",
        }
    }
}

/// Result alias used across the domain.
pub type Result<T, E = ExecutionError> = std::result::Result<T, E>;

/// How far a claim moves on the `available_at` of a queued row it cannot decode, so that the row
/// does not hold a place at the head of the queue on every claim
/// (docs/semantics.md#undecodable-rows).
pub const UNDECODABLE_DEFER_S: f64 = 900.0;
