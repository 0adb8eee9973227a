//! Time formatting that must match Python's `isoformat()` byte for byte (spec §7.1.3, §7.3).
//! (STUB: being implemented.)

use chrono::{DateTime, FixedOffset};

/// `YYYY-MM-DDTHH:MM:SS[.ffffff]+HH:MM` (fraction only when microseconds are non-zero; `+HH:MM:SS`
/// for second-level offsets).
pub fn python_isoformat(dt: &DateTime<FixedOffset>) -> String {
    let _ = dt;
    unimplemented!("isoformat is being implemented")
}
