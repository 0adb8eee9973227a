//! One undecodable row among good ones (the shared testkit case
//! `onestep_testkit::backend_cases::undecodable`, also run on PostgreSQL): `get` and `list`
//! report it as `Undecodable` naming the row, `claim` leaves it alone and claims the rest,
//! `heartbeat_many` and `complete_many` answer for that item alone, and no row lock outlives
//! the calls (docs/semantics.md#undecodable-rows, docs/lease-protocol.md#refused-writes). The
//! raw SQL is here.
// Test code: a helper that cannot set up its fixture panics, like an assertion.
#![allow(clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;

use async_trait::async_trait;
use common::{Server, admin_pool, create_db, drop_db, open};
use mysql_async::prelude::Queryable;
use onestep_core::Limits;
use onestep_core::names::TableNames;
use onestep_mysql::DdlStyle;
use onestep_mysql::rows::bind_uuid;
use onestep_testkit::ManualClock;
use onestep_testkit::backend_cases::undecodable::{RawRows, one_undecodable_row_alone};
use uuid::Uuid;

struct Rows(mysql_async::Pool);

#[async_trait]
impl RawRows for Rows {
    async fn set_payload(&self, id: Uuid, payload: &str) {
        let mut c = self.0.get_conn().await.expect("conn");
        c.exec_drop(
            "UPDATE onestep_executions SET payload = ? WHERE id = ?",
            (payload, bind_uuid(id)),
        )
        .await
        .expect("corrupt");
    }

    async fn status(&self, id: Uuid) -> String {
        let mut c = self.0.get_conn().await.expect("conn");
        c.exec_first::<String, _, _>(
            "SELECT status FROM onestep_executions WHERE id = ?",
            (bind_uuid(id),),
        )
        .await
        .expect("status")
        .expect("row")
    }

    async fn lock_nowait(&self, id: Uuid) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let mut c = self.0.get_conn().await.expect("conn");
        c.query_drop("START TRANSACTION").await.expect("begin");
        let r: Result<Vec<mysql_async::Row>, _> = c
            .exec(
                "SELECT id FROM onestep_executions WHERE id = ? FOR UPDATE NOWAIT",
                (bind_uuid(id),),
            )
            .await;
        c.query_drop("ROLLBACK").await.expect("rollback");
        r.map(drop).map_err(Into::into)
    }

    async fn deferred_s(&self, id: Uuid) -> i64 {
        let mut c = self.0.get_conn().await.expect("conn");
        c.exec_first(
            "SELECT TIMESTAMPDIFF(SECOND, created_at, available_at) FROM onestep_executions WHERE id = ?",
            (bind_uuid(id),),
        )
        .await
        .expect("available_at")
        .expect("row")
    }
}

async fn one_row_alone(server: Server) {
    let Some(url) = server.admin_url() else {
        return;
    };
    let admin = admin_pool(&url);
    let db = create_db(&admin).await;
    let clock = Arc::new(ManualClock::default());
    let b = open(
        &url,
        &db,
        clock.clone(),
        Limits::default(),
        DdlStyle::Onestep,
        TableNames::default(),
    )
    .await;
    let rows = Rows(b.test_pool().clone());
    one_undecodable_row_alone(&b, &clock, &rows).await;
    drop(b);
    drop_db(&admin, &db).await;
}

#[tokio::test]
async fn one_undecodable_row_alone_mariadb() {
    one_row_alone(Server::MariaDb).await;
}

#[tokio::test]
async fn one_undecodable_row_alone_mysql() {
    one_row_alone(Server::MySql).await;
}
