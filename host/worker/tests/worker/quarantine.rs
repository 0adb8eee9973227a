//! One task that cannot run is quarantined on its own (docs/security.md#one-tenants-bad-deploy):
//! a task whose claims fail with a non-retryable error stops claiming (no hot loop: one probe
//! claim a minute), its executions stay queued, the other task of the same worker keeps
//! claiming and succeeding, the observer hears of the quarantine once, and a probe that
//! succeeds lifts it. A task quarantined before the start (its component could not be loaded)
//! claims nothing until the switch is lifted.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use onestep_core::ports::{ExecutionStore, LeaseStore};
use onestep_core::runner::TaskRunner;
use onestep_core::{BackendError, ConnectorKind, ExecutionError, ExecutionStatus, Limits};
use onestep_testkit::{FakeRunner, ManualClock, MemoryStore, Op, builders};
use onestep_worker::{
    CLAIM_QUARANTINE_PROBE, Quarantine, QuarantineCause, QuarantineKind, TaskBinding, TaskSettings,
    Worker, WorkerObserver, WorkerSettings,
};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::harness::{NS, bounded, let_time_pass};

const GOOD: &str = "good";
const BAD: &str = "bad";

/// What the observer heard of quarantines: (task, kind or `None` for a lift).
#[derive(Debug, Default)]
struct Recorder {
    changes: Mutex<Vec<(String, Option<QuarantineKind>)>>,
}

impl WorkerObserver for Recorder {
    fn quarantine(&self, task: &str, cause: Option<&QuarantineCause>) {
        self.changes
            .lock()
            .expect("lock")
            .push((task.to_owned(), cause.map(|c| c.kind)));
    }
}

impl Recorder {
    fn changes(&self) -> Vec<(String, Option<QuarantineKind>)> {
        self.changes.lock().expect("lock").clone()
    }
}

fn denied() -> ExecutionError {
    ExecutionError::Backend(BackendError {
        backend: "memory",
        operation: "claim",
        kind: ConnectorKind::Misconfigured,
        message: "SELECT command denied for table 'bad_executions'".into(),
    })
}

struct Task {
    store: Arc<MemoryStore>,
    binding: TaskBinding,
}

fn task(name: &str, clock: &Arc<ManualClock>, runner: &Arc<FakeRunner>) -> Task {
    let store = Arc::new(MemoryStore::new(clock.clone(), Limits::default()));
    let mut settings = TaskSettings::new(NS, name);
    settings.worker_id = "w1".into();
    let binding = TaskBinding {
        settings,
        store: store.clone() as Arc<dyn LeaseStore>,
        runner: runner.clone() as Arc<dyn TaskRunner>,
        quarantine: Quarantine::default(),
    };
    Task { store, binding }
}

async fn submit(store: &MemoryStore, name: &str) -> uuid::Uuid {
    store
        .submit(builders::prepared(NS, name, json!(name)))
        .await
        .expect("submit")
        .id
}

async fn wait_status(store: &MemoryStore, id: uuid::Uuid, status: ExecutionStatus) {
    bounded(store.wait_until(|s| s.status(id) == Some(status))).await;
}

#[tokio::test(start_paused = true)]
async fn a_non_retryable_claim_error_quarantines_its_task_only() {
    let clock = Arc::new(ManualClock::default());
    let runner = Arc::new(FakeRunner::new());
    let good = task(GOOD, &clock, &runner);
    let bad = task(BAD, &clock, &runner);
    // Every claim of the bad task fails, without retry, until the failures are cleared.
    bad.store.fail_times(Op::Claim, 1_000, denied());
    let recorder = Arc::new(Recorder::default());
    let shutdown = CancellationToken::new();
    let worker = Worker::new(
        vec![good.binding.clone(), bad.binding.clone()],
        WorkerSettings::default(),
    )
    .expect("valid settings")
    .with_clock(clock.clone())
    .with_observer(recorder.clone() as Arc<dyn WorkerObserver>);
    let handle = tokio::spawn(worker.run(shutdown.clone()));

    let queued = submit(&bad.store, BAD).await;
    let first = submit(&good.store, GOOD).await;
    wait_status(&good.store, first, ExecutionStatus::Succeeded).await;
    // Ten virtual minutes: the good task polls every second, the bad one probes once a minute.
    let_time_pass(Duration::from_secs(600)).await;
    assert!(!handle.is_finished(), "the worker stopped: {handle:?}");
    let later = submit(&good.store, GOOD).await;
    wait_status(&good.store, later, ExecutionStatus::Succeeded).await;
    assert_eq!(
        bad.store.status(queued),
        Some(ExecutionStatus::Queued),
        "the quarantined task's execution stays queued"
    );
    let bad_claims = bad.store.calls(Op::Claim);
    let probes = (600 / CLAIM_QUARANTINE_PROBE.as_secs()) as usize;
    println!(
        "claims in 600 s: bad task {bad_claims}, good task {}",
        good.store.calls(Op::Claim)
    );
    assert!(
        (2..=probes + 2).contains(&bad_claims),
        "the bad task claimed {bad_claims} times in 600 s (one probe a minute: at most {})",
        probes + 2
    );
    assert!(
        good.store.calls(Op::Claim) > 100,
        "the good task kept polling"
    );
    assert!(bad.binding.quarantine.is_set());
    assert_eq!(
        bad.binding.quarantine.cause().map(|c| c.message),
        Some(denied().to_string())
    );
    assert_eq!(
        recorder.changes(),
        vec![(BAD.to_owned(), Some(QuarantineKind::Claim))],
        "reported once, though every probe failed"
    );

    // The table is readable again: the next probe succeeds, lifts the quarantine, runs the work.
    bad.store.clear_failures();
    wait_status(&bad.store, queued, ExecutionStatus::Succeeded).await;
    assert!(!bad.binding.quarantine.is_set());
    assert_eq!(
        recorder.changes(),
        vec![
            (BAD.to_owned(), Some(QuarantineKind::Claim)),
            (BAD.to_owned(), None)
        ]
    );
    shutdown.cancel();
    bounded(handle)
        .await
        .expect("worker task")
        .expect("a clean stop");
}

#[tokio::test(start_paused = true)]
async fn a_task_quarantined_at_start_claims_nothing_until_lifted() {
    let clock = Arc::new(ManualClock::default());
    let runner = Arc::new(FakeRunner::new());
    let good = task(GOOD, &clock, &runner);
    let bad = task(BAD, &clock, &runner);
    bad.binding.quarantine.set(QuarantineCause::new(
        QuarantineKind::Load,
        "task 'bad': cannot load bad.wasm",
    ));
    let recorder = Arc::new(Recorder::default());
    let shutdown = CancellationToken::new();
    let worker = Worker::new(
        vec![good.binding.clone(), bad.binding.clone()],
        WorkerSettings::default(),
    )
    .expect("valid settings")
    .with_clock(clock.clone())
    .with_observer(recorder.clone() as Arc<dyn WorkerObserver>);
    let handle = tokio::spawn(worker.run(shutdown.clone()));
    let queued = submit(&bad.store, BAD).await;
    let done = submit(&good.store, GOOD).await;
    wait_status(&good.store, done, ExecutionStatus::Succeeded).await;
    let_time_pass(Duration::from_secs(600)).await;
    assert_eq!(
        bad.store.calls(Op::Claim),
        0,
        "a load quarantine never probes"
    );
    assert_eq!(bad.store.status(queued), Some(ExecutionStatus::Queued));
    assert_eq!(
        recorder.changes(),
        vec![(BAD.to_owned(), Some(QuarantineKind::Load))]
    );
    // A good build was loaded: the switch is lifted and the task claims at once.
    assert!(bad.binding.quarantine.lift());
    wait_status(&bad.store, queued, ExecutionStatus::Succeeded).await;
    assert_eq!(
        recorder.changes(),
        vec![
            (BAD.to_owned(), Some(QuarantineKind::Load)),
            (BAD.to_owned(), None)
        ]
    );
    shutdown.cancel();
    bounded(handle)
        .await
        .expect("worker task")
        .expect("a clean stop");
}
