//! [`CancelHandle`]: the worker's way to stop an attempt.

use std::sync::Arc;
use std::time::Instant;
use tokio::sync::watch;

/// A cheap-to-clone cancellation signal for one (or several) invocations.
///
/// Triggering it makes the guest's `cancel-requested()` return `true` and, if
/// the guest does not return by itself, stops it: a guest running wasm code is
/// interrupted at the next epoch tick, a guest blocked in a host call (sleep,
/// poll) has its call future dropped at once — after the sandbox's
/// `cancel_grace` (default [`DEFAULT_CANCEL_GRACE`](onestep_core::settings::DEFAULT_CANCEL_GRACE), 50 ms), during which a cooperative guest can
/// return by itself. Cancellation is sticky.
#[derive(Debug, Clone)]
pub struct CancelHandle {
    /// `Some(when)` once cancelled.
    tx: Arc<watch::Sender<Option<Instant>>>,
}

impl Default for CancelHandle {
    fn default() -> Self {
        Self::new()
    }
}

impl CancelHandle {
    /// A new, untriggered handle.
    pub fn new() -> Self {
        let (tx, _rx) = watch::channel(None);
        Self { tx: Arc::new(tx) }
    }

    /// Requests cancellation (idempotent).
    pub fn cancel(&self) {
        self.tx.send_if_modified(|at| {
            if at.is_none() {
                *at = Some(Instant::now());
                true
            } else {
                false
            }
        });
    }

    /// Whether [`cancel`](Self::cancel) has been called.
    pub fn is_cancelled(&self) -> bool {
        self.tx.borrow().is_some()
    }

    /// When [`cancel`](Self::cancel) was first called.
    pub fn cancelled_at(&self) -> Option<Instant> {
        *self.tx.borrow()
    }

    /// Resolves once cancellation is requested (immediately if it already was).
    pub async fn cancelled(&self) {
        let mut rx = self.tx.subscribe();
        // `wait_for` only fails if the sender is dropped, and we hold it.
        let _ = rx.wait_for(|c| c.is_some()).await;
    }
}
