//! A manual clock (docs/semantics.md#time: the injected clock).

use std::sync::Mutex;

use chrono::{DateTime, Duration, TimeZone, Utc};
use onestep_core::Clock;

/// A clock that returns a fixed instant until [`ManualClock::advance`] or [`ManualClock::set`].
#[derive(Debug)]
pub struct ManualClock {
    now: Mutex<DateTime<Utc>>,
}

impl ManualClock {
    /// Starts at `start`.
    pub fn new(start: DateTime<Utc>) -> Self {
        ManualClock {
            now: Mutex::new(start),
        }
    }

    /// Starts at 2026-08-10 12:00:00.123456 UTC (microseconds on purpose).
    pub fn default_start() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 8, 10, 12, 0, 0)
            .single()
            .unwrap_or_default()
            + Duration::microseconds(123_456)
    }

    /// Moves the clock forward by `seconds` (may be fractional; microsecond precision).
    pub fn advance(&self, seconds: f64) {
        let d = Duration::microseconds((seconds * 1_000_000.0).round() as i64);
        let mut g = self.now.lock().unwrap_or_else(|p| p.into_inner());
        *g += d;
    }

    /// Sets the clock.
    pub fn set(&self, t: DateTime<Utc>) {
        *self.now.lock().unwrap_or_else(|p| p.into_inner()) = t;
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        ManualClock::new(ManualClock::default_start())
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.now.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl ManualClock {
    /// The current instant (same as [`Clock::now`], without importing the trait).
    pub fn now_value(&self) -> DateTime<Utc> {
        Clock::now(self)
    }
}
