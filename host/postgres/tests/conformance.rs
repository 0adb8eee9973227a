//! The testkit's conformance suite against a real PostgreSQL server: one test per case (one
//! fresh database per case, created by the test), on tables our DDL created and on tables the
//! reference's own code created, so `cargo test -p onestep-postgres --test conformance
//! t14_release` runs that case on both.
// Test code: a helper that cannot set up its fixture panics, like an assertion (clippy.toml
// allows this inside #[test] functions; these helpers live outside them).
#![allow(clippy::expect_used, clippy::panic)]

mod common;

use common::{PgFactory, Tables};

mod postgres {
    onestep_testkit::conformance_tests!(Some(super::PgFactory::new(super::Tables::Ours)));
}

/// The same suite on tables created by the reference (onestep-sql 0.7.1) itself.
mod reference_tables_postgres {
    onestep_testkit::conformance_tests!(Some(super::PgFactory::new(super::Tables::Reference)));
}

/// The overview/gauge insights and the attempts read (the shared testkit check), and the grouped
/// count reads the `(namespace, task_name, status, …)` index.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insights_and_attempts_postgres() {
    let db = common::scratch().await;
    let b = onestep_postgres::PgBackend::open(onestep_postgres::StoreOptions::new(db.dsn()))
        .await
        .expect("open backend");
    onestep_testkit::insights::counts_recent_and_attempts(&b, &b).await;
    onestep_testkit::insights::rate_limit_states(&b, &b).await;
    let conn = b.test_pool().get().await.expect("conn");
    conn.batch_execute("SET enable_seqscan = off")
        .await
        .expect("set");
    let plan = conn
        .query(
            "EXPLAIN SELECT namespace, task_name, status, COUNT(*) FROM onestep_executions \
             WHERE namespace = ANY($1::text[]) GROUP BY namespace, task_name, status",
            &[&vec!["ins-a".to_owned()]],
        )
        .await
        .expect("explain");
    let text: Vec<String> = plan.iter().filter_map(|r| r.try_get(0).ok()).collect();
    assert!(
        text.iter()
            .any(|l| l.contains("ix_onestep_executions_status")),
        "{text:?}"
    );
    conn.batch_execute("RESET enable_seqscan")
        .await
        .expect("reset");
    drop(conn);
    b.close().await.expect("close");
    db.drop_database().await.expect("drop");
}

/// The submit quotas' counts (docs/semantics.md#quotas) read `ix_<T>_quota` under a `Limit`:
/// the namespace's waiting rows and one key's among them, never the finished history.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quota_counts_read_the_quota_index_postgres() {
    let db = common::scratch().await;
    let b = onestep_postgres::PgBackend::open(onestep_postgres::StoreOptions::new(db.dsn()))
        .await
        .expect("open backend");
    let conn = b.test_pool().get().await.expect("conn");
    // 2,000 finished rows and 20 queued ones of the namespace.
    conn.batch_execute(
        "INSERT INTO onestep_executions (id, namespace, task_name, status, payload, \
         available_at, created_at, updated_at, fairness_key) \
         SELECT gen_random_uuid(), 'q', 't', CASE WHEN i <= 2000 THEN 'succeeded' ELSE 'queued' END, \
         '1', now(), now(), now(), 'k' || (i % 3) FROM generate_series(1, 2020) AS i; \
         ANALYZE onestep_executions",
    )
    .await
    .expect("rows");
    for (sql, params) in [
        (
            "EXPLAIN SELECT count(*) FROM (SELECT 1 FROM \"onestep_executions\" WHERE namespace = $1 \
             AND status IN ('queued', 'retrying') LIMIT $2) AS w",
            2,
        ),
        (
            "EXPLAIN SELECT count(*) FROM (SELECT 1 FROM \"onestep_executions\" WHERE namespace = $1 \
             AND status IN ('queued', 'retrying') AND COALESCE(fairness_key, namespace) = $3 \
             LIMIT $2) AS w",
            3,
        ),
    ] {
        let limit = 10_i64;
        let key = "k1".to_owned();
        let ns = "q".to_owned();
        let all: [&(dyn tokio_postgres::types::ToSql + Sync); 3] = [&ns, &limit, &key];
        let plan = conn.query(sql, &all[..params]).await.expect("explain");
        let text: Vec<String> = plan.iter().filter_map(|r| r.try_get(0).ok()).collect();
        assert!(
            text.iter()
                .any(|l| l.contains("ix_onestep_executions_quota")),
            "{text:?}"
        );
        assert!(text.iter().any(|l| l.contains("Limit")), "{text:?}");
        assert!(!text.iter().any(|l| l.contains("Seq Scan")), "{text:?}");
    }
    drop(conn);
    b.close().await.expect("close");
    db.drop_database().await.expect("drop");
}
