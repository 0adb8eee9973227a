//! Attempt diagnostics and purge on PostgreSQL (docs/postgres.md#diagnostics-and-traces,
//! docs/observability.md#attempt-diagnostics): the shared testkit cases the MySQL backend runs
//! too (`onestep_testkit::diagnostics`: round trip, and a store without the diagnostics table),
//! plus purge without that table and a final write the server refuses.
#![allow(clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;

use chrono::Duration;
use onestep_core::diagnostics::PurgeRequest;
use onestep_core::ports::{ExecutionStore, LeaseStore, Retention};
use onestep_core::{Completion, ExecutionStatus, time::Clock};
use onestep_postgres::{PgBackend, StoreOptions};
use onestep_testkit::ManualClock;
use onestep_testkit::diagnostics::{NS, seed};
use serde_json::json;

async fn backend(dsn: &str, clock: Arc<ManualClock>) -> PgBackend {
    let mut o = StoreOptions::new(dsn);
    o.clock = clock;
    PgBackend::open(o).await.expect("open backend")
}

#[tokio::test]
async fn diagnostics_round_trip() {
    let db = common::scratch().await;
    let clock = Arc::new(ManualClock::default());
    let b = backend(db.dsn(), clock.clone()).await;
    assert!(b.schema_report().features.diagnostics_table);
    onestep_testkit::diagnostics::round_trip(&b, &clock).await;
    b.close().await.expect("close");
    db.drop_database().await.expect("drop");
}

/// Without the diagnostics table (dropped after the pair was created, as when the reference
/// created the tables and nobody ran `onestep migrate`), completions carrying diagnostics still
/// complete, the live write reports "not kept", and attempts are listed without diagnostics.
#[tokio::test]
async fn without_the_diagnostics_table() {
    let db = common::scratch().await;
    let clock = Arc::new(ManualClock::default());
    {
        let b = backend(db.dsn(), clock.clone()).await;
        assert!(b.schema_report().features.diagnostics_table);
        let c = b.test_pool().get().await.expect("conn");
        c.batch_execute("DROP TABLE onestep_execution_attempts_diagnostics")
            .await
            .expect("drop");
        drop(c);
        b.close().await.expect("close");
    }
    let mut o = StoreOptions::new(db.dsn());
    o.clock = clock.clone();
    o.auto_create = false;
    let b = PgBackend::open(o).await.expect("open without the table");
    assert!(!b.schema_report().features.diagnostics_table);
    onestep_testkit::diagnostics::without_the_table(&b, &clock).await;
    // Purge still works without the table (no diagnostics rows to count).
    let report = b
        .purge(&PurgeRequest {
            namespace: None,
            finished_before: clock.now() + Duration::minutes(1),
            statuses: vec![],
            batch_size: 10,
            dry_run: false,
        })
        .await
        .expect("purge");
    assert_eq!(
        (
            report.executions,
            report.attempts,
            report.diagnostics,
            report.batches
        ),
        (1, 1, 0, 1)
    );
    b.close().await.expect("close");
    db.drop_database().await.expect("drop");
}

/// A final write that the server refuses (here: a trap kind longer than its `VARCHAR(255)`)
/// is rolled back to its savepoint and costs the completion nothing.
#[tokio::test]
async fn a_refused_final_write_costs_the_completion_nothing() {
    let db = common::scratch().await;
    let clock = Arc::new(ManualClock::default());
    let b = backend(db.dsn(), clock.clone()).await;
    let leases = seed(&b, 1).await;
    let r = leases[0].lease_ref();
    let mut d = onestep_testkit::diagnostics::diagnostics(&clock, "m");
    d.facts.trap_kind = Some("x".repeat(300));
    let done = b
        .complete(&r, &Completion::succeeded(json!(1)).with_diagnostics(d))
        .await
        .expect("complete despite the refused diagnostics");
    assert_eq!(done.status, ExecutionStatus::Succeeded);
    let a = b
        .attempts(NS, r.execution_id)
        .await
        .expect("attempts")
        .expect("execution");
    assert_eq!(a[0].status, "succeeded");
    assert_eq!(a[0].diagnostics, None);
    b.close().await.expect("close");
    db.drop_database().await.expect("drop");
}
