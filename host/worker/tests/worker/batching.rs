//! Completion batching: completions that are ready together share `complete_many` writes of at
//! most `completion_batch` items.

use std::time::Duration;

use onestep_core::ExecutionStatus;
use onestep_core::runner::RunOutcome;
use onestep_testkit::{Op, Step};
use onestep_worker::WorkerSettings;
use serde_json::json;

use crate::harness::{Harness, let_time_pass, task_settings};

#[tokio::test(start_paused = true)]
async fn ready_completions_are_written_in_batches_of_at_most_completion_batch() {
    let mut h = Harness::new();
    h.runner.set_default(Step::block());
    let mut ids = Vec::new();
    for i in 0..7 {
        ids.push(h.submit(json!(i)).await.id);
    }
    let mut settings = task_settings();
    settings.concurrency = 7;
    h.start(
        settings,
        WorkerSettings {
            completion_batch: 3,
            ..WorkerSettings::default()
        },
    );
    h.runner.wait_for_calls(7).await;
    // Hold the first write so every other completion queues up behind it.
    h.store.pause(Op::Complete);
    h.store.pause(Op::CompleteMany);
    assert_eq!(h.runner.release_all(RunOutcome::Succeeded(json!("ok"))), 7);
    h.store
        .wait_until(|s| s.waiting(Op::Complete) + s.waiting(Op::CompleteMany) == 1)
        .await;
    // Paused time only moves once every task is idle: all seven completions are queued now.
    let_time_pass(Duration::from_millis(1)).await;
    h.store.resume(Op::Complete);
    h.store.resume(Op::CompleteMany);
    for id in &ids {
        h.wait_status(*id, ExecutionStatus::Succeeded).await;
    }
    let writes: Vec<usize> = h
        .store
        .log()
        .iter()
        .filter(|r| matches!(r.op, Op::Complete | Op::CompleteMany))
        .map(|r| r.items)
        .collect();
    assert_eq!(writes.iter().sum::<usize>(), 7, "{writes:?}");
    assert!(
        writes.iter().all(|n| *n <= 3),
        "bounded by completion_batch: {writes:?}"
    );
    assert_eq!(
        writes.len(),
        3,
        "seven queued completions take three writes: {writes:?}"
    );
    assert_eq!(h.stats.succeeded(), 7);
    h.stop().await.expect("clean stop");
}

#[tokio::test(start_paused = true)]
async fn a_transient_batch_failure_is_retried_and_every_item_answered() {
    let mut h = Harness::new();
    h.runner.set_default(Step::block());
    let a = h.submit(json!("a")).await;
    let b = h.submit(json!("b")).await;
    let mut settings = task_settings();
    settings.concurrency = 2;
    h.start(settings, WorkerSettings::default());
    h.runner.wait_for_calls(2).await;
    h.store.pause(Op::Complete);
    h.store.pause(Op::CompleteMany);
    h.store
        .fail_next(Op::CompleteMany, crate::harness::disconnected("ack"));
    h.store
        .fail_next(Op::Complete, crate::harness::disconnected("ack"));
    assert_eq!(h.runner.release_all(RunOutcome::Succeeded(json!(1))), 2);
    h.store
        .wait_until(|s| s.waiting(Op::Complete) + s.waiting(Op::CompleteMany) == 1)
        .await;
    let_time_pass(Duration::from_millis(1)).await;
    h.store.resume(Op::Complete);
    h.store.resume(Op::CompleteMany);
    h.wait_status(a.id, ExecutionStatus::Succeeded).await;
    h.wait_status(b.id, ExecutionStatus::Succeeded).await;
    assert!(
        h.store
            .log()
            .iter()
            .any(|r| matches!(r.op, Op::Complete | Op::CompleteMany) && !r.ok),
        "the injected failure was hit and retried"
    );
    assert_eq!(h.stats.completion_errors(), 0);
    h.stop().await.expect("clean stop");
}
