//! Ids of new rows: execution ids (made when a submission is prepared) and attempt ids (made by
//! the claim) are time-ordered UUIDv7 (docs/semantics.md#time-ordered-ids). Lease tokens are not
//! made here: they stay random v4.
//!
//! There is no process-wide switch: `onestep bench --ids v4` (docs/benchmarks.md#history)
//! measures the random layout by giving the ids it wants to the rows it writes, through
//! [`IdVersion`] values it hands to the code that makes them. Every reader accepts either
//! version.

use uuid::Uuid;

/// The UUID version of new execution and attempt ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IdVersion {
    /// Time-ordered (the default; every production path).
    #[default]
    V7,
    /// Random, as written before ids became time-ordered; for benchmarks.
    V4,
}

impl IdVersion {
    /// A new id of this version.
    pub fn new_id(self) -> Uuid {
        match self {
            IdVersion::V7 => Uuid::now_v7(),
            IdVersion::V4 => Uuid::new_v4(),
        }
    }
}

/// A new execution or attempt id: time-ordered UUIDv7.
pub fn new_row_id() -> Uuid {
    Uuid::now_v7()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_ids_are_v7_and_increase() {
        let a = new_row_id();
        let b = new_row_id();
        assert_eq!(a.get_version_num(), 7);
        assert!(b > a, "v7 ids made by one process increase: {a} then {b}");
        assert_eq!(IdVersion::default(), IdVersion::V7);
    }

    #[test]
    fn an_id_version_makes_ids_of_that_version() {
        assert_eq!(IdVersion::V4.new_id().get_version_num(), 4);
        assert_eq!(IdVersion::V7.new_id().get_version_num(), 7);
        // Asking for v4 ids changes nothing elsewhere.
        assert_eq!(new_row_id().get_version_num(), 7);
    }
}
