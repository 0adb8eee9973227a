//! The port through which a worker runs a handler (architecture: the worker sees only core
//! traits; the wasm runtime implements this port and the binary wires them together).

use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::retry::FailureKind;

/// Everything a handler receives for one attempt (docs/semantics.md#handler-input, plus the WIT `ctx`).
#[derive(Debug, Clone, PartialEq)]
pub struct Invocation {
    /// The execution id.
    pub execution_id: Uuid,
    /// The attempt id.
    pub attempt_id: Uuid,
    /// The attempt's lease token, which fences the attempt's step saves (docs/steps.md); nil
    /// when no lease is held (a run outside a worker).
    pub lease_token: Uuid,
    /// 1-based attempt number.
    pub attempt_no: u32,
    /// The task name.
    pub task_name: String,
    /// The namespace.
    pub namespace: String,
    /// The worker id holding the lease.
    pub worker_id: String,
    /// The decoded payload.
    pub payload: Value,
    /// The decoded metadata plus `onestep.execution = {id, attempt_id}` (docs/semantics.md#handler-input).
    pub metadata: Map<String, Value>,
    /// Wall-clock limit of the handler call (`timeout_s`), if any.
    pub timeout: Option<Duration>,
    /// Where the runner records the attempt's log lines, progress and run facts
    /// (docs/observability.md#attempt-diagnostics); `None` when nobody keeps them.
    pub journal: Option<crate::diagnostics::JournalHandle>,
}

/// How a handler run ended, as data (architecture: outcomes are data; traps are the host's).
#[derive(Debug, Clone, PartialEq)]
pub enum RunOutcome {
    /// The handler returned this result.
    Succeeded(Value),
    /// The handler returned a result of `bytes` bytes of text, more than the task's
    /// `max_result_bytes`: it was refused before it was decoded, and the attempt fails as an
    /// oversized result does (docs/semantics.md#size-limits).
    ResultTooLarge {
        /// Length of the handler's output text.
        bytes: usize,
    },
    /// The run failed. `retryable = false` means fail at once without consulting the policy.
    Failed(RunFailure),
    /// The run was stopped because the cancellation token fired.
    Cancelled,
    /// The handler slept (docs/steps.md#sleep): the attempt ends parked and the execution is
    /// claimable again at `wake_at`.
    Parked {
        /// When the execution may run again.
        wake_at: chrono::DateTime<chrono::Utc>,
    },
}

/// A failed run, classified for the error object (docs/semantics.md#error-object) and the retry policy (docs/semantics.md#retry-policies).
#[derive(Debug, Clone, PartialEq)]
pub struct RunFailure {
    /// `error` or `timeout` (drives `by_failure_kind`).
    pub kind: FailureKind,
    /// The error object's `exception_type`, e.g. `HandlerError`, `TimeoutError`, `OutOfFuel`,
    /// `MemoryLimitExceeded`, `GuestPanic`, `Trap`, `HostError`.
    pub exception_type: String,
    /// False for a handler's fatal error: the execution fails without retry.
    pub retryable: bool,
    /// A delay the handler asked for before the retry, in seconds (overrides the policy's).
    pub retry_after_s: Option<f64>,
    /// Human-readable message; goes to logs only, never into the stored row.
    pub message: String,
}

/// Runs handlers. Implementations must return promptly (well under 100 ms) after `cancel`
/// fires or `invocation.timeout` passes, and must never panic or take the worker down.
#[async_trait]
pub trait TaskRunner: Send + Sync {
    /// Runs one attempt.
    async fn run(&self, invocation: Invocation, cancel: CancellationToken) -> RunOutcome;
}
