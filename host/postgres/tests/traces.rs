//! The trace-context table on PostgreSQL (docs/postgres.md#diagnostics-and-traces,
//! docs/observability.md#traces): the shared testkit case
//! (`onestep_testkit::backend_cases::traces`, also run on MariaDB and MySQL), with the backend
//! opened and its table read here.
#![allow(clippy::expect_used, clippy::panic)]

mod common;

use async_trait::async_trait;
use onestep_postgres::{PgBackend, StoreOptions};
use onestep_testkit::backend_cases::traces::{TraceRows, round_trip};
use uuid::Uuid;

/// The test database.
struct Db(String);

#[async_trait]
impl TraceRows for Db {
    type Store = PgBackend;

    async fn open(&self, traces: bool) -> PgBackend {
        let mut o = StoreOptions::new(&self.0);
        o.traces = traces;
        PgBackend::open(o).await.expect("open backend")
    }

    fn has_traces_table(store: &PgBackend) -> bool {
        store.schema_report().features.traces_table
    }

    /// The rows of the trace-context table, read on a connection of their own.
    async fn stored(&self) -> Vec<(String, String)> {
        let b = self.open(false).await;
        let c = b.test_pool().get().await.expect("conn");
        let rows = c
            .query(
                "SELECT execution_id, traceparent FROM onestep_executions_traces ORDER BY execution_id",
                &[],
            )
            .await
            .expect("read the traces table");
        drop(c);
        b.close().await.expect("close");
        rows.iter()
            .map(|r| (r.get::<_, Uuid>(0).to_string(), r.get(1)))
            .collect()
    }

    fn stored_id(id: Uuid) -> String {
        id.to_string()
    }
}

#[tokio::test]
async fn trace_context_round_trip() {
    let db = common::scratch().await;
    round_trip(&Db(db.dsn().to_owned())).await;
    db.drop_database().await.expect("drop");
}
