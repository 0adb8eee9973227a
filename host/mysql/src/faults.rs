//! Fault injection for this crate's integration tests (feature `test-support`, enabled only by
//! its own dev-dependency): counters a test sets to make the next commits or set-based
//! heartbeats fail in a chosen way. Without the feature, [`Faults`] is an empty type whose
//! [`Faults::take`] is a constant `false`, so a shipping build reads no switch on the commit path.

/// Which injected fault a code path asks about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    /// Commit normally, then report the connection as lost (an ambiguous commit).
    CommitAckLost,
    /// Fail with a connection loss just before COMMIT (rolled back).
    LostBeforeCommit,
    /// Fail with a deadlock (1213) just before COMMIT (rolled back).
    DeadlockBeforeCommit,
    /// Make the set-based heartbeat's matched-row count disagree with its locking read.
    HeartbeatSetMismatch,
}

#[cfg(feature = "test-support")]
pub use injected::Faults;

#[cfg(feature = "test-support")]
mod injected {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::Fault;

    /// Test-only fault injection (not part of the supported API).
    #[doc(hidden)]
    #[derive(Debug, Default)]
    pub struct Faults {
        /// Commit normally, then report the connection as lost (an ambiguous commit), this many
        /// times.
        pub commit_ack_lost: AtomicU32,
        /// Fail with a connection loss just before COMMIT (rolled back), this many times.
        pub lost_before_commit: AtomicU32,
        /// Fail with a deadlock (1213) just before COMMIT (rolled back), this many times.
        pub deadlock_before_commit: AtomicU32,
        /// Make the matched-row counts of the set-based heartbeat disagree with its locking
        /// read (after its UPDATEs ran), this many times, so that it takes the per-lease
        /// fallback.
        pub heartbeat_set_mismatch: AtomicU32,
    }

    impl Faults {
        /// Whether `fault` fires now (its counter was above zero; it is decremented).
        pub(crate) fn take(&self, fault: Fault) -> bool {
            let counter = match fault {
                Fault::CommitAckLost => &self.commit_ack_lost,
                Fault::LostBeforeCommit => &self.lost_before_commit,
                Fault::DeadlockBeforeCommit => &self.deadlock_before_commit,
                Fault::HeartbeatSetMismatch => &self.heartbeat_set_mismatch,
            };
            counter
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
        }
    }
}

/// No fault injection in this build.
#[cfg(not(feature = "test-support"))]
#[derive(Debug, Default)]
pub(crate) struct Faults {
    _none: (),
}

#[cfg(not(feature = "test-support"))]
impl Faults {
    /// Never fires.
    #[inline(always)]
    pub(crate) fn take(&self, _fault: Fault) -> bool {
        false
    }
}
