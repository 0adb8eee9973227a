//! The worker tells its observer of every claim, attempt start and end (with the status written
//! and the failure's kind and type), heartbeat answer and storage error.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use onestep_core::retry::{FailureKind, RetryPolicy};
use onestep_core::runner::RunOutcome;
use onestep_core::{ExecutionError, ExecutionStatus};
use onestep_testkit::Step;
use onestep_worker::{AttemptEnd, HeartbeatOutcome, WorkerObserver, WorkerSettings};
use serde_json::json;

use crate::harness::{Harness, TASK, bounded, let_time_pass, task_settings};

#[derive(Debug, Default)]
struct Recorder {
    claimed: Mutex<Vec<usize>>,
    started: Mutex<Vec<Duration>>,
    finished: Mutex<Vec<AttemptEnd>>,
    heartbeats: Mutex<Vec<HeartbeatOutcome>>,
    errors: Mutex<Vec<String>>,
}

impl WorkerObserver for Recorder {
    fn claimed(&self, task: &str, leases: usize, _elapsed: Duration) {
        assert_eq!(task, TASK);
        self.claimed.lock().expect("lock").push(leases);
    }
    fn attempt_started(&self, task: &str, queue_wait: Duration) {
        assert_eq!(task, TASK);
        self.started.lock().expect("lock").push(queue_wait);
    }
    fn attempt_finished(&self, task: &str, end: &AttemptEnd) {
        assert_eq!(task, TASK);
        self.finished.lock().expect("lock").push(end.clone());
    }
    fn heartbeat(&self, _task: &str, outcome: HeartbeatOutcome) {
        self.heartbeats.lock().expect("lock").push(outcome);
    }
    fn store_error(&self, _task: &str, error: &ExecutionError) {
        self.errors.lock().expect("lock").push(error.to_string());
    }
}

#[tokio::test(start_paused = true)]
async fn every_attempt_start_and_end_reaches_the_observer() {
    let mut h = Harness::new();
    let ok = h.submit(json!("ok")).await;
    let flaky = h.submit(json!("flaky")).await;
    let slow = h.submit(json!("slow")).await;
    h.runner.script(ok.id, [Step::succeed(json!(1))]);
    h.runner.script(
        flaky.id,
        [
            Step::fail(FailureKind::Error, true),
            Step::fail(FailureKind::Error, true),
        ],
    );
    h.runner.script(slow.id, [Step::block()]);
    let mut settings = task_settings();
    settings.concurrency = 4;
    settings.retry = RetryPolicy::MaxAttempts {
        max_attempts: 2,
        delay_s: None,
    };
    let recorder = Arc::new(Recorder::default());
    h.start_observed(settings, WorkerSettings::default(), recorder.clone());
    bounded(h.wait_status(ok.id, ExecutionStatus::Succeeded)).await;
    bounded(h.wait_status(flaky.id, ExecutionStatus::Failed)).await;
    // The slow one is renewed by heartbeats (30 s apart) while it runs.
    let_time_pass(Duration::from_secs(65)).await;
    h.runner.release_all(RunOutcome::Succeeded(json!(2)));
    bounded(h.wait_status(slow.id, ExecutionStatus::Succeeded)).await;
    h.stop().await.expect("clean stop");

    let started = recorder.started.lock().expect("lock").len();
    assert_eq!(started, 4, "ok, flaky twice, slow");
    let finished = recorder.finished.lock().expect("lock").clone();
    let mut statuses: Vec<_> = finished.iter().map(|e| e.status).collect();
    statuses.sort_by_key(|s| s.map(|s| s.as_str()));
    assert_eq!(
        statuses,
        [
            Some(ExecutionStatus::Failed),
            Some(ExecutionStatus::Retrying),
            Some(ExecutionStatus::Succeeded),
            Some(ExecutionStatus::Succeeded)
        ]
    );
    for end in &finished {
        let expect_failure = matches!(
            end.status,
            Some(ExecutionStatus::Failed | ExecutionStatus::Retrying)
        );
        assert_eq!(
            end.failure,
            expect_failure.then(|| ("error".to_owned(), "HandlerError".to_owned())),
            "{end:?}"
        );
        assert!(!end.lease_lost);
    }
    let slow_end = finished
        .iter()
        .map(|e| e.duration)
        .max()
        .expect("a duration");
    assert!(slow_end >= Duration::from_secs(65), "{slow_end:?}");
    let claimed: usize = recorder.claimed.lock().expect("lock").iter().sum();
    assert_eq!(claimed, 4);
    let beats = recorder.heartbeats.lock().expect("lock").clone();
    assert!(
        beats.len() >= 2 && beats.iter().all(|b| *b == HeartbeatOutcome::Renewed),
        "{beats:?}"
    );
    assert!(recorder.errors.lock().expect("lock").is_empty());
}
