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
use crate::outcome::completion_for;
use crate::settings::TaskSettings;
use crate::worker::WorkerStats;

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
) {
    let span = tracing::info_span!(
        "delivery",
        task = %ctx.settings.task_name,
        execution_id = %lease.execution.id,
        attempt_id = %lease.attempt_id,
        attempt_no = lease.attempt_no,
    );
    run_delivery(ctx, lease, hard_cancel).instrument(span).await;
}

async fn run_delivery(ctx: Arc<TaskCtx>, lease: ExecutionLease, hard_cancel: CancellationToken) {
    let started = tokio::time::Instant::now();
    let task = ctx.settings.task_name.as_str();
    let queue_wait = (ctx.clock.now() - lease.execution.available_at)
        .to_std()
        .unwrap_or_default();
    ctx.observer.attempt_started(task, queue_wait);
    let lease_ref = lease.lease_ref();
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
    let run = ctx.runner.run(invocation, handler_cancel.clone());
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
        return;
    }
    // A cancel request seen by the heartbeat or by the cancel poll: the same completion.
    let cancel_requested = heartbeat_end == HeartbeatEnd::CancelRequested || polled_cancel;
    let heartbeat_failed = heartbeat_end == HeartbeatEnd::Failed;
    log_outcome(&outcome);
    // The handler's own message, kept with the attempt even when the outcome becomes a cancel.
    let message = match &outcome {
        RunOutcome::Failed(f) => Some(f.message.clone()),
        RunOutcome::ResultTooLarge { bytes } => Some(format!(
            "handler result of {bytes} bytes is over max_result_bytes ({})",
            ctx.settings.max_result_bytes
        )),
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
    let previous_attempts = lease.attempt_no.saturating_sub(1);
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
    let written = write_completion(&ctx, lease_ref, completion).await;
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

fn log_outcome(outcome: &RunOutcome) {
    match outcome {
        RunOutcome::Succeeded(_) => tracing::debug!("handler succeeded"),
        RunOutcome::Cancelled => tracing::info!("handler cancelled"),
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
        Err(e) => {
            ctx.observer.store_error(&ctx.settings.task_name, &e);
            ctx.stats.record_completion_error();
            tracing::error!(error = %e, "completion was not written; the lease will expire and the execution will be retried");
            Written::default()
        }
    }
}

async fn retry_write(
    ctx: &TaskCtx,
    lease: onestep_core::LeaseRef,
    completion: Completion,
) -> Written {
    let error = completion.error.clone();
    match ctx.completer.complete(lease, completion).await {
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
            ctx.stats.record_completion_error();
            tracing::error!(error = %e, "completion was not written; the lease will expire");
            Written::default()
        }
    }
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
