//! Shared set-up: a store, a runner and a worker on one manual clock.

use std::sync::Arc;
use std::time::Duration;

use onestep_core::ports::{ExecutionStore, LeaseStore};
use onestep_core::runner::TaskRunner;
use onestep_core::{Execution, Limits};
use onestep_testkit::{FakeRunner, ManualClock, MemoryStore, Op, builders};
use onestep_worker::{TaskBinding, TaskSettings, Worker, WorkerError, WorkerSettings, WorkerStats};
use serde_json::Value;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

pub const NS: &str = "ns";
pub const TASK: &str = "t";

/// The task's lease and heartbeat period: the defaults of [`TaskSettings::new`] (90 s / 30 s).
pub const LEASE_S: f64 = 90.0;

pub struct Harness {
    pub clock: Arc<ManualClock>,
    pub store: Arc<MemoryStore>,
    pub runner: Arc<FakeRunner>,
    pub shutdown: CancellationToken,
    pub stats: Arc<WorkerStats>,
    pub settings: TaskSettings,
    worker: Option<JoinHandle<Result<(), WorkerError>>>,
}

/// Default task settings with worker id `w1`.
pub fn task_settings() -> TaskSettings {
    let mut s = TaskSettings::new(NS, TASK);
    s.worker_id = "w1".into();
    s
}

impl Harness {
    /// A store and a runner; no worker yet.
    pub fn new() -> Self {
        let clock = Arc::new(ManualClock::default());
        Harness {
            store: Arc::new(MemoryStore::new(clock.clone(), Limits::default())),
            clock,
            runner: Arc::new(FakeRunner::new()),
            shutdown: CancellationToken::new(),
            stats: Arc::new(WorkerStats::default()),
            settings: task_settings(),
            worker: None,
        }
    }

    /// Starts a worker for one task with `settings` on the harness's clock.
    pub fn start(&mut self, settings: TaskSettings, worker: WorkerSettings) {
        self.start_observed(settings, worker, Arc::new(onestep_worker::NoObserver));
    }

    /// [`start`](Self::start) with `observer` told of what the worker does.
    pub fn start_observed(
        &mut self,
        settings: TaskSettings,
        worker: WorkerSettings,
        observer: Arc<dyn onestep_worker::WorkerObserver>,
    ) {
        self.settings = settings.clone();
        let binding = TaskBinding {
            settings,
            store: self.store.clone() as Arc<dyn LeaseStore>,
            runner: self.runner.clone() as Arc<dyn TaskRunner>,
            quarantine: onestep_worker::Quarantine::default(),
        };
        let w = Worker::new(vec![binding], worker)
            .expect("valid settings")
            .with_clock(self.clock.clone())
            .with_observer(observer);
        self.stats = w.stats();
        self.worker = Some(tokio::spawn(w.run(self.shutdown.clone())));
    }

    /// Starts a worker with default settings.
    pub fn start_default(&mut self) {
        self.start(task_settings(), WorkerSettings::default());
    }

    /// Signals shutdown and waits for the worker to return.
    pub async fn stop(&mut self) -> Result<(), WorkerError> {
        self.shutdown.cancel();
        self.join().await
    }

    /// The running worker's task (the caller awaits it).
    pub fn take_worker(&mut self) -> JoinHandle<Result<(), WorkerError>> {
        self.worker.take().expect("a started worker")
    }

    /// Waits for the worker to return (after a shutdown or a fatal error).
    pub async fn join(&mut self) -> Result<(), WorkerError> {
        match self.worker.take() {
            Some(h) => h.await.expect("worker task"),
            None => Ok(()),
        }
    }

    pub async fn submit(&self, payload: Value) -> Execution {
        self.store
            .submit(builders::prepared(NS, TASK, payload))
            .await
            .expect("submit")
    }

    pub fn execution(&self, id: Uuid) -> Execution {
        self.store.execution(id).expect("execution exists")
    }

    /// Waits until execution `id` has status `status`.
    pub async fn wait_status(&self, id: Uuid, status: onestep_core::ExecutionStatus) {
        self.store
            .wait_until(|s| s.status(id) == Some(status))
            .await;
    }

    /// Heartbeat calls that returned `Ok` so far (one call per tick carries every lease of the
    /// task).
    pub fn heartbeats(&self) -> usize {
        self.store
            .log()
            .iter()
            .filter(|r| r.op == Op::HeartbeatMany && r.ok)
            .count()
    }

    /// Completion writes so far (single and batched).
    pub fn completion_writes(&self) -> usize {
        self.store.calls(Op::Complete) + self.store.calls(Op::CompleteMany)
    }
}

/// Lets virtual time pass: with paused time this resolves once every other task is idle and
/// the clock has been advanced by `d`.
pub async fn let_time_pass(d: Duration) {
    tokio::time::sleep(d).await;
}

/// Fails the test when `f` has not finished within a virtual hour (paused time reaches that in
/// milliseconds), instead of hanging.
pub async fn bounded<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(3_600), f)
        .await
        .expect("did not happen within a virtual hour")
}

/// A retryable storage failure, as a backend reports a dropped connection.
pub fn disconnected(operation: &'static str) -> onestep_core::ExecutionError {
    onestep_core::ExecutionError::Backend(onestep_core::BackendError {
        backend: "memory",
        operation,
        kind: onestep_core::ConnectorKind::Disconnected,
        message: "injected".into(),
    })
}
