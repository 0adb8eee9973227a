//! What the worker tells an observer as it works (docs/observability.md#worker-metrics): the
//! worker calls a [`WorkerObserver`] at every claim, attempt start and end, heartbeat answer and
//! storage error, and knows nothing of how it is exported (the CLI turns it into Prometheus
//! metrics and the health endpoints). Every method has an empty default, so an observer
//! implements only what it needs; calls are cheap and never block.

use std::time::Duration;

use onestep_core::{ExecutionError, ExecutionStatus};

use crate::quarantine::QuarantineCause;

/// How one attempt ended, as far as the worker knows.
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptEnd {
    /// The status the completion left the execution in (`succeeded`, `failed`, `retrying`,
    /// `cancelled`), or `None` when nothing was written (the lease was lost, or the completion
    /// could not be written and is left to lease expiry).
    pub status: Option<ExecutionStatus>,
    /// Claim to completion.
    pub duration: Duration,
    /// For `failed` and `retrying`: the error object's `kind` and `exception_type`.
    pub failure: Option<(String, String)>,
    /// The lease was lost (the delivery wrote nothing).
    pub lease_lost: bool,
}

/// One lease's heartbeat answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeartbeatOutcome {
    /// Renewed.
    Renewed,
    /// Renewed, and a cancel was requested.
    CancelRequested,
    /// The lease is no longer ours.
    Stale,
    /// The call failed (retried within the lease when transient).
    Error,
}

impl HeartbeatOutcome {
    /// The label value (`renewed`, `cancel_requested`, `stale`, `error`).
    pub fn as_str(self) -> &'static str {
        match self {
            HeartbeatOutcome::Renewed => "renewed",
            HeartbeatOutcome::CancelRequested => "cancel_requested",
            HeartbeatOutcome::Stale => "stale",
            HeartbeatOutcome::Error => "error",
        }
    }
}

/// Receives what the worker does. Implementations must be cheap: they are called on the hot
/// path.
pub trait WorkerObserver: Send + Sync + std::fmt::Debug {
    /// A claim of `task` returned `leases` leases after `elapsed` (also called with 0 leases:
    /// the store answered).
    fn claimed(&self, task: &str, leases: usize, elapsed: Duration) {
        let _ = (task, leases, elapsed);
    }
    /// An attempt of `task` started, `queue_wait` after the execution became available.
    fn attempt_started(&self, task: &str, queue_wait: Duration) {
        let _ = (task, queue_wait);
    }
    /// An attempt of `task` ended.
    fn attempt_finished(&self, task: &str, end: &AttemptEnd) {
        let _ = (task, end);
    }
    /// An attempt of `task` parked (T15, docs/steps.md#sleep): its execution waits, `queued`,
    /// for `sleep` (from now to its wake time) and holds no slot or lease meanwhile.
    fn parked(&self, task: &str, sleep: Duration) {
        let _ = (task, sleep);
    }
    /// One lease of `task` got its heartbeat answer.
    fn heartbeat(&self, task: &str, outcome: HeartbeatOutcome) {
        let _ = (task, outcome);
    }
    /// A storage call of `task` failed (claim, heartbeat, completion, release, cancel poll).
    fn store_error(&self, task: &str, error: &ExecutionError) {
        let _ = (task, error);
    }
    /// `task`'s fetch loop found no token in its rate-limit bucket and waits `wait`
    /// (docs/semantics.md#rate-limits).
    fn rate_limited(&self, task: &str, wait: Duration) {
        let _ = (task, wait);
    }
    /// `task` was quarantined for `cause`, or its quarantine was lifted (`None`)
    /// (docs/security.md#one-tenants-bad-deploy). Called once per change.
    fn quarantine(&self, task: &str, cause: Option<&QuarantineCause>) {
        let _ = (task, cause);
    }
}

/// The observer that ignores everything (the default).
#[derive(Debug, Default)]
pub struct NoObserver;

impl WorkerObserver for NoObserver {}
