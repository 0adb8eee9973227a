//! Sleeping handlers and the execution's run-time bound (docs/steps.md#sleep).
//!
//! A handler of world `onestep:handler@0.3.0` may call `sleep(key, duration-ms)` or
//! `sleep-until(key, unix-ms)`. The attempt then ends **parked**: the worker writes T15
//! ([`LeaseStore::park`](crate::ports::LeaseStore::park)), the execution goes back to `queued`
//! with `available_at` = the wake time, its lease is cleared and its attempt ends `parked`. The
//! next claim, at or after the wake time, starts the handler again from the top with every
//! saved step; the sleep's own step (its key) holds the wake time, so the same call returns at
//! once and the handler goes on past it.
//!
//! Rules kept here, with no SQL, wasmtime or YAML:
//! - the wake time of a sleep is recorded as a step ([`sleep_record`]) under the sleep's key
//!   before the attempt parks, so a crash between the two writes parks again until the same
//!   instant, never shorter and never twice as long;
//! - a recorded wake time wins over the call's arguments;
//! - a wake time is at most [`MAX_SLEEP_MS`] after "now" ([`wake_after`], [`wake_at_unix_ms`]);
//! - a park counts neither as a failure nor against the retry policy's `max_attempts`: the
//!   worker subtracts the execution's parked attempts from `n` (docs/semantics.md#retry-policies);
//! - the task's `max_duration_s` bounds the whole execution from its first start, sleeps
//!   included ([`max_duration_deadline`], [`max_duration_error`]).

use std::time::Duration;

use chrono::{DateTime, TimeDelta, TimeZone, Utc};

use crate::diagnostics::AttemptDiagnostics;
use crate::error::ExecutionError;
use crate::error_object::ErrorObject;
use crate::time::truncate_micros;

/// The longest sleep a handler may ask for: 365 days, in milliseconds.
pub const MAX_SLEEP_MS: u64 = 365 * 86_400_000;

/// The `exception_type` of an execution that ran past its task's `max_duration_s`.
pub const MAX_DURATION_EXCEPTION: &str = "MaxDurationExceeded";

/// Why a park is refused on tables whose attempts' status `CHECK` predates `parked` (the
/// backends' message for the constraint's violation).
pub const PARKED_STATUS_REFUSED: &str = "the attempts table's status CHECK constraint does not \
    allow 'parked' (tables created before sleeps, or by the reference); allow it online with \
    `onestep migrate --upgrade`";

/// What a worker writes when an attempt parks (T15, docs/state-machine.md).
#[derive(Debug, Clone, PartialEq)]
pub struct Park {
    /// When the execution becomes claimable again (its new `available_at`).
    pub wake_at: DateTime<Utc>,
    /// The attempt's diagnostics, written in the park's transaction by backends that keep them
    /// (docs/observability.md#attempt-diagnostics).
    pub diagnostics: Option<Box<AttemptDiagnostics>>,
}

impl Park {
    /// A park until `wake_at` (truncated to the microsecond, as every stored instant).
    pub fn until(wake_at: DateTime<Utc>) -> Self {
        Park {
            wake_at: truncate_micros(wake_at),
            diagnostics: None,
        }
    }

    /// The same park carrying `diagnostics`.
    pub fn with_diagnostics(mut self, diagnostics: AttemptDiagnostics) -> Self {
        self.diagnostics = Some(Box::new(diagnostics));
        self
    }

    /// The wake time must be storable on every backend (docs/semantics.md#storable-values).
    pub fn validate(&self) -> Result<(), ExecutionError> {
        crate::storable::check_instant("wake_at", &self.wake_at)
    }
}

/// `2026-05-01T12:00:00.123Z`: an instant as messages and sleep records show it (milliseconds,
/// the precision a guest gives a wake time in).
pub fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// The attempt's message of a park: `parked until <RFC 3339 instant>`.
pub fn parked_message(wake_at: DateTime<Utc>) -> String {
    format!("parked until {}", rfc3339(wake_at))
}

/// The error object of an attempt stopped by a cancel request: kind `cancelled`,
/// `CancelledError`, stage `handler` (docs/semantics.md#failure-handling).
pub fn cancel_error() -> ErrorObject {
    ErrorObject::new("cancelled", "CancelledError", Some("handler"))
}

/// The error object of an execution that ran past its task's `max_duration_s`: kind `timeout`,
/// `MaxDurationExceeded`, stage `handler`. Fatal: the execution fails without a retry.
pub fn max_duration_error() -> ErrorObject {
    ErrorObject::new("timeout", MAX_DURATION_EXCEPTION, Some("handler"))
}

/// The instant a task's `max_duration` after the execution's first start, `None` when it is not
/// representable (it never comes).
pub fn max_duration_deadline(
    started_at: DateTime<Utc>,
    max_duration: Duration,
) -> Option<DateTime<Utc>> {
    TimeDelta::from_std(max_duration)
        .ok()
        .and_then(|d| started_at.checked_add_signed(d))
}

/// The message of an execution ended by its `max_duration_s`.
pub fn max_duration_message(
    max_duration: Duration,
    started_at: DateTime<Utc>,
    why: &str,
) -> String {
    format!(
        "max_duration_s ({}) exceeded: the execution started at {} and {why}",
        max_duration.as_secs_f64(),
        rfc3339(started_at)
    )
}

/// Why a sleep's wake time was refused (WIT `step-error.invalid-wake`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidWake(pub String);

/// The wake time of a sleep of `duration_ms` from `now`: at most [`MAX_SLEEP_MS`].
pub fn wake_after(now: DateTime<Utc>, duration_ms: u64) -> Result<DateTime<Utc>, InvalidWake> {
    if duration_ms > MAX_SLEEP_MS {
        return Err(InvalidWake(format!(
            "a sleep of {duration_ms} ms is over the limit of {MAX_SLEEP_MS} ms (365 days)"
        )));
    }
    let d = TimeDelta::milliseconds(i64::try_from(duration_ms).unwrap_or(i64::MAX));
    now.checked_add_signed(d)
        .map(truncate_millis)
        .ok_or_else(|| InvalidWake("the wake time is not representable".into()))
}

/// The instant `unix_ms` milliseconds after the Unix epoch, as a wake time from `now`: at most
/// [`MAX_SLEEP_MS`] ahead (an instant in the past is accepted: the sleep is already over).
pub fn wake_at_unix_ms(unix_ms: u64, now: DateTime<Utc>) -> Result<DateTime<Utc>, InvalidWake> {
    let at = i64::try_from(unix_ms)
        .ok()
        .and_then(|ms| Utc.timestamp_millis_opt(ms).single())
        .ok_or_else(|| InvalidWake(format!("{unix_ms} ms after the Unix epoch is out of range")))?;
    let ahead = (at - now).num_milliseconds();
    if ahead > i64::try_from(MAX_SLEEP_MS).unwrap_or(i64::MAX) {
        return Err(InvalidWake(format!(
            "the wake time {} is {ahead} ms ahead, over the limit of {MAX_SLEEP_MS} ms (365 days)",
            rfc3339(at)
        )));
    }
    Ok(truncate_millis(at))
}

/// A wake time is kept to the millisecond, as its record ([`sleep_record`]) holds it, so the
/// recorded instant and the parked `available_at` are the same.
fn truncate_millis(t: DateTime<Utc>) -> DateTime<Utc> {
    use chrono::DurationRound;
    t.duration_trunc(TimeDelta::milliseconds(1)).unwrap_or(t)
}

/// The step value a sleep records under its key: `{"wake_at":"<RFC 3339>","wake_at_ms":<n>}`.
pub fn sleep_record(wake_at: DateTime<Utc>) -> String {
    serde_json::json!({
        "wake_at": rfc3339(wake_at),
        "wake_at_ms": wake_at.timestamp_millis(),
    })
    .to_string()
}

/// The wake time of a step value written by [`sleep_record`]; an error names what is wrong
/// (the key holds a step the handler saved itself, not a sleep).
pub fn parse_sleep_record(text: &str) -> Result<DateTime<Utc>, InvalidWake> {
    let value: serde_json::Value = serde_json::from_str(text)
        .map_err(|e| InvalidWake(format!("the step is not a recorded sleep: {e}")))?;
    value
        .get("wake_at_ms")
        .and_then(serde_json::Value::as_i64)
        .and_then(|ms| Utc.timestamp_millis_opt(ms).single())
        .ok_or_else(|| {
            InvalidWake("the step under this key is not a recorded sleep (no wake_at_ms)".into())
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s)
            .map(|t| t.with_timezone(&Utc))
            .unwrap_or_default()
    }

    #[test]
    fn wake_times_are_bounded() {
        let now = at("2026-01-01T00:00:00Z");
        assert_eq!(wake_after(now, 10_000), Ok(at("2026-01-01T00:00:10Z")));
        assert!(wake_after(now, MAX_SLEEP_MS).is_ok());
        assert!(wake_after(now, MAX_SLEEP_MS + 1).is_err());
        assert!(wake_after(now, u64::MAX).is_err());
        let ms = |t: DateTime<Utc>| u64::try_from(t.timestamp_millis()).unwrap_or(0);
        assert_eq!(
            wake_at_unix_ms(ms(at("2026-01-02T00:00:00Z")), now),
            Ok(at("2026-01-02T00:00:00Z"))
        );
        // In the past: accepted (the sleep is over).
        assert_eq!(
            wake_at_unix_ms(ms(at("2025-01-01T00:00:00Z")), now),
            Ok(at("2025-01-01T00:00:00Z"))
        );
        assert!(wake_at_unix_ms(ms(at("2028-01-01T00:00:00Z")), now).is_err());
        assert!(wake_at_unix_ms(u64::MAX, now).is_err());
    }

    #[test]
    fn sleep_records_round_trip_and_foreign_steps_are_named() {
        let t = at("2026-05-01T12:00:00.123Z");
        assert_eq!(parse_sleep_record(&sleep_record(t)), Ok(t));
        assert!(parse_sleep_record("{\"pages\":3}").is_err());
        assert!(parse_sleep_record("not json").is_err());
    }

    #[test]
    fn the_deadline_is_the_first_start_plus_max_duration() {
        let s = at("2026-01-01T00:00:00Z");
        assert_eq!(
            max_duration_deadline(s, Duration::from_secs(60)),
            Some(at("2026-01-01T00:01:00Z"))
        );
        assert_eq!(max_duration_deadline(s, Duration::MAX), None);
        assert_eq!(max_duration_error().exception_type, MAX_DURATION_EXCEPTION);
        assert!(Park::until(at("9999-12-31T23:59:59Z")).validate().is_ok());
    }
}
