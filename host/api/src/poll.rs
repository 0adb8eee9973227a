//! Polling schedules, never past the caller's deadline: [`delay`], the backoff a client that
//! re-reads a whole execution should follow (docs/http-api.md#the-curl-flow: 1, 2, 4, 8
//! seconds, then 10, 15, 20 and every 30 seconds); and [`version_delay`], the shorter one of
//! `onestep wait` on the database, which reads only the execution's `version` between full
//! reads (docs/cli.md#waiting-on-the-database).

use std::time::Duration;

/// The delay before poll number `n` (0-based).
pub fn delay(n: u32) -> Duration {
    const STEPS: [u64; 7] = [1, 2, 4, 8, 10, 15, 20];
    Duration::from_secs(STEPS.get(n as usize).copied().unwrap_or(30))
}

/// The delay before poll `n`, cut so that it does not sleep past `remaining`; `None` when no
/// time remains.
pub fn delay_within(n: u32, remaining: Option<Duration>) -> Option<Duration> {
    cut(delay(n), remaining)
}

/// The delay before version read number `n` (0-based) of `onestep wait` on the database:
/// 0.25, 0.5, 1, 2, 4 seconds, then every 5 seconds.
pub fn version_delay(n: u32) -> Duration {
    const STEPS_MS: [u64; 5] = [250, 500, 1000, 2000, 4000];
    Duration::from_millis(STEPS_MS.get(n as usize).copied().unwrap_or(5000))
}

/// [`version_delay`] cut so that it does not sleep past `remaining`; `None` when no time
/// remains.
pub fn version_delay_within(n: u32, remaining: Option<Duration>) -> Option<Duration> {
    cut(version_delay(n), remaining)
}

fn cut(d: Duration, remaining: Option<Duration>) -> Option<Duration> {
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
    fn version_reads_back_off_to_every_five_seconds() {
        let s: Vec<u128> = (0..8).map(|n| version_delay(n).as_millis()).collect();
        assert_eq!(s, [250, 500, 1000, 2000, 4000, 5000, 5000, 5000]);
        assert_eq!(version_delay(u32::MAX), Duration::from_secs(5));
        assert_eq!(
            version_delay_within(5, Some(Duration::from_millis(300))),
            Some(Duration::from_millis(300))
        );
        assert_eq!(version_delay_within(0, Some(Duration::ZERO)), None);
    }

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
