//! Typed worker settings (docs/semantics.md#worker-settings, docs/semantics.md#fetch-loop, docs/semantics.md#timeouts, docs/semantics.md#shutdown-and-drain). Their defaults are the constants of
//! [`onestep_core::settings`], the same ones the config crate applies to a file; settings loaded
//! from a file arrive validated by the config crate, and [`TaskSettings::validate`] applies the
//! same rules (the same functions) to settings built in code, when a [`Worker`](crate::Worker)
//! is created.

use std::sync::Arc;
use std::time::Duration;

use onestep_core::ports::LeaseStore;
use onestep_core::retry::RetryPolicy;
use onestep_core::runner::TaskRunner;
use onestep_core::settings::{
    DEFAULT_BATCH_SIZE, DEFAULT_CONCURRENCY, DEFAULT_HEARTBEAT_INTERVAL, DEFAULT_LEASE_DURATION,
    DEFAULT_POLL_INTERVAL, DEFAULT_SHUTDOWN_GRACE, DEFAULT_SHUTDOWN_TIMEOUT, DEFAULT_WORKER_ID,
    cancel_poll_fits_heartbeat, default_cancel_poll_interval, heartbeat_fits_lease,
};
use onestep_core::{ExecutionError, Limits};

use crate::quarantine::Quarantine;

/// Settings of one task: its source (namespace, task name, polling, lease) and its execution
/// (concurrency, retry, timeout).
#[derive(Debug, Clone)]
pub struct TaskSettings {
    /// The task name the source claims (exactly one, docs/semantics.md#worker-settings).
    pub task_name: String,
    /// The namespace the source claims from (for a source with several: its label, `a,b` or
    /// `*`, used in logs and metrics).
    pub namespace: String,
    /// The namespaces the source claims from (docs/semantics.md#fair-claim).
    pub scope: onestep_core::request::NamespaceScope,
    /// Weights and the per-key cap of its fair claim (docs/semantics.md#fair-claim).
    pub fair: onestep_core::schedule::FairShare,
    /// The worker id written into leases and attempts (1–255 characters).
    pub worker_id: String,
    /// Maximum leases per claim (≥ 1; default 100).
    pub batch_size: u32,
    /// Wait between empty claims (default 1 s).
    pub poll_interval: Duration,
    /// Lease length (> 0; default 90 s). The ports take it in seconds:
    /// [`lease_duration_secs`](Self::lease_duration_secs).
    pub lease_duration: Duration,
    /// Heartbeat period (≤ lease / 3; default 30 s).
    pub heartbeat_interval: Duration,
    /// Period of the source's cancel poll (docs/semantics.md#cancel-poll; `0 < poll <=
    /// heartbeat_interval`; default 1 s, or the heartbeat period when shorter). Give a
    /// heartbeat below 1 s a poll no longer than it.
    pub cancel_poll_interval: Duration,
    /// Maximum executions in flight for this task in this process (≥ 1; default 1).
    pub concurrency: u32,
    /// What to do after a retryable failure.
    pub retry: RetryPolicy,
    /// Wall-clock limit of one handler call (`timeout_s`).
    pub timeout: Option<Duration>,
    /// Wall-clock limit of the whole execution from its first start, sleeps and retries
    /// included (`max_duration_s`, docs/steps.md#max-duration); `None` = no limit.
    pub max_duration: Option<Duration>,
    /// Result size limit in bytes of canonical JSON, checked before the completion is written.
    pub max_result_bytes: usize,
    /// Fleet-wide limit on the task's execution starts (docs/semantics.md#rate-limits); needs a
    /// bucket store ([`Worker::with_rate_limits`](crate::Worker::with_rate_limits)).
    pub rate_limit: Option<onestep_core::rate::RateLimit>,
    /// Most executions of the task running at once across the whole fleet
    /// (docs/semantics.md#max-running; ≥ 1); `None` = no cap.
    pub max_running: Option<u32>,
}

impl TaskSettings {
    /// The defaults ([`onestep_core::settings`], [`Limits::default`]) for `task_name` in
    /// `namespace`.
    pub fn new(namespace: &str, task_name: &str) -> Self {
        TaskSettings {
            task_name: task_name.to_owned(),
            namespace: namespace.to_owned(),
            scope: onestep_core::request::NamespaceScope::One(namespace.to_owned()),
            fair: onestep_core::schedule::FairShare::default(),
            worker_id: DEFAULT_WORKER_ID.to_owned(),
            batch_size: DEFAULT_BATCH_SIZE,
            poll_interval: DEFAULT_POLL_INTERVAL,
            lease_duration: DEFAULT_LEASE_DURATION,
            heartbeat_interval: DEFAULT_HEARTBEAT_INTERVAL,
            cancel_poll_interval: default_cancel_poll_interval(DEFAULT_HEARTBEAT_INTERVAL),
            concurrency: DEFAULT_CONCURRENCY,
            retry: RetryPolicy::NoRetry,
            timeout: None,
            max_duration: None,
            max_result_bytes: Limits::default().max_result_bytes,
            rate_limit: None,
            max_running: None,
        }
    }

    /// The lease length in seconds, as the core ports (`ClaimRequest`, `LeaseStore::heartbeat`)
    /// take it: the one `Duration` → seconds conversion of the worker.
    pub fn lease_duration_secs(&self) -> f64 {
        self.lease_duration.as_secs_f64()
    }

    /// Checks the invariants the worker relies on: batch and concurrency ≥ 1, positive poll
    /// interval, a lease the store accepts, `0 < heartbeat_interval <= lease_duration / 3`
    /// ([`heartbeat_fits_lease`]), `0 < cancel_poll_interval <= heartbeat_interval`
    /// ([`cancel_poll_fits_heartbeat`]), a valid retry policy and a positive timeout.
    pub fn validate(&self) -> Result<(), ExecutionError> {
        if self.batch_size < 1 {
            return Err(ExecutionError::invalid("batch_size must be >= 1"));
        }
        if self.concurrency < 1 {
            return Err(ExecutionError::invalid("concurrency must be >= 1"));
        }
        if self.poll_interval.is_zero() {
            return Err(ExecutionError::invalid("poll_interval_s must be > 0"));
        }
        onestep_core::request::validate_lease_duration(self.lease_duration_secs())?;
        if !heartbeat_fits_lease(self.heartbeat_interval, self.lease_duration) {
            return Err(ExecutionError::invalid(
                "heartbeat_interval_s must be > 0 and <= lease_duration_s / 3",
            ));
        }
        if !cancel_poll_fits_heartbeat(self.cancel_poll_interval, self.heartbeat_interval) {
            return Err(ExecutionError::invalid(
                "cancel_poll_interval_s must be > 0 and <= heartbeat_interval_s",
            ));
        }
        if self.timeout.is_some_and(|t| t.is_zero()) {
            return Err(ExecutionError::invalid("timeout_s must be > 0"));
        }
        if self.max_duration.is_some_and(|t| t.is_zero()) {
            return Err(ExecutionError::invalid("max_duration_s must be > 0"));
        }
        if let Some(rate) = self.rate_limit {
            rate.validate()
                .map_err(|m| ExecutionError::invalid(format!("rate_limit: {m}")))?;
        }
        if self.max_running == Some(0) {
            return Err(ExecutionError::invalid("max_running must be >= 1"));
        }
        self.retry.validate()
    }
}

/// One task wired to its storage and its handler.
#[derive(Clone)]
pub struct TaskBinding {
    /// The task's settings.
    pub settings: TaskSettings,
    /// Where leases come from.
    pub store: Arc<dyn LeaseStore>,
    /// What runs the handler.
    pub runner: Arc<dyn TaskRunner>,
    /// The task's quarantine switch (docs/security.md#one-tenants-bad-deploy): while it is set
    /// the task claims nothing. [`Quarantine::default`] is not set.
    pub quarantine: Quarantine,
}

impl std::fmt::Debug for TaskBinding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskBinding")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// Process-wide settings (docs/semantics.md#shutdown-and-drain).
#[derive(Debug, Clone)]
pub struct WorkerSettings {
    /// How long in-flight executions may run after a shutdown signal before they are cancelled
    /// (`shutdown_timeout_s`, default [`DEFAULT_SHUTDOWN_TIMEOUT`]; `None` waits forever).
    pub shutdown_timeout: Option<Duration>,
    /// After cancelling the remainder, how long their `retrying` completions (or releases) may
    /// take to reach the database before the worker returns (default
    /// [`DEFAULT_SHUTDOWN_GRACE`], 10 s). Not the sandbox's `cancel_grace_ms`, which is how long a
    /// cancelled guest may run on.
    pub shutdown_grace: Duration,
    /// Largest number of completions written in one `complete_many` transaction (default 64).
    pub completion_batch: usize,
}

impl Default for WorkerSettings {
    fn default() -> Self {
        WorkerSettings {
            shutdown_timeout: Some(DEFAULT_SHUTDOWN_TIMEOUT),
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
            completion_batch: 64,
        }
    }
}
