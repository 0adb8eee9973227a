//! The one retry helper of the crate: bounded, jittered backoff for failures that are safe to
//! repeat (docs/semantics.md#error-classification: deadlock 1213, lock wait 1205, connection lost before COMMIT).
//!
//! An operation passed to [`with_retry`] must be a whole transaction: a failed attempt leaves
//! nothing behind (the transaction is rolled back by the server or when its connection is
//! dropped), so running it again is safe. A failure *during* COMMIT is reported as
//! [`OpError::CommitUnknown`] and never retried here: only the caller knows how to resolve it
//! (submit re-reads through its id and idempotency key).

use std::future::Future;
use std::time::Duration;

use rand::Rng;

use crate::errors::{OpError, OpResult, is_retryable_before_commit};

/// Bounded exponential backoff.
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    /// Total tries including the first (≥ 1).
    pub max_tries: u32,
    /// First delay.
    pub base_delay: Duration,
    /// Upper bound of one delay.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_tries: 6,
            base_delay: Duration::from_millis(5),
            max_delay: Duration::from_millis(200),
        }
    }
}

impl RetryPolicy {
    /// The delay before try `n + 1` (n ≥ 1): `base × 2^(n-1)`, capped, with ±50 % jitter.
    fn delay(&self, n: u32) -> Duration {
        let exp = self
            .base_delay
            .saturating_mul(1u32 << n.saturating_sub(1).min(16));
        let capped = exp.min(self.max_delay);
        let jitter: f64 = rand::rng().random_range(0.5..1.5);
        capped.mul_f64(jitter)
    }
}

/// Runs `attempt` until it succeeds, fails with a non-retryable error, or `policy.max_tries` is
/// reached (the last error is returned).
pub(crate) async fn with_retry<T, F, Fut>(policy: RetryPolicy, mut attempt: F) -> OpResult<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = OpResult<T>>,
{
    let mut tries = 0u32;
    loop {
        tries += 1;
        match attempt().await {
            Err(OpError::Db(e)) if tries < policy.max_tries && is_retryable_before_commit(&e) => {
                tracing::debug!(tries, error = %e, "retrying a mysql transaction");
                tokio::time::sleep(policy.delay(tries)).await;
            }
            other => return other,
        }
    }
}
