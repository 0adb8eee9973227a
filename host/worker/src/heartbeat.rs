//! The heartbeat of one source (docs/semantics.md#heartbeat, docs/semantics.md#delivery step
//! 2): every delivery registers its lease in the task's [`HeartbeatSet`]; one ticker per task
//! sends, every `heartbeat_interval`, ONE `heartbeat_many` call for every registered lease —
//! none while nothing is in flight — and hands each delivery its own answer: renewed (the new
//! expiry is remembered), `cancel_requested` (its handler is cancelled), stale (the lease is
//! lost: its handler is cancelled and the delivery writes nothing), a retryable failure
//! (retried within that lease's remaining time, as a batch with the other failing leases) or
//! any other failure (its handler is cancelled and the delivery completes `retrying`). A lease
//! whose heartbeat ended is no longer sent. An error for the whole call counts as that error
//! for every lease in it.
//!
//! A delivery that finishes unregisters and then waits for a call already carrying its lease
//! to return, so no heartbeat of that lease is in flight once its completion is written
//! (docs/semantics.md#delivery step 4), and an answer of that call still counts.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use chrono::{DateTime, Utc};
use onestep_core::diagnostics::JournalHandle;
use onestep_core::ports::LeaseStore;
use onestep_core::time::{SharedClock, seconds_between};
use onestep_core::{ExecutionError, HeartbeatResult, LeaseRef};
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::observe::{HeartbeatOutcome, WorkerObserver};

/// How the heartbeat of one lease ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HeartbeatEnd {
    /// The delivery finished and unregistered the lease.
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

/// What the ticker knows about one lease.
#[derive(Debug)]
struct SlotState {
    /// The last expiry the store confirmed (the claim's at first).
    lease_expires_at: DateTime<Utc>,
    /// Consecutive retryable failures.
    failures: u32,
    /// When a failed heartbeat is due again (`None` while the lease is healthy).
    retry_at: Option<Instant>,
    /// Set once, when the heartbeat of this lease ended.
    end: Option<HeartbeatEnd>,
    /// Fires when the call carrying this lease returns (`None` while none is in flight).
    in_call: Option<CancellationToken>,
}

/// One registered delivery.
struct Slot {
    lease: LeaseRef,
    handler_cancel: CancellationToken,
    /// The attempt's journal, whose progress and log tail the ticker persists while it runs.
    journal: Option<JournalHandle>,
    state: Mutex<SlotState>,
}

impl Slot {
    fn state(&self) -> MutexGuard<'_, SlotState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The in-flight leases of one task, keyed by attempt id.
#[derive(Default)]
pub(crate) struct HeartbeatSet {
    slots: Mutex<HashMap<Uuid, Arc<Slot>>>,
    /// Set once the store said it keeps no diagnostics: no more live writes.
    no_diagnostics: AtomicBool,
}

impl HeartbeatSet {
    fn slots(&self) -> MutexGuard<'_, HashMap<Uuid, Arc<Slot>>> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a delivery's lease (claimed with `lease_expires_at`) until the returned guard
    /// is finished or dropped. When its heartbeat ends other than by [`Registration::finish`],
    /// `handler_cancel` fires.
    pub(crate) fn register(
        self: &Arc<Self>,
        lease: LeaseRef,
        lease_expires_at: DateTime<Utc>,
        handler_cancel: CancellationToken,
        journal: Option<JournalHandle>,
    ) -> Registration {
        let slot = Arc::new(Slot {
            lease,
            handler_cancel,
            journal,
            state: Mutex::new(SlotState {
                lease_expires_at,
                failures: 0,
                retry_at: None,
                end: None,
                in_call: None,
            }),
        });
        self.slots().insert(lease.attempt_id, Arc::clone(&slot));
        Registration {
            set: Arc::clone(self),
            slot,
        }
    }

    /// The earliest retry of a failed heartbeat, if any.
    fn next_retry(&self) -> Option<Instant> {
        self.slots()
            .values()
            .filter_map(|s| s.state().retry_at)
            .min()
    }

    /// Takes the leases of the next call — every registered lease on a regular tick, else
    /// the failed ones that are due — and marks them as in a call that `done` ends.
    fn start_call(&self, regular: bool, done: &CancellationToken) -> Vec<Arc<Slot>> {
        let now = Instant::now();
        let slots = self.slots();
        let mut out = Vec::new();
        for slot in slots.values() {
            let mut st = slot.state();
            if regular || st.retry_at.is_some_and(|t| t <= now) {
                st.in_call = Some(done.clone());
                out.push(Arc::clone(slot));
            }
        }
        out
    }

    fn remove(&self, attempt_id: Uuid) {
        self.slots().remove(&attempt_id);
    }
}

/// A delivery's place in the [`HeartbeatSet`]; dropping it unregisters the delivery.
pub(crate) struct Registration {
    set: Arc<HeartbeatSet>,
    slot: Arc<Slot>,
}

impl Registration {
    /// Unregisters the delivery (no later call carries its lease), waits for a call already
    /// carrying it to return, and tells how its heartbeat ended.
    pub(crate) async fn finish(self) -> HeartbeatEnd {
        self.set.remove(self.slot.lease.attempt_id);
        let in_call = self.slot.state().in_call.clone();
        if let Some(done) = in_call {
            done.cancelled().await;
        }
        self.slot.state().end.unwrap_or(HeartbeatEnd::Stopped)
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.set.remove(self.slot.lease.attempt_id);
    }
}

/// The fixed inputs of a task's ticker.
pub(crate) struct Ticker {
    pub(crate) store: Arc<dyn LeaseStore>,
    pub(crate) set: Arc<HeartbeatSet>,
    /// Where the lease time left is measured (the store's clock in tests).
    pub(crate) clock: SharedClock,
    pub(crate) interval: Duration,
    pub(crate) lease_duration_s: f64,
    pub(crate) task_name: String,
    /// Told of every lease's answer.
    pub(crate) observer: Arc<dyn WorkerObserver>,
}

/// Runs until `stop` fires: every `interval`, one `heartbeat_many` call for every lease in the
/// set (skipped when there is none), and in between, when heartbeats failed with retryable
/// errors, one call for the failed leases at the earliest of their retry times.
pub(crate) async fn heartbeat_loop(t: Ticker, stop: CancellationToken) {
    let mut ticks = tokio::time::interval_at(Instant::now() + t.interval, t.interval);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        let retry_at = t.set.next_retry();
        let regular = tokio::select! {
            _ = stop.cancelled() => return,
            _ = ticks.tick() => true,
            _ = tokio::time::sleep_until(retry_at.unwrap_or_else(Instant::now)), if retry_at.is_some() => false,
        };
        let done = CancellationToken::new();
        // Whatever happens below, deliveries waiting on this call are released.
        let _release = done.clone().drop_guard();
        let slots = t.set.start_call(regular, &done);
        if slots.is_empty() {
            continue;
        }
        let leases: Vec<LeaseRef> = slots.iter().map(|s| s.lease).collect();
        let answer = tokio::select! {
            _ = stop.cancelled() => return,
            answer = t.store.heartbeat_many(&leases, t.lease_duration_s) => answer,
        };
        if let Err(e) = &answer {
            t.observer.store_error(&t.task_name, e);
        }
        let mut retrying = 0usize;
        let mut first_error = None;
        for (k, slot) in slots.iter().enumerate() {
            let item = match &answer {
                Ok(items) => items.get(k).cloned().unwrap_or_else(|| {
                    Err(ExecutionError::invalid(format!(
                        "heartbeat_many answered {} of {} leases",
                        items.len(),
                        leases.len()
                    )))
                }),
                Err(e) => Err(e.clone()),
            };
            t.observer.heartbeat(&t.task_name, outcome_of(&item));
            if let Err(e) = &item
                && e.is_transient()
            {
                first_error.get_or_insert_with(|| e.clone());
            }
            if t.apply(slot, item) {
                retrying += 1;
            }
        }
        if let Some(e) = first_error
            && retrying > 0
        {
            tracing::warn!(task = %t.task_name, leases = retrying, error = %e, "heartbeat failed; retrying within the leases");
        }
        if regular {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = t.write_live(&slots) => {}
            }
        }
        for slot in &slots {
            slot.state().in_call = None;
        }
    }
}

/// The observer's name for one lease's answer.
fn outcome_of(answer: &Result<HeartbeatResult, ExecutionError>) -> HeartbeatOutcome {
    match answer {
        Ok(beat) if beat.cancel_requested => HeartbeatOutcome::CancelRequested,
        Ok(_) => HeartbeatOutcome::Renewed,
        Err(ExecutionError::StaleLease(_)) => HeartbeatOutcome::Stale,
        Err(_) => HeartbeatOutcome::Error,
    }
}

impl Ticker {
    /// The live diagnostics write of a regular tick (docs/observability.md#attempt-diagnostics):
    /// the progress and log tail of every lease still beating whose journal changed since its
    /// last write, in one `record_live` call, while the deliveries' completions wait for this
    /// call (so a live write never lands after the final one; the store also refuses that).
    async fn write_live(&self, slots: &[Arc<Slot>]) {
        if self.set.no_diagnostics.load(Ordering::Relaxed) {
            return;
        }
        let mut items = Vec::new();
        let mut journals = Vec::new();
        for slot in slots {
            if slot.state().end.is_some() {
                continue;
            }
            if let Some(journal) = &slot.journal
                && let Some(live) = journal.live()
            {
                items.push((slot.lease, live));
                journals.push(journal);
            }
        }
        if items.is_empty() {
            return;
        }
        match self.store.record_live(&items).await {
            Ok(true) => {}
            Ok(false) => self.set.no_diagnostics.store(true, Ordering::Relaxed),
            Err(e) => {
                self.observer.store_error(&self.task_name, &e);
                tracing::debug!(task = %self.task_name, error = %e, "live diagnostics not written; next tick tries again");
                for journal in journals {
                    journal.unpersist();
                }
            }
        }
    }

    /// Applies one lease's answer; `true` when it will be retried.
    fn apply(&self, slot: &Slot, answer: Result<HeartbeatResult, ExecutionError>) -> bool {
        let lease = &slot.lease;
        let mut st = slot.state();
        if st.end.is_some() {
            return false;
        }
        let end = match answer {
            Ok(beat) => {
                st.lease_expires_at = beat.lease_expires_at;
                st.failures = 0;
                st.retry_at = None;
                if !beat.cancel_requested {
                    return false;
                }
                HeartbeatEnd::CancelRequested
            }
            Err(e) if e.is_transient() => {
                let remaining = seconds_between(self.clock.now(), st.lease_expires_at);
                if remaining > 0.0 {
                    let backoff =
                        self.interval.as_secs_f64() * 2f64.powi(st.failures.min(10) as i32);
                    let wait = backoff.min(remaining / 4.0).max(0.001);
                    tracing::debug!(execution_id = %lease.execution_id, attempt_id = %lease.attempt_id, error = %e, retry_in_s = wait, "heartbeat failed; retrying");
                    st.failures += 1;
                    st.retry_at = Some(Instant::now() + Duration::from_secs_f64(wait));
                    return true;
                }
                tracing::warn!(execution_id = %lease.execution_id, attempt_id = %lease.attempt_id, error = %e, "heartbeat failed until the lease ran out");
                HeartbeatEnd::LeaseLost
            }
            Err(e @ ExecutionError::StaleLease(_)) => {
                tracing::warn!(execution_id = %lease.execution_id, attempt_id = %lease.attempt_id, error = %e, "lease lost; stopping the handler");
                HeartbeatEnd::LeaseLost
            }
            Err(e) => {
                tracing::error!(execution_id = %lease.execution_id, attempt_id = %lease.attempt_id, error = %e, "heartbeat failed; stopping the handler");
                HeartbeatEnd::Failed
            }
        };
        st.end = Some(end);
        st.retry_at = None;
        drop(st);
        slot.handler_cancel.cancel();
        self.set.remove(lease.attempt_id);
        false
    }
}
