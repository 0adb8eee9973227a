//! Interop with the Python reference (onestep 1.15.0, onestep-sql 0.7.1) against MySQL 9 and
//! MariaDB: the
//! reference reads what we submitted and we read what it submitted, on tables created by the
//! reference in one case and by us in the other; the same key + content via both clients is a
//! replay (equal digests), not a conflict.
//!
//! The reference venv comes from `scripts/ref-venv.sh` (`$ONESTEP_REF_VENV`, default
//! `target/ref-venv`); if it cannot be created (pip unreachable) the test FAILS.
// Test code: a helper that cannot set up its fixture panics, like an assertion (clippy.toml
// allows this inside #[test] functions; these helpers live outside them).
#![allow(clippy::expect_used, clippy::panic)]

mod common;

use common::{Server, admin_pool, create_db, db_url, drop_db, server_version};
use onestep_core::ports::{ExecutionStore, LeaseStore};
use onestep_core::request::SubmitRequest;
use onestep_mysql::{MySqlBackend, StoreOptions};
use onestep_testkit::backend_cases::reference;
use onestep_testkit::builders::prepare;
use serde_json::{Value, json};
use uuid::Uuid;

fn canon(v: &Value) -> String {
    onestep_core::canonical::to_canonical_string(v)
}

async fn run_case(server: Server, tables_by_reference: bool) {
    let Some(url) = server.admin_url() else {
        return;
    };
    let admin = admin_pool(&url);
    let version = server_version(&admin).await;
    let db = create_db(&admin).await;
    let ours_dsn = db_url(&url, &db);
    let py_dsn = ours_dsn.replacen("mysql://", "mysql+asyncmy://", 1);
    let ns = "interop";
    let payload = json!({"b": [1, 2.5, true, null], "a": "é😀\n", "$onestep": 1});
    let metadata = json!({"tenant": "t1"});
    let (p, m) = (payload.to_string(), metadata.to_string());

    let backend = if tables_by_reference {
        let first = reference::run(&py_dsn, ns, true, &["submit", "t", "k-py", &p, &m]).await;
        let mut o = StoreOptions::new(&ours_dsn);
        o.auto_create = false;
        let b = MySqlBackend::open(o)
            .await
            .expect("open on reference tables");
        assert!(!b.schema_report().features.claimable_column);
        drop(first);
        b
    } else {
        let b = MySqlBackend::open(StoreOptions::new(&ours_dsn))
            .await
            .expect("open");
        assert!(b.schema_report().features.claimable_column);
        reference::run(&py_dsn, ns, false, &["submit", "t", "k-py", &p, &m]).await;
        b
    };
    // We read what the reference submitted, and replay it with equal content.
    let py = reference::run(&py_dsn, ns, false, &["submit", "t", "k-py", &p, &m]).await;
    let py_id: Uuid = py["id"].as_str().and_then(|s| s.parse().ok()).expect("id");
    let ours = backend.get(ns, py_id).await.expect("get").expect("found");
    assert_eq!(canon(&ours.payload), canon(&payload));
    assert_eq!(
        canon(&Value::Object(ours.metadata.clone())),
        canon(&metadata)
    );
    assert_eq!(
        (ours.status.as_str(), ours.task_name.as_str()),
        ("queued", "t")
    );
    let req = |key: &str| SubmitRequest {
        task_name: "t".into(),
        payload: payload.clone(),
        idempotency_key: Some(key.into()),
        metadata: Some(metadata.clone()),
        ..SubmitRequest::default()
    };
    let replay = backend
        .submit(prepare(ns, &req("k-py")))
        .await
        .expect("same digest: replay");
    assert_eq!(replay.id, py_id);
    // The reference reads what we submitted, and replays it with equal content.
    let mine = backend
        .submit(prepare(ns, &req("k-rs")))
        .await
        .expect("submit");
    // Our ids are UUIDv7 (docs/semantics.md#time-ordered-ids); the reference reads them unchanged.
    assert_eq!(mine.id.get_version_num(), 7);
    let id = mine.id.to_string();
    let seen = reference::run(&py_dsn, ns, false, &["get", &id]).await;
    assert_eq!(seen["id"], json!(id));
    assert_eq!(canon(&seen["payload"]), canon(&payload));
    assert_eq!(canon(&seen["metadata"]), canon(&metadata));
    assert_eq!(
        (seen["status"].clone(), seen["version"].clone()),
        (json!("queued"), json!(0))
    );
    let py_replay = reference::run(&py_dsn, ns, false, &["submit", "t", "k-rs", &p, &m]).await;
    assert_eq!(
        py_replay["id"],
        json!(id),
        "reference replay of our submission"
    );
    eprintln!(
        "[interop] tables by {}: ok against {} {version}",
        if tables_by_reference {
            "reference"
        } else {
            "onestep-mysql"
        },
        server.label()
    );
    backend.close().await.expect("close");
    drop_db(&admin, &db).await;
}

/// Reference-created tables upgraded by `MySqlBackend::upgrade` (`onestep migrate --upgrade`,
/// docs/schema.md#upgrading-reference-tables): the upgrade adds the column and both indexes once
/// (a second run does nothing), our backend then uses the claimable query shapes, and the
/// reference's client and worker calls (claim, heartbeat, complete) keep working beside ours.
async fn upgraded_case(server: Server) {
    let Some(url) = server.admin_url() else {
        return;
    };
    let admin = admin_pool(&url);
    let version = server_version(&admin).await;
    let db = create_db(&admin).await;
    let ours_dsn = db_url(&url, &db);
    let py_dsn = ours_dsn.replacen("mysql://", "mysql+asyncmy://", 1);
    let ns = "interop";
    let submit_py = async |key: &str, n: i64| {
        let p = json!({"n": n}).to_string();
        reference::run(&py_dsn, ns, true, &["submit", "t", key, &p, "{}"]).await
    };
    let before = submit_py("py-before", 1).await;
    let mut o = StoreOptions::new(&ours_dsn);
    o.auto_create = false;
    let b = MySqlBackend::open(o)
        .await
        .expect("open on reference tables");
    assert!(!b.schema_report().features.claimable_column);
    b.close().await.expect("close");

    let report = MySqlBackend::upgrade(StoreOptions::new(&ours_dsn))
        .await
        .expect("upgrade");
    // The execution tables exist already; only the diagnostics, keys, quotas, trace-context,
    // buckets, webhook (callbacks, deliveries), component store and deployment tables are new
    // (the reference's two tables are altered additively, never replaced).
    assert_eq!(
        report.created,
        [
            "onestep_execution_attempts_diagnostics",
            "onestep_executions_keys",
            "onestep_executions_quotas",
            "onestep_executions_traces",
            "onestep_executions_buckets",
            "onestep_executions_callbacks",
            "onestep_executions_deliveries",
            "onestep_executions_component_chunks",
            "onestep_executions_components",
            "onestep_executions_component_holders",
            "onestep_executions_deployments",
            "onestep_executions_deployment_events",
            "onestep_executions_deployment_revision",
            "onestep_executions_steps"
        ],
        "{report:?}"
    );
    let added: Vec<&str> = report.steps.iter().map(|s| s.added.as_str()).collect();
    // The reference's status CHECK on the attempts: MySQL widens it NOT ENFORCED, MariaDB
    // (which has no NOT ENFORCED) drops it; either in place (docs/schema.md).
    let parked_step = if version.to_ascii_lowercase().contains("mariadb") {
        "status 'parked' on onestep_execution_attempts (its status CHECK \
         ck_onestep_execution_attempts_status dropped)"
    } else {
        "status 'parked' on onestep_execution_attempts (its status CHECK \
         ck_onestep_execution_attempts_status widened, NOT ENFORCED)"
    };
    assert_eq!(
        added,
        [
            "column claimable",
            "columns priority, fairness_key",
            "column fair_key",
            "index ix_onestep_executions_claim_priority",
            "index ix_onestep_executions_expiry",
            "index ix_onestep_executions_status",
            "index ix_onestep_executions_status_list",
            "index ix_onestep_executions_task_list",
            "index ix_onestep_executions_fair",
            "index ix_onestep_executions_fair_running",
            "index ix_onestep_executions_quota",
            parked_step,
        ]
    );
    for s in &report.steps[..3] {
        assert_eq!(s.form, "ALGORITHM=INSTANT", "{report:?}");
    }
    for s in &report.steps[3..] {
        assert_eq!(s.form, "ALGORITHM=INPLACE, LOCK=NONE", "{report:?}");
    }
    let again = MySqlBackend::upgrade(StoreOptions::new(&ours_dsn))
        .await
        .expect("second upgrade");
    assert!(again.steps.is_empty(), "idempotent: {again:?}");

    let mut o = StoreOptions::new(&ours_dsn);
    o.auto_create = false;
    let b = MySqlBackend::open(o).await.expect("open upgraded");
    assert!(b.schema_report().features.claimable_column);
    assert!(b.schema_report().features.list_indexes);
    assert!(b.schema_report().features.priority_columns);
    assert!(b.schema_report().features.claim_priority_index);
    assert!(b.schema_report().features.fair_keys);
    assert!(b.schema_report().features.components_tables);
    assert!(b.schema_report().features.deployments_tables);
    assert!(b.schema_report().features.steps_table);
    assert_eq!(b.schema_report().upgrade_command, None);
    // The row written before the upgrade is claimable through the new index.
    let before_id: Uuid = before["id"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .expect("id");
    let after = submit_py("py-after", 2).await;
    let after_id: Uuid = after["id"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .expect("id");
    let mine = b
        .submit(prepare(
            ns,
            &SubmitRequest {
                task_name: "t".into(),
                payload: json!({"n": 3}),
                ..SubmitRequest::default()
            },
        ))
        .await
        .expect("submit");
    // We claim and complete one (the oldest: the reference's pre-upgrade row).
    let leases = b
        .claim(&onestep_testkit::builders::claim(ns, "t", 1, 30.0, "ours"))
        .await
        .expect("claim");
    assert_eq!(leases.len(), 1);
    assert_eq!(leases[0].execution.id, before_id);
    // Rows the reference wrote, before and after the columns were added, read with their
    // defaults (its INSERT names neither column).
    assert_eq!(
        (
            leases[0].execution.priority,
            leases[0].execution.fairness_key.as_deref()
        ),
        (5, None)
    );
    let after_row = b.get(ns, after_id).await.expect("get").expect("found");
    assert_eq!((after_row.priority, after_row.fairness_key), (5, None));
    b.complete(
        &leases[0].lease_ref(),
        &onestep_core::execution::Completion::succeeded(json!("by us")),
    )
    .await
    .expect("complete");
    // The reference worker claims and completes the other two (its and ours).
    let drained = reference::run(&py_dsn, ns, false, &["drain", "t", "10"]).await;
    let drained_ids: Vec<&str> = drained
        .as_array()
        .expect("list")
        .iter()
        .filter_map(|e| e["id"].as_str())
        .collect();
    assert_eq!(drained_ids.len(), 2, "{drained}");
    assert!(drained_ids.contains(&after_id.to_string().as_str()));
    assert!(drained_ids.contains(&mine.id.to_string().as_str()));
    let done = b.get(ns, mine.id).await.expect("get").expect("found");
    assert_eq!(done.status.as_str(), "succeeded");
    assert_eq!(
        done.result,
        Some(json!({"by": "reference", "echo": {"n": 3}}))
    );
    let seen = reference::run(&py_dsn, ns, false, &["get", &before_id.to_string()]).await;
    assert_eq!(seen["status"], json!("succeeded"));
    let none = b
        .claim(&onestep_testkit::builders::claim(ns, "t", 10, 30.0, "ours"))
        .await
        .expect("claim");
    assert!(none.is_empty());
    // A sleeping execution on the shared tables: the reference reads it waiting, then its result.
    reference::parked_execution_as_the_reference_sees_it(&b, &b, &py_dsn, ns).await;
    eprintln!(
        "[interop] upgraded reference tables: ok against {} {version}",
        server.label()
    );
    b.close().await.expect("close");
    drop_db(&admin, &db).await;
}

#[tokio::test]
async fn interop_upgraded_reference_tables_mariadb() {
    upgraded_case(Server::MariaDb).await;
}

#[tokio::test]
async fn interop_upgraded_reference_tables_mysql() {
    upgraded_case(Server::MySql).await;
}

#[tokio::test]
async fn interop_reference_created_tables_mysql() {
    run_case(Server::MySql, true).await;
}

#[tokio::test]
async fn interop_our_tables_mysql() {
    run_case(Server::MySql, false).await;
}

#[tokio::test]
async fn interop_reference_created_tables_mariadb() {
    run_case(Server::MariaDb, true).await;
}

/// On MariaDB the reference declares its UUID columns with the native `uuid` type and binds
/// 36-character hyphenated text; tables we create there use the same type (a `CHAR(32)` column
/// refused those values: "Data too long for column 'id'"), so its client submits into them.
#[tokio::test]
async fn interop_our_tables_mariadb() {
    run_case(Server::MariaDb, false).await;
}
