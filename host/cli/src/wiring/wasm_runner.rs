//! Adapts the wasm runtime's [`Handler`] to the core [`TaskRunner`] port: loads a task's
//! component for its sandbox ([`load_task_handler`], shared by `onestep run` and `onestep
//! check`), builds the WIT context, bridges the worker's cancellation token to the runtime's
//! cancel handle, and maps the runtime's outcome (data vs trap) to a [`RunOutcome`] with its
//! retryability (docs/semantics.md#error-classification; architecture: outcomes are data; the
//! worker never guesses from strings).

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use async_trait::async_trait;
use onestep_config::TaskConfig;
use onestep_core::diagnostics::RunFacts;
use onestep_core::retry::FailureKind;
use onestep_core::runner::{Invocation, RunFailure, RunOutcome, TaskRunner};
use onestep_wasm::{
    CancelHandle, DurableSteps, Handler, InvocationContext, Outcome, Runtime, SandboxSettings,
    TrapKind,
};
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;

/// Loads `task`'s component into `runtime` for `sandbox` (compile through the compile cache, link
/// against the host's imports, check the handler export). `onestep run` quarantines the task
/// (docs/security.md#one-tenants-bad-deploy) and `onestep check` fails with this error, so both name the task, the file and, for a component
/// that cannot be linked, the missing import: `task 'x': cannot load /path/x.wasm: component
/// x.wasm cannot be linked: component imports instance `ns:pkg/iface`, but a matching
/// implementation was not found in the linker…`. Blocking and CPU-heavy on a cache miss.
pub(crate) fn load_task_handler(
    runtime: &Runtime,
    task: &TaskConfig,
    sandbox: &SandboxSettings,
) -> anyhow::Result<Handler> {
    runtime
        .load_for(&task.handler.component, sandbox)
        .with_context(|| {
            format!(
                "task '{}': cannot load {}",
                task.name,
                task.handler.component.display()
            )
        })
}

/// The build of a task's component that new attempts use.
struct Loaded {
    handler: Handler,
    /// The component's SHA-256, lower-case hex, recorded with every attempt.
    digest: String,
}

/// Runs one task's handler component in its sandbox. The component can be replaced while the
/// worker runs ([`Self::replace`], docs/cli.md#redeploying-a-component): an attempt keeps the
/// build it started with, new attempts take the new one. A runner may start without a build
/// ([`Self::unloaded`]: its task is quarantined, docs/security.md#one-tenants-bad-deploy) and
/// get one from a later reload.
pub(crate) struct WasmTaskRunner {
    loaded: std::sync::RwLock<Option<Arc<Loaded>>>,
    sandbox: SandboxSettings,
    /// Told of each attempt's trap, fuel, memory and guest log losses (docs/observability.md).
    metrics: Option<Arc<Metrics>>,
    /// The task's `handler.params` as JSON text, handed to `0.2.0` components in their context
    /// (docs/configuration.md#tasks).
    params_json: String,
    /// The fleet-wide buckets of the sandbox's outbound rate limits (the task's source's
    /// backend, docs/semantics.md#outbound-rate-limits), given to every build.
    buckets: Option<Arc<dyn onestep_core::rate::RateLimitStore>>,
    /// Where `0.3.0` components' durable steps are kept (the task's source's backend, or memory
    /// for `task run`), docs/steps.md.
    steps: Option<Arc<dyn onestep_core::steps::StepStore>>,
    /// "Now" of a sleep's wake time (docs/steps.md#sleep): the system clock.
    clock: onestep_core::time::SharedClock,
}

impl WasmTaskRunner {
    /// A runner for `handler` with the task's `sandbox`. The handler's output text may be at most
    /// `max_result_bytes` long (the task's source's limit): a longer one is refused before it is
    /// parsed (docs/semantics.md#size-limits).
    pub(crate) fn new(handler: Handler, sandbox: SandboxSettings, max_result_bytes: usize) -> Self {
        let runner = Self::unloaded(sandbox, max_result_bytes);
        runner.replace(handler);
        runner
    }

    /// A runner with no build yet, for a task whose component could not be loaded (its task is
    /// quarantined, so nothing is claimed for it); [`Self::replace`] gives it one.
    pub(crate) fn unloaded(sandbox: SandboxSettings, max_result_bytes: usize) -> Self {
        let sandbox = SandboxSettings {
            result_limit_bytes: Some(u64::try_from(max_result_bytes).unwrap_or(u64::MAX)),
            ..sandbox
        };
        WasmTaskRunner {
            loaded: std::sync::RwLock::new(None),
            sandbox,
            metrics: None,
            params_json: "{}".to_owned(),
            buckets: None,
            steps: None,
            clock: Arc::new(onestep_core::time::SystemClock),
        }
    }

    fn current(&self) -> Option<Arc<Loaded>> {
        self.loaded
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The SHA-256 (lower-case hex) of the build new attempts use, `None` without a build.
    pub(crate) fn digest(&self) -> Option<String> {
        self.current().map(|l| l.digest.clone())
    }

    /// The sandbox the task's component runs in (what a replacement must load for).
    pub(crate) fn sandbox(&self) -> &SandboxSettings {
        &self.sandbox
    }

    /// Makes `handler` the build of new attempts (in-flight attempts finish on theirs); it keeps
    /// the task's log rate. Returns the previous digest (`None`: the runner had no build).
    pub(crate) fn replace(&self, handler: Handler) -> Option<String> {
        let handler = match &self.buckets {
            Some(store) => handler.with_outbound_rate_limits(Arc::clone(store)),
            None => handler,
        };
        let mut slot = self.loaded.write().unwrap_or_else(|p| p.into_inner());
        let (handler, old) = match slot.as_ref() {
            Some(old) => (
                handler.keeping_log_rate_of(&old.handler),
                Some(old.digest.clone()),
            ),
            None => (handler, None),
        };
        *slot = Some(Arc::new(Loaded {
            digest: handler.digest_hex(),
            handler,
        }));
        old
    }

    /// Hands `params` (the task's `handler.params`) to every attempt.
    pub(crate) fn with_params(
        mut self,
        params: &serde_json::Map<String, serde_json::Value>,
    ) -> Self {
        self.params_json = serde_json::Value::Object(params.clone()).to_string();
        self
    }

    /// Draws the tokens of the sandbox's outbound rate limits from `store` (the task's source's
    /// backend, shared by the fleet), for the current build and every later one.
    pub(crate) fn with_outbound_rate_limits(
        mut self,
        store: Arc<dyn onestep_core::rate::RateLimitStore>,
    ) -> Self {
        self.buckets = Some(store);
        if let Some(loaded) = self.current() {
            self.replace(loaded.handler.clone());
        }
        self
    }

    /// Keeps the durable steps of every attempt in `store`, fenced by the attempt's lease
    /// (docs/steps.md).
    pub(crate) fn with_steps(mut self, store: Arc<dyn onestep_core::steps::StepStore>) -> Self {
        self.steps = Some(store);
        self
    }

    /// Records every attempt's wasm figures in `metrics`.
    pub(crate) fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
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
            params_json: self.params_json.clone(),
            journal: invocation.journal.clone(),
            steps: self.steps.as_ref().map(|store| DurableSteps {
                store: Arc::clone(store),
                lease: onestep_core::execution::LeaseRef {
                    execution_id: invocation.execution_id,
                    attempt_id: invocation.attempt_id,
                    lease_token: invocation.lease_token,
                },
                clock: Arc::clone(&self.clock),
            }),
        };
        let payload = invocation.payload.to_string();
        let handle = CancelHandle::new();
        if cancel.is_cancelled() {
            handle.cancel();
        }
        let Some(loaded) = self.current() else {
            // Not reached: a task without a build is quarantined and claims nothing.
            return failure(
                FailureKind::Error,
                "HostError",
                true,
                format!(
                    "task '{}': no build of its component is loaded",
                    invocation.task_name
                ),
            );
        };
        let call = loaded.handler.invoke_report(
            &self.sandbox,
            ctx,
            &payload,
            handle.clone(),
            invocation.timeout,
        );
        tokio::pin!(call);
        let report = tokio::select! {
            report = &mut call => report,
            _ = cancel.cancelled() => {
                handle.cancel();
                call.await
            }
        };
        if let Some(m) = &self.metrics {
            m.record_wasm(&invocation.task_name, &report);
        }
        if let Some(journal) = &invocation.journal {
            journal.record_facts(RunFacts {
                trap_kind: trap_kind(&report.outcome).map(str::to_owned),
                component_digest: Some(loaded.digest.clone()),
                fuel_consumed: report.fuel_consumed,
                peak_memory_bytes: Some(report.peak_memory_bytes),
            });
        }
        map_outcome(report.outcome)
    }
}

/// The trap kind attempt diagnostics record (docs/observability.md#attempt-diagnostics).
pub(crate) fn trap_kind(outcome: &Outcome) -> Option<&'static str> {
    match outcome {
        Outcome::Trapped { kind } => Some(match kind {
            TrapKind::Cancelled => "cancelled",
            TrapKind::Timeout => "timeout",
            TrapKind::OutOfFuel => "out_of_fuel",
            TrapKind::MemoryLimit => "memory_limit",
            TrapKind::GuestPanic(_) => "panic",
            TrapKind::Other(_) => "trap",
        }),
        _ => None,
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

/// Maps the runtime's outcome to the worker's (docs/semantics.md#error-classification):
///
/// * handler errors keep their own retryability and requested delay;
/// * a timeout is kind `timeout` (`TimeoutError`), retryable through the policy;
/// * a cancel is [`RunOutcome::Cancelled`], a sleep [`RunOutcome::Parked`] (docs/steps.md#sleep);
/// * a host error (`HostError`: the host could not run the handler, e.g. a shared pool slot was
///   exhausted) is retryable: another attempt may find the host in a better state;
/// * deterministic guest failures are not retryable, because the same component given the same
///   payload fails the same way again: the memory limit (`MemoryLimitExceeded`), fuel
///   exhaustion (`OutOfFuel`), a panic (`GuestPanic`), any other trap (`Trap`), output that is
///   not JSON (`InvalidOutput`) and output over the result limit
///   ([`RunOutcome::ResultTooLarge`], which the worker fails with `ExecutionEncodingError`).
pub(crate) fn map_outcome(outcome: Outcome) -> RunOutcome {
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
        Outcome::OutputTooLarge { bytes, .. } => RunOutcome::ResultTooLarge {
            bytes: usize::try_from(bytes).unwrap_or(usize::MAX),
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
                false,
                "handler ran out of fuel".into(),
            ),
            TrapKind::MemoryLimit => failure(
                FailureKind::Error,
                "MemoryLimitExceeded",
                false,
                "handler exceeded memory_limit_bytes".into(),
            ),
            TrapKind::GuestPanic(msg) => failure(FailureKind::Error, "GuestPanic", false, msg),
            TrapKind::Other(msg) => failure(FailureKind::Error, "Trap", false, msg),
        },
        Outcome::HostError(e) => failure(FailureKind::Error, "HostError", true, e.to_string()),
        Outcome::Parked { wake_at } => RunOutcome::Parked { wake_at },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use onestep_wasm::InvokeError;

    /// What the worker needs from a failure: kind, exception type, retryable.
    fn classified(outcome: Outcome) -> Option<(FailureKind, String, bool)> {
        match map_outcome(outcome) {
            RunOutcome::Failed(f) => Some((f.kind, f.exception_type, f.retryable)),
            _ => None,
        }
    }

    #[test]
    fn outcomes_are_classified_for_the_retry_policy() {
        use FailureKind::{Error, Timeout};
        let trap = |kind| Outcome::Trapped { kind };
        let handler_error = |retryable| Outcome::HandlerError {
            retryable,
            message: "m".into(),
            retry_after: None,
        };
        let table: Vec<(&str, Outcome, FailureKind, &str, bool)> = vec![
            // Deterministic guest failures: the same attempt would fail the same way again.
            (
                "memory limit",
                trap(TrapKind::MemoryLimit),
                Error,
                "MemoryLimitExceeded",
                false,
            ),
            (
                "out of fuel",
                trap(TrapKind::OutOfFuel),
                Error,
                "OutOfFuel",
                false,
            ),
            (
                "panic",
                trap(TrapKind::GuestPanic("p".into())),
                Error,
                "GuestPanic",
                false,
            ),
            (
                "other trap",
                trap(TrapKind::Other("unreachable".into())),
                Error,
                "Trap",
                false,
            ),
            (
                "invalid output",
                Outcome::Succeeded("{".into()),
                Error,
                "InvalidOutput",
                false,
            ),
            // Time and the host: another attempt may succeed, the policy decides.
            (
                "timeout",
                trap(TrapKind::Timeout),
                Timeout,
                "TimeoutError",
                true,
            ),
            (
                "host error",
                Outcome::HostError(InvokeError::Instantiation("pool".into())),
                Error,
                "HostError",
                true,
            ),
            (
                "sandbox host error",
                Outcome::HostError(InvokeError::Sandbox("preopen".into())),
                Error,
                "HostError",
                true,
            ),
            // Handler errors keep the handler's own flag.
            (
                "retryable handler error",
                handler_error(true),
                Error,
                "HandlerError",
                true,
            ),
            (
                "fatal handler error",
                handler_error(false),
                Error,
                "HandlerError",
                false,
            ),
        ];
        for (case, outcome, kind, exception_type, retryable) in table {
            assert_eq!(
                classified(outcome),
                Some((kind, exception_type.to_owned(), retryable)),
                "{case}"
            );
        }
    }

    #[test]
    fn other_outcomes_are_not_failures() {
        assert_eq!(
            map_outcome(Outcome::Succeeded("[1]".into())),
            RunOutcome::Succeeded(serde_json::json!([1]))
        );
        assert_eq!(
            map_outcome(Outcome::Trapped {
                kind: TrapKind::Cancelled
            }),
            RunOutcome::Cancelled
        );
        assert_eq!(
            map_outcome(Outcome::OutputTooLarge {
                bytes: 30_000_000,
                limit: 1_048_576
            }),
            RunOutcome::ResultTooLarge { bytes: 30_000_000 }
        );
    }
}
