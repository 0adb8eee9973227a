//! The testkit's conformance suite on the embedded SQLite backend: one test per case, each on
//! a fresh database file in a temporary directory (`cargo test -p onestep-sqlite --test
//! conformance t14_release` runs one case).
// Test code: a helper that cannot set up its fixture panics, like an assertion.
#![allow(clippy::expect_used, clippy::panic)]

mod common;

mod sqlite {
    onestep_testkit::conformance_tests!(Some(super::common::SqliteFactory::default()));
}

/// The overview/gauge insights and the attempts read (the shared testkit check).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insights_and_attempts_sqlite() {
    let (_dir, dsn) = common::scratch();
    let b = onestep_sqlite::SqliteBackend::open(onestep_sqlite::StoreOptions::new(dsn))
        .await
        .expect("open backend");
    onestep_testkit::insights::counts_recent_and_attempts(&b, &b).await;
    onestep_testkit::insights::rate_limit_states(&b, &b).await;
    b.close().await.expect("close");
}
