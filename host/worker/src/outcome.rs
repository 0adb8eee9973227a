//! From a handler's outcome to the completion the worker writes (docs/semantics.md#failure-handling, docs/semantics.md#timeouts, docs/semantics.md#retry-policies).

use onestep_core::plan::encode_result;
use onestep_core::retry::{FailureKind, RetryDecision, RetryPolicy};
use onestep_core::runner::{RunFailure, RunOutcome};
use onestep_core::{Completion, ErrorObject};
use rand::Rng;

/// The longest retry delay a handler may ask for (`retry-after-ms`), in seconds: 30 days. Longer
/// requests are capped so the completion stays valid.
pub const MAX_GUEST_RETRY_DELAY_S: f64 = 30.0 * 86_400.0;

/// The error object of a cancelled run: kind `cancelled`, `CancelledError`, stage `handler`.
pub fn cancel_error() -> ErrorObject {
    onestep_core::park::cancel_error()
}

/// The completion for `outcome`.
///
/// * success → `succeeded`, unless the result cannot be stored ([`result_rejection`]: not
///   encodable, not storable on every backend, or over `max_result_bytes`), which is a failure
///   at stage `result_validation` (`ExecutionEncodingError`) that follows the retry policy; a
///   result the runner refused before decoding it ([`RunOutcome::ResultTooLarge`]) fails the
///   same way (docs/semantics.md#storable-values). A success while a cancel was requested is
///   left to the store, where the cancel wins and no result is written;
/// * a fatal handler error → `failed` at once;
/// * any other failure → the retry policy with `previous_attempts` (docs/semantics.md#retry-policies `n`); a delay the
///   handler asked for replaces the policy's delay;
/// * cancelled → `cancelled` when a cancel was requested, else `retrying` after 0 s.
pub fn completion_for<R: Rng + ?Sized>(
    outcome: RunOutcome,
    retry: &RetryPolicy,
    max_result_bytes: usize,
    previous_attempts: u32,
    cancel_requested: bool,
    rng: &mut R,
) -> Completion {
    match outcome {
        RunOutcome::Succeeded(value) => {
            if !cancel_requested && encode_result(&value, max_result_bytes).is_err() {
                result_rejected(retry, previous_attempts, rng)
            } else {
                Completion::succeeded(value)
            }
        }
        RunOutcome::ResultTooLarge { .. } => result_rejected(retry, previous_attempts, rng),
        RunOutcome::Failed(failure) => {
            failure_completion(&failure, "handler", retry, previous_attempts, rng)
        }
        RunOutcome::Cancelled => {
            if cancel_requested {
                Completion::cancelled(Some(cancel_error()))
            } else {
                Completion::retrying(cancel_error(), 0.0)
            }
        }
        // Not a completion: the delivery parks the attempt (T15) before it gets here; should a
        // park reach this mapping, a cancel requested meanwhile wins, and otherwise the
        // execution goes on at once (the sleep's recorded step parks it again).
        RunOutcome::Parked { .. } => {
            if cancel_requested {
                Completion::cancelled(Some(cancel_error()))
            } else {
                Completion::retrying(cancel_error(), 0.0)
            }
        }
    }
}

/// Why the handler's result cannot be stored, for the attempt's message and log: `None` for
/// any other outcome and for a storable result (docs/semantics.md#storable-values).
pub fn result_rejection(outcome: &RunOutcome, max_result_bytes: usize) -> Option<String> {
    match outcome {
        RunOutcome::Succeeded(value) => encode_result(value, max_result_bytes)
            .err()
            .map(|e| format!("result rejected: {e}")),
        RunOutcome::ResultTooLarge { bytes } => Some(format!(
            "result rejected: handler result of {bytes} bytes is over max_result_bytes ({max_result_bytes})"
        )),
        _ => None,
    }
}

/// The completion of an attempt whose result cannot be stored (`ExecutionEncodingError` at
/// stage `result_validation`): a handler failure under the task's retry policy, so a handler
/// that returns a poison result runs at most as often as the policy allows.
fn result_rejected<R: Rng + ?Sized>(
    retry: &RetryPolicy,
    previous_attempts: u32,
    rng: &mut R,
) -> Completion {
    let failure = RunFailure {
        kind: FailureKind::Error,
        exception_type: "ExecutionEncodingError".into(),
        retryable: true,
        retry_after_s: None,
        message: "the handler's result cannot be stored".into(),
    };
    failure_completion(&failure, "result_validation", retry, previous_attempts, rng)
}

fn failure_completion<R: Rng + ?Sized>(
    failure: &RunFailure,
    stage: &str,
    retry: &RetryPolicy,
    previous_attempts: u32,
    rng: &mut R,
) -> Completion {
    // The guest names its exception type: a NUL, which PostgreSQL cannot store, is replaced so
    // the completion stays writable (docs/semantics.md#storable-values).
    let exception_type = truncate(&failure.exception_type, 255).replace('\0', "\u{fffd}");
    let exception_type = if exception_type.trim().is_empty() {
        "HandlerError".to_owned()
    } else {
        exception_type
    };
    let error = ErrorObject::new(failure.kind.as_str(), &exception_type, Some(stage));
    if !failure.retryable {
        return Completion::failed(error);
    }
    match retry.decide(failure.kind, previous_attempts, rng) {
        RetryDecision::Retry { delay_s } => {
            let delay_s = failure
                .retry_after_s
                .filter(|d| d.is_finite() && *d >= 0.0)
                .map(|d| d.min(MAX_GUEST_RETRY_DELAY_S))
                .unwrap_or(delay_s);
            Completion::retrying(error, delay_s)
        }
        RetryDecision::Fail => Completion::failed(error),
    }
}

fn truncate(s: &str, max_chars: usize) -> &str {
    match s.char_indices().nth(max_chars) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use onestep_core::CompletionStatus;
    use rand::SeedableRng;
    use rand::rngs::StdRng;
    use serde_json::json;

    fn failure(kind: FailureKind, retryable: bool) -> RunOutcome {
        RunOutcome::Failed(RunFailure {
            kind,
            exception_type: "HandlerError".into(),
            retryable,
            retry_after_s: None,
            message: "boom".into(),
        })
    }

    #[test]
    fn maps_outcomes_through_the_policy() {
        let mut rng = StdRng::seed_from_u64(3);
        let policy = RetryPolicy::MaxAttempts {
            max_attempts: 2,
            delay_s: Some(1.0),
        };
        let c = completion_for(
            failure(FailureKind::Error, true),
            &policy,
            100,
            0,
            false,
            &mut rng,
        );
        assert_eq!(c.status, CompletionStatus::Retrying);
        assert_eq!(c.delay_s, Some(1.0));
        let c = completion_for(
            failure(FailureKind::Error, true),
            &policy,
            100,
            1,
            false,
            &mut rng,
        );
        assert_eq!(c.status, CompletionStatus::Failed);
        let c = completion_for(
            failure(FailureKind::Error, false),
            &policy,
            100,
            0,
            false,
            &mut rng,
        );
        assert_eq!(
            c.status,
            CompletionStatus::Failed,
            "fatal errors skip the policy"
        );
        let c = completion_for(
            failure(FailureKind::Timeout, true),
            &RetryPolicy::NoRetry,
            100,
            0,
            false,
            &mut rng,
        );
        assert_eq!(c.error.as_ref().map(|e| e.kind.as_str()), Some("timeout"));
    }

    #[test]
    fn a_huge_guest_retry_delay_is_capped() {
        let mut rng = StdRng::seed_from_u64(3);
        let outcome = RunOutcome::Failed(RunFailure {
            kind: FailureKind::Error,
            exception_type: "HandlerError".into(),
            retryable: true,
            retry_after_s: Some(1e12),
            message: "later".into(),
        });
        let policy = RetryPolicy::MaxAttempts {
            max_attempts: 3,
            delay_s: None,
        };
        let c = completion_for(outcome, &policy, 100, 0, false, &mut rng);
        assert_eq!(c.delay_s, Some(MAX_GUEST_RETRY_DELAY_S));
        assert!(
            c.validate().is_ok(),
            "the capped completion must be writable"
        );
    }

    #[test]
    fn oversized_result_fails_at_result_validation() {
        let mut rng = StdRng::seed_from_u64(3);
        let big = json!("x".repeat(200));
        let c = completion_for(
            RunOutcome::Succeeded(big),
            &RetryPolicy::NoRetry,
            100,
            0,
            false,
            &mut rng,
        );
        assert_eq!(c.status, CompletionStatus::Failed);
        assert_eq!(
            c.error.and_then(|e| e.stage).as_deref(),
            Some("result_validation")
        );
    }

    fn deep(depth: usize) -> serde_json::Value {
        serde_json::from_str(&format!("{}1{}", "[".repeat(depth), "]".repeat(depth))).unwrap()
    }

    #[test]
    fn unstorable_results_follow_the_retry_policy() {
        let mut rng = StdRng::seed_from_u64(3);
        let policy = RetryPolicy::MaxAttempts {
            max_attempts: 3,
            delay_s: Some(2.0),
        };
        for outcome in [
            RunOutcome::Succeeded(json!("x".repeat(200))),
            RunOutcome::ResultTooLarge { bytes: 30_000_000 },
            RunOutcome::Succeeded(deep(40)),
            RunOutcome::Succeeded(json!({"k": "a\u{0}b"})),
        ] {
            assert!(result_rejection(&outcome, 100).is_some(), "{outcome:?}");
            for (previous, status) in [
                (0, CompletionStatus::Retrying),
                (1, CompletionStatus::Retrying),
                (2, CompletionStatus::Failed),
            ] {
                let c = completion_for(outcome.clone(), &policy, 100, previous, false, &mut rng);
                assert_eq!(c.status, status, "{outcome:?} after {previous}");
                let error = c.error.expect("error object");
                assert_eq!(error.exception_type, "ExecutionEncodingError");
                assert_eq!(error.stage.as_deref(), Some("result_validation"));
            }
            let c = completion_for(
                outcome.clone(),
                &RetryPolicy::NoRetry,
                100,
                0,
                false,
                &mut rng,
            );
            assert_eq!(c.status, CompletionStatus::Failed, "{outcome:?}");
        }
        assert_eq!(
            result_rejection(&RunOutcome::Succeeded(deep(40)), 1000).as_deref(),
            Some(
                "result rejected: cannot store execution result: nesting depth over 31 (arrays and objects) at /0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0 (docs/semantics.md#storable-values)"
            )
        );
        assert_eq!(
            result_rejection(&RunOutcome::Succeeded(deep(31)), 1000),
            None
        );
        // A success while a cancel is requested goes to the store, where the cancel wins.
        let c = completion_for(
            RunOutcome::Succeeded(deep(40)),
            &policy,
            1000,
            0,
            true,
            &mut rng,
        );
        assert_eq!(c.status, CompletionStatus::Succeeded);
        // Equal to the limit is allowed: `"xx"` is 4 bytes of canonical JSON.
        let c = completion_for(
            RunOutcome::Succeeded(json!("xx")),
            &policy,
            4,
            0,
            false,
            &mut rng,
        );
        assert_eq!(c.status, CompletionStatus::Succeeded);
    }

    #[test]
    fn cancelled_runs_depend_on_the_reason() {
        let mut rng = StdRng::seed_from_u64(3);
        let c = completion_for(
            RunOutcome::Cancelled,
            &RetryPolicy::NoRetry,
            100,
            0,
            true,
            &mut rng,
        );
        assert_eq!(c.status, CompletionStatus::Cancelled);
        let c = completion_for(
            RunOutcome::Cancelled,
            &RetryPolicy::NoRetry,
            100,
            0,
            false,
            &mut rng,
        );
        assert_eq!(c.status, CompletionStatus::Retrying);
        assert_eq!(c.delay_s, Some(0.0));
    }
}
