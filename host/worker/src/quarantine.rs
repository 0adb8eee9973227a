//! Quarantine of one task (docs/security.md#one-tenants-bad-deploy): a task whose component
//! cannot be loaded, or whose claims fail with a non-retryable error, stops claiming while every
//! other task of the worker runs on. Its executions stay `queued` (nothing is claimed, so
//! nothing is failed or retried). A [`Quarantine`] is the task's switch, shared by the worker
//! (its fetch loop waits while it is set, sets it on a non-retryable claim error and lifts it
//! when a later probe claim succeeds) and whoever loads the task's handler (the CLI sets it when
//! the component cannot be loaded and lifts it when a good build is reloaded). The fetch loop
//! tells the [`WorkerObserver`](crate::WorkerObserver) and the log of every change, once.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

/// How long a task quarantined by a non-retryable claim error waits before it tries one claim
/// again (a success lifts the quarantine; another non-retryable error keeps it, silently when
/// the error is the same).
pub const CLAIM_QUARANTINE_PROBE: Duration = Duration::from_secs(60);

/// Why a task is quarantined: a small fixed set, used as a metric label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuarantineKind {
    /// The task's component cannot be loaded (missing file, not a component, an import the
    /// task's sandbox does not grant, over its limits).
    Load,
    /// A claim of the task failed with a non-retryable error.
    Claim,
}

impl QuarantineKind {
    /// The label value: `load` or `claim`.
    pub fn as_str(self) -> &'static str {
        match self {
            QuarantineKind::Load => "load",
            QuarantineKind::Claim => "claim",
        }
    }
}

/// What quarantined a task: its kind and the full error message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuarantineCause {
    /// The kind (the metric's `reason` label).
    pub kind: QuarantineKind,
    /// The error, as the log and `/readyz` show it.
    pub message: String,
}

impl QuarantineCause {
    /// A cause of `kind` with `message`.
    pub fn new(kind: QuarantineKind, message: impl Into<String>) -> Self {
        QuarantineCause {
            kind,
            message: message.into(),
        }
    }
}

/// One task's quarantine switch (cheap to clone: clones share the switch). Not quarantined when
/// created.
#[derive(Debug, Clone)]
pub struct Quarantine {
    state: Arc<watch::Sender<Option<QuarantineCause>>>,
}

impl Default for Quarantine {
    fn default() -> Self {
        Quarantine {
            state: Arc::new(watch::Sender::new(None)),
        }
    }
}

impl Quarantine {
    /// A switch that is not set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Quarantines the task for `cause` (replacing an earlier cause). Returns whether anything
    /// changed (the same cause again changes nothing and is not reported again).
    pub fn set(&self, cause: QuarantineCause) -> bool {
        self.state.send_if_modified(|current| {
            if current.as_ref() == Some(&cause) {
                false
            } else {
                *current = Some(cause);
                true
            }
        })
    }

    /// Lifts the quarantine. Returns whether the task was quarantined.
    pub fn lift(&self) -> bool {
        self.state
            .send_if_modified(|current| current.take().is_some())
    }

    /// Lifts the quarantine if its cause is of `kind` (a cause of another kind stays).
    pub fn lift_kind(&self, kind: QuarantineKind) -> bool {
        self.state.send_if_modified(|current| {
            if current.as_ref().is_some_and(|c| c.kind == kind) {
                *current = None;
                true
            } else {
                false
            }
        })
    }

    /// The current cause, `None` when the task is not quarantined.
    pub fn cause(&self) -> Option<QuarantineCause> {
        self.state.borrow().clone()
    }

    /// Whether the task is quarantined.
    pub fn is_set(&self) -> bool {
        self.state.borrow().is_some()
    }

    pub(crate) fn subscribe(&self) -> watch::Receiver<Option<QuarantineCause>> {
        self.state.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_and_lift_report_changes_only() {
        let q = Quarantine::new();
        assert!(!q.is_set());
        assert!(!q.lift());
        let cause = QuarantineCause::new(QuarantineKind::Load, "bad import");
        assert!(q.set(cause.clone()));
        assert!(!q.set(cause.clone()), "the same cause is no change");
        assert!(q.set(QuarantineCause::new(QuarantineKind::Load, "other")));
        assert_eq!(
            q.clone().cause().map(|c| c.kind),
            Some(QuarantineKind::Load)
        );
        assert!(q.lift());
        assert!(q.cause().is_none());
        assert_eq!(QuarantineKind::Claim.as_str(), "claim");
    }
}
