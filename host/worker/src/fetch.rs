//! The fetch loop of one task (docs/semantics.md#fetch-loop): claim up to `min(free slots, batch_size)`, start one
//! delivery per lease, claim again at once after a non-empty batch, otherwise wait
//! `poll_interval`.

use std::sync::Arc;

use onestep_core::ExecutionError;
use onestep_core::request::ClaimRequest;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::delivery::{TaskCtx, deliver, release_all};

/// Runs until `stopping` fires (returns `Ok`) or a claim fails with a non-retryable error
/// (returns that error, which stops the worker). A claim in progress when `stopping` fires is
/// finished and its leases are released, not run.
pub(crate) async fn fetch_loop(
    ctx: Arc<TaskCtx>,
    stopping: CancellationToken,
    hard_cancel: CancellationToken,
    tracker: TaskTracker,
) -> Result<(), ExecutionError> {
    let s = &ctx.settings;
    let slots = Arc::new(Semaphore::new(s.concurrency as usize));
    loop {
        if stopping.is_cancelled() {
            return Ok(());
        }
        let free = slots.available_permits();
        if free == 0 {
            tokio::select! {
                permit = Arc::clone(&slots).acquire_owned() => drop(permit),
                _ = stopping.cancelled() => return Ok(()),
            }
            continue;
        }
        let limit = free.min(s.batch_size as usize);
        let request = ClaimRequest {
            namespace: s.namespace.clone(),
            task_names: vec![s.task_name.clone()],
            limit: u32::try_from(limit).unwrap_or(u32::MAX),
            lease_duration_s: s.lease_duration_secs(),
            worker_id: s.worker_id.clone(),
        };
        let claim_started = tokio::time::Instant::now();
        let wall_started = onestep_telemetry::enabled().then(std::time::SystemTime::now);
        let claimed = ctx.store.claim(&request).await;
        // docs/observability.md#traces: a `claim` span for a claim that returned leases or failed.
        let claim_span = wall_started.and_then(|started| {
            let error = claimed.as_ref().err().map(ToString::to_string);
            onestep_telemetry::record_claim(&onestep_telemetry::ClaimRecord {
                started,
                ended: std::time::SystemTime::now(),
                task: &s.task_name,
                namespace: &s.namespace,
                leases: claimed.as_ref().map_or(0, Vec::len),
                error: error.as_deref(),
            })
        });
        match &claimed {
            Ok(leases) => ctx
                .observer
                .claimed(&s.task_name, leases.len(), claim_started.elapsed()),
            Err(e) => ctx.observer.store_error(&s.task_name, e),
        }
        match claimed {
            Ok(leases) => {
                if stopping.is_cancelled() {
                    release_all(&ctx, leases).await;
                    return Ok(());
                }
                if leases.is_empty() {
                    tokio::select! {
                        _ = tokio::time::sleep(s.poll_interval) => {}
                        _ = stopping.cancelled() => return Ok(()),
                    }
                    continue;
                }
                ctx.stats.record_claimed(leases.len());
                let mut leases = leases.into_iter();
                while let Some(lease) = leases.next() {
                    let Ok(permit) = Arc::clone(&slots).try_acquire_owned() else {
                        // Cannot happen (only this loop takes slots), but never run more than
                        // `concurrency` at once: give the rest back.
                        let rest: Vec<_> = std::iter::once(lease).chain(leases).collect();
                        release_all(&ctx, rest).await;
                        break;
                    };
                    tracker.spawn(deliver(
                        Arc::clone(&ctx),
                        lease,
                        hard_cancel.clone(),
                        permit,
                        claim_span.clone(),
                    ));
                }
            }
            Err(e) if e.is_transient() => {
                tracing::warn!(task = %s.task_name, error = %e, "claim failed; retrying after poll_interval");
                tokio::select! {
                    _ = tokio::time::sleep(s.poll_interval) => {}
                    _ = stopping.cancelled() => return Ok(()),
                }
            }
            Err(e) => {
                tracing::error!(task = %s.task_name, error = %e, "claim failed with a non-retryable error; stopping the worker");
                return Err(e);
            }
        }
    }
}
