//! The worker: one fetch loop, one heartbeat ticker and one cancel poll per task, shared
//! completion writers, and the graceful drain. A task that cannot run is quarantined on its own
//! ([`crate::Quarantine`]); only a fetch loop that panics stops the worker.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use onestep_core::rate::RateLimitStore;
use onestep_core::time::SharedClock;
use onestep_core::{ExecutionError, ExecutionStatus, SystemClock};
use tokio::sync::mpsc;
use tokio::task::{JoinHandle, JoinSet};
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
    parked: AtomicU64,
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
    pub(crate) fn record_parked(&self) {
        self.parked.fetch_add(1, Ordering::Relaxed);
    }

    /// Attempts that parked (T15, docs/steps.md#sleep).
    pub fn parked(&self) -> u64 {
        self.parked.load(Ordering::Relaxed)
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

/// Starts tasks on a running [`Worker`] (docs/deployments.md#workers-follow-deployments): each
/// started task gets its own fetch loop, heartbeat ticker, cancel poll and completion writer,
/// exactly as a task given to [`Worker::new`], and can be stopped on its own while the worker
/// runs on. Cheap to clone; obtained from [`Worker::task_set`] before [`Worker::run`].
#[derive(Clone, Debug)]
pub struct TaskSet {
    tx: mpsc::UnboundedSender<Started>,
}

struct Started {
    binding: TaskBinding,
    stop: CancellationToken,
    done: CancellationToken,
}

/// A task started through a [`TaskSet`].
#[derive(Debug)]
pub struct RunningTask {
    stop: CancellationToken,
    done: CancellationToken,
}

impl RunningTask {
    /// Stops claiming for the task: a claim in progress is finished and its leases released;
    /// attempts in flight run to their end (each on the runner it started with) and write their
    /// completion. The worker's own drain also applies when it stops first.
    pub fn stop(&self) {
        self.stop.cancel();
    }

    /// Resolves once the task stopped claiming and every attempt it started has ended (after
    /// [`Self::stop`] or the worker's shutdown). Never resolves for a task the worker did not
    /// start because it was already stopping.
    pub async fn stopped(&self) {
        self.done.cancelled().await;
    }

    /// Whether [`Self::stopped`] has resolved.
    pub fn is_stopped(&self) -> bool {
        self.done.is_cancelled()
    }
}

impl TaskSet {
    /// Starts `binding` on the worker: its settings are validated first (the same rules as
    /// [`Worker::new`]). A task with a `rate_limit` cannot be started this way. When the worker
    /// is already stopping the task is never started.
    pub fn start(&self, binding: TaskBinding) -> Result<RunningTask, WorkerError> {
        let task = binding.settings.task_name.clone();
        binding
            .settings
            .validate()
            .map_err(|source| WorkerError::InvalidTask {
                task: task.clone(),
                source,
            })?;
        if binding.settings.rate_limit.is_some() {
            return Err(WorkerError::InvalidTask {
                task,
                source: ExecutionError::invalid(
                    "a task started while the worker runs cannot have a rate_limit",
                ),
            });
        }
        let running = RunningTask {
            stop: CancellationToken::new(),
            done: CancellationToken::new(),
        };
        // A closed channel: the worker has stopped; the task is never started.
        let _ = self.tx.send(Started {
            binding,
            stop: running.stop.clone(),
            done: running.done.clone(),
        });
        Ok(running)
    }
}

/// What every task's machinery shares inside [`Worker::run`].
struct RunShared {
    stopping: CancellationToken,
    hard_cancel: CancellationToken,
    tracker: TaskTracker,
    stop_tickers: CancellationToken,
}

/// The handles of one task's machinery besides its fetch loop.
struct TaskHandles {
    writer: JoinHandle<()>,
    tickers: [JoinHandle<()>; 2],
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
    /// Tasks started while the worker runs ([`TaskSet`]).
    started: Option<mpsc::UnboundedReceiver<Started>>,
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
            started: None,
        })
    }

    /// A handle that starts (and stops) tasks while the worker runs. The worker then also runs
    /// with no task at all until it is shut down.
    pub fn task_set(&mut self) -> TaskSet {
        let (tx, rx) = mpsc::unbounded_channel();
        self.started = Some(rx);
        TaskSet { tx }
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
    pub async fn run(mut self, shutdown: CancellationToken) -> Result<(), WorkerError> {
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
        let shared = RunShared {
            stopping: shutdown.child_token(),
            hard_cancel: CancellationToken::new(),
            tracker: TaskTracker::new(),
            stop_tickers: CancellationToken::new(),
        };
        let mut writers = Vec::new();
        let mut tickers = Vec::new();
        let mut loops = JoinSet::new();
        for task in &self.tasks {
            let limiter = limiters.get(&task.settings.task_name).cloned();
            let (ctx, handles) = self.spawn_machinery(task, limiter, shared.stop_tickers.clone());
            writers.push(handles.writer);
            tickers.extend(handles.tickers);
            loops.spawn(fetch_loop(
                ctx,
                task.quarantine.clone(),
                shared.stopping.clone(),
                shared.hard_cancel.clone(),
                shared.tracker.clone(),
                None,
            ));
        }
        tracing::info!(tasks = self.tasks.len(), "worker started");

        let mut fatal: Option<WorkerError> = None;
        let mut started = self.started.take();
        loop {
            if started.is_none() && loops.is_empty() {
                break;
            }
            tokio::select! {
                joined = loops.join_next(), if !loops.is_empty() => {
                    if let Some(Err(e)) = joined {
                        shared.stopping.cancel();
                        fatal.get_or_insert(WorkerError::FetchLoop(e.to_string()));
                    }
                }
                next = recv(&mut started), if started.is_some() => match next {
                    Some(s) => self.start_dynamic(s, &shared, &mut loops),
                    None => started = None,
                },
                _ = shared.stopping.cancelled() => break,
            }
        }
        drop(started);
        while let Some(joined) = loops.join_next().await {
            if let Err(e) = joined {
                fatal.get_or_insert(WorkerError::FetchLoop(e.to_string()));
            }
        }
        let RunShared {
            stopping: _,
            hard_cancel,
            tracker,
            stop_tickers,
        } = shared;
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

    /// Spawns `task`'s completion writer, heartbeat ticker and cancel poll (stopped by
    /// `stop_tickers`) and returns the context its fetch loop runs with.
    fn spawn_machinery(
        &self,
        task: &TaskBinding,
        limiter: Option<Limiter>,
        stop_tickers: CancellationToken,
    ) -> (Arc<TaskCtx>, TaskHandles) {
        let (completer, writer) =
            Completer::spawn(Arc::clone(&task.store), self.settings.completion_batch);
        let heartbeats = Arc::new(HeartbeatSet::default());
        let heartbeat = tokio::spawn(heartbeat_loop(
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
        ));
        let cancel_watch = Arc::new(CancelWatch::default());
        let cancel_poll = tokio::spawn(cancel_poll_loop(
            Arc::clone(&task.store),
            Arc::clone(&cancel_watch),
            task.settings.cancel_poll_interval,
            task.settings.task_name.clone(),
            Arc::clone(&self.observer),
            stop_tickers,
        ));
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
            limiter,
        });
        (
            ctx,
            TaskHandles {
                writer,
                tickers: [heartbeat, cancel_poll],
            },
        )
    }

    /// Starts a task given through a [`TaskSet`]: its fetch loop joins `loops` (a panic stops the
    /// worker as for any task) and stops on the worker's drain or its own stop; then a retiring
    /// task waits for its attempts, stops its tickers and marks it stopped.
    fn start_dynamic(&self, s: Started, shared: &RunShared, loops: &mut JoinSet<()>) {
        let Started {
            binding,
            stop,
            done,
        } = s;
        let own_tickers = shared.stop_tickers.child_token();
        let (ctx, handles) = self.spawn_machinery(&binding, None, own_tickers.clone());
        let task_stop = shared.stopping.child_token();
        let own = TaskTracker::new();
        let name = binding.settings.task_name.clone();
        let namespace = binding.settings.namespace.clone();
        tracing::info!(task = %name, namespace = %namespace, "task started");
        let fetch = fetch_loop(
            ctx,
            binding.quarantine.clone(),
            task_stop.clone(),
            shared.hard_cancel.clone(),
            shared.tracker.clone(),
            Some(own.clone()),
        );
        // Its own stop ends the loop like the drain does: a claim in progress is finished and its
        // leases released.
        let forward = task_stop.clone();
        tokio::spawn(async move {
            tokio::select! {
                () = stop.cancelled() => forward.cancel(),
                () = forward.cancelled() => {}
            }
        });
        loops.spawn(async move {
            fetch.await;
            task_stop.cancel();
            tokio::spawn(async move {
                own.close();
                own.wait().await;
                own_tickers.cancel();
                for t in handles.tickers {
                    let _ = t.await;
                }
                let _ = handles.writer.await;
                tracing::info!(task = %name, namespace = %namespace, "task stopped: its attempts have ended");
                done.cancel();
            });
        });
    }
}

async fn recv(rx: &mut Option<mpsc::UnboundedReceiver<Started>>) -> Option<Started> {
    match rx {
        Some(rx) => rx.recv().await,
        None => None,
    }
}
