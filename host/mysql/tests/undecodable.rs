//! One undecodable row (a payload no decoder accepts, written with raw SQL) among good ones:
//! `get` and `list` report it as `Undecodable` naming the row, `claim` leaves it alone and
//! claims the rest, `heartbeat_many` and `complete_many` answer for that item alone, and no
//! row lock outlives the calls (docs/semantics.md#undecodable-rows,
//! docs/lease-protocol.md#refused-writes).
// Test code: a helper that cannot set up its fixture panics, like an assertion.
#![allow(clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;

use common::{Server, admin_pool, create_db, drop_db, open};
use mysql_async::prelude::Queryable;
use onestep_core::execution::{Completion, LeaseRef};
use onestep_core::names::TableNames;
use onestep_core::ports::{ExecutionStore, LeaseStore};
use onestep_core::request::ListFilter;
use onestep_core::{ExecutionError, Limits, StaleReason};
use onestep_mysql::DdlStyle;
use onestep_mysql::rows::bind_uuid;
use onestep_testkit::ManualClock;
use onestep_testkit::builders::{claim, prepared};
use serde_json::json;
use uuid::Uuid;

const NS: &str = "ns";
const BAD: &str = r#"{"$onestep": 1}"#;

async fn corrupt(pool: &mysql_async::Pool, id: Uuid) {
    let mut c = pool.get_conn().await.expect("conn");
    c.exec_drop(
        "UPDATE onestep_executions SET payload = ? WHERE id = ?",
        (BAD, bind_uuid(id)),
    )
    .await
    .expect("corrupt");
}

fn undecodable(e: &ExecutionError, id: Uuid) {
    match e {
        ExecutionError::Undecodable(m) => {
            assert!(m.contains(&id.to_string()), "{m}");
            assert!(m.contains("payload"), "{m}");
        }
        other => panic!("expected Undecodable for {id}, got {other:?}"),
    }
}

/// `FOR UPDATE NOWAIT` on `id` from a connection of its own: fails while any transaction
/// still holds the row.
async fn lockable(pool: &mysql_async::Pool, id: Uuid) {
    let mut c = pool.get_conn().await.expect("conn");
    c.query_drop("START TRANSACTION").await.expect("begin");
    let r: Result<Vec<mysql_async::Row>, _> = c
        .exec(
            "SELECT id FROM onestep_executions WHERE id = ? FOR UPDATE NOWAIT",
            (bind_uuid(id),),
        )
        .await;
    assert!(r.is_ok(), "row {id} is still locked: {r:?}");
    c.query_drop("ROLLBACK").await.expect("rollback");
}

async fn status(pool: &mysql_async::Pool, id: Uuid) -> String {
    let mut c = pool.get_conn().await.expect("conn");
    c.exec_first::<String, _, _>(
        "SELECT status FROM onestep_executions WHERE id = ?",
        (bind_uuid(id),),
    )
    .await
    .expect("status")
    .expect("row")
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
    let pool = b.test_pool().clone();
    for i in 0..3 {
        b.submit(prepared(NS, "t", json!({ "i": i })))
            .await
            .expect("submit");
    }
    let leases = b.claim(&claim(NS, "t", 3, 30.0, "w")).await.expect("claim");
    assert_eq!(leases.len(), 3);
    let bad = leases[1].execution.id;
    corrupt(&pool, bad).await;

    // Client reads: the row alone is an error that names it.
    undecodable(&b.get(NS, bad).await.expect_err("get bad"), bad);
    assert!(
        b.get(NS, leases[0].execution.id)
            .await
            .expect("get")
            .is_some()
    );
    let filter = ListFilter {
        task_name: None,
        status: None,
        limit: 10,
        after: None,
        search: Default::default(),
        window: onestep_core::request::SEARCH_WINDOW_ROWS,
    };
    undecodable(&b.list(NS, &filter).await.expect_err("list"), bad);

    // Heartbeat reads no payload: every lease is renewed from the injected clock.
    clock.advance(5.0);
    let refs: Vec<LeaseRef> = leases.iter().map(|l| l.lease_ref()).collect();
    let beats = b.heartbeat_many(&refs, 30.0).await.expect("heartbeat");
    for r in &beats {
        let beat = r.as_ref().expect("renewed");
        assert_eq!(
            beat.lease_expires_at,
            clock.now_value() + chrono::Duration::seconds(30)
        );
    }

    // complete_many: the undecodable item fails alone, a stale item is refused alone, the
    // rest are written.
    let mut stale = leases[2].lease_ref();
    stale.lease_token = Uuid::new_v4();
    let items = vec![
        (leases[0].lease_ref(), Completion::succeeded(json!(0))),
        (leases[1].lease_ref(), Completion::succeeded(json!(1))),
        (stale, Completion::succeeded(json!(2))),
    ];
    let out = b.complete_many(&items).await.expect("complete_many");
    assert_eq!(out[0].as_ref().expect("item 0").result, Some(json!(0)));
    undecodable(out[1].as_ref().expect_err("item 1"), bad);
    assert!(
        matches!(
            out[2],
            Err(ExecutionError::StaleLease(StaleReason::LeaseInvalid))
        ),
        "{:?}",
        out[2]
    );
    assert_eq!(status(&pool, bad).await, "running");
    assert_eq!(status(&pool, leases[2].execution.id).await, "running");
    for l in &leases {
        lockable(&pool, l.execution.id).await;
    }

    // Claim: the undecodable row is not claimed (but deferred), the others are claimed.
    let mut fresh = Vec::new();
    for i in 0..3 {
        fresh.push(
            b.submit(prepared(NS, "u", json!({ "j": i })))
                .await
                .expect("submit")
                .id,
        );
    }
    corrupt(&pool, fresh[0]).await;
    let got = b
        .claim(&claim(NS, "u", 10, 30.0, "w"))
        .await
        .expect("claim");
    let mut ids: Vec<Uuid> = got.iter().map(|l| l.execution.id).collect();
    ids.sort();
    let mut want = vec![fresh[1], fresh[2]];
    want.sort();
    assert_eq!(ids, want);
    assert_eq!(status(&pool, fresh[0]).await, "queued");
    lockable(&pool, fresh[0]).await;
    // Deferred, so that it does not take a place at the head of the queue in every claim.
    let mut c = pool.get_conn().await.expect("conn");
    let deferred: i64 = c
        .exec_first(
            "SELECT TIMESTAMPDIFF(SECOND, created_at, available_at) FROM onestep_executions WHERE id = ?",
            (bind_uuid(fresh[0]),),
        )
        .await
        .expect("available_at")
        .expect("row");
    drop(c);
    assert!(
        (899..=901).contains(&deferred),
        "available_at moved on by {deferred} s, not UNDECODABLE_DEFER_S"
    );

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
