//! Time semantics (docs/semantics.md#time): one injected clock, UTC, microsecond precision.

use std::sync::Arc;

use chrono::{DateTime, Duration, DurationRound, TimeDelta, Utc};

use crate::error::ExecutionError;

/// A source of "now". Backends read it once per transaction. Implementations return UTC
/// instants; [`truncate_micros`] is applied by callers that store them.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// The current instant, UTC.
    fn now(&self) -> DateTime<Utc>;
}

/// The process's wall clock, truncated to microseconds.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        truncate_micros(Utc::now())
    }
}

/// A shared clock handle.
pub type SharedClock = Arc<dyn Clock>;

/// Drops sub-microsecond precision (the database keeps `DATETIME(6)`).
pub fn truncate_micros(t: DateTime<Utc>) -> DateTime<Utc> {
    t.duration_trunc(TimeDelta::microseconds(1)).unwrap_or(t)
}

/// Converts a non-negative, finite number of seconds into an exact duration rounded to the
/// microsecond, half to even (docs/semantics.md#time, "Delays").
///
/// Errors: `<name> must be finite and >= 0` for NaN, infinities and negatives; values beyond
/// 100 years are rejected with `<name> is too large`.
pub fn seconds_to_duration(name: &str, seconds: f64) -> Result<Duration, ExecutionError> {
    if !seconds.is_finite() || seconds < 0.0 {
        return Err(ExecutionError::invalid(format!(
            "{name} must be finite and >= 0"
        )));
    }
    const MAX_S: f64 = 100.0 * 366.0 * 86_400.0;
    if seconds > MAX_S {
        return Err(ExecutionError::invalid(format!("{name} is too large")));
    }
    let micros = (seconds * 1_000_000.0).round_ties_even();
    // `micros` is finite and below 2^53 here, so the cast is exact.
    Ok(Duration::microseconds(micros as i64))
}

/// `now + seconds` rounded to the microsecond (see [`seconds_to_duration`]).
pub fn add_seconds(
    now: DateTime<Utc>,
    name: &str,
    seconds: f64,
) -> Result<DateTime<Utc>, ExecutionError> {
    Ok(now + seconds_to_duration(name, seconds)?)
}

/// `t - now` in seconds (may be negative): the lease time left (docs/semantics.md#time).
pub fn seconds_between(now: DateTime<Utc>, t: DateTime<Utc>) -> f64 {
    (t - now).num_microseconds().unwrap_or(i64::MAX) as f64 / 1_000_000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_round_half_even_to_micros() {
        let d = seconds_to_duration("delay_s", 0.0000005).unwrap_or_default();
        assert_eq!(d.num_microseconds(), Some(0));
        let d = seconds_to_duration("delay_s", 0.0000015).unwrap_or_default();
        assert_eq!(d.num_microseconds(), Some(2));
        let d = seconds_to_duration("delay_s", 5.0).unwrap_or_default();
        assert_eq!(d.num_microseconds(), Some(5_000_000));
        assert!(seconds_to_duration("delay_s", -1.0).is_err());
        assert!(seconds_to_duration("delay_s", f64::NAN).is_err());
    }

    #[test]
    fn system_clock_has_micro_precision() {
        let t = SystemClock.now();
        assert_eq!(t.timestamp_subsec_nanos() % 1000, 0);
    }
}
