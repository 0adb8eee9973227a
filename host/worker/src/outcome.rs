//! From a handler's outcome to the completion the worker writes (docs/semantics.md#failure-handling, docs/semantics.md#timeouts, docs/semantics.md#retry-policies).

use onestep_core::canonical::canonical_len;
use onestep_core::retry::{FailureKind, RetryDecision, RetryPolicy};
use onestep_core::runner::{RunFailure, RunOutcome};
use onestep_core::{Completion, ErrorObject};
use rand::Rng;

/// The longest retry delay a handler may ask for (`retry-after-ms`), in seconds: 30 days. Longer
/// requests are capped so the completion stays valid.
pub const MAX_GUEST_RETRY_DELAY_S: f64 = 30.0 * 86_400.0;

/// The error object of a cancelled run: kind `cancelled`, `CancelledError`, stage `handler`.
pub fn cancel_error() -> ErrorObject {
    ErrorObject::new("cancelled", "CancelledError", Some("handler"))
}

/// The completion for `outcome`.
///
/// * success → `succeeded`, unless the result's canonical JSON exceeds `max_result_bytes`
///   (measured without building the text), which fails at once at stage `result_validation`
///   (`ExecutionEncodingError`); a result the runner refused before decoding it
///   ([`RunOutcome::ResultTooLarge`]) fails the same way. An oversized result is deterministic,
///   so it is not retried (docs/semantics.md#error-classification);
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
            if canonical_len(&value) > max_result_bytes {
                result_too_large(retry, previous_attempts, rng)
            } else {
                Completion::succeeded(value)
            }
        }
        RunOutcome::ResultTooLarge { .. } => result_too_large(retry, previous_attempts, rng),
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
    }
}

/// The completion of an attempt whose result exceeds the limit (`ExecutionEncodingError` at
/// stage `result_validation`, not retryable).
fn result_too_large<R: Rng + ?Sized>(
    retry: &RetryPolicy,
    previous_attempts: u32,
    rng: &mut R,
) -> Completion {
    let failure = RunFailure {
        kind: FailureKind::Error,
        exception_type: "ExecutionEncodingError".into(),
        retryable: false,
        retry_after_s: None,
        message: "execution result exceeds the configured limit".into(),
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
    let error = ErrorObject::new(
        failure.kind.as_str(),
        truncate(&failure.exception_type, 255),
        Some(stage),
    );
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

    #[test]
    fn oversized_results_fail_at_once_despite_a_retry_policy() {
        let mut rng = StdRng::seed_from_u64(3);
        let policy = RetryPolicy::MaxAttempts {
            max_attempts: 3,
            delay_s: None,
        };
        for outcome in [
            RunOutcome::Succeeded(json!("x".repeat(200))),
            RunOutcome::ResultTooLarge { bytes: 30_000_000 },
        ] {
            let c = completion_for(outcome.clone(), &policy, 100, 0, false, &mut rng);
            assert_eq!(c.status, CompletionStatus::Failed, "{outcome:?}");
            let error = c.error.expect("error object");
            assert_eq!(error.exception_type, "ExecutionEncodingError");
            assert_eq!(error.stage.as_deref(), Some("result_validation"));
        }
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
