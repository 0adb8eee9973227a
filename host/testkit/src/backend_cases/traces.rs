//! The trace-context table on a real server (docs/observability.md#traces): with traces on, a
//! new submission's traceparent is stored in the submit's transaction, a replay with another
//! traceparent stays a replay and keeps the first one, the claim returns it with the lease, and
//! it is never part of the execution's metadata; with traces off nothing is written or read;
//! `purge` removes the row with its execution. Opening the backend and reading the table are
//! the backend's ([`TraceRows`]).

use async_trait::async_trait;
use onestep_core::Backend;
use onestep_core::diagnostics::PurgeRequest;
use onestep_core::ports::{ExecutionStore, LeaseStore, Retention};
use onestep_core::{Completion, ExecutionStatus};
use serde_json::json;
use uuid::Uuid;

use crate::builders::{claim, keyed};

const NS: &str = "ns";
const TASK: &str = "t";
const FIRST: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const SECOND: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

/// One database of the backend under test.
#[async_trait]
pub trait TraceRows: Send + Sync {
    /// The backend type.
    type Store: Backend + ExecutionStore + LeaseStore + Retention;
    /// Opens the backend on the database with traces on or off (tables created as needed).
    async fn open(&self, traces: bool) -> Self::Store;
    /// Whether the opened backend found (or created) the trace-context table.
    fn has_traces_table(store: &Self::Store) -> bool;
    /// The rows of the trace-context table, `(execution_id, traceparent)` ordered by execution
    /// id, the id as the server's text of the column.
    async fn stored(&self) -> Vec<(String, String)>;
    /// How [`Self::stored`] spells execution `id`.
    fn stored_id(id: Uuid) -> String;
}

/// The round trip on an empty database.
pub async fn round_trip<R: TraceRows>(db: &R) {
    // Traces off: the table exists (created with the pair) but nothing is written or read.
    let off = db.open(false).await;
    assert!(R::has_traces_table(&off));
    let mut sub = keyed(NS, TASK, "k-off", json!({"n": 0}));
    sub.trace_parent = Some(FIRST.into());
    let untraced = off.submit(sub).await.expect("submit");
    assert!(db.stored().await.is_empty(), "written while off");
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
    Backend::close(&off).await.expect("close");

    // Traces on: stored once, with the new execution only.
    let on = db.open(true).await;
    let mut sub = keyed(NS, TASK, "k-on", json!({"n": 1}));
    sub.trace_parent = Some(FIRST.into());
    let first = on.submit(sub).await.expect("submit");
    let mut again = keyed(NS, TASK, "k-on", json!({"n": 1}));
    again.trace_parent = Some(SECOND.into());
    let replay = on.submit(again).await.expect("a replay, not a conflict");
    assert_eq!(replay.id, first.id, "another traceparent is still a replay");
    assert_eq!(
        db.stored().await,
        vec![(R::stored_id(first.id), FIRST.to_owned())]
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
    assert!(db.stored().await.is_empty(), "left after purge");
    Backend::close(&on).await.expect("close");
}
