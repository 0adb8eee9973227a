//! The worker: one fetch loop, one heartbeat ticker and one cancel poll per task, shared
//! completion writers, and the graceful drain. A task that cannot run is quarantined on its own
//! ([`crate::Quarantine`]); only a fetch loop that panics stops the worker.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use onestep_core::rate::RateLimitStore;
use onestep_core::time::SharedClock;
use onestep_core::{ExecutionError, ExecutionStatus, SystemClock};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::cancel_poll::{CancelWatch, cancel_poll_loop};
use crate::completer::Completer;
use crate::delivery::TaskCtx;
use crate::fetch::fetch_loop;
use crate::heartbeat::{HeartbeatSet, Ticker, heartbeat_loop};
use crate::limiter::Limiter;
use crate::observe::{NoObserver, WorkerObserver};
use crate::settings::{TaskBinding, WorkerSettings};

/// Why a worker stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// A task's settings are invalid.
    #[error("task '{task}': {source}")]
    InvalidTask {
        /// The task name.
        task: String,
        /// The rule that failed.
        source: ExecutionError,
    },
    /// A task's fetch loop stopped unexpectedly (it panicked); the worker drained and stopped.
    /// (A non-retryable claim error quarantines its task instead, docs/semantics.md#fetch-loop.)
    #[error("a fetch loop stopped unexpectedly: {0}")]
    FetchLoop(String),
}

/// Counters of what a worker did (monotonic, for logs and benchmarks).
#[derive(Debug, Default)]
pub struct WorkerStats {
    claimed: AtomicU64,
    succeeded: AtomicU64,
    failed: AtomicU64,
    retried: AtomicU64,
    cancelled: AtomicU64,
    lease_lost: AtomicU64,
    released: AtomicU64,
    completion_errors: AtomicU64,
}

impl WorkerStats {
    pub(crate) fn record_claimed(&self, n: usize) {
        self.claimed.fetch_add(n as u64, Ordering::Relaxed);
    }
    pub(crate) fn record_completion(&self, status: ExecutionStatus) {
        let counter = match status {
            ExecutionStatus::Succeeded => &self.succeeded,
            ExecutionStatus::Failed => &self.failed,
            ExecutionStatus::Retrying => &self.retried,
            ExecutionStatus::Cancelled => &self.cancelled,
            _ => return,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
    pub(crate) fn record_lease_lost(&self) {
        self.lease_lost.fetch_add(1, Ordering::Relaxed);
    }
    pub(crate) fn record_release(&self) {
        self.released.fetch_add(1, Ordering::Relaxed);
    }
    pub(crate) fn record_completion_error(&self) {
        self.completion_errors.fetch_add(1, Ordering::Relaxed);
    }

    /// Leases claimed.
    pub fn claimed(&self) -> u64 {
        self.claimed.load(Ordering::Relaxed)
    }
    /// Completions that left the execution `succeeded`.
    pub fn succeeded(&self) -> u64 {
        self.succeeded.load(Ordering::Relaxed)
    }
    /// Completions that left the execution `failed`.
    pub fn failed(&self) -> u64 {
        self.failed.load(Ordering::Relaxed)
    }
    /// Completions that left the execution `retrying`.
    pub fn retried(&self) -> u64 {
        self.retried.load(Ordering::Relaxed)
    }
    /// Completions that left the execution `cancelled`.
    pub fn cancelled(&self) -> u64 {
        self.cancelled.load(Ordering::Relaxed)
    }
    /// Deliveries that lost their lease and wrote nothing.
    pub fn lease_lost(&self) -> u64 {
        self.lease_lost.load(Ordering::Relaxed)
    }
    /// Leases released unstarted.
    pub fn released(&self) -> u64 {
        self.released.load(Ordering::Relaxed)
    }
    /// Completions that could not be written (left to lease expiry).
    pub fn completion_errors(&self) -> u64 {
        self.completion_errors.load(Ordering::Relaxed)
    }
}

/// A worker process's task set.
pub struct Worker {
    tasks: Vec<TaskBinding>,
    settings: WorkerSettings,
    stats: Arc<WorkerStats>,
    clock: SharedClock,
    observer: Arc<dyn WorkerObserver>,
    /// The bucket store of each task with a `rate_limit`, by task name.
    rate_limits: BTreeMap<String, Arc<dyn RateLimitStore>>,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("tasks", &self.tasks)
            .field("settings", &self.settings)
            .field("stats", &self.stats)
            .field("observer", &self.observer)
            .field("rate_limited_tasks", &self.rate_limits.keys())
            .finish_non_exhaustive()
    }
}

impl Worker {
    /// Validates every task's settings.
    pub fn new(tasks: Vec<TaskBinding>, settings: WorkerSettings) -> Result<Self, WorkerError> {
        for t in &tasks {
            t.settings
                .validate()
                .map_err(|source| WorkerError::InvalidTask {
                    task: t.settings.task_name.clone(),
                    source,
                })?;
        }
        Ok(Worker {
            tasks,
            settings,
            stats: Arc::new(WorkerStats::default()),
            clock: Arc::new(SystemClock),
            observer: Arc::new(NoObserver),
            rate_limits: BTreeMap::new(),
        })
    }

    /// Reads "now" from `clock` instead of the system clock (the lease time left when heartbeats
    /// fail is measured on it). Give it the clock the store uses, e.g. a manual clock in tests.
    pub fn with_clock(mut self, clock: SharedClock) -> Self {
        self.clock = clock;
        self
    }

    /// Tells `observer` of every claim, attempt, heartbeat answer and storage error
    /// (docs/observability.md#worker-metrics).
    pub fn with_observer(mut self, observer: Arc<dyn WorkerObserver>) -> Self {
        self.observer = observer;
        self
    }

    /// Keeps `task`'s rate-limit bucket in `store` (its backend's buckets, shared by the fleet;
    /// docs/semantics.md#rate-limits). A task whose settings have a `rate_limit` needs one.
    pub fn with_rate_limits(mut self, task: &str, store: Arc<dyn RateLimitStore>) -> Self {
        self.rate_limits.insert(task.to_owned(), store);
        self
    }

    /// The worker's counters.
    pub fn stats(&self) -> Arc<WorkerStats> {
        Arc::clone(&self.stats)
    }

    /// Runs until `shutdown` fires (a task whose claims fail with a non-retryable error is
    /// quarantined, docs/security.md#one-tenants-bad-deploy, the others run on), then drains (docs/semantics.md#shutdown-and-drain):
    /// stop claiming; give in-flight executions `shutdown_timeout`; cancel the remainder and
    /// give their `retrying` completions `shutdown_grace` to be written; return.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), WorkerError> {
        let mut limiters = BTreeMap::new();
        for task in &self.tasks {
            let name = &task.settings.task_name;
            let Some(rate) = task.settings.rate_limit else {
                continue;
            };
            let Some(store) = self.rate_limits.get(name) else {
                return Err(WorkerError::InvalidTask {
                    task: name.clone(),
                    source: ExecutionError::invalid(
                        "rate_limit needs a rate-limit bucket store (Worker::with_rate_limits)",
                    ),
                });
            };
            limiters.insert(name.clone(), Limiter::new(Arc::clone(store), name, rate));
        }
        let stopping = shutdown.child_token();
        let hard_cancel = CancellationToken::new();
        let tracker = TaskTracker::new();
        let mut writers = Vec::new();
        let stop_tickers = CancellationToken::new();
        let mut tickers = Vec::new();
        let mut loops = JoinSet::new();
        for task in &self.tasks {
            let (completer, writer) =
                Completer::spawn(Arc::clone(&task.store), self.settings.completion_batch);
            writers.push(writer);
            let heartbeats = Arc::new(HeartbeatSet::default());
            tickers.push(tokio::spawn(heartbeat_loop(
                Ticker {
                    store: Arc::clone(&task.store),
                    set: Arc::clone(&heartbeats),
                    clock: Arc::clone(&self.clock),
                    interval: task.settings.heartbeat_interval,
                    lease_duration_s: task.settings.lease_duration_secs(),
                    task_name: task.settings.task_name.clone(),
                    observer: Arc::clone(&self.observer),
                },
                stop_tickers.clone(),
            )));
            let cancel_watch = Arc::new(CancelWatch::default());
            tickers.push(tokio::spawn(cancel_poll_loop(
                Arc::clone(&task.store),
                Arc::clone(&cancel_watch),
                task.settings.cancel_poll_interval,
                task.settings.task_name.clone(),
                Arc::clone(&self.observer),
                stop_tickers.clone(),
            )));
            let ctx = Arc::new(TaskCtx {
                settings: task.settings.clone(),
                store: Arc::clone(&task.store),
                runner: Arc::clone(&task.runner),
                completer,
                stats: Arc::clone(&self.stats),
                cancel_watch,
                heartbeats,
                observer: Arc::clone(&self.observer),
                clock: Arc::clone(&self.clock),
                limiter: limiters.get(&task.settings.task_name).cloned(),
            });
            loops.spawn(fetch_loop(
                ctx,
                task.quarantine.clone(),
                stopping.clone(),
                hard_cancel.clone(),
                tracker.clone(),
            ));
        }
        tracing::info!(tasks = self.tasks.len(), "worker started");

        let mut fatal: Option<WorkerError> = None;
        while let Some(joined) = loops.join_next().await {
            match joined {
                Ok(()) => {}
                Err(e) => {
                    stopping.cancel();
                    fatal.get_or_insert(WorkerError::FetchLoop(e.to_string()));
                }
            }
        }
        tracker.close();
        tracing::info!(
            in_flight = tracker.len(),
            "worker stopping: claiming stopped, draining"
        );
        let drained = match self.settings.shutdown_timeout {
            Some(limit) => tokio::time::timeout(limit, tracker.wait()).await.is_ok(),
            None => {
                tracker.wait().await;
                true
            }
        };
        if !drained {
            tracing::warn!(
                in_flight = tracker.len(),
                "shutdown timeout passed: cancelling in-flight executions (they complete retrying)"
            );
            hard_cancel.cancel();
            if tokio::time::timeout(self.settings.shutdown_grace, tracker.wait())
                .await
                .is_err()
            {
                tracing::error!(
                    in_flight = tracker.len(),
                    "cancelled executions did not finish within the grace period; their leases will expire"
                );
            }
        }
        // Every delivery has ended (or been given up on): nothing left to heartbeat or poll for.
        stop_tickers.cancel();
        for ticker in tickers {
            let _ = ticker.await;
        }
        for writer in writers {
            let _ = tokio::time::timeout(self.settings.shutdown_grace, writer).await;
        }
        tracing::info!("worker stopped");
        fatal.map_or(Ok(()), Err)
    }
}
