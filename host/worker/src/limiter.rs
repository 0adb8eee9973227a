//! A task's `rate_limit` on execution starts (docs/semantics.md#rate-limits): before a claim of
//! up to `n` leases the fetch loop takes up to `n` tokens from the task's fleet-wide bucket,
//! claims at most what was granted and gives back what the claim did not use. With no token it
//! waits the bucket's `retry_in` (at most the poll interval); when the bucket cannot be read it
//! claims nothing that round (never past the limit).

use std::sync::Arc;
use std::time::Duration;

use onestep_core::ExecutionError;
use onestep_core::rate::{RateLimit, RateLimitStore, task_bucket};

/// Shortest wait for a token (a bucket a hair short of its next token).
const MIN_WAIT: Duration = Duration::from_millis(1);

/// The bucket of one task and the store that keeps it.
#[derive(Clone)]
pub(crate) struct Limiter {
    pub(crate) store: Arc<dyn RateLimitStore>,
    pub(crate) rate: RateLimit,
    pub(crate) bucket: String,
}

/// What the fetch loop does after asking the bucket.
#[derive(Debug)]
pub(crate) enum Grant {
    /// Claim at most this many (≥ 1).
    Claim(u32),
    /// No token: wait this long, then ask again.
    Wait(Duration),
    /// The bucket could not be read: claim nothing, wait the poll interval.
    Failed(ExecutionError),
}

impl Limiter {
    pub(crate) fn new(store: Arc<dyn RateLimitStore>, task: &str, rate: RateLimit) -> Limiter {
        Limiter {
            store,
            rate,
            bucket: task_bucket(task),
        }
    }

    /// Asks for `wanted` tokens.
    pub(crate) async fn take(&self, task: &str, wanted: u32, poll: Duration) -> Grant {
        match self.store.take(&self.bucket, self.rate, wanted).await {
            Ok(t) if t.granted > 0 => Grant::Claim(t.granted),
            Ok(t) => Grant::Wait(
                t.retry_in
                    .unwrap_or(poll)
                    .clamp(MIN_WAIT, poll.max(MIN_WAIT)),
            ),
            Err(e) => {
                tracing::warn!(
                    task = %task,
                    bucket = %self.bucket,
                    error = %e,
                    "rate-limit bucket unavailable: claiming nothing this round"
                );
                Grant::Failed(e)
            }
        }
    }

    /// Gives back `n` unused tokens (a failure is logged: the tokens are lost, which only
    /// slows the task).
    pub(crate) async fn refund(&self, task: &str, n: u32) {
        if n == 0 {
            return;
        }
        if let Err(e) = self.store.refund(&self.bucket, self.rate, n).await {
            tracing::warn!(
                task = %task,
                bucket = %self.bucket,
                error = %e,
                unused = n,
                "could not give unused rate-limit tokens back"
            );
        }
    }
}
