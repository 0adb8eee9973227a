//! One invocation: fresh store + WASI context, instantiate, call `handle`,
//! race it against cancellation and the deadline, classify the result.

use std::sync::Arc;
use std::time::{Duration, Instant};
use wasmtime::{Store, Trap, UpdateDeadline};

use crate::bindings::{self, onestep::handler::types::HandlerError};
use crate::cancel::CancelHandle;
use crate::capture::{Capture, StreamKind};
use crate::context::{InvocationContext, LogIds};
use crate::guest_log::escape;
use crate::handles::OpenHandles;
use crate::http::{HttpTotals, OriginLimitTotals};
use crate::log_budget::{LogBudget, LogTotals};
use crate::outcome::{InvokeError, Outcome, TrapKind, panic_message};
use crate::runtime::Handler;
use crate::sandbox::build_wasi;
use crate::settings::SandboxSettings;
use crate::state::{Limits, State};
use crate::world::Pre;

/// An [`Outcome`] plus what the host observed while producing it.
#[derive(Debug, Clone)]
pub struct Report {
    /// What happened.
    pub outcome: Outcome,
    /// Captured stdout (at most `output_limit_bytes`, lossy UTF-8).
    pub stdout: String,
    /// Captured stderr (at most `output_limit_bytes`, lossy UTF-8).
    pub stderr: String,
    /// Bytes of stdout + stderr dropped because of the capture limits.
    pub output_dropped_bytes: u64,
    /// What the guest's log lines (log, progress, stdout/stderr lines) and
    /// error message cost and what was dropped or cut
    /// (docs/security.md#logs). Lines not logged are still in
    /// `stdout`/`stderr`.
    pub log: LogTotals,
    /// What the attempt's outbound HTTP requests did (docs/security.md#network).
    pub http: HttpTotals,
    /// What its requests to origins with a fleet-wide rate limit did with their buckets
    /// (tokens, waits, 429 pauses; docs/semantics.md#outbound-rate-limits), one entry per
    /// origin used.
    pub rate_limits: Vec<OriginLimitTotals>,
    /// What its durable step calls did (`0.3.0` components; docs/steps.md).
    pub steps: crate::durable::StepCounts,
    /// Fuel consumed, when metering is on.
    pub fuel_consumed: Option<u64>,
    /// Peak total linear memory of the guest in bytes.
    pub peak_memory_bytes: u64,
    /// Wall-clock time of the invocation (store creation to result).
    pub elapsed: Duration,
    /// Sleeps (`0.3.0`'s `durable`) the guest reached again after their wake time: the
    /// execution resumed past them (docs/steps.md#sleep).
    pub wakes: u32,
}

/// When the epoch callback must stop the guest.
struct StoreLimits {
    cancel: CancelHandle,
    grace: Duration,
    deadline: Option<Instant>,
}

/// How the race between the call, the cancel signal and the deadline ended.
enum Race {
    Done(Stage),
    Cancelled,
    TimedOut,
}

/// Result of the guest work, keeping instantiation and call apart.
enum Stage {
    InstantiateFailed(wasmtime::Error),
    CallFailed(wasmtime::Error),
    Returned(Result<String, HandlerError>),
}

impl Handler {
    /// Runs the handler once in a fresh sandbox and returns its [`Outcome`].
    /// See [`invoke_report`](Self::invoke_report).
    pub async fn invoke(
        &self,
        sandbox: &SandboxSettings,
        ctx: InvocationContext,
        payload_json: &str,
        cancel: CancelHandle,
        timeout: Option<Duration>,
    ) -> Outcome {
        self.invoke_report(sandbox, ctx, payload_json, cancel, timeout)
            .await
            .outcome
    }

    /// Runs the handler once: a new `Store` and WASI context built from
    /// `sandbox`, instantiation from the prepared `InstancePre`, then
    /// `handle(ctx, payload)`. The deadline is `timeout` (wall clock), if
    /// any. `cancel` stops the guest (after `sandbox.cancel_grace`).
    /// The store is dropped before returning, whatever happened. Never
    /// panics on guest behaviour; host problems come back as
    /// [`Outcome::HostError`].
    pub async fn invoke_report(
        &self,
        sandbox: &SandboxSettings,
        ctx: InvocationContext,
        payload_json: &str,
        cancel: CancelHandle,
        timeout: Option<Duration>,
    ) -> Report {
        let started = Instant::now();
        let ids = Arc::new(LogIds::from_ctx(&ctx));
        let budget = LogBudget::new(sandbox, self.log_rate.clone(), ids.clone());
        let stdout = Capture::new(
            StreamKind::Stdout,
            sandbox.output_limit_bytes,
            ids.clone(),
            budget.clone(),
        );
        let stderr = Capture::new(
            StreamKind::Stderr,
            sandbox.output_limit_bytes,
            ids.clone(),
            budget.clone(),
        );
        let report = |outcome, fuel, peak, http, rate_limits, steps, wakes| Report {
            outcome,
            rate_limits,
            steps,
            stdout: stdout.text(),
            stderr: stderr.text(),
            output_dropped_bytes: stdout.dropped() + stderr.dropped(),
            log: budget.totals(),
            http,
            fuel_consumed: fuel,
            peak_memory_bytes: peak,
            elapsed: started.elapsed(),
            wakes,
        };

        let deadline = deadline(started, timeout);
        let grace = sandbox.cancel_grace;
        if cancel.is_cancelled() {
            return report(
                trapped(TrapKind::Cancelled),
                None,
                0,
                HttpTotals::default(),
                Vec::new(),
                crate::durable::StepCounts::default(),
                0,
            );
        }
        let limits = StoreLimits {
            cancel: cancel.clone(),
            grace,
            deadline,
        };
        let mut store = match self.new_store(
            sandbox,
            ids.clone(),
            limits,
            (&stdout, &stderr, &budget),
            ctx.steps.clone(),
        ) {
            Ok(s) => s,
            Err(e) => {
                return report(
                    Outcome::HostError(e),
                    None,
                    0,
                    HttpTotals::default(),
                    Vec::new(),
                    crate::durable::StepCounts::default(),
                    0,
                );
            }
        };
        let fuel_start = self.fuel_budget(sandbox);

        let payload = payload_json.to_string();
        let race = {
            let pre = &self.pre;
            let store_ref = &mut store;
            let work = async move {
                match pre {
                    Pre::V1(pre) => {
                        let handler = match pre.instantiate_async(&mut *store_ref).await {
                            Ok(h) => h,
                            Err(e) => return Stage::InstantiateFailed(e),
                        };
                        let wit_ctx = v1_context(ctx);
                        match handler
                            .call_handle(&mut *store_ref, &wit_ctx, &payload)
                            .await
                        {
                            Ok(r) => Stage::Returned(r),
                            Err(e) => Stage::CallFailed(e),
                        }
                    }
                    Pre::V2(pre) => {
                        let handler = match pre.instantiate_async(&mut *store_ref).await {
                            Ok(h) => h,
                            Err(e) => return Stage::InstantiateFailed(e),
                        };
                        let wit_ctx = v2_context(ctx);
                        match handler
                            .call_handle(&mut *store_ref, &wit_ctx, &payload)
                            .await
                        {
                            Ok(r) => Stage::Returned(r.map_err(|e| HandlerError {
                                retryable: e.retryable,
                                message: e.message,
                                retry_after_ms: e.retry_after_ms,
                            })),
                            Err(e) => Stage::CallFailed(e),
                        }
                    }
                    Pre::V3(pre) => {
                        let handler = match pre.instantiate_async(&mut *store_ref).await {
                            Ok(h) => h,
                            Err(e) => return Stage::InstantiateFailed(e),
                        };
                        let wit_ctx = v3_context(ctx);
                        match handler
                            .call_handle(&mut *store_ref, &wit_ctx, &payload)
                            .await
                        {
                            Ok(r) => Stage::Returned(r.map_err(|e| HandlerError {
                                retryable: e.retryable,
                                message: e.message,
                                retry_after_ms: e.retry_after_ms,
                            })),
                            Err(e) => Stage::CallFailed(e),
                        }
                    }
                }
            };
            let sleep = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d.into()).await,
                    None => std::future::pending().await,
                }
            };
            // The guest future only makes progress when polled; dropping it
            // (when cancel or the timer wins) stops the guest even while it is
            // blocked in a host call. Guest code yields at every epoch tick.
            let stop = async {
                cancel.cancelled().await;
                if grace > Duration::ZERO {
                    tokio::time::sleep(grace).await;
                }
            };
            tokio::select! {
                biased;
                _ = stop => Race::Cancelled,
                _ = sleep => Race::TimedOut,
                stage = work => Race::Done(stage),
            }
        };
        stdout.finish();
        stderr.finish();

        let fuel = fuel_start.and_then(|f| store.get_fuel().ok().map(|left| f - left.min(f)));
        let limits = &store.data().limits;
        let peak = limits.memory_peak as u64;
        let memory_denied = limits.memory_denied;
        let parked = store.data().parked;
        let wakes = store.data().wakes;
        let outcome = match race {
            // The guest slept: the sleep's host call recorded the wake time and trapped
            // (docs/steps.md#sleep).
            Race::Done(Stage::CallFailed(_)) if parked.is_some() => Outcome::Parked {
                wake_at: parked.unwrap_or_default(),
            },
            Race::Cancelled => trapped(TrapKind::Cancelled),
            Race::TimedOut => trapped(TrapKind::Timeout),
            Race::Done(Stage::Returned(Ok(output))) => {
                validate_output(output, sandbox.result_limit_bytes)
            }
            Race::Done(Stage::Returned(Err(e))) => Outcome::HandlerError {
                retryable: e.retryable,
                message: budget.error_message(e.message),
                retry_after: e.retry_after_ms.map(Duration::from_millis),
            },
            // The host ran out of a shared pool slot (e.g. a fiber stack) for the call: not
            // the guest's doing.
            Race::Done(Stage::CallFailed(e)) if is_pool_exhaustion(&e) => {
                Outcome::HostError(InvokeError::Instantiation(format!("{e:#}")))
            }
            Race::Done(Stage::CallFailed(e)) => {
                let capacity = crate::http::resources::table_capacity(
                    sandbox.max_open_handles,
                    sandbox.max_http_handles,
                );
                match crate::http::resources::describe_limit(&e, capacity) {
                    Some(message) => trapped(TrapKind::Other(message)),
                    None => classify_trap(&e, memory_denied, &cancel, deadline, &stderr.text()),
                }
            }
            Race::Done(Stage::InstantiateFailed(e)) => {
                if e.downcast_ref::<Trap>().is_some() || memory_denied {
                    classify_trap(&e, memory_denied, &cancel, deadline, &stderr.text())
                } else {
                    Outcome::HostError(InvokeError::Instantiation(format!("{e:#}")))
                }
            }
        };
        let outcome = match outcome {
            Outcome::Trapped {
                kind: TrapKind::GuestPanic(message),
            } => trapped(TrapKind::GuestPanic(budget.cap_message(message))),
            other => other,
        };
        // A stopped or trapped store is never reused: it is dropped here.
        let http = store.data().http.totals();
        let rate_limits = store.data().http.limit_totals();
        let steps = store.data().step_counts;
        drop(store);
        record_limit_waits(&ids, &rate_limits);
        let end = EndLine {
            elapsed: started.elapsed(),
            log: budget.totals(),
            output_dropped_bytes: stdout.dropped() + stderr.dropped(),
            http,
        };
        log_outcome(&ids, &outcome, &end);
        report(outcome, fuel, peak, http, rate_limits, steps, wakes)
    }

    fn fuel_budget(&self, sandbox: &SandboxSettings) -> Option<u64> {
        self.runtime
            .settings
            .fuel_metering
            .then(|| sandbox.fuel.unwrap_or(u64::MAX))
    }

    fn new_store(
        &self,
        sandbox: &SandboxSettings,
        ids: Arc<LogIds>,
        stop: StoreLimits,
        (stdout, stderr, budget): (&Capture, &Capture, &LogBudget),
        steps: Option<crate::durable::DurableSteps>,
    ) -> Result<Store<State>, InvokeError> {
        let rt = &self.runtime;
        if sandbox.fuel.is_some() && !rt.settings.fuel_metering {
            return Err(InvokeError::Sandbox(
                "sandbox sets `fuel` but the runtime has fuel_metering off".into(),
            ));
        }
        let wasi = build_wasi(sandbox, stdout, stderr)?;
        let http = crate::http::HttpState::new(
            &sandbox.network,
            &rt.clients,
            stop.deadline,
            ids.clone(),
            budget.clone(),
            self.buckets.clone(),
            stop.cancel.clone(),
        );
        let mut table = wasmtime_wasi::ResourceTable::new();
        table.set_max_capacity(crate::http::resources::table_capacity(
            sandbox.max_open_handles,
            sandbox.max_http_handles,
        ));
        let state = State {
            wasi,
            table,
            limits: Limits::new(sandbox, rt.settings.max_memory_bytes),
            ids,
            cancel: stop.cancel.clone(),
            log: budget.clone(),
            handles: OpenHandles::new(sandbox.max_open_handles),
            http,
            http_fields: crate::http::resources::FieldsBudget::new(sandbox.http_fields_limit_bytes),
            steps,
            step_counts: crate::durable::StepCounts::default(),
            parked: None,
            wakes: 0,
        };
        let mut store = Store::new(&rt.engine, state);
        store.limiter(|s| &mut s.limits);
        if let Some(fuel) = self.fuel_budget(sandbox) {
            store
                .set_fuel(fuel)
                .map_err(|e| InvokeError::Sandbox(format!("fuel: {e:#}")))?;
        }
        // Every epoch tick: stop if cancelled or past the deadline, otherwise
        // yield to tokio (so CPU-bound guests cannot starve other tasks, and
        // the select in `invoke_report` gets to run) and re-arm for one tick.
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(move |_ctx| {
            let now = Instant::now();
            let expired = stop.deadline.is_some_and(|d| now >= d);
            let cancelled = stop
                .cancel
                .cancelled_at()
                .is_some_and(|t| now >= t + stop.grace);
            if cancelled || expired {
                Ok(UpdateDeadline::Interrupt)
            } else {
                // tokio's own yield defers the wake-up until the I/O and
                // timer drivers have run, so timers of other tasks (e.g. the
                // worker's heartbeats) fire even next to a spinning guest.
                Ok(UpdateDeadline::YieldCustom(
                    1,
                    Box::pin(tokio::task::yield_now()),
                ))
            }
        });
        Ok(store)
    }
}

/// The `0.1.0` context: everything but the task's params.
fn v1_context(ctx: InvocationContext) -> bindings::WitContext {
    bindings::WitContext {
        execution_id: ctx.execution_id,
        attempt_id: ctx.attempt_id,
        attempt: ctx.attempt,
        task_name: ctx.task_name,
        namespace: ctx.namespace,
        worker_id: ctx.worker_id,
        metadata: ctx.metadata_json,
    }
}

/// The `0.2.0` context, with the task's params.
fn v2_context(ctx: InvocationContext) -> bindings::v2::WitContext {
    bindings::v2::WitContext {
        execution_id: ctx.execution_id,
        attempt_id: ctx.attempt_id,
        attempt: ctx.attempt,
        task_name: ctx.task_name,
        namespace: ctx.namespace,
        worker_id: ctx.worker_id,
        metadata: ctx.metadata_json,
        params: ctx.params_json,
    }
}

/// The `0.3.0` context: the same fields as `0.2.0`'s.
fn v3_context(ctx: InvocationContext) -> bindings::v3::WitContext {
    bindings::v3::WitContext {
        execution_id: ctx.execution_id,
        attempt_id: ctx.attempt_id,
        attempt: ctx.attempt,
        task_name: ctx.task_name,
        namespace: ctx.namespace,
        worker_id: ctx.worker_id,
        metadata: ctx.metadata_json,
        params: ctx.params_json,
    }
}

/// When the call must end: `timeout` after `started`; none for no timeout, or for one so
/// large that the instant is not representable (it would never come).
fn deadline(started: Instant, timeout: Option<Duration>) -> Option<Instant> {
    timeout.and_then(|t| started.checked_add(t))
}

fn trapped(kind: TrapKind) -> Outcome {
    Outcome::Trapped { kind }
}

/// Output must be JSON text of at most `limit` bytes. The length is checked first, on the
/// guest's bytes, so an oversized output is dropped unparsed; the JSON is then validated by a
/// streaming pass that builds nothing (`IgnoredAny`). Invalid JSON is the handler's (fatal)
/// error.
fn validate_output(output: String, limit: Option<u64>) -> Outcome {
    let bytes = output.len() as u64;
    if let Some(limit) = limit.filter(|l| bytes > *l) {
        return Outcome::OutputTooLarge { bytes, limit };
    }
    match serde_json::from_str::<serde::de::IgnoredAny>(&output) {
        Ok(_) => Outcome::Succeeded(output),
        Err(e) => Outcome::HandlerError {
            retryable: false,
            message: format!("handler returned invalid JSON output: {e}"),
            retry_after: None,
        },
    }
}

/// Whether `e` says a pooling-allocator slot shared by every task was exhausted.
fn is_pool_exhaustion(e: &wasmtime::Error) -> bool {
    e.downcast_ref::<wasmtime::PoolConcurrencyLimitError>()
        .is_some()
}

fn classify_trap(
    e: &wasmtime::Error,
    memory_denied: bool,
    cancel: &CancelHandle,
    deadline: Option<Instant>,
    stderr: &str,
) -> Outcome {
    let trap = e.downcast_ref::<Trap>();
    let kind = match trap {
        Some(Trap::OutOfFuel) => TrapKind::OutOfFuel,
        Some(Trap::Interrupt) if cancel.is_cancelled() => TrapKind::Cancelled,
        Some(Trap::Interrupt) if deadline.is_some_and(|d| Instant::now() >= d) => TrapKind::Timeout,
        // A denied growth makes the guest abort (Rust: "memory allocation
        // failed"); report the cause, not the symptom.
        _ if memory_denied => TrapKind::MemoryLimit,
        _ => match panic_message(stderr) {
            Some(message) => TrapKind::GuestPanic(message),
            None => TrapKind::Other(match trap {
                Some(t) => format!("{t}"),
                None => format!("{e:#}"),
            }),
        },
    };
    trapped(kind)
}

/// Writes one line per rate-limited origin that made a request wait, was paused by a `429` or
/// could not be read into the attempt's diagnostics (docs/observability.md#attempt-diagnostics):
/// a host line, not charged to the guest's log budget, at most one per allowed origin.
fn record_limit_waits(ids: &LogIds, limits: &[OriginLimitTotals]) {
    let Some(journal) = &ids.journal else {
        return;
    };
    for l in limits
        .iter()
        .filter(|l| l.waits > 0 || l.pauses > 0 || l.errors > 0)
    {
        journal.log(
            "info",
            &format!(
                "outbound rate limit of {}: {} requests, {} waited {:.3} s for a token in all, {} paused the origin (429 with Retry-After), {} failed on the bucket",
                l.origin,
                l.tokens,
                l.waits,
                l.waited.as_secs_f64(),
                l.pauses,
                l.errors
            ),
        );
    }
}

/// What the attempt's end line reports besides the outcome.
#[derive(Debug, Clone, Copy, Default)]
struct EndLine {
    elapsed: Duration,
    log: LogTotals,
    output_dropped_bytes: u64,
    http: HttpTotals,
}

/// Logs how the attempt ended: the attempt's end line, with the totals of
/// its guest log (docs/security.md#logs). The handler-error message (already
/// cut by the budget) and a host error's text may carry guest-chosen text:
/// they are escaped fields; a trap kind is written with `Debug`, which
/// escapes its strings itself. A success is logged at DEBUG unless the
/// guest's log lost lines or bytes, then at INFO.
fn log_outcome(ids: &LogIds, outcome: &Outcome, end: &EndLine) {
    let elapsed_us = end.elapsed.as_micros() as u64;
    let t = &end.log;
    let h = &end.http;
    macro_rules! line {
        ($lvl:ident, $($rest:tt)+) => {
            tracing::$lvl!(
                execution_id = %ids.execution_id, attempt_id = %ids.attempt_id, elapsed_us,
                log_lines = t.lines, log_bytes = t.bytes, log_dropped_lines = t.dropped_lines,
                log_rate_limited_lines = t.rate_limited_lines,
                log_dropped_bytes = t.dropped_bytes, log_truncated = t.truncated,
                output_dropped_bytes = end.output_dropped_bytes,
                http_requests = h.requests, http_denied = h.denied, http_refused = h.refused,
                http_failed = h.failed, http_bytes_out = h.bytes_out, http_bytes_in = h.bytes_in,
                http_rate_limit_waits = h.rate_limit_waits,
                http_rate_limit_wait_ms = h.rate_limit_wait_ms,
                $($rest)+
            )
        };
    }
    let lost = t.lost_any() || end.output_dropped_bytes > 0;
    match outcome {
        Outcome::Succeeded(_) if lost => line!(info, "handler succeeded"),
        Outcome::Succeeded(_) => line!(debug, "handler succeeded"),
        Outcome::HandlerError {
            retryable, message, ..
        } => {
            line!(info, retryable, error = %escape(message), "handler error")
        }
        Outcome::OutputTooLarge { bytes, limit } => {
            line!(info, bytes, limit, "handler output refused: too large")
        }
        Outcome::Trapped { kind } => line!(warn, "handler trapped: {kind:?}"),
        Outcome::HostError(e) => {
            line!(error, error = %escape(&e.to_string()), "handler could not run")
        }
        Outcome::Parked { wake_at } => {
            line!(info, wake_at = %onestep_core::park::rfc3339(*wake_at), "handler slept")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The worker spawns invocations on a multi-threaded runtime.
    #[allow(dead_code)]
    fn invoke_future_is_send(h: &Handler, s: &SandboxSettings) {
        fn assert_send<T: Send>(_: &T) {}
        let f = h.invoke(
            s,
            InvocationContext::default(),
            "{}",
            CancelHandle::new(),
            None,
        );
        assert_send(&f);
    }

    #[test]
    fn deadline_is_the_timeout_after_the_start() {
        let started = Instant::now();
        assert_eq!(
            deadline(started, Some(Duration::from_millis(500))),
            Some(started + Duration::from_millis(500))
        );
        assert_eq!(deadline(started, None), None);
        assert_eq!(deadline(started, Some(Duration::MAX)), None);
    }

    #[test]
    fn outcome_lines_escape_guest_text() {
        use crate::guest_log::tests::{FORGED, ids, logged};
        let ids = ids();
        let outcomes = [
            Outcome::HandlerError {
                retryable: false,
                message: FORGED.into(),
                retry_after: None,
            },
            trapped(TrapKind::GuestPanic(FORGED.into())),
            trapped(TrapKind::Other(FORGED.into())),
            Outcome::HostError(InvokeError::Instantiation(FORGED.into())),
        ];
        for outcome in &outcomes {
            let out = logged(false, || log_outcome(&ids, outcome, &EndLine::default()));
            assert_eq!(out.matches('\n').count(), 1, "{out:?}");
            assert!(!out.contains('\u{1b}') && !out.contains('\r'), "{out:?}");
            assert!(out.contains("ok\\n2026-01-01"), "{out:?}");
            let out = logged(true, || log_outcome(&ids, outcome, &EndLine::default()));
            assert_eq!(out.matches('\n').count(), 1, "{out:?}");
            let v: serde_json::Value = serde_json::from_str(&out).expect("one JSON object");
            assert_eq!(v["fields"]["execution_id"], "mine", "{v}");
        }
    }

    #[test]
    fn output_must_be_json() {
        assert_eq!(
            validate_output("[1]".into(), None),
            Outcome::Succeeded("[1]".into())
        );
        assert!(matches!(
            validate_output("nope".into(), None),
            Outcome::HandlerError {
                retryable: false,
                ..
            }
        ));
    }

    #[test]
    fn output_length_is_checked_before_parsing() {
        // At the limit: parsed and accepted.
        assert_eq!(
            validate_output("[1,2]".into(), Some(5)),
            Outcome::Succeeded("[1,2]".into())
        );
        // One byte more: refused, even though it is not JSON (it is never parsed).
        assert_eq!(
            validate_output("[1,2,]".into(), Some(5)),
            Outcome::OutputTooLarge { bytes: 6, limit: 5 }
        );
        assert_eq!(
            validate_output("x".repeat(10), Some(9)),
            Outcome::OutputTooLarge {
                bytes: 10,
                limit: 9
            }
        );
    }
}
