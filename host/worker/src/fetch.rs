//! The fetch loop of one task (docs/semantics.md#fetch-loop): claim up to `min(free slots, batch_size)`, start one
//! delivery per lease, claim again at once after a non-empty batch, otherwise wait
//! `poll_interval`. A task with a `rate_limit` takes a token per lease from its fleet-wide bucket
//! before it claims (docs/semantics.md#rate-limits). A quarantined task (docs/security.md#one-tenants-bad-deploy) claims nothing
//! until its quarantine is lifted; a non-retryable claim error quarantines the task instead of
//! stopping the worker.

use std::sync::Arc;

use onestep_core::request::ClaimRequest;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::delivery::{TaskCtx, deliver, release_all};
use crate::limiter::Grant;
use crate::quarantine::{CLAIM_QUARANTINE_PROBE, Quarantine, QuarantineCause, QuarantineKind};

/// Runs until `stopping` fires. A claim in progress when `stopping` fires is finished and its
/// leases are released, not run. While `quarantine` is set the loop claims nothing; a claim that
/// fails with a non-retryable error sets it (kind `claim`), and a claim tried
/// [`CLAIM_QUARANTINE_PROBE`] later that succeeds lifts it.
pub(crate) async fn fetch_loop(
    ctx: Arc<TaskCtx>,
    quarantine: Quarantine,
    stopping: CancellationToken,
    hard_cancel: CancellationToken,
    tracker: TaskTracker,
    task_tracker: Option<TaskTracker>,
) {
    let s = &ctx.settings;
    let slots = Arc::new(Semaphore::new(s.concurrency as usize));
    let mut switch = quarantine.subscribe();
    let mut reported: Option<QuarantineCause> = None;
    // A claim-quarantined task's probe claim is due.
    let mut probe = false;
    loop {
        if stopping.is_cancelled() {
            return;
        }
        let current = switch.borrow_and_update().clone();
        report(&ctx, &mut reported, &current);
        if let Some(cause) = &current
            && !probe
        {
            let probing = cause.kind == QuarantineKind::Claim;
            tokio::select! {
                changed = switch.changed() => {
                    if changed.is_err() {
                        // Cannot happen (`quarantine` holds the sender): wait for the end.
                        stopping.cancelled().await;
                        return;
                    }
                }
                _ = tokio::time::sleep(CLAIM_QUARANTINE_PROBE), if probing => probe = true,
                _ = stopping.cancelled() => return,
            }
            continue;
        }
        let free = slots.available_permits();
        if free == 0 {
            tokio::select! {
                permit = Arc::clone(&slots).acquire_owned() => drop(permit),
                _ = stopping.cancelled() => return,
            }
            continue;
        }
        let mut limit = u32::try_from(free.min(s.batch_size as usize)).unwrap_or(u32::MAX);
        // docs/semantics.md#rate-limits: a token per lease, taken before the claim.
        let mut granted = None;
        if let Some(limiter) = &ctx.limiter {
            match limiter.take(&s.task_name, limit, s.poll_interval).await {
                Grant::Claim(n) => {
                    limit = limit.min(n);
                    granted = Some(n);
                }
                Grant::Wait(wait) => {
                    ctx.observer.rate_limited(&s.task_name, wait);
                    tokio::select! {
                        _ = tokio::time::sleep(wait) => {}
                        _ = stopping.cancelled() => return,
                    }
                    continue;
                }
                Grant::Failed(e) => {
                    ctx.observer.store_error(&s.task_name, &e);
                    tokio::select! {
                        _ = tokio::time::sleep(s.poll_interval) => {}
                        _ = stopping.cancelled() => return,
                    }
                    continue;
                }
            }
        }
        let request = ClaimRequest {
            namespaces: s.scope.clone(),
            fair: s.fair.clone(),
            task_names: vec![s.task_name.clone()],
            limit,
            lease_duration_s: s.lease_duration_secs(),
            worker_id: s.worker_id.clone(),
            max_running: s.max_running,
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
        if let (Some(limiter), Some(n)) = (&ctx.limiter, granted) {
            let used = claimed
                .as_ref()
                .map_or(0, |l| u32::try_from(l.len()).unwrap_or(u32::MAX));
            limiter.refund(&s.task_name, n.saturating_sub(used)).await;
        }
        match claimed {
            Ok(leases) => {
                if std::mem::take(&mut probe) {
                    quarantine.lift_kind(QuarantineKind::Claim);
                }
                if stopping.is_cancelled() {
                    release_all(&ctx, leases).await;
                    return;
                }
                if leases.is_empty() {
                    tokio::select! {
                        _ = tokio::time::sleep(s.poll_interval) => {}
                        _ = stopping.cancelled() => return,
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
                    let delivery = deliver(
                        Arc::clone(&ctx),
                        lease,
                        hard_cancel.clone(),
                        permit,
                        claim_span.clone(),
                    );
                    // A task started while the worker runs also counts its own deliveries, so
                    // its stop can wait for them (crate::TaskSet).
                    match &task_tracker {
                        Some(own) => tracker.spawn(own.track_future(delivery)),
                        None => tracker.spawn(delivery),
                    };
                }
            }
            Err(e) if e.is_transient() => {
                tracing::warn!(task = %s.task_name, error = %e, "claim failed; retrying after poll_interval");
                tokio::select! {
                    _ = tokio::time::sleep(s.poll_interval) => {}
                    _ = stopping.cancelled() => return,
                }
            }
            Err(e) => {
                probe = false;
                // Reported (logged once, observed) at the top of the loop.
                quarantine.set(QuarantineCause::new(QuarantineKind::Claim, e.to_string()));
            }
        }
    }
}

/// Logs and observes a change of the task's quarantine since the last one reported (once per
/// change: the same cause again is not reported).
fn report(
    ctx: &TaskCtx,
    reported: &mut Option<QuarantineCause>,
    current: &Option<QuarantineCause>,
) {
    if reported == current {
        return;
    }
    let task = &ctx.settings.task_name;
    match current {
        Some(cause) => {
            let until = match cause.kind {
                QuarantineKind::Load => "until a build of its component loads".to_owned(),
                QuarantineKind::Claim => format!(
                    "until a claim succeeds (tried again every {} s)",
                    CLAIM_QUARANTINE_PROBE.as_secs()
                ),
            };
            tracing::error!(
                task = %task,
                reason = cause.kind.as_str(),
                error = %cause.message,
                "task quarantined: it claims nothing and its executions stay queued {until}; the other tasks run on"
            );
        }
        None => tracing::info!(task = %task, "task quarantine lifted: claiming again"),
    }
    ctx.observer.quarantine(task, current.as_ref());
    reported.clone_from(current);
}
