//! The cost of a park (T15, docs/steps.md#sleep) beside a plain retry on real servers: the
//! statements each write sends, counted on the server in the backend's own session, with and
//! without the attempt's diagnostics, and the wake (a claim) after each. The test prints the
//! figures; it asserts the statement counts (stable), never the times.
// Test code: a helper that cannot set up its fixture panics, like an assertion (clippy.toml
// allows this inside #[test] functions; these helpers live outside them).
#![allow(clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;

use common::{Server, admin_pool, create_db, db_url, drop_db, server_version};
use mysql_async::prelude::Queryable;
use onestep_core::diagnostics::AttemptDiagnostics;
use onestep_core::park::{Park, parked_message};
use onestep_core::ports::{ExecutionStore, LeaseStore};
use onestep_core::{Completion, ErrorObject, ExecutionLease};
use onestep_mysql::{MySqlBackend, StoreOptions};
use onestep_testkit::ManualClock;
use onestep_testkit::builders::{claim, prepared};
use serde_json::json;

/// A backend with ONE pooled connection, so that every statement it sends runs in one session.
async fn one_connection_backend(url: &str, db: &str, clock: Arc<ManualClock>) -> MySqlBackend {
    let mut o = StoreOptions::new(db_url(url, db));
    o.clock = clock;
    o.pool_max = 1;
    MySqlBackend::open(o).await.expect("open backend")
}

/// The session's `Questions` counter and connection id (the read counts as two statements).
async fn questions(b: &MySqlBackend) -> (u64, u64) {
    let mut c = b.test_pool().get_conn().await.expect("conn");
    c.reset_connection(false);
    let id: Option<u64> = c.query_first("SELECT CONNECTION_ID()").await.expect("id");
    let row: Option<(String, u64)> = c
        .query_first("SHOW SESSION STATUS LIKE 'Questions'")
        .await
        .expect("questions");
    (row.expect("Questions").1, id.expect("connection id"))
}

/// Statements `op` sent, counted on the server.
async fn statements_of<F: std::future::Future<Output = ()>>(b: &MySqlBackend, op: F) -> u64 {
    let (before, conn_before) = questions(b).await;
    op.await;
    let (after, conn_after) = questions(b).await;
    assert_eq!(conn_before, conn_after, "one session throughout");
    after - before - 2
}

async fn one_lease(b: &MySqlBackend, task: &str) -> ExecutionLease {
    b.submit(prepared("ns", task, json!(1)))
        .await
        .expect("submit");
    b.claim(&claim("ns", task, 1, 600.0, "w"))
        .await
        .expect("claim")
        .pop()
        .expect("lease")
}

fn diagnostics(message: &str) -> AttemptDiagnostics {
    AttemptDiagnostics {
        message: Some(message.to_owned()),
        ..AttemptDiagnostics::default()
    }
}

async fn park_against_retry(server: Server) {
    let Some(url) = server.admin_url() else {
        return;
    };
    let admin = admin_pool(&url);
    let version = server_version(&admin).await;
    let db = create_db(&admin).await;
    let clock = Arc::new(ManualClock::default());
    let b = one_connection_backend(&url, &db, clock.clone()).await;
    // Warm the statement cache as a running worker's is.
    let warm = one_lease(&b, "warm").await;
    b.park(&warm.lease_ref(), &Park::until(clock.now_value()))
        .await
        .expect("warm park");
    let warm = one_lease(&b, "warm2").await;
    b.complete(
        &warm.lease_ref(),
        &Completion::retrying(ErrorObject::new("error", "E", Some("handler")), 0.0),
    )
    .await
    .expect("warm retry");

    let mut figures = Vec::new();
    for with_diagnostics in [false, true] {
        let wake = clock.now_value() + chrono::Duration::seconds(10);
        let lease = one_lease(&b, "p").await;
        let mut park = Park::until(wake);
        if with_diagnostics {
            park = park.with_diagnostics(diagnostics(&parked_message(wake)));
        }
        let parks = statements_of(&b, async {
            b.park(&lease.lease_ref(), &park).await.expect("park");
        })
        .await;
        let lease = one_lease(&b, "r").await;
        let mut retry = Completion::retrying(ErrorObject::new("error", "E", Some("handler")), 10.0);
        if with_diagnostics {
            retry = retry.with_diagnostics(diagnostics("boom"));
        }
        let retries = statements_of(&b, async {
            b.complete(&lease.lease_ref(), &retry).await.expect("retry");
        })
        .await;
        figures.push((with_diagnostics, parks, retries));
        // Their wake-ups are the same claim.
        clock.advance(10.0);
        for task in ["p", "r"] {
            let again = b
                .claim(&claim("ns", task, 1, 600.0, "w"))
                .await
                .expect("claim");
            assert_eq!(again.len(), 1, "{task} claimable at its time");
            b.complete(&again[0].lease_ref(), &Completion::succeeded(json!(1)))
                .await
                .expect("done");
        }
    }
    let count = statements_of(&b, async {
        b.parked_attempts(uuid::Uuid::new_v4())
            .await
            .expect("count");
    })
    .await;
    for (d, parks, retries) in &figures {
        eprintln!(
            "[{} {version}] statements per write{}: park {parks}, retrying completion {retries}",
            server.label(),
            if *d { " with diagnostics" } else { "" }
        );
    }
    eprintln!(
        "[{} {version}] parked_attempts (asked only on a retryable failure after a park): {count}",
        server.label()
    );
    // BEGIN, UPDATE execution, UPDATE attempt, read-back, COMMIT.
    assert_eq!(figures[0].1, 5, "{figures:?}");
    // A completion reads (and locks) the row first: one more.
    assert_eq!(figures[0].2, 6, "{figures:?}");
    assert!(figures[1].1 < figures[1].2, "{figures:?}");
    assert_eq!(count, 1);
    b.close().await.expect("close");
    drop_db(&admin, &db).await;
}

#[tokio::test]
async fn a_park_costs_a_statement_less_than_a_retry_mariadb() {
    park_against_retry(Server::MariaDb).await;
}

#[tokio::test]
async fn a_park_costs_a_statement_less_than_a_retry_mysql() {
    park_against_retry(Server::MySql).await;
}
