//! Results no backend can store, and completions a store refuses for good
//! (docs/semantics.md#storable-values): the attempt fails under the task's retry policy, and the
//! execution is never left to be claimed again forever.

use std::time::Duration;

use onestep_core::retry::RetryPolicy;
use onestep_core::{AttemptStatus, BackendError, ConnectorKind, ExecutionError, ExecutionStatus};
use onestep_testkit::{Op, Step};
use onestep_worker::WorkerSettings;
use serde_json::{Value, json};

use crate::harness::{Harness, bounded, let_time_pass, task_settings};

fn start_with(h: &mut Harness, retry: RetryPolicy) {
    let mut s = task_settings();
    s.retry = retry;
    h.start(s, WorkerSettings::default());
}

/// JSON nested `depth` arrays deep (MariaDB's `json_valid` refuses 32 and deeper).
fn deep(depth: usize) -> Value {
    serde_json::from_str(&format!("{}1{}", "[".repeat(depth), "]".repeat(depth))).expect("json")
}

fn poison_results() -> Vec<(&'static str, Value)> {
    vec![
        ("depth 40", deep(40)),
        ("a NUL in a string", json!({"text": "a\u{0}b"})),
        ("a NUL in a key", json!({"a\u{0}": 1})),
        (
            "an integer beyond a double",
            serde_json::from_str(&"9".repeat(400)).expect("json"),
        ),
    ]
}

#[tokio::test(start_paused = true)]
async fn a_poison_result_fails_once_on_a_task_without_retries() {
    for (what, result) in poison_results() {
        let mut h = Harness::new();
        h.runner.set_default(Step::succeed(result));
        let e = h.submit(json!(1)).await;
        start_with(&mut h, RetryPolicy::NoRetry);
        bounded(h.wait_status(e.id, ExecutionStatus::Failed)).await;
        // Long past the lease: nobody claims it again.
        let_time_pass(Duration::from_secs(600)).await;
        h.clock.advance(600.0);
        let_time_pass(Duration::from_secs(600)).await;
        let x = h.execution(e.id);
        assert_eq!(
            (x.status, x.attempts),
            (ExecutionStatus::Failed, 1),
            "{what}"
        );
        assert_eq!(h.runner.call_count(), 1, "{what}");
        let error = x.error.expect("error object");
        assert_eq!(error.exception_type, "ExecutionEncodingError", "{what}");
        assert_eq!(error.stage.as_deref(), Some("result_validation"), "{what}");
        assert_eq!(x.result, None, "{what}");
        let rows = h.store.attempt_rows(e.id);
        assert_eq!(rows.len(), 1, "{what}");
        assert_eq!(rows[0].status, AttemptStatus::Failed, "{what}");
        h.stop().await.expect("clean stop");
    }
}

#[tokio::test(start_paused = true)]
async fn a_poison_result_follows_the_retry_policy() {
    let mut h = Harness::new();
    h.runner.set_default(Step::succeed(deep(40)));
    let e = h.submit(json!(1)).await;
    start_with(
        &mut h,
        RetryPolicy::MaxAttempts {
            max_attempts: 3,
            delay_s: None,
        },
    );
    bounded(h.wait_status(e.id, ExecutionStatus::Failed)).await;
    let x = h.execution(e.id);
    assert_eq!(x.attempts, 3);
    assert_eq!(h.runner.call_count(), 3);
    let statuses: Vec<_> = h
        .store
        .attempt_rows(e.id)
        .iter()
        .map(|a| a.status)
        .collect();
    assert_eq!(
        statuses,
        [
            AttemptStatus::Retrying,
            AttemptStatus::Retrying,
            AttemptStatus::Failed
        ]
    );
    h.stop().await.expect("clean stop");
}

#[tokio::test(start_paused = true)]
async fn a_storable_result_at_the_bounds_succeeds() {
    let mut h = Harness::new();
    let result = json!({"deep": deep(30), "text": "a\u{1}b"});
    h.runner.set_default(Step::succeed(result.clone()));
    let e = h.submit(json!(1)).await;
    start_with(&mut h, RetryPolicy::NoRetry);
    bounded(h.wait_status(e.id, ExecutionStatus::Succeeded)).await;
    assert_eq!(h.execution(e.id).result, Some(result));
    h.stop().await.expect("clean stop");
}

fn refused(message: &str) -> ExecutionError {
    ExecutionError::Backend(BackendError {
        backend: "memory",
        operation: "ack",
        kind: ConnectorKind::Permanent,
        message: message.into(),
    })
}

/// A completion the store refuses with a non-retryable error (a constraint or data error) fails
/// the execution through a fenced write, instead of leaving the lease to expire and the handler
/// to run again into the same refusal.
#[tokio::test(start_paused = true)]
async fn a_completion_refused_for_good_fails_the_execution_instead_of_looping() {
    for refusals in [1, 2] {
        let mut h = Harness::new();
        h.runner.set_default(Step::succeed(json!({"ok": true})));
        let e = h.submit(json!(1)).await;
        // The success is refused; with 2, the failed fallback is refused too and the bare
        // failed completion is written.
        h.store
            .fail_times(Op::Complete, refusals, refused("CHECK constraint failed"));
        start_with(
            &mut h,
            RetryPolicy::MaxAttempts {
                max_attempts: 5,
                delay_s: None,
            },
        );
        bounded(h.wait_status(e.id, ExecutionStatus::Failed)).await;
        let_time_pass(Duration::from_secs(600)).await;
        h.clock.advance(600.0);
        let_time_pass(Duration::from_secs(600)).await;
        let x = h.execution(e.id);
        assert_eq!(
            (x.status, x.attempts),
            (ExecutionStatus::Failed, 1),
            "{refusals}"
        );
        assert_eq!(h.runner.call_count(), 1, "{refusals}");
        let error = x.error.expect("error object");
        assert_eq!(error.exception_type, "CompletionRefused");
        assert_eq!(error.stage.as_deref(), Some("ack"));
        assert_eq!(error.connector_kind.as_deref(), Some("permanent"));
        assert_eq!(error.backend.as_deref(), Some("memory"));
        h.stop().await.expect("clean stop");
    }
}

/// A transient refusal (a lost connection) still leaves the execution to its lease: the
/// completion is retried by the writer and, if it stays unwritten, the lease expires.
#[tokio::test(start_paused = true)]
async fn a_transient_completion_failure_is_retried_not_failed() {
    let mut h = Harness::new();
    h.runner.set_default(Step::succeed(json!(7)));
    let e = h.submit(json!(1)).await;
    h.store
        .fail_next(Op::Complete, crate::harness::disconnected("ack"));
    start_with(&mut h, RetryPolicy::NoRetry);
    bounded(h.wait_status(e.id, ExecutionStatus::Succeeded)).await;
    assert_eq!(h.execution(e.id).result, Some(json!(7)));
    h.stop().await.expect("clean stop");
}
