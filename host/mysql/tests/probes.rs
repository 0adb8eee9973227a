//! The read-only probes and the benchmarks' scratch databases: a scratch database is created
//! and dropped, `ready()` answers `Ok` on a fresh schema and a typed `misconfigured` error once a
//! table is gone, `execution_timings` reports queue and run time per execution, and
//! `server_counters` reads the server's status counters.
// Test code: a helper that cannot set up its fixture panics, like an assertion (clippy.toml
// allows this inside #[test] functions; these helpers live outside them).
#![allow(clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;

use common::{Server, admin_pool};
use mysql_async::prelude::Queryable;
use onestep_core::execution::Completion;
use onestep_core::ports::{ExecutionStore, LeaseStore, Readiness, StoreStats};
use onestep_core::{ConnectorKind, ExecutionError};
use onestep_mysql::{MySqlBackend, ScratchDatabase, StoreOptions};
use onestep_testkit::ManualClock;
use onestep_testkit::builders::{claim, prepared};
use serde_json::json;

async fn database_exists(admin_url: &str, name: &str) -> bool {
    let admin = admin_pool(admin_url);
    let mut c = admin.get_conn().await.expect("admin connection");
    let found: Option<String> = c
        .exec_first(
            "SELECT SCHEMA_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?",
            (name,),
        )
        .await
        .expect("schemata");
    drop(c);
    let _ = admin.disconnect().await;
    found.is_some()
}

async fn probes(server: Server) {
    let Some(url) = server.admin_url() else {
        return;
    };
    let scratch = ScratchDatabase::create(&format!("{url}/"), "onestep_t_")
        .await
        .expect("create the scratch database");
    let name = scratch.name().to_owned();
    assert!(name.starts_with("onestep_t_"), "{name}");
    assert!(database_exists(&url, &name).await, "{name} was created");

    let clock = Arc::new(ManualClock::default());
    let mut opts = StoreOptions::new(scratch.dsn());
    opts.clock = clock.clone();
    let b = MySqlBackend::open(opts)
        .await
        .expect("open on the scratch dsn");
    b.ready().await.expect("ready on a fresh schema");

    // One execution runs for 2 s after waiting 1 s; the other is never claimed.
    let t0 = clock.now_value();
    b.submit(prepared("probe", "t", json!(1)))
        .await
        .expect("submit");
    clock.advance(1.0);
    let leases = b
        .claim(&claim("probe", "t", 1, 30.0, "w"))
        .await
        .expect("claim");
    assert_eq!(leases.len(), 1);
    b.submit(prepared("probe", "t", json!(2)))
        .await
        .expect("submit");
    b.submit(prepared("other", "t", json!(3)))
        .await
        .expect("submit");
    clock.advance(2.0);
    b.complete(&leases[0].lease_ref(), &Completion::succeeded(json!("ok")))
        .await
        .expect("complete");
    let later = b
        .execution_timings("probe", Some(t0 + chrono::Duration::milliseconds(500)))
        .await
        .expect("timings since");
    assert_eq!(later.len(), 1, "only the second submission: {later:?}");
    assert!(!later[0].succeeded);
    let mut timings = b.execution_timings("probe", None).await.expect("timings");
    timings.sort_by_key(|t| !t.succeeded);
    assert_eq!(timings.len(), 2, "{timings:?}");
    assert_eq!(
        (
            timings[0].queued_us,
            timings[0].running_us,
            timings[0].succeeded
        ),
        (Some(1_000_000), Some(2_000_000), true)
    );
    assert_eq!(
        (
            timings[1].queued_us,
            timings[1].running_us,
            timings[1].succeeded
        ),
        (None, None, false)
    );

    let counters = b.server_counters().await.expect("counters");
    assert!(
        counters.get("questions").is_some_and(|q| *q > 0.0),
        "{counters:?}"
    );
    for k in [
        "com_select",
        "innodb_buffer_pool_reads",
        "innodb_buffer_pool_read_requests",
        "handler_read_key",
        "handler_read_next",
        "handler_read_rnd_next",
    ] {
        assert!(counters.contains_key(k), "{k}: {counters:?}");
    }

    // A missing table: not ready, typed, without the DSN.
    let mut c = b.test_pool().get_conn().await.expect("conn");
    c.query_drop(format!("DROP TABLE `{}`", b.tables().attempts))
        .await
        .expect("drop attempts");
    drop(c);
    match b.ready().await {
        Err(ExecutionError::Backend(e)) => {
            assert_eq!(
                (e.backend, e.operation, e.kind),
                ("mysql", "ready", ConnectorKind::Misconfigured)
            );
            assert!(
                e.message.starts_with("server error 1146: "),
                "{}",
                e.message
            );
            assert!(!e.message.contains(scratch.dsn()), "{}", e.message);
        }
        other => panic!("expected a backend error, got {other:?}"),
    }
    b.close().await.expect("close");

    scratch.drop_database().await.expect("drop");
    assert!(!database_exists(&url, &name).await, "{name} was dropped");
}

#[tokio::test]
async fn probes_mariadb() {
    probes(Server::MariaDb).await;
}

#[tokio::test]
async fn probes_mysql() {
    probes(Server::MySql).await;
}

#[tokio::test]
async fn scratch_database_on_an_unreachable_server_is_disconnected() {
    let e = ScratchDatabase::create("mysql://root:hunter2@127.0.0.1:1/", "onestep_t_")
        .await
        .expect_err("nothing listens on port 1");
    match e {
        ExecutionError::Backend(b) => {
            assert_eq!(
                (b.operation, b.kind),
                ("create_database", ConnectorKind::Disconnected)
            );
            assert!(!b.message.contains("hunter2"), "{}", b.message);
        }
        other => panic!("expected a backend error, got {other:?}"),
    }
}
