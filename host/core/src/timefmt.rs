//! Time formatting that must match Python's `isoformat()` byte for byte (docs/semantics.md#submission-digest, docs/semantics.md#listing-and-cursors).
//!
//! Python's `datetime` has microsecond resolution; sub-microsecond nanoseconds of a chrono value
//! are truncated (every instant of the domain is already microsecond-precise, docs/semantics.md#time). A chrono
//! leap second (nanoseconds ≥ 10⁹) is rendered as second 59 with the remaining fraction, since
//! Python cannot represent second 60.

use std::fmt::Write as _;

use chrono::{DateTime, Datelike, FixedOffset, Timelike, Utc};

/// `YYYY-MM-DDTHH:MM:SS[.ffffff]+HH:MM` (fraction only when microseconds are non-zero; `+HH:MM:SS`
/// for second-level offsets).
pub fn python_isoformat(dt: &DateTime<FixedOffset>) -> String {
    let local = dt.naive_local();
    let mut out = String::with_capacity(32);
    let year = local.year();
    if year < 0 {
        // Not representable in Python; keep a readable, sortable form.
        let _ = write!(out, "-{:04}", year.unsigned_abs());
    } else {
        let _ = write!(out, "{year:04}");
    }
    let micros = (local.nanosecond() % 1_000_000_000) / 1000;
    let _ = write!(
        out,
        "-{:02}-{:02}T{:02}:{:02}:{:02}",
        local.month(),
        local.day(),
        local.hour(),
        local.minute(),
        local.second()
    );
    if micros != 0 {
        let _ = write!(out, ".{micros:06}");
    }
    let offset = dt.offset().local_minus_utc();
    let sign = if offset < 0 { '-' } else { '+' };
    let abs = offset.unsigned_abs();
    let _ = write!(out, "{sign}{:02}:{:02}", abs / 3600, (abs / 60) % 60);
    if !abs.is_multiple_of(60) {
        let _ = write!(out, ":{:02}", abs % 60);
    }
    out
}

/// Python's `isoformat()` of a UTC instant: always ends in `+00:00`.
pub fn utc_isoformat(dt: &DateTime<Utc>) -> String {
    python_isoformat(&dt.fixed_offset())
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn formats_like_python() {
        let plus8 = FixedOffset::east_opt(8 * 3600).unwrap();
        let dt = plus8.with_ymd_and_hms(2026, 8, 10, 20, 0, 0).unwrap();
        assert_eq!(python_isoformat(&dt), "2026-08-10T20:00:00+08:00");

        let utc = Utc.with_ymd_and_hms(2026, 8, 10, 12, 0, 0).unwrap()
            + chrono::Duration::microseconds(500);
        assert_eq!(utc_isoformat(&utc), "2026-08-10T12:00:00.000500+00:00");

        let minus = FixedOffset::west_opt(5 * 3600 + 30 * 60).unwrap();
        let dt = minus
            .with_ymd_and_hms(1, 1, 2, 3, 4, 5)
            .unwrap()
            .with_nanosecond(123_456_789)
            .unwrap();
        assert_eq!(python_isoformat(&dt), "0001-01-02T03:04:05.123456-05:30");

        let secs = FixedOffset::east_opt(3600 + 2 * 60 + 3).unwrap();
        let dt = secs.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        assert_eq!(python_isoformat(&dt), "2026-01-01T00:00:00+01:02:03");

        let neg_secs = FixedOffset::west_opt(30).unwrap();
        let dt = neg_secs.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        assert_eq!(python_isoformat(&dt), "2026-01-01T00:00:00-00:00:30");
    }
}
