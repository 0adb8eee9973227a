//! Attempt diagnostics on real servers (docs/observability.md#attempt-diagnostics): the final
//! write rides in the completion's transaction (single and batched), the heartbeat's live write
//! shows progress and log lines of a running attempt and never replaces a final row, the reads
//! are scoped to the namespace, a refused (stale) completion stores nothing, tables without the
//! diagnostics table keep working without it, and `purge` removes finished executions with
//! their attempts and diagnostics in bounded batches (a dry run counts and removes nothing).
#![allow(clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;

use chrono::Duration;
use common::{Server, admin_pool, create_db, db_url, drop_db};
use mysql_async::prelude::Queryable;
use onestep_core::diagnostics::{
    AttemptDiagnostics, AttemptProgress, LiveDiagnostics, LogLine, LogTail, PurgeRequest, RunFacts,
};
use onestep_core::ports::{ExecutionStore, LeaseStore, Retention};
use onestep_core::{Completion, ExecutionLease, ExecutionStatus, LeaseRef, time::Clock};
use onestep_mysql::{MySqlBackend, MySqlOptions};
use onestep_testkit::ManualClock;
use onestep_testkit::builders::{claim, prepared};
use serde_json::json;

const NS: &str = "ns";
const TASK: &str = "t";

async fn backend(url: &str, db: &str, clock: Arc<ManualClock>) -> MySqlBackend {
    let mut o = MySqlOptions::new(db_url(url, db));
    o.clock = clock;
    MySqlBackend::open(o).await.expect("open backend")
}

async fn seed(b: &MySqlBackend, n: usize) -> Vec<ExecutionLease> {
    for i in 0..n {
        b.submit(prepared(NS, TASK, json!({ "i": i })))
            .await
            .expect("submit");
    }
    b.claim(&claim(NS, TASK, n as u32, 30.0, "w1"))
        .await
        .expect("claim")
}

fn line(seq: u64, clock: &ManualClock, message: &str) -> LogLine {
    LogLine {
        seq,
        at: clock.now(),
        level: "info".into(),
        message: message.into(),
    }
}

fn diagnostics(clock: &ManualClock, message: &str) -> AttemptDiagnostics {
    AttemptDiagnostics {
        message: Some(message.into()),
        progress: Some(AttemptProgress {
            done: 3,
            total: 10,
            note: "third".into(),
            at: clock.now(),
        }),
        log: Some(LogTail {
            total_lines: 5,
            lines: vec![line(4, clock, "four"), line(5, clock, "five\nwith newline")],
        }),
        facts: RunFacts {
            trap_kind: None,
            component_digest: Some("ab".repeat(32)),
            fuel_consumed: Some(1234),
            peak_memory_bytes: Some(1 << 20),
        },
    }
}

fn handler_error() -> onestep_core::ErrorObject {
    onestep_core::ErrorObject::new("error", "HandlerError", Some("handler"))
}

async fn round_trip(server: Server) {
    let Some(url) = server.admin_url() else {
        return;
    };
    let admin = admin_pool(&url);
    let db = create_db(&admin).await;
    let clock = Arc::new(ManualClock::default());
    let b = backend(&url, &db, clock.clone()).await;
    assert!(b.schema_report().features.diagnostics_table);
    let leases = seed(&b, 3).await;
    let refs: Vec<LeaseRef> = leases.iter().map(ExecutionLease::lease_ref).collect();

    // Live write of a running attempt: progress and lines, visible through attempts/logs.
    let live = LiveDiagnostics {
        progress: Some(AttemptProgress {
            done: 1,
            total: 10,
            note: "first".into(),
            at: clock.now(),
        }),
        log: Some(LogTail {
            total_lines: 1,
            lines: vec![line(1, &clock, "one")],
        }),
    };
    assert!(
        b.record_live(&[(refs[0], live.clone())])
            .await
            .expect("live")
    );
    let a = b
        .attempts(NS, refs[0].execution_id)
        .await
        .expect("attempts")
        .expect("execution");
    assert_eq!(a.len(), 1);
    assert_eq!(a[0].status, "running");
    let d = a[0].diagnostics.as_ref().expect("live diagnostics");
    assert_eq!(d.progress.as_ref().map(|p| p.done), Some(1));
    assert_eq!(d.message, None);
    let tail = b
        .attempt_log(NS, refs[0].execution_id, 1)
        .await
        .expect("log")
        .expect("attempt")
        .expect("tail");
    assert_eq!(tail.lines, live.log.as_ref().expect("tail").lines);

    // Final writes: one single completion, two batched.
    let done = b
        .complete(
            &refs[0],
            &Completion::failed(handler_error()).with_diagnostics(diagnostics(&clock, "boom 0")),
        )
        .await
        .expect("complete");
    assert_eq!(done.status, ExecutionStatus::Failed);
    let out = b
        .complete_many(&[
            (
                refs[1],
                Completion::succeeded(json!(1)).with_diagnostics(diagnostics(&clock, "m1")),
            ),
            (
                refs[2],
                Completion::retrying(handler_error(), 0.0)
                    .with_diagnostics(diagnostics(&clock, "m2")),
            ),
        ])
        .await
        .expect("complete_many");
    assert!(out.iter().all(Result::is_ok), "{out:?}");

    // A late live write does not replace the final row.
    b.record_live(&[(refs[0], live)]).await.expect("late live");
    for (r, message) in refs.iter().zip(["boom 0", "m1", "m2"]) {
        let a = b
            .attempts(NS, r.execution_id)
            .await
            .expect("attempts")
            .expect("execution");
        let d = a[0].diagnostics.as_ref().expect("final diagnostics");
        assert_eq!(d.message.as_deref(), Some(message));
        assert_eq!(
            d.progress.as_ref().map(|p| (p.done, p.total)),
            Some((3, 10))
        );
        assert_eq!(
            d.facts.component_digest.as_deref(),
            Some("ab".repeat(32).as_str())
        );
        assert_eq!(d.facts.fuel_consumed, Some(1234));
        assert_eq!(d.log.as_ref().map(|t| t.total_lines), Some(5));
        let tail = b
            .attempt_log(NS, r.execution_id, 1)
            .await
            .expect("log")
            .expect("attempt")
            .expect("tail");
        assert_eq!(tail.total_lines, 5);
        assert_eq!(tail.dropped_lines(), 3);
        assert_eq!(tail.lines[1].message, "five\nwith newline");
    }

    // Namespace scoping and absent attempts.
    assert_eq!(
        b.attempts("other", refs[0].execution_id)
            .await
            .expect("other"),
        None
    );
    assert_eq!(
        b.attempt_log("other", refs[0].execution_id, 1)
            .await
            .expect("other"),
        None
    );
    assert_eq!(
        b.attempt_log(NS, refs[0].execution_id, 2)
            .await
            .expect("n=2"),
        None
    );

    // A refused completion (stale token) stores nothing.
    let more = seed(&b, 1).await;
    let mut stale = more[0].lease_ref();
    stale.lease_token = uuid::Uuid::new_v4();
    let refused = b
        .complete(
            &stale,
            &Completion::succeeded(json!(0)).with_diagnostics(diagnostics(&clock, "stale")),
        )
        .await;
    assert!(refused.is_err());
    let a = b
        .attempts(NS, stale.execution_id)
        .await
        .expect("attempts")
        .expect("execution");
    let last = a.last().expect("the claimed attempt");
    assert_eq!(last.attempt_no, more[0].attempt_no);
    assert_eq!(last.diagnostics, None, "nothing stored for a refused write");

    // Purge: only finished executions older than the cutoff; dry run first.
    clock.advance(2.0 * 86_400.0);
    let request = PurgeRequest {
        namespace: Some(NS.into()),
        finished_before: clock.now() - Duration::days(1),
        statuses: vec![],
        batch_size: 1,
        dry_run: true,
    };
    let dry = b.purge(&request).await.expect("dry run");
    // Two finished (failed, succeeded); the retrying and the running one stay.
    assert_eq!((dry.executions, dry.attempts, dry.diagnostics), (2, 2, 2));
    let wet = b
        .purge(&PurgeRequest {
            dry_run: false,
            ..request.clone()
        })
        .await
        .expect("purge");
    assert_eq!((wet.executions, wet.attempts, wet.diagnostics), (2, 2, 2));
    assert_eq!(wet.batches, 2, "batch size 1");
    assert_eq!(b.get(NS, refs[0].execution_id).await.expect("get"), None);
    assert!(
        b.get(NS, refs[2].execution_id)
            .await
            .expect("get")
            .is_some()
    );
    let again = b
        .purge(&PurgeRequest {
            dry_run: false,
            ..request
        })
        .await
        .expect("again");
    assert_eq!(again.executions, 0);
    let bad = b
        .purge(&PurgeRequest {
            namespace: None,
            finished_before: clock.now(),
            statuses: vec![ExecutionStatus::Running],
            batch_size: 10,
            dry_run: true,
        })
        .await;
    assert!(
        bad.as_ref()
            .is_err_and(|e| e.to_string().contains("'running' is not a terminal status")),
        "{bad:?}"
    );

    b.close().await.expect("close");
    drop_db(&admin, &db).await;
}

#[tokio::test]
async fn diagnostics_round_trip_mariadb() {
    round_trip(Server::MariaDb).await;
}

#[tokio::test]
async fn diagnostics_round_trip_mysql() {
    round_trip(Server::MySql).await;
}

/// Without the diagnostics table (dropped after the pair was created, as when the reference
/// created the tables and nobody ran `onestep migrate`), completions carrying diagnostics still
/// complete, the live write reports "not kept", and attempts are listed without diagnostics.
async fn without_the_table(server: Server) {
    let Some(url) = server.admin_url() else {
        return;
    };
    let admin = admin_pool(&url);
    let db = create_db(&admin).await;
    let clock = Arc::new(ManualClock::default());
    {
        let b = backend(&url, &db, clock.clone()).await;
        let mut c = b.test_pool().get_conn().await.expect("conn");
        let table = b.tables().diagnostics();
        c.query_drop(format!("DROP TABLE `{table}`"))
            .await
            .expect("drop");
        drop(c);
        b.close().await.expect("close");
    }
    let mut o = MySqlOptions::new(db_url(&url, &db));
    o.clock = clock.clone();
    o.auto_create = false;
    let b = MySqlBackend::open(o).await.expect("open without the table");
    assert!(!b.schema_report().features.diagnostics_table);
    let leases = seed(&b, 1).await;
    let r = leases[0].lease_ref();
    let live = LiveDiagnostics {
        progress: None,
        log: None,
    };
    assert!(!b.record_live(&[(r, live)]).await.expect("live"));
    b.complete(
        &r,
        &Completion::succeeded(json!(1)).with_diagnostics(diagnostics(&clock, "m")),
    )
    .await
    .expect("complete");
    let a = b
        .attempts(NS, r.execution_id)
        .await
        .expect("attempts")
        .expect("execution");
    assert_eq!(a.len(), 1);
    assert_eq!(a[0].status, "succeeded");
    assert_eq!(a[0].diagnostics, None);
    assert_eq!(
        b.attempt_log(NS, r.execution_id, 1).await.expect("log"),
        Some(None)
    );
    b.close().await.expect("close");
    drop_db(&admin, &db).await;
}

#[tokio::test]
async fn without_the_diagnostics_table_mariadb() {
    without_the_table(Server::MariaDb).await;
}

#[tokio::test]
async fn without_the_diagnostics_table_mysql() {
    without_the_table(Server::MySql).await;
}

/// The overview/gauge insights and the attempts read on our tables (the shared testkit check),
/// and the grouped count reads the `(namespace, task_name, status)` index alone.
async fn insights_on(server: Server) {
    let Some(url) = server.admin_url() else {
        return;
    };
    let admin = admin_pool(&url);
    let db = create_db(&admin).await;
    let b = MySqlBackend::open(MySqlOptions::new(db_url(&url, &db)))
        .await
        .expect("open backend");
    onestep_testkit::insights::counts_recent_and_attempts(&b, &b).await;
    let mut conn = admin.get_conn().await.expect("conn");
    // MySQL 9 defaults to the tree format; MariaDB knows only the traditional one.
    let explain = match server {
        Server::MariaDb => "EXPLAIN",
        Server::MySql => "EXPLAIN FORMAT=TRADITIONAL",
    };
    let plan: Vec<mysql_async::Row> = conn
        .query(format!(
            "{explain} SELECT namespace, task_name, status, COUNT(*) FROM `{db}`.onestep_executions \
             WHERE namespace IN ('ins-a', 'ins-b') GROUP BY namespace, task_name, status"
        ))
        .await
        .expect("explain");
    let text: Vec<(String, String)> = plan
        .into_iter()
        .map(|mut r| {
            let key: Option<String> = r.take("key");
            let extra: Option<String> = r.take("Extra");
            (key.unwrap_or_default(), extra.unwrap_or_default())
        })
        .collect();
    assert!(
        text.len() == 1
            && text[0].0 == "ix_onestep_executions_status"
            && text[0].1.contains("Using index"),
        "{}: index-only read of ix_<T>_status: {text:?}",
        server.label()
    );
    // The UUID columns have the type the reference gives them on this server (docs/schema.md).
    let types: Vec<(String, String, String)> = conn
        .exec(
            "SELECT TABLE_NAME, COLUMN_NAME, DATA_TYPE FROM information_schema.COLUMNS \
             WHERE TABLE_SCHEMA = ? AND COLUMN_NAME IN ('id', 'execution_id', 'lease_token') \
             AND TABLE_NAME IN ('onestep_executions', 'onestep_execution_attempts') \
             ORDER BY TABLE_NAME, COLUMN_NAME",
            (db.as_str(),),
        )
        .await
        .expect("columns");
    let want = match server {
        Server::MariaDb => "uuid",
        Server::MySql => "char",
    };
    assert_eq!(types.len(), 5, "{types:?}");
    assert!(
        types.iter().all(|(_, _, t)| t == want),
        "{}: {types:?}",
        server.label()
    );
    drop(conn);
    b.close().await.expect("close");
    drop_db(&admin, &db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insights_mariadb() {
    insights_on(Server::MariaDb).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insights_mysql() {
    insights_on(Server::MySql).await;
}
