//! The cancel poll of one source (docs/semantics.md#cancel-poll): every delivery registers its
//! lease in the task's [`CancelWatch`]; one loop per task asks the store, at most every
//! `cancel_poll_interval`, which of the registered leases have a cancel request — one
//! set-based call for all of them, none while nothing is in flight — and fires the matching
//! deliveries' handler cancellation, as the heartbeat does when it reports `cancel_requested`.
//! A cancel therefore reaches even a busy guest within about one poll interval whatever the
//! heartbeat interval; a failed poll only delays that to the next poll or heartbeat.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use onestep_core::LeaseRef;
use onestep_core::ports::LeaseStore;
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

use crate::observe::WorkerObserver;
use uuid::Uuid;

/// One registered delivery.
struct Entry {
    lease: LeaseRef,
    handler_cancel: CancellationToken,
    requested: Arc<AtomicBool>,
}

/// The in-flight leases of one task, keyed by attempt id.
#[derive(Default)]
pub(crate) struct CancelWatch {
    entries: Mutex<HashMap<Uuid, Entry>>,
}

impl CancelWatch {
    fn entries(&self) -> MutexGuard<'_, HashMap<Uuid, Entry>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a delivery until the returned guard is finished or dropped. When a poll finds a
    /// cancel request for `lease`, `handler_cancel` fires and [`Registration::finish`] answers
    /// true.
    pub(crate) fn register(
        self: &Arc<Self>,
        lease: LeaseRef,
        handler_cancel: CancellationToken,
    ) -> Registration {
        let requested = Arc::new(AtomicBool::new(false));
        self.entries().insert(
            lease.attempt_id,
            Entry {
                lease,
                handler_cancel,
                requested: Arc::clone(&requested),
            },
        );
        Registration {
            watch: Arc::clone(self),
            attempt_id: lease.attempt_id,
            requested,
        }
    }

    fn leases(&self) -> Vec<LeaseRef> {
        self.entries().values().map(|e| e.lease).collect()
    }

    /// Fires the deliveries of the executions in `ids` (still registered ones only).
    fn fire(&self, ids: &[Uuid]) {
        let ids: HashSet<&Uuid> = ids.iter().collect();
        for entry in self.entries().values() {
            if ids.contains(&entry.lease.execution_id) {
                entry.requested.store(true, Ordering::SeqCst);
                entry.handler_cancel.cancel();
            }
        }
    }
}

/// A delivery's place in the [`CancelWatch`]; dropping it unregisters the delivery.
pub(crate) struct Registration {
    watch: Arc<CancelWatch>,
    attempt_id: Uuid,
    requested: Arc<AtomicBool>,
}

impl Registration {
    /// Unregisters the delivery (no poll fires it from now on) and tells whether a poll found a
    /// cancel request for it (and cancelled its handler).
    pub(crate) fn finish(self) -> bool {
        let requested = Arc::clone(&self.requested);
        drop(self);
        requested.load(Ordering::SeqCst)
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.watch.entries().remove(&self.attempt_id);
    }
}

/// Polls until `stop` fires: every `interval`, one `cancel_requested` call for every lease in
/// `watch` (skipped when there is none). A failure is logged (a warning for the first of a
/// run of failures) and the next tick tries again.
pub(crate) async fn cancel_poll_loop(
    store: Arc<dyn LeaseStore>,
    watch: Arc<CancelWatch>,
    interval: Duration,
    task_name: String,
    observer: Arc<dyn WorkerObserver>,
    stop: CancellationToken,
) {
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut failing = false;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = ticks.tick() => {}
        }
        let leases = watch.leases();
        if leases.is_empty() {
            continue;
        }
        let answer = tokio::select! {
            _ = stop.cancelled() => return,
            answer = store.cancel_requested(&leases) => answer,
        };
        match answer {
            Ok(ids) => {
                failing = false;
                if !ids.is_empty() {
                    tracing::debug!(task = %task_name, executions = ids.len(), "cancel requested; stopping the handlers");
                    watch.fire(&ids);
                }
            }
            Err(e) if !failing => {
                observer.store_error(&task_name, &e);
                failing = true;
                tracing::warn!(task = %task_name, error = %e, "cancel poll failed; cancel requests wait for the next poll or heartbeat");
            }
            Err(e) => {
                observer.store_error(&task_name, &e);
                tracing::debug!(task = %task_name, error = %e, "cancel poll failed again");
            }
        }
    }
}
