//! The polling schedule of `onestep wait` (docs/http-api.md#the-curl-flow): 1, 2, 4, 8 seconds, then 10, 15, 20 and
//! every 30 seconds, never past the caller's deadline.

use std::time::Duration;

/// The delay before poll number `n` (0-based).
pub fn delay(n: u32) -> Duration {
    const STEPS: [u64; 7] = [1, 2, 4, 8, 10, 15, 20];
    Duration::from_secs(STEPS.get(n as usize).copied().unwrap_or(30))
}

/// The delay before poll `n`, cut so that it does not sleep past `remaining`; `None` when no
/// time remains.
pub fn delay_within(n: u32, remaining: Option<Duration>) -> Option<Duration> {
    let d = delay(n);
    match remaining {
        None => Some(d),
        Some(r) if r.is_zero() => None,
        Some(r) => Some(d.min(r)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_backs_off_then_stays_between_10_and_30_seconds() {
        let s: Vec<u64> = (0..10).map(|n| delay(n).as_secs()).collect();
        assert_eq!(s, [1, 2, 4, 8, 10, 15, 20, 30, 30, 30]);
        assert!((4..1000).all(|n| (10..=30).contains(&delay(n).as_secs())));
    }

    #[test]
    fn never_sleeps_past_the_deadline() {
        assert_eq!(
            delay_within(3, Some(Duration::from_millis(1500))),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(delay_within(0, Some(Duration::ZERO)), None);
        assert_eq!(delay_within(0, None), Some(Duration::from_secs(1)));
    }
}
