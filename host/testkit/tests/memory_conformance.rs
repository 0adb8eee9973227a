//! The conformance suite against the in-memory reference store: one test per case, the same
//! names as on the SQL backends (`cargo test -p onestep-testkit t14_release`).

mod memory {
    onestep_testkit::conformance_tests!(Some(onestep_testkit::MemoryFactory));
}
