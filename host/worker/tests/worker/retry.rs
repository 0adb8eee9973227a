//! Retry mapping: a retryable failure completes `retrying` after the policy's delay (or the
//! handler's own), a fatal one `failed`; timeouts follow the policy for their kind.

use onestep_core::ExecutionStatus;
use onestep_core::retry::{FailureKind, RetryPolicy};
use onestep_core::runner::RunOutcome;
use onestep_core::{AttemptStatus, ErrorObject};
use onestep_testkit::{Step, runner};
use onestep_worker::WorkerSettings;
use serde_json::json;

use crate::harness::{Harness, task_settings};

fn handler_error(kind: &str, exception_type: &str) -> ErrorObject {
    ErrorObject::new(kind, exception_type, Some("handler"))
}

fn start_with(h: &mut Harness, retry: RetryPolicy) {
    let mut s = task_settings();
    s.retry = retry;
    h.start(s, WorkerSettings::default());
}

#[tokio::test(start_paused = true)]
async fn a_retryable_failure_waits_the_policy_delay_until_attempts_run_out() {
    let mut h = Harness::new();
    h.runner.set_default(Step::fail(FailureKind::Error, true));
    let e = h.submit(json!(1)).await;
    start_with(
        &mut h,
        RetryPolicy::MaxAttempts {
            max_attempts: 2,
            delay_s: Some(5.0),
        },
    );
    h.wait_status(e.id, ExecutionStatus::Retrying).await;
    let x = h.execution(e.id);
    let now = h.clock.now_value();
    assert_eq!(x.available_at, now + chrono::TimeDelta::seconds(5));
    assert_eq!(x.error, Some(handler_error("error", "HandlerError")));
    assert_eq!(
        h.store.attempt_rows(e.id)[0].status,
        AttemptStatus::Retrying
    );
    // Not claimable before the delay on the store's clock; claimed again once it passed.
    crate::harness::let_time_pass(std::time::Duration::from_secs(60)).await;
    assert_eq!(h.runner.call_count(), 1);
    h.clock.advance(5.0);
    h.wait_status(e.id, ExecutionStatus::Failed).await;
    let calls = h.runner.calls();
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[1].invocation.attempt_no, 2);
    let x = h.execution(e.id);
    assert_eq!(
        (x.attempts, x.error),
        (2, Some(handler_error("error", "HandlerError")))
    );
    assert_eq!((h.stats.retried(), h.stats.failed()), (1, 1));
    h.stop().await.expect("clean stop");
}

#[tokio::test(start_paused = true)]
async fn a_fatal_failure_fails_at_once() {
    let mut h = Harness::new();
    h.runner.set_default(Step::fail(FailureKind::Error, false));
    let e = h.submit(json!(1)).await;
    start_with(
        &mut h,
        RetryPolicy::MaxAttempts {
            max_attempts: 5,
            delay_s: None,
        },
    );
    h.wait_status(e.id, ExecutionStatus::Failed).await;
    assert_eq!(h.execution(e.id).attempts, 1);
    assert_eq!(h.store.attempt_rows(e.id)[0].status, AttemptStatus::Failed);
    h.stop().await.expect("clean stop");
}

#[tokio::test(start_paused = true)]
async fn timeouts_follow_their_kind_s_policy_and_a_handler_delay_wins() {
    let mut h = Harness::new();
    let timeout = h.submit(json!("timeout")).await;
    let error = h.submit(json!("error")).await;
    let asked = h.submit(json!("asked")).await;
    h.runner
        .script(timeout.id, [Step::fail(FailureKind::Timeout, true)]);
    h.runner
        .script(error.id, [Step::fail(FailureKind::Error, true)]);
    let mut with_delay = runner::failure(FailureKind::Timeout, true);
    with_delay.retry_after_s = Some(2.5);
    h.runner
        .script(asked.id, [Step::Return(RunOutcome::Failed(with_delay))]);
    start_with(
        &mut h,
        RetryPolicy::ByFailureKind {
            default: None,
            error: None,
            timeout: Some(Box::new(RetryPolicy::MaxAttempts {
                max_attempts: 2,
                delay_s: Some(7.0),
            })),
            cancelled: None,
        },
    );
    h.wait_status(timeout.id, ExecutionStatus::Retrying).await;
    h.wait_status(error.id, ExecutionStatus::Failed).await;
    h.wait_status(asked.id, ExecutionStatus::Retrying).await;
    let now = h.clock.now_value();
    let t = h.execution(timeout.id);
    assert_eq!(t.available_at, now + chrono::TimeDelta::seconds(7));
    assert_eq!(t.error, Some(handler_error("timeout", "TimeoutError")));
    assert_eq!(
        h.execution(error.id).error,
        Some(handler_error("error", "HandlerError")),
        "no policy for errors: failed"
    );
    assert_eq!(
        h.execution(asked.id).available_at,
        now + chrono::TimeDelta::milliseconds(2500),
        "the handler's delay replaces the policy's"
    );
    h.stop().await.expect("clean stop");
}
