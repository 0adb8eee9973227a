//! Adapts the wasm runtime's [`Handler`] to the core [`TaskRunner`] port: builds the WIT
//! context, bridges the worker's cancellation token to the runtime's cancel handle, and maps the
//! runtime's outcome (data vs trap) to a [`RunOutcome`] (architecture: outcomes are data; the
//! worker never guesses from strings).

use std::time::Duration;

use async_trait::async_trait;
use onestep_core::retry::FailureKind;
use onestep_core::runner::{Invocation, RunFailure, RunOutcome, TaskRunner};
use onestep_wasm::{CancelHandle, Handler, InvocationContext, Outcome, SandboxSettings, TrapKind};
use tokio_util::sync::CancellationToken;

/// Runs one task's handler component in its sandbox.
pub struct WasmTaskRunner {
    handler: Handler,
    sandbox: SandboxSettings,
}

impl WasmTaskRunner {
    /// A runner for `handler` with the task's `sandbox`.
    pub fn new(handler: Handler, sandbox: SandboxSettings) -> Self {
        WasmTaskRunner { handler, sandbox }
    }
}

#[async_trait]
impl TaskRunner for WasmTaskRunner {
    async fn run(&self, invocation: Invocation, cancel: CancellationToken) -> RunOutcome {
        let ctx = InvocationContext {
            execution_id: invocation.execution_id.to_string(),
            attempt_id: invocation.attempt_id.to_string(),
            attempt: invocation.attempt_no,
            task_name: invocation.task_name.clone(),
            namespace: invocation.namespace.clone(),
            worker_id: invocation.worker_id.clone(),
            metadata_json: serde_json::Value::Object(invocation.metadata.clone()).to_string(),
        };
        let payload = invocation.payload.to_string();
        let handle = CancelHandle::new();
        if cancel.is_cancelled() {
            handle.cancel();
        }
        let call = self.handler.invoke(
            &self.sandbox,
            ctx,
            &payload,
            handle.clone(),
            invocation.timeout,
        );
        tokio::pin!(call);
        let outcome = tokio::select! {
            outcome = &mut call => outcome,
            _ = cancel.cancelled() => {
                handle.cancel();
                call.await
            }
        };
        map_outcome(outcome)
    }
}

fn failure(
    kind: FailureKind,
    exception_type: &str,
    retryable: bool,
    message: String,
) -> RunOutcome {
    RunOutcome::Failed(RunFailure {
        kind,
        exception_type: exception_type.to_owned(),
        retryable,
        retry_after_s: None,
        message,
    })
}

/// Maps the runtime's outcome to the worker's: handler errors keep their retryability and
/// requested delay; a timeout is kind `timeout` (`TimeoutError`); a cancel is
/// [`RunOutcome::Cancelled`]; other traps and host errors are retryable failures of kind
/// `error` whose `exception_type` names the trap.
pub fn map_outcome(outcome: Outcome) -> RunOutcome {
    match outcome {
        Outcome::Succeeded(text) => match serde_json::from_str(&text) {
            Ok(value) => RunOutcome::Succeeded(value),
            Err(e) => failure(
                FailureKind::Error,
                "InvalidOutput",
                false,
                format!("handler output is not JSON: {e}"),
            ),
        },
        Outcome::HandlerError {
            retryable,
            message,
            retry_after,
        } => RunOutcome::Failed(RunFailure {
            kind: FailureKind::Error,
            exception_type: "HandlerError".into(),
            retryable,
            retry_after_s: retry_after.map(|d: Duration| d.as_secs_f64()),
            message,
        }),
        Outcome::Trapped { kind } => match kind {
            TrapKind::Cancelled => RunOutcome::Cancelled,
            TrapKind::Timeout => failure(
                FailureKind::Timeout,
                "TimeoutError",
                true,
                "handler exceeded timeout_s".into(),
            ),
            TrapKind::OutOfFuel => failure(
                FailureKind::Error,
                "OutOfFuel",
                true,
                "handler ran out of fuel".into(),
            ),
            TrapKind::MemoryLimit => failure(
                FailureKind::Error,
                "MemoryLimitExceeded",
                true,
                "handler exceeded memory_limit_bytes".into(),
            ),
            TrapKind::GuestPanic(msg) => failure(FailureKind::Error, "GuestPanic", true, msg),
            TrapKind::Other(msg) => failure(FailureKind::Error, "Trap", true, msg),
        },
        Outcome::HostError(e) => failure(FailureKind::Error, "HostError", true, e.to_string()),
    }
}
