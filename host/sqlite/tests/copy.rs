//! `onestep copy` on SQLite (docs/cli.md#onestep-copy): the shared testkit case
//! (`onestep_testkit::backend_cases::copy`, also run on PostgreSQL, MariaDB and MySQL and between
//! the backends in the e2e suite) from one database file to another.
#![allow(clippy::expect_used, clippy::panic)]

mod common;

use onestep_core::transfer::Transfer;
use onestep_sqlite::{SqliteBackend, StoreOptions};
use onestep_testkit::backend_cases::copy::round_trip;

async fn open(dsn: &str) -> SqliteBackend {
    let mut o = StoreOptions::new(dsn);
    o.traces = true;
    SqliteBackend::open(o).await.expect("open backend")
}

#[tokio::test]
async fn copy_sqlite_to_sqlite() {
    let ((_a_dir, a_dsn), (_b_dir, b_dsn)) = (common::scratch(), common::scratch());
    let (a, b) = (open(&a_dsn).await, open(&b_dsn).await);
    round_trip(&a, &b).await;
    a.close().await.expect("close");
    b.close().await.expect("close");
}

#[tokio::test]
async fn location_is_the_canonical_file_and_table() {
    let (dir, dsn) = common::scratch();
    let b = open(&dsn).await;
    let canonical = std::fs::canonicalize(dir.path().join("onestep.db")).expect("canonical");
    assert_eq!(
        b.location().await.expect("location"),
        format!(
            "sqlite file {} table onestep_executions",
            canonical.display()
        )
    );
    // The same file through another spelling of its path names the same store.
    let other = format!(
        "sqlite://{}",
        dir.path().join(".").join("onestep.db").display()
    );
    let c = open(&other).await;
    assert_eq!(
        c.location().await.expect("location"),
        b.location().await.expect("location")
    );
    c.close().await.expect("close");
    b.close().await.expect("close");
}
