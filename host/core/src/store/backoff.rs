//! The bounded, jittered backoff a backend applies to failures that are safe to repeat
//! (docs/semantics.md#error-classification: deadlocks, lock waits, connection lost before
//! COMMIT). Not to be confused with [`crate::retry::RetryPolicy`], the retry policy of a
//! task's attempts.
//!
//! An operation run through [`TransientBackoff::run`] must be a whole transaction: a failed
//! try leaves nothing behind (the server rolls it back, or it is rolled back when its
//! connection is dropped), so running it again is safe. A failure *during* COMMIT must not be
//! classified as transient: only the caller can resolve it ([`crate::store::ambiguity`]).

use std::future::Future;
use std::time::Duration;

use rand::Rng;

/// Bounded exponential backoff with ±50 % jitter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransientBackoff {
    /// Total tries including the first (≥ 1).
    pub max_tries: u32,
    /// First delay.
    pub base_delay: Duration,
    /// Upper bound of one delay (before jitter).
    pub max_delay: Duration,
}

impl Default for TransientBackoff {
    fn default() -> Self {
        TransientBackoff {
            max_tries: 6,
            base_delay: Duration::from_millis(5),
            max_delay: Duration::from_millis(200),
        }
    }
}

impl TransientBackoff {
    /// The delay before try `n + 1` (n ≥ 1): `base × 2^(n-1)`, capped, with ±50 % jitter.
    pub fn delay(&self, n: u32) -> Duration {
        let exp = self
            .base_delay
            .saturating_mul(1u32 << n.saturating_sub(1).min(16));
        let capped = exp.min(self.max_delay);
        let jitter: f64 = rand::rng().random_range(0.5..1.5);
        capped.mul_f64(jitter)
    }

    /// Runs `attempt` until it succeeds, fails with an error `is_transient` rejects, or
    /// `max_tries` is reached (the last error is returned). `sleep` waits between tries (the
    /// backend's runtime timer; core has no runtime).
    pub async fn run<T, E, F, Fut, S, SFut>(
        &self,
        mut attempt: F,
        is_transient: impl Fn(&E) -> bool,
        sleep: S,
    ) -> Result<T, E>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
        S: Fn(Duration) -> SFut,
        SFut: Future<Output = ()>,
    {
        let mut tries = 0u32;
        loop {
            tries += 1;
            match attempt().await {
                Err(e) if tries < self.max_tries && is_transient(&e) => {
                    sleep(self.delay(tries)).await;
                }
                other => return other,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_support::block_on;
    use std::cell::Cell;

    #[test]
    fn delays_grow_capped_with_jitter() {
        let b = TransientBackoff::default();
        for n in 1..20 {
            let d = b.delay(n);
            assert!(d <= b.max_delay.mul_f64(1.5), "{n}: {d:?}");
            assert!(d >= b.base_delay.mul_f64(0.5), "{n}: {d:?}");
        }
    }

    #[test]
    fn transient_errors_are_retried_up_to_max_tries() {
        let b = TransientBackoff::default();
        let tries = Cell::new(0u32);
        let slept = Cell::new(0u32);
        let r: Result<(), &str> = block_on(b.run(
            || {
                tries.set(tries.get() + 1);
                async { Err("deadlock") }
            },
            |e| *e == "deadlock",
            |_| {
                slept.set(slept.get() + 1);
                async {}
            },
        ));
        assert_eq!(r, Err("deadlock"));
        assert_eq!(tries.get(), b.max_tries);
        assert_eq!(slept.get(), b.max_tries - 1);
    }

    #[test]
    fn other_errors_and_successes_return_at_once() {
        let b = TransientBackoff::default();
        let tries = Cell::new(0u32);
        let r: Result<(), &str> = block_on(b.run(
            || {
                tries.set(tries.get() + 1);
                async { Err("syntax") }
            },
            |e| *e == "deadlock",
            |_| async {},
        ));
        assert_eq!((r, tries.get()), (Err("syntax"), 1));
        let r: Result<u8, &str> = block_on(b.run(|| async { Ok(7) }, |_| true, |_| async {}));
        assert_eq!(r, Ok(7));
    }
}
