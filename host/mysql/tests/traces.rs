//! The trace-context table on MariaDB and MySQL (docs/observability.md#traces): the shared
//! testkit case (`onestep_testkit::backend_cases::traces`, also run on PostgreSQL: traceparents
//! stored once per new execution, returned with the lease, never metadata, nothing while off,
//! purged with the execution), with the backend opened and its table read here.
#![allow(clippy::expect_used, clippy::panic)]

mod common;

use async_trait::async_trait;
use common::{Server, admin_pool, create_db, db_url, drop_db};
use mysql_async::prelude::Queryable;
use onestep_mysql::{MySqlBackend, StoreOptions};
use onestep_testkit::backend_cases::traces::{TraceRows, round_trip};
use uuid::Uuid;

/// One test database on a server.
struct Db {
    url: String,
    admin: mysql_async::Pool,
    db: String,
}

#[async_trait]
impl TraceRows for Db {
    type Store = MySqlBackend;

    async fn open(&self, traces: bool) -> MySqlBackend {
        let mut o = StoreOptions::new(db_url(&self.url, &self.db));
        o.traces = traces;
        MySqlBackend::open(o).await.expect("open backend")
    }

    fn has_traces_table(store: &MySqlBackend) -> bool {
        store.schema_report().features.traces_table
    }

    async fn stored(&self) -> Vec<(String, String)> {
        let mut conn = self.admin.get_conn().await.expect("conn");
        conn.query(format!(
            "SELECT execution_id, traceparent FROM `{}`.`onestep_executions_traces` ORDER BY execution_id",
            self.db
        ))
        .await
        .expect("read the traces table")
    }

    fn stored_id(id: Uuid) -> String {
        id.simple().to_string()
    }
}

async fn trace_round_trip(server: Server) {
    let Some(url) = server.admin_url() else {
        return;
    };
    let admin = admin_pool(&url);
    let db = create_db(&admin).await;
    let fixture = Db { url, admin, db };
    round_trip(&fixture).await;
    drop_db(&fixture.admin, &fixture.db).await;
}

#[tokio::test]
async fn trace_context_round_trip_mariadb() {
    trace_round_trip(Server::MariaDb).await;
}

#[tokio::test]
async fn trace_context_round_trip_mysql() {
    trace_round_trip(Server::MySql).await;
}
