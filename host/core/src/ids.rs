//! Ids of new rows: execution ids (made when a submission is prepared) and attempt ids (made by
//! the claim) are time-ordered UUIDv7 (docs/semantics.md#time-ordered-ids). Lease tokens are not
//! made here: they stay random v4.
//!
//! The version is a process-wide setting only so that `onestep bench --ids v4` can measure the
//! random layout beside the time-ordered one in one run (docs/benchmarks.md#history); nothing
//! else changes it, and every reader accepts either version.

use std::sync::atomic::{AtomicBool, Ordering};

use uuid::Uuid;

/// The UUID version of new execution and attempt ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdVersion {
    /// Time-ordered (the default).
    V7,
    /// Random, as written before ids became time-ordered; for benchmarks.
    V4,
}

static RANDOM_IDS: AtomicBool = AtomicBool::new(false);

/// Sets the version of the ids this process makes from now on (benchmarks only).
pub fn set_new_id_version(version: IdVersion) {
    RANDOM_IDS.store(version == IdVersion::V4, Ordering::Relaxed);
}

/// The version of the ids this process makes.
pub fn new_id_version() -> IdVersion {
    if RANDOM_IDS.load(Ordering::Relaxed) {
        IdVersion::V4
    } else {
        IdVersion::V7
    }
}

/// A new execution or attempt id.
pub fn new_row_id() -> Uuid {
    match new_id_version() {
        IdVersion::V7 => Uuid::now_v7(),
        IdVersion::V4 => Uuid::new_v4(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_ids_are_v7_and_increase_unless_set_to_v4() {
        // One test owns the process-wide setting (tests in this crate run in threads).
        let a = new_row_id();
        let b = new_row_id();
        assert_eq!(a.get_version_num(), 7);
        assert!(b > a, "v7 ids made by one process increase: {a} then {b}");
        set_new_id_version(IdVersion::V4);
        assert_eq!(new_id_version(), IdVersion::V4);
        assert_eq!(new_row_id().get_version_num(), 4);
        set_new_id_version(IdVersion::V7);
        assert_eq!(new_row_id().get_version_num(), 7);
    }
}
