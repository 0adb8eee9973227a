//! One delivery: run the handler for one lease, registered with the task's heartbeat ticker and
//! its cancel poll, then write exactly one completion (or nothing, when the lease was lost) —
//! docs/semantics.md#delivery.

use std::sync::Arc;

use onestep_core::diagnostics::JournalHandle;
use onestep_core::ports::LeaseStore;
use onestep_core::request::RESERVED_METADATA_KEY;
use onestep_core::runner::{Invocation, RunOutcome, TaskRunner};
use onestep_core::{
    Completion, CompletionStatus, ErrorObject, ExecutionError, ExecutionLease, ExecutionStatus,
};
use serde_json::json;
use tokio::sync::OwnedSemaphorePermit;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::cancel_poll::CancelWatch;
use crate::completer::Completer;
use crate::heartbeat::{HeartbeatEnd, HeartbeatSet};
use crate::observe::{AttemptEnd, WorkerObserver};
use crate::outcome::{completion_for, result_rejection};
use crate::settings::TaskSettings;
use crate::worker::WorkerStats;
use onestep_core::park;

/// Everything the deliveries of one task share.
pub(crate) struct TaskCtx {
    pub(crate) settings: TaskSettings,
    pub(crate) store: Arc<dyn LeaseStore>,
    pub(crate) runner: Arc<dyn TaskRunner>,
    pub(crate) completer: Completer,
    pub(crate) stats: Arc<WorkerStats>,
    /// The in-flight leases the task's cancel poll asks about.
    pub(crate) cancel_watch: Arc<CancelWatch>,
    /// The in-flight leases the task's heartbeat ticker renews.
    pub(crate) heartbeats: Arc<HeartbeatSet>,
    /// Told of every attempt's start and end (docs/observability.md#worker-metrics).
    pub(crate) observer: Arc<dyn WorkerObserver>,
    /// "Now" for the queue wait (the store's clock in tests).
    pub(crate) clock: onestep_core::time::SharedClock,
    /// The task's rate-limit bucket, when it has a `rate_limit` (docs/semantics.md#rate-limits).
    pub(crate) limiter: Option<crate::limiter::Limiter>,
}

/// Builds the handler's invocation: payload, metadata plus `onestep.execution = {id,
/// attempt_id}` (docs/semantics.md#handler-input), correlation ids and the timeout.
pub(crate) fn invocation_for(settings: &TaskSettings, lease: &ExecutionLease) -> Invocation {
    let execution = &lease.execution;
    let mut metadata = execution.metadata.clone();
    metadata.insert(
        RESERVED_METADATA_KEY.to_owned(),
        json!({"id": execution.id.to_string(), "attempt_id": lease.attempt_id.to_string()}),
    );
    Invocation {
        execution_id: execution.id,
        attempt_id: lease.attempt_id,
        lease_token: lease.lease_token,
        attempt_no: lease.attempt_no,
        task_name: execution.task_name.clone(),
        namespace: execution.namespace.clone(),
        worker_id: settings.worker_id.clone(),
        payload: execution.payload.clone(),
        metadata,
        timeout: settings.timeout,
        journal: None,
    }
}

/// Runs one lease to its completion. `hard_cancel` fires when the drain timeout has passed:
/// the handler is then stopped and the attempt completes `retrying` after 0 s.
pub(crate) async fn deliver(
    ctx: Arc<TaskCtx>,
    lease: ExecutionLease,
    hard_cancel: CancellationToken,
    _permit: OwnedSemaphorePermit,
    claim: Option<onestep_telemetry::SpanContext>,
) {
    let span = tracing::info_span!(
        "delivery",
        task = %ctx.settings.task_name,
        execution_id = %lease.execution.id,
        attempt_id = %lease.attempt_id,
        attempt_no = lease.attempt_no,
    );
    let process = process_span(&ctx, &lease, claim);
    run_delivery(ctx, lease, hard_cancel, process.clone())
        .instrument(process)
        .instrument(span)
        .await;
}

/// The attempt's `process <task>` span (docs/observability.md#traces): a child of the submit's
/// stored trace context, linked to it and to the claim that leased it. Disabled (and nothing
/// here is evaluated) while traces are off.
fn process_span(
    ctx: &TaskCtx,
    lease: &ExecutionLease,
    claim: Option<onestep_telemetry::SpanContext>,
) -> tracing::Span {
    let task = ctx.settings.task_name.as_str();
    let span = tracing::info_span!(
        target: onestep_telemetry::TARGET,
        parent: None,
        "process",
        "otel.name" = %format!("process {task}"),
        "otel.kind" = "consumer",
        "messaging.system" = onestep_telemetry::MESSAGING_SYSTEM,
        "messaging.operation.type" = "process",
        "messaging.destination.name" = task,
        "messaging.message.id" = %lease.execution.id,
        "messaging.consumer.group.name" = %ctx.settings.worker_id,
        "onestep.namespace" = %lease.execution.namespace,
        "onestep.attempt.id" = %lease.attempt_id,
        "onestep.attempt.number" = lease.attempt_no,
        "onestep.status" = tracing::field::Empty,
    );
    if span.is_disabled() {
        return span;
    }
    if let Some(parent) = lease
        .trace_parent
        .as_deref()
        .and_then(onestep_telemetry::context_from_traceparent)
    {
        use onestep_telemetry::TraceContextExt as _;
        let submit = parent.span().span_context().clone();
        onestep_telemetry::set_parent(&span, parent);
        onestep_telemetry::add_link(&span, submit);
    }
    if let Some(claim) = claim {
        onestep_telemetry::add_link(&span, claim);
    }
    span
}

async fn run_delivery(
    ctx: Arc<TaskCtx>,
    lease: ExecutionLease,
    hard_cancel: CancellationToken,
    process: tracing::Span,
) {
    let started = tokio::time::Instant::now();
    let task = ctx.settings.task_name.as_str();
    let queue_wait = (ctx.clock.now() - lease.execution.available_at)
        .to_std()
        .unwrap_or_default();
    ctx.observer.attempt_started(task, queue_wait);
    let lease_ref = lease.lease_ref();
    // docs/steps.md#max-duration: the execution's deadline, from its first start.
    let bound = ctx.settings.max_duration.and_then(|max| {
        let first = lease
            .execution
            .started_at
            .unwrap_or_else(|| ctx.clock.now());
        park::max_duration_deadline(first, max).map(|deadline| Bound {
            first,
            max,
            deadline,
        })
    });
    if let Some(b) = &bound
        && ctx.clock.now() >= b.deadline
    {
        // Past the deadline before this attempt starts (a retry or a wake-up claimed late):
        // the handler does not run.
        let message = b.message("it was claimed again after the deadline");
        tracing::warn!(%message, "execution over its max_duration_s; failing it without a run");
        let completion = Completion::failed(park::max_duration_error()).with_diagnostics(
            onestep_core::diagnostics::AttemptDiagnostics {
                message: Some(message),
                ..Default::default()
            },
        );
        let written = write_completion(&ctx, lease_ref, completion).await;
        finish_attempt(&ctx, started, written, &process);
        return;
    }
    let handler_cancel = CancellationToken::new();
    // The attempt's log tail, progress and run facts (docs/observability.md#attempt-diagnostics).
    let journal = JournalHandle::new(ctx.clock.clone());
    // The task's heartbeat ticker carries the lease from now on (docs/semantics.md#heartbeat),
    // and persists the journal's progress while the attempt runs; dropping the registration, a
    // panic included, takes it out again.
    let beating = ctx.heartbeats.register(
        lease_ref,
        lease.lease_expires_at,
        handler_cancel.clone(),
        Some(journal.clone()),
    );

    // The cancel poll may cancel the handler too (docs/semantics.md#cancel-poll).
    let polled = ctx.cancel_watch.register(lease_ref, handler_cancel.clone());

    tracing::debug!("handler started");
    let mut invocation = invocation_for(&ctx.settings, &lease);
    invocation.journal = Some(journal.clone());
    // The attempt's time limit is `timeout_s` or what is left before the deadline, whichever
    // ends first; `deadline_bound` says the deadline is the one that ends it.
    let left = bound
        .as_ref()
        .map(|b| (b.deadline - ctx.clock.now()).to_std().unwrap_or_default());
    let deadline_bound = match (invocation.timeout, left) {
        (Some(t), Some(l)) if l < t => true,
        (None, Some(_)) => true,
        _ => false,
    };
    if deadline_bound {
        invocation.timeout = left;
    }
    let invoke = tracing::info_span!(
        target: onestep_telemetry::TARGET,
        "invoke",
        "onestep.outcome" = tracing::field::Empty,
    );
    let run = ctx
        .runner
        .run(invocation, handler_cancel.clone())
        .instrument(invoke.clone());
    tokio::pin!(run);
    let mut shutdown_stop = false;
    let mut outcome = tokio::select! {
        outcome = &mut run => outcome,
        _ = hard_cancel.cancelled() => {
            shutdown_stop = true;
            handler_cancel.cancel();
            run.await
        }
    };

    if !invoke.is_disabled() {
        record_outcome(&invoke, &outcome);
    }
    drop(invoke);

    // Stop heartbeating and polling before the completion is written (docs/semantics.md#delivery
    // step 4).
    let polled_cancel = polled.finish();
    let heartbeat_end = beating.finish().await;
    if heartbeat_end == HeartbeatEnd::LeaseLost {
        ctx.stats.record_lease_lost();
        tracing::warn!("lease lost: the handler was stopped and nothing is written");
        let end = AttemptEnd {
            status: None,
            duration: started.elapsed(),
            failure: None,
            lease_lost: true,
        };
        ctx.observer.attempt_finished(task, &end);
        process.record("onestep.status", "lease_lost");
        onestep_telemetry::set_error(&process, "lease lost");
        return;
    }
    // A cancel request seen by the heartbeat or by the cancel poll: the same completion.
    let cancel_requested = heartbeat_end == HeartbeatEnd::CancelRequested || polled_cancel;
    let heartbeat_failed = heartbeat_end == HeartbeatEnd::Failed;
    log_outcome(&outcome);
    // The handler slept (docs/steps.md#sleep): the attempt parks, unless a cancel was requested
    // meanwhile (it wins: the run ends as a cancelled one).
    if let RunOutcome::Parked { wake_at } = outcome {
        if !cancel_requested {
            let end = Parking {
                lease: lease_ref,
                wake_at,
                bound: bound.as_ref(),
                journal: &journal,
            };
            let written = park_attempt(&ctx, end).await;
            finish_attempt(&ctx, started, written, &process);
            return;
        }
        outcome = RunOutcome::Cancelled;
    }
    // The attempt's time limit was the execution's deadline: it ends the execution, whatever
    // the retry policy (docs/steps.md#max-duration).
    if let (true, Some(b), RunOutcome::Failed(f)) = (deadline_bound, &bound, &outcome)
        && f.kind == onestep_core::retry::FailureKind::Timeout
    {
        outcome = RunOutcome::Failed(onestep_core::runner::RunFailure {
            kind: onestep_core::retry::FailureKind::Timeout,
            exception_type: park::MAX_DURATION_EXCEPTION.to_owned(),
            retryable: false,
            retry_after_s: None,
            message: b.message("its attempt was still running at the deadline"),
        });
    }
    // The handler's own message, kept with the attempt even when the outcome becomes a cancel.
    let message = match &outcome {
        RunOutcome::Failed(f) => Some(f.message.clone()),
        // A result no backend can store (docs/semantics.md#storable-values): the attempt fails
        // at stage `result_validation` with the reason, under the retry policy.
        other if !cancel_requested => result_rejection(other, ctx.settings.max_result_bytes)
            .inspect(
                |why| tracing::warn!(reason = %why, "handler result refused: it cannot be stored"),
            ),
        _ => None,
    };
    // A handler we asked to stop may still return an error of its own (e.g. a cooperative
    // "cancelled" handler error) instead of trapping: it is a cancellation all the same
    // (docs/semantics.md#failure-handling). A success still goes to the store, where cancel wins (T10).
    if (cancel_requested || shutdown_stop || heartbeat_failed)
        && matches!(outcome, RunOutcome::Failed(_))
    {
        outcome = RunOutcome::Cancelled;
    }

    let diagnostics = journal.finish(message.as_deref());
    let previous_attempts = previous_attempts(&ctx, &lease, &outcome).await;
    let completion = {
        let mut rng = rand::rng();
        completion_for(
            outcome,
            &ctx.settings.retry,
            ctx.settings.max_result_bytes,
            previous_attempts,
            cancel_requested,
            &mut rng,
        )
        .with_diagnostics(diagnostics)
    };
    let complete = tracing::info_span!(
        target: onestep_telemetry::TARGET,
        "complete",
        "onestep.completion" = completion.status.as_str(),
    );
    let written = write_completion(&ctx, lease_ref, completion)
        .instrument(complete)
        .await;
    finish_attempt(&ctx, started, written, &process);
}

/// The execution's run-time bound (docs/steps.md#max-duration).
struct Bound {
    /// Its first start.
    first: chrono::DateTime<chrono::Utc>,
    /// The task's `max_duration_s`.
    max: std::time::Duration,
    /// `first + max`.
    deadline: chrono::DateTime<chrono::Utc>,
}

impl Bound {
    fn message(&self, why: &str) -> String {
        park::max_duration_message(self.max, self.first, why)
    }
}

/// `n` of the retry policy (docs/semantics.md#retry-policies): the earlier attempts, less those
/// that parked (a sleep is not a failure). The store is asked only when the policy decides,
/// i.e. for a retryable failure of an attempt after the first; if it cannot answer, every
/// earlier attempt counts (the policy then retries less, never more).
async fn previous_attempts(ctx: &TaskCtx, lease: &ExecutionLease, outcome: &RunOutcome) -> u32 {
    let earlier = lease.attempt_no.saturating_sub(1);
    let decides = match outcome {
        RunOutcome::Failed(f) => f.retryable,
        RunOutcome::ResultTooLarge { .. } | RunOutcome::Succeeded(_) => true,
        RunOutcome::Cancelled | RunOutcome::Parked { .. } => false,
    };
    if earlier == 0
        || !decides
        || matches!(
            ctx.settings.retry,
            onestep_core::retry::RetryPolicy::NoRetry
        )
    {
        return earlier;
    }
    match ctx.store.parked_attempts(lease.execution.id).await {
        Ok(parked) => earlier.saturating_sub(parked),
        Err(e) => {
            ctx.observer.store_error(&ctx.settings.task_name, &e);
            tracing::warn!(error = %e, "could not count the parked attempts; every earlier attempt counts for the retry policy");
            earlier
        }
    }
}

/// What ends a parking attempt.
struct Parking<'a> {
    lease: onestep_core::LeaseRef,
    wake_at: chrono::DateTime<chrono::Utc>,
    bound: Option<&'a Bound>,
    journal: &'a JournalHandle,
}

/// Parks the attempt (T15, docs/steps.md#sleep), or fails the execution when its sleep would
/// end after the deadline of its `max_duration_s`.
async fn park_attempt(ctx: &TaskCtx, p: Parking<'_>) -> Written {
    let task = ctx.settings.task_name.as_str();
    if let Some(b) = p.bound
        && p.wake_at > b.deadline
    {
        let message = b.message(&format!(
            "its sleep would end at {}, after the deadline {}",
            park::rfc3339(p.wake_at),
            park::rfc3339(b.deadline)
        ));
        tracing::warn!(%message, "execution over its max_duration_s; failing it instead of parking");
        let completion = Completion::failed(park::max_duration_error())
            .with_diagnostics(p.journal.finish(Some(&message)));
        return write_completion(ctx, p.lease, completion).await;
    }
    let diagnostics = p.journal.finish(Some(&park::parked_message(p.wake_at)));
    let request = park::Park::until(p.wake_at).with_diagnostics(diagnostics.clone());
    match ctx.store.park(&p.lease, &request).await {
        Ok(execution) if execution.status == ExecutionStatus::Queued => {
            ctx.stats.record_parked();
            let sleep = (p.wake_at - ctx.clock.now()).to_std().unwrap_or_default();
            ctx.observer.parked(task, sleep);
            tracing::info!(wake_at = %park::rfc3339(p.wake_at), "attempt parked");
            Written {
                status: Some(execution.status),
                ..Written::default()
            }
        }
        // A cancel requested before the park won (T11).
        Ok(execution) => {
            ctx.stats.record_completion(execution.status);
            tracing::info!(status = %execution.status, "cancel requested before the park; the execution ended");
            Written {
                status: Some(execution.status),
                ..Written::default()
            }
        }
        Err(ExecutionError::StaleLease(reason)) => {
            ctx.stats.record_lease_lost();
            tracing::info!(%reason, "park refused: the lease is no longer ours");
            Written {
                lease_lost: true,
                ..Written::default()
            }
        }
        Err(e) if refused_for_good(&e) => {
            ctx.observer.store_error(task, &e);
            tracing::error!(error = %e, "park refused by the store; failing the execution");
            let failed = Completion::failed(refusal_error(&e)).with_diagnostics(diagnostics);
            retry_write(ctx, p.lease, failed).await
        }
        Err(e) => {
            ctx.observer.store_error(task, &e);
            ctx.stats.record_completion_error();
            tracing::error!(error = %e, "park was not written; the lease will expire and the sleep's recorded step parks the next attempt again");
            Written::default()
        }
    }
}

/// Tells the observer and the attempt's span how it ended.
fn finish_attempt(
    ctx: &TaskCtx,
    started: tokio::time::Instant,
    written: Written,
    process: &tracing::Span,
) {
    let task = ctx.settings.task_name.as_str();
    if !process.is_disabled() {
        match written.status {
            Some(status) => {
                process.record("onestep.status", status.as_str());
                if let Some(e) = &written.error {
                    onestep_telemetry::set_error(
                        process,
                        format!("{}: {}", e.kind, e.exception_type),
                    );
                }
            }
            None => {
                let what = if written.lease_lost {
                    "lease_lost"
                } else {
                    "not_written"
                };
                process.record("onestep.status", what);
                onestep_telemetry::set_error(process, what);
            }
        }
    }
    let failure = match written.status {
        Some(ExecutionStatus::Failed | ExecutionStatus::Retrying) => written
            .error
            .map(|e| (e.kind.clone(), e.exception_type.clone())),
        _ => None,
    };
    let end = AttemptEnd {
        status: written.status,
        duration: started.elapsed(),
        failure,
        lease_lost: written.lease_lost,
    };
    ctx.observer.attempt_finished(task, &end);
}

/// What a completion write left behind.
#[derive(Debug, Default)]
struct Written {
    /// The execution's status after the write; `None` when nothing was written.
    status: Option<ExecutionStatus>,
    /// The error object written with a `failed` or `retrying` completion.
    error: Option<ErrorObject>,
    /// The store refused the write: the lease is no longer ours.
    lease_lost: bool,
}

/// The handler's outcome on the `invoke` span; a failure sets the span's error status.
fn record_outcome(span: &tracing::Span, outcome: &RunOutcome) {
    let name = match outcome {
        RunOutcome::Succeeded(_) => "succeeded",
        RunOutcome::Cancelled => "cancelled",
        RunOutcome::Parked { .. } => "parked",
        RunOutcome::ResultTooLarge { .. } => "result_too_large",
        RunOutcome::Failed(f) => {
            onestep_telemetry::set_error(
                span,
                format!("{}: {}", f.kind.as_str(), f.exception_type),
            );
            "failed"
        }
    };
    span.record("onestep.outcome", name);
}

fn log_outcome(outcome: &RunOutcome) {
    match outcome {
        RunOutcome::Succeeded(_) => tracing::debug!("handler succeeded"),
        RunOutcome::Cancelled => tracing::info!("handler cancelled"),
        RunOutcome::Parked { wake_at } => {
            tracing::debug!(wake_at = %park::rfc3339(*wake_at), "handler slept")
        }
        RunOutcome::ResultTooLarge { bytes } => {
            tracing::warn!(bytes, "handler result refused: too large")
        }
        // Not the message: the runner logs the handler's own text once, with the totals of the
        // attempt's guest log (docs/security.md#logs).
        RunOutcome::Failed(f) => tracing::warn!(
            kind = f.kind.as_str(),
            exception_type = %f.exception_type,
            retryable = f.retryable,
            message_bytes = f.message.len(),
            "handler failed"
        ),
    }
}

async fn write_completion(
    ctx: &TaskCtx,
    lease: onestep_core::LeaseRef,
    completion: Completion,
) -> Written {
    let requested = completion.status;
    let error = completion.error.clone();
    let diagnostics = completion.diagnostics.clone();
    // A fallback completion keeps the attempt's diagnostics.
    let keep = |c: Completion| Completion {
        diagnostics: diagnostics.clone(),
        ..c
    };
    match ctx.completer.complete(lease, completion).await {
        Ok(execution) => {
            ctx.stats.record_completion(execution.status);
            tracing::info!(status = %execution.status, "attempt completed");
            Written {
                status: Some(execution.status),
                error,
                lease_lost: false,
            }
        }
        Err(ExecutionError::StaleLease(reason)) => {
            ctx.stats.record_lease_lost();
            tracing::info!(%reason, "completion refused: the lease is no longer ours");
            Written {
                lease_lost: true,
                ..Written::default()
            }
        }
        Err(ExecutionError::Encoding(msg)) if requested == CompletionStatus::Succeeded => {
            tracing::warn!(message = %msg, "result refused by the store; failing the execution");
            let error =
                ErrorObject::new("error", "ExecutionEncodingError", Some("result_validation"));
            retry_write(ctx, lease, keep(Completion::failed(error))).await
        }
        Err(e) if requested == CompletionStatus::Failed => {
            ctx.observer.store_error(&ctx.settings.task_name, &e);
            // docs/semantics.md#failure-handling: a failed completion that raises anything but a lease loss falls back
            // to a retrying completion.
            tracing::warn!(error = %e, "failed completion was not written; trying retrying");
            let error = error.unwrap_or_else(|| ErrorObject::new("error", "Error", Some("ack")));
            retry_write(ctx, lease, keep(Completion::retrying(error, 0.0))).await
        }
        // The store refused this completion for good (a constraint or data error, not a lost
        // connection): the lease expiring would only run the handler again into the same
        // refusal, so the execution fails with the store's error instead, through the same
        // fenced write (docs/semantics.md#storable-values).
        Err(e) if refused_for_good(&e) => {
            ctx.observer.store_error(&ctx.settings.task_name, &e);
            tracing::error!(error = %e, "completion refused by the store; failing the execution");
            retry_write(ctx, lease, keep(Completion::failed(refusal_error(&e)))).await
        }
        Err(e) => {
            ctx.observer.store_error(&ctx.settings.task_name, &e);
            ctx.stats.record_completion_error();
            tracing::error!(error = %e, "completion was not written; the lease will expire and the execution will be retried");
            Written::default()
        }
    }
}

/// Whether a failed completion write can never succeed as it is: anything but a lease loss or a
/// retryable storage failure (docs/semantics.md#error-classification).
fn refused_for_good(e: &ExecutionError) -> bool {
    !e.is_transient() && !matches!(e, ExecutionError::StaleLease(_))
}

/// The error object of an execution whose completion the store refused: stage `ack`, with the
/// backend's classification when the refusal came from the backend.
pub(crate) fn refusal_error(e: &ExecutionError) -> ErrorObject {
    let mut error = ErrorObject::new("error", "CompletionRefused", Some("ack"));
    if let ExecutionError::Backend(b) = e {
        error.backend = Some(b.backend.to_owned());
        error.operation = Some(b.operation.to_owned());
        error.connector_kind = Some(b.kind.as_str().to_owned());
    }
    error
}

/// Writes a fallback completion. If the store refuses that too for good, a last, bare `failed`
/// completion (the store's error, no diagnostics) is written, so a refused completion never
/// leaves the execution to be claimed again forever (docs/semantics.md#storable-values).
async fn retry_write(
    ctx: &TaskCtx,
    lease: onestep_core::LeaseRef,
    completion: Completion,
) -> Written {
    match write_fallback(ctx, lease, completion).await {
        Ok(written) => written,
        Err(e) => {
            tracing::error!(error = %e, "fallback completion refused by the store; failing the execution without diagnostics");
            let bare = Completion::failed(refusal_error(&e));
            match write_fallback(ctx, lease, bare).await {
                Ok(written) => written,
                Err(e) => {
                    ctx.stats.record_completion_error();
                    tracing::error!(error = %e, "completion was not written; the lease will expire");
                    Written::default()
                }
            }
        }
    }
}

/// One fallback write: `Err` only when the store refused it for good ([`refused_for_good`]).
async fn write_fallback(
    ctx: &TaskCtx,
    lease: onestep_core::LeaseRef,
    completion: Completion,
) -> Result<Written, ExecutionError> {
    let error = completion.error.clone();
    Ok(match ctx.completer.complete(lease, completion).await {
        Ok(execution) => {
            ctx.stats.record_completion(execution.status);
            Written {
                status: Some(execution.status),
                error,
                lease_lost: false,
            }
        }
        Err(ExecutionError::StaleLease(_)) => {
            ctx.stats.record_lease_lost();
            Written {
                lease_lost: true,
                ..Written::default()
            }
        }
        Err(e) => {
            ctx.observer.store_error(&ctx.settings.task_name, &e);
            if refused_for_good(&e) {
                return Err(e);
            }
            ctx.stats.record_completion_error();
            tracing::error!(error = %e, "completion was not written; the lease will expire");
            Written::default()
        }
    })
}

/// Releases leases that were claimed but will not be started (docs/semantics.md#release, docs/semantics.md#fetch-loop).
pub(crate) async fn release_all(ctx: &TaskCtx, leases: Vec<ExecutionLease>) {
    for lease in leases {
        match ctx.store.release(&lease.lease_ref()).await {
            Ok(_) => ctx.stats.record_release(),
            Err(e) => {
                ctx.observer.store_error(&ctx.settings.task_name, &e);
                tracing::warn!(execution_id = %lease.execution.id, error = %e, "release failed; the lease will expire")
            }
        }
    }
}
