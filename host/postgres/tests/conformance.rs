//! The testkit's conformance suite against a real PostgreSQL server: one test per case (one
//! fresh database per case, created by the test), on tables our DDL created and on tables the
//! reference's own code created, so `cargo test -p onestep-postgres --test conformance
//! t14_release` runs that case on both.
// Test code: a helper that cannot set up its fixture panics, like an assertion (clippy.toml
// allows this inside #[test] functions; these helpers live outside them).
#![allow(clippy::expect_used, clippy::panic)]

mod common;

use common::{PgFactory, Tables};

mod postgres {
    onestep_testkit::conformance_tests!(Some(super::PgFactory::new(super::Tables::Ours)));
}

/// The same suite on tables created by the reference (onestep-sql 0.7.1) itself.
mod reference_tables_postgres {
    onestep_testkit::conformance_tests!(Some(super::PgFactory::new(super::Tables::Reference)));
}
