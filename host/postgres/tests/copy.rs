//! `onestep copy` on PostgreSQL (docs/cli.md#onestep-copy): the shared testkit case
//! (`onestep_testkit::backend_cases::copy`, also run on MariaDB and MySQL and between the
//! backends in the e2e suite) from one database to another.
#![allow(clippy::expect_used, clippy::panic)]

mod common;

use onestep_postgres::{PgBackend, StoreOptions};
use onestep_testkit::backend_cases::copy::round_trip;

async fn open(dsn: &str) -> PgBackend {
    let mut o = StoreOptions::new(dsn);
    o.traces = true;
    PgBackend::open(o).await.expect("open backend")
}

#[tokio::test]
async fn copy_postgres_to_postgres() {
    let (a_db, b_db) = (common::scratch().await, common::scratch().await);
    let (a, b) = (open(a_db.dsn()).await, open(b_db.dsn()).await);
    round_trip(&a, &b).await;
    a.close().await.expect("close");
    b.close().await.expect("close");
    a_db.drop_database().await.expect("drop");
    b_db.drop_database().await.expect("drop");
}
