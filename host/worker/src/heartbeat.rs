//! The per-attempt heartbeat loop (docs/semantics.md#delivery step 2): extends the lease every
//! `heartbeat_interval`, notices `cancel_requested`, and self-fences when the lease is lost.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use onestep_core::LeaseRef;
use onestep_core::ports::LeaseStore;
use onestep_core::time::{SharedClock, seconds_between};
use tokio_util::sync::CancellationToken;

/// How a heartbeat loop ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HeartbeatEnd {
    /// The delivery finished and stopped the loop.
    Stopped,
    /// A client asked to cancel; the handler was cancelled.
    CancelRequested,
    /// The lease is gone (stale token, or retryable errors until the lease ran out); the
    /// handler was cancelled and the delivery must write nothing.
    LeaseLost,
    /// The heartbeat failed with a non-retryable error other than a stale lease while the lease
    /// may still hold; the handler was cancelled and the delivery completes `retrying`
    /// (docs/semantics.md#failure-handling), which the store fences like any other write.
    Failed,
}

/// Runs until `stop` fires, a cancel is requested, or the lease is lost. In the last two cases
/// it cancels `handler_cancel` before returning. The lease time left after a failed heartbeat is
/// measured on `clock` (the store's clock in tests; the system clock in production).
#[allow(clippy::too_many_arguments)]
pub(crate) async fn heartbeat_loop(
    store: Arc<dyn LeaseStore>,
    clock: SharedClock,
    lease: LeaseRef,
    interval: Duration,
    lease_duration_s: f64,
    mut lease_expires_at: DateTime<Utc>,
    stop: CancellationToken,
    handler_cancel: CancellationToken,
) -> HeartbeatEnd {
    loop {
        tokio::select! {
            _ = stop.cancelled() => return HeartbeatEnd::Stopped,
            _ = tokio::time::sleep(interval) => {}
        }
        let mut failures: u32 = 0;
        let end = loop {
            match store.heartbeat(&lease, lease_duration_s).await {
                Ok(beat) => {
                    lease_expires_at = beat.lease_expires_at;
                    if beat.cancel_requested {
                        break Some(HeartbeatEnd::CancelRequested);
                    }
                    break None;
                }
                Err(e) if e.is_transient() => {
                    let remaining = seconds_between(clock.now(), lease_expires_at);
                    if remaining <= 0.0 {
                        tracing::warn!(execution_id = %lease.execution_id, attempt_id = %lease.attempt_id, error = %e, "heartbeat failed until the lease ran out");
                        break Some(HeartbeatEnd::LeaseLost);
                    }
                    let backoff = interval.as_secs_f64() * 2f64.powi(failures.min(10) as i32);
                    let wait = backoff.min(remaining / 4.0).max(0.001);
                    tracing::warn!(execution_id = %lease.execution_id, attempt_id = %lease.attempt_id, error = %e, retry_in_s = wait, "heartbeat failed; retrying");
                    failures += 1;
                    tokio::select! {
                        _ = stop.cancelled() => return HeartbeatEnd::Stopped,
                        _ = tokio::time::sleep(Duration::from_secs_f64(wait)) => {}
                    }
                }
                Err(e @ onestep_core::ExecutionError::StaleLease(_)) => {
                    tracing::warn!(execution_id = %lease.execution_id, attempt_id = %lease.attempt_id, error = %e, "lease lost; stopping the handler");
                    break Some(HeartbeatEnd::LeaseLost);
                }
                Err(e) => {
                    tracing::error!(execution_id = %lease.execution_id, attempt_id = %lease.attempt_id, error = %e, "heartbeat failed; stopping the handler");
                    break Some(HeartbeatEnd::Failed);
                }
            }
        };
        if let Some(end) = end {
            handler_cancel.cancel();
            return end;
        }
    }
}
