//! Cancel propagation: a cancel requested in the store reaches the handler's token at the next
//! heartbeat and the execution ends `cancelled`.

use onestep_core::retry::FailureKind;
use onestep_core::runner::RunOutcome;
use onestep_core::{AttemptStatus, ExecutionStatus};
use onestep_testkit::{Step, runner};
use onestep_worker::cancel_error;
use serde_json::json;
use tokio::time::Instant;

use crate::harness::{Harness, NS};

async fn cancel_while_running(on_cancel: RunOutcome) -> (Harness, uuid::Uuid) {
    let mut h = Harness::new();
    h.runner.set_default(Step::Block { on_cancel });
    let e = h.submit(json!(1)).await;
    h.start_default();
    h.runner.wait_for_calls(1).await;
    let asked = Instant::now();
    let c = onestep_core::ports::ExecutionStore::cancel(&*h.store, NS, e.id, Some("stop".into()))
        .await
        .expect("cancel")
        .expect("row");
    assert_eq!(c.status, ExecutionStatus::CancelRequested);
    h.wait_status(e.id, ExecutionStatus::Cancelled).await;
    assert_eq!(
        asked.elapsed(),
        h.settings.heartbeat_interval,
        "seen at the next heartbeat"
    );
    let call = &h.runner.calls()[0];
    assert!(call.cancelled, "the handler's token fired");
    assert_eq!(h.heartbeats(), 1);
    h.stop().await.expect("clean stop");
    (h, e.id)
}

#[tokio::test(start_paused = true)]
async fn a_cancel_request_stops_the_handler_and_the_execution_is_cancelled() {
    let (h, id) = cancel_while_running(RunOutcome::Cancelled).await;
    let x = h.execution(id);
    assert_eq!(x.error, Some(cancel_error()));
    assert_eq!(x.result, None);
    let a = h.store.attempt_rows(id);
    assert_eq!(a[0].status, AttemptStatus::Cancelled);
    assert_eq!(h.stats.cancelled(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_handler_error_after_the_cancel_is_a_cancellation() {
    let failed = RunOutcome::Failed(runner::failure(FailureKind::Error, true));
    let (h, id) = cancel_while_running(failed).await;
    assert_eq!(h.execution(id).error, Some(cancel_error()));
}

#[tokio::test(start_paused = true)]
async fn a_success_after_the_cancel_request_loses_to_the_cancel() {
    let (h, id) = cancel_while_running(RunOutcome::Succeeded(json!("late"))).await;
    let x = h.execution(id);
    assert_eq!((x.result, x.error), (None, None), "cancel wins: no result");
}
