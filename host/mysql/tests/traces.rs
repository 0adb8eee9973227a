//! The trace-context table on real servers (docs/observability.md#traces): with traces on, a
//! new submission's traceparent is stored in the submit's transaction, a replay with another
//! traceparent stays a replay and keeps the first one, the claim returns it with the lease, and
//! it is never part of the execution's metadata; with traces off nothing is written or read;
//! `purge` removes the row with its execution.
#![allow(clippy::expect_used, clippy::panic)]

mod common;

use common::{Server, admin_pool, create_db, db_url, drop_db};
use mysql_async::prelude::Queryable;
use onestep_core::diagnostics::PurgeRequest;
use onestep_core::ports::{ExecutionStore, LeaseStore, Retention};
use onestep_core::{Completion, ExecutionStatus};
use onestep_mysql::{MySqlBackend, StoreOptions};
use onestep_testkit::builders::{claim, keyed};
use serde_json::json;

const NS: &str = "ns";
const TASK: &str = "t";
const FIRST: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const SECOND: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

async fn backend(url: &str, db: &str, traces: bool) -> MySqlBackend {
    let mut o = StoreOptions::new(db_url(url, db));
    o.traces = traces;
    MySqlBackend::open(o).await.expect("open backend")
}

async fn stored(admin: &mysql_async::Pool, db: &str) -> Vec<(String, String)> {
    let mut conn = admin.get_conn().await.expect("conn");
    conn.query(format!(
        "SELECT execution_id, traceparent FROM `{db}`.`onestep_executions_traces` ORDER BY execution_id"
    ))
    .await
    .expect("read the traces table")
}

async fn round_trip(server: Server) {
    let Some(url) = server.admin_url() else {
        return;
    };
    let admin = admin_pool(&url);
    let db = create_db(&admin).await;

    // Traces off: the table exists (created with the pair) but nothing is written or read.
    let off = backend(&url, &db, false).await;
    assert!(off.schema_report().features.traces_table);
    let mut sub = keyed(NS, TASK, "k-off", json!({"n": 0}));
    sub.trace_parent = Some(FIRST.into());
    let untraced = off.submit(sub).await.expect("submit");
    assert!(stored(&admin, &db).await.is_empty(), "written while off");
    let leases = off
        .claim(&claim(NS, TASK, 1, 30.0, "w1"))
        .await
        .expect("claim");
    assert_eq!(leases.len(), 1);
    assert_eq!(leases[0].execution.id, untraced.id);
    assert_eq!(leases[0].trace_parent, None);
    off.complete(&leases[0].lease_ref(), &Completion::succeeded(json!(1)))
        .await
        .expect("complete");
    off.close().await.expect("close");

    // Traces on: stored once, with the new execution only.
    let on = backend(&url, &db, true).await;
    let mut sub = keyed(NS, TASK, "k-on", json!({"n": 1}));
    sub.trace_parent = Some(FIRST.into());
    let first = on.submit(sub).await.expect("submit");
    let mut again = keyed(NS, TASK, "k-on", json!({"n": 1}));
    again.trace_parent = Some(SECOND.into());
    let replay = on.submit(again).await.expect("a replay, not a conflict");
    assert_eq!(replay.id, first.id, "another traceparent is still a replay");
    assert_eq!(
        stored(&admin, &db).await,
        vec![(first.id.simple().to_string(), FIRST.to_owned())]
    );
    assert!(
        !first
            .metadata
            .values()
            .any(|v| v.to_string().contains("4bf92f35")),
        "{:?}",
        first.metadata
    );
    let fetched = on.get(NS, first.id).await.expect("get").expect("present");
    assert!(fetched.metadata.is_empty(), "{:?}", fetched.metadata);

    let leases = on
        .claim(&claim(NS, TASK, 2, 30.0, "w1"))
        .await
        .expect("claim");
    assert_eq!(leases.len(), 1);
    assert_eq!(leases[0].trace_parent.as_deref(), Some(FIRST));
    let done = on
        .complete(&leases[0].lease_ref(), &Completion::succeeded(json!(2)))
        .await
        .expect("complete");
    assert_eq!(done.status, ExecutionStatus::Succeeded);

    // Purge removes the row with its execution.
    let report = on
        .purge(&PurgeRequest {
            namespace: Some(NS.into()),
            finished_before: chrono::Utc::now() + chrono::Duration::minutes(1),
            statuses: vec![ExecutionStatus::Succeeded],
            batch_size: 10,
            dry_run: false,
        })
        .await
        .expect("purge");
    assert_eq!(report.executions, 2);
    assert!(stored(&admin, &db).await.is_empty(), "left after purge");
    on.close().await.expect("close");
    drop_db(&admin, &db).await;
}

#[tokio::test]
async fn trace_context_round_trip_mariadb() {
    round_trip(Server::MariaDb).await;
}

#[tokio::test]
async fn trace_context_round_trip_mysql() {
    round_trip(Server::MySql).await;
}
