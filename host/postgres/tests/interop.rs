//! Interop with the Python reference (onestep 1.15.0, onestep-sql 0.7.1) on PostgreSQL, both
//! directions: the reference's client submits into tables our backend created and our worker
//! operations complete them; our client submits into tables the reference created and the
//! reference's worker operations complete them; the same key + content through both clients is
//! one execution (equal digests), not a conflict; reference tables upgraded by `migrate --upgrade`
//! keep working for the reference.
// Test code: a helper that cannot set up its fixture panics, like an assertion (clippy.toml
// allows this inside #[test] functions; these helpers live outside them).
#![allow(clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;

use common::reference;
use onestep_core::execution::Completion;
use onestep_core::ports::{ExecutionStore, LeaseStore};
use onestep_core::request::SubmitRequest;
use onestep_postgres::{PgBackend, StoreOptions};
use onestep_testkit::builders::{claim, prepare};
use serde_json::{Value, json};
use uuid::Uuid;

/// A change sink that forwards `None` once the session listens, then each `(id, version)`.
struct Heard(tokio::sync::mpsc::UnboundedSender<Option<(Uuid, i64)>>);

impl onestep_core::changes::ChangeSink for Heard {
    fn listening(&self) {
        let _ = self.0.send(None);
    }
    fn changed(&self, id: Uuid, version: i64) {
        let _ = self.0.send(Some((id, version)));
    }
    fn unreadable(&self) {}
}

fn canon(v: &Value) -> String {
    onestep_core::canonical::to_canonical_string(v)
}

fn id_of(v: &Value) -> Uuid {
    v["id"].as_str().and_then(|s| s.parse().ok()).expect("id")
}

fn request(key: &str, payload: &Value, metadata: &Value) -> SubmitRequest {
    SubmitRequest {
        task_name: "t".into(),
        payload: payload.clone(),
        idempotency_key: Some(key.into()),
        metadata: Some(metadata.clone()),
        ..SubmitRequest::default()
    }
}

/// Tables created by us: the reference client submits, our worker claims and completes, the
/// reference reads the result; both clients replay each other's keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reference_client_our_tables_our_worker() {
    let db = common::scratch().await;
    let backend = PgBackend::open(StoreOptions::new(db.dsn()))
        .await
        .expect("open");
    // The pair, then our additions (docs/postgres.md#diagnostics-and-traces).
    assert_eq!(
        backend.schema_report().created,
        [
            "onestep_executions",
            "onestep_execution_attempts",
            "onestep_execution_attempts_diagnostics",
            "onestep_executions_traces",
            "onestep_executions_keys",
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
        ]
    );
    let ns = "interop";
    // No exponent-form float here: the reference writes `1e16` as JSON text into `jsonb`, which
    // keeps the value but not its float-ness (docs/postgres.md#json-numbers).
    let payload = json!({"b": [1, 2.5, true, null, 0.001], "a": "é😀\n", "$onestep": 1});
    let metadata = json!({"tenant": "t1"});
    let (p, m) = (payload.to_string(), metadata.to_string());
    let py = reference::run(db.dsn(), ns, false, &["submit", "t", "k-py", &p, &m]).await;
    let py_id = id_of(&py);
    let ours = backend.get(ns, py_id).await.expect("get").expect("found");
    assert_eq!(canon(&ours.payload), canon(&payload));
    assert_eq!(
        canon(&Value::Object(ours.metadata.clone())),
        canon(&metadata)
    );
    // Same key + content through our client: the reference's execution (equal digests).
    let replay = backend
        .submit(prepare(ns, &request("k-py", &payload, &metadata)))
        .await
        .expect("replay");
    assert_eq!(replay.id, py_id);
    // Our worker operations complete it.
    let leases = backend
        .claim(&claim(ns, "t", 10, 30.0, "ours"))
        .await
        .expect("claim");
    assert_eq!(leases.len(), 1);
    assert_eq!(leases[0].execution.id, py_id);
    let hb = backend
        .heartbeat(&leases[0].lease_ref(), 30.0)
        .await
        .expect("heartbeat");
    assert!(!hb.cancel_requested);
    backend
        .complete(
            &leases[0].lease_ref(),
            &Completion::succeeded(json!({"by": "onestep", "n": 1.5})),
        )
        .await
        .expect("complete");
    let seen = reference::run(db.dsn(), ns, false, &["get", &py_id.to_string()]).await;
    assert_eq!(seen["status"], json!("succeeded"));
    assert_eq!(seen["result"], json!({"by": "onestep", "n": 1.5}));
    assert_eq!(seen["attempts"], json!(1));
    // The reference replays what we submitted.
    let mine = backend
        .submit(prepare(ns, &request("k-rs", &payload, &metadata)))
        .await
        .expect("submit");
    let py_replay = reference::run(db.dsn(), ns, false, &["submit", "t", "k-rs", &p, &m]).await;
    assert_eq!(
        id_of(&py_replay),
        mine.id,
        "reference replay of our submission"
    );
    backend.close().await.expect("close");
    db.drop_database().await.expect("drop");
}

/// Tables created by the reference: our client submits, the reference's worker operations
/// claim, heartbeat and complete; we read the results.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_client_reference_tables_reference_worker() {
    let db = common::scratch().await;
    let ns = "interop";
    reference::create_tables(db.dsn()).await;
    let mut o = StoreOptions::new(db.dsn());
    o.auto_create = false;
    let backend = PgBackend::open(o).await.expect("open on reference tables");
    assert!(
        !backend.schema_report().features.expiry_index,
        "reference tables have no expiry index"
    );
    let payload = json!({"n": 3, "x": [1e-5, "ü"]});
    let metadata = json!({"k": "v"});
    let mine = backend
        .submit(prepare(ns, &request("k-rs", &payload, &metadata)))
        .await
        .expect("submit");
    assert_eq!(mine.id.get_version_num(), 7);
    let seen = reference::run(db.dsn(), ns, false, &["get", &mine.id.to_string()]).await;
    assert_eq!(canon(&seen["payload"]), canon(&payload));
    assert_eq!(
        (seen["status"].clone(), seen["version"].clone()),
        (json!("queued"), json!(0))
    );
    let (p, m) = (payload.to_string(), metadata.to_string());
    let py_replay = reference::run(db.dsn(), ns, false, &["submit", "t", "k-rs", &p, &m]).await;
    assert_eq!(id_of(&py_replay), mine.id);
    let drained = reference::run(db.dsn(), ns, false, &["drain", "t", "10"]).await;
    let drained = drained.as_array().expect("list");
    assert_eq!(drained.len(), 1, "{drained:?}");
    assert_eq!(id_of(&drained[0]), mine.id);
    let done = backend.get(ns, mine.id).await.expect("get").expect("found");
    assert_eq!(done.status.as_str(), "succeeded");
    assert_eq!(
        done.result.as_ref().map(canon),
        Some(canon(&json!({"by": "reference", "echo": payload})))
    );
    assert!(
        backend
            .claim(&claim(ns, "t", 10, 30.0, "ours"))
            .await
            .expect("claim")
            .is_empty()
    );
    backend.close().await.expect("close");
    db.drop_database().await.expect("drop");
}

/// Reference-created tables upgraded by `PgBackend::upgrade` (`onestep migrate --upgrade`,
/// docs/postgres.md#upgrading-reference-tables): the upgrade adds our two indexes once (a second
/// run does nothing), our backend then sees them, and the reference's client and worker keep
/// working beside ours on the same rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgraded_reference_tables_reference_worker() {
    let db = common::scratch().await;
    let ns = "interop";
    reference::create_tables(db.dsn()).await;
    let before = reference::run(
        db.dsn(),
        ns,
        false,
        &["submit", "t", "py-before", "{\"n\":1}", "{}"],
    )
    .await;
    let mut o = StoreOptions::new(db.dsn());
    o.auto_create = false;
    let b = PgBackend::open(o).await.expect("open on reference tables");
    assert!(b.schema_report().upgrade_command.is_some());
    b.close().await.expect("close");

    let report = PgBackend::upgrade(StoreOptions::new(db.dsn()))
        .await
        .expect("upgrade");
    let added: Vec<&str> = report.steps.iter().map(|s| s.added.as_str()).collect();
    assert_eq!(
        added,
        [
            "columns priority, fairness_key",
            "constraint ck_onestep_execution_priority",
            "index ix_onestep_executions_claim_priority",
            "index ix_onestep_executions_fair",
            "index ix_onestep_executions_fair_running",
            "index ix_onestep_executions_quota",
            "index ix_onestep_executions_expiry",
            "index ix_onestep_executions_status",
            "index ix_onestep_executions_status_list",
            "index ix_onestep_executions_task_list",
            "fillfactor 70 on onestep_execution_attempts",
            "table onestep_executions_listeners and trigger onestep_notify on onestep_executions",
            "status 'parked' on onestep_execution_attempts (its status CHECK widened)"
        ],
        "{report:?}"
    );
    assert_eq!(report.steps[12].form, "NOT VALID, then VALIDATE");
    assert_eq!(report.steps[0].form, "ADD COLUMN (catalog only)");
    assert_eq!(report.steps[1].form, "NOT VALID, then VALIDATE");
    assert!(
        report.steps[2..10].iter().all(|s| s.form == "CONCURRENTLY"),
        "{report:?}"
    );
    let c = tokio_postgres::connect(db.dsn(), tokio_postgres::NoTls).await;
    let (c, conn) = c.expect("connect");
    let driver = tokio::spawn(conn);
    let options: Option<Vec<String>> = c
        .query_one(
            "SELECT reloptions FROM pg_class WHERE relname = 'onestep_execution_attempts'",
            &[],
        )
        .await
        .expect("reloptions")
        .get(0);
    assert_eq!(options, Some(vec!["fillfactor=70".to_owned()]));
    drop(c);
    let _ = driver.await;
    let again = PgBackend::upgrade(StoreOptions::new(db.dsn()))
        .await
        .expect("second upgrade");
    assert!(again.steps.is_empty(), "idempotent: {again:?}");

    let mut o = StoreOptions::new(db.dsn());
    o.auto_create = false;
    let b = PgBackend::open(o).await.expect("open upgraded");
    let features = b.schema_report().features;
    assert!(
        features.expiry_index
            && features.list_indexes
            && features.buckets_table
            && features.callbacks_tables
            && features.components_tables
            && features.deployments_tables
            && features.steps_table
            && features.notify_trigger,
        "{features:?}"
    );
    assert!(b.schema_report().upgrade_command.is_none());
    // We claim and complete the reference's pre-upgrade row; the reference worker drains ours.
    let leases = b
        .claim(&claim(ns, "t", 1, 30.0, "ours"))
        .await
        .expect("claim");
    assert_eq!(leases.len(), 1);
    assert_eq!(leases[0].execution.id, id_of(&before));
    // The reference's row, written before the columns existed, reads with their defaults.
    assert_eq!(
        (
            leases[0].execution.priority,
            leases[0].execution.fairness_key.as_deref()
        ),
        (5, None)
    );
    b.complete(
        &leases[0].lease_ref(),
        &Completion::succeeded(json!("by us")),
    )
    .await
    .expect("complete");
    let mine = b
        .submit(prepare(
            ns,
            &request("k-after", &json!({"n": 2}), &json!({})),
        ))
        .await
        .expect("submit");
    // The notify trigger the upgrade added sees the reference's completion too
    // (docs/postgres.md#change-notifications): our listening session is told of it.
    let (tx, mut heard) = tokio::sync::mpsc::unbounded_channel();
    let stop = tokio_util::sync::CancellationToken::new();
    let listener = onestep_core::Backend::changes(&b).expect("a listener after the upgrade");
    let listening = {
        let stop = stop.clone();
        tokio::spawn(async move { listener.listen(Arc::new(Heard(tx)), stop).await })
    };
    assert_eq!(
        tokio::time::timeout(std::time::Duration::from_secs(10), heard.recv())
            .await
            .expect("listening in time"),
        Some(None),
        "the session listens first"
    );
    let drained = reference::run(db.dsn(), ns, false, &["drain", "t", "10"]).await;
    let drained = drained.as_array().expect("list");
    assert_eq!(drained.len(), 1, "{drained:?}");
    assert_eq!(id_of(&drained[0]), mine.id);
    let done = b.get(ns, mine.id).await.expect("get").expect("found");
    let mut notified = None;
    while let Ok(Some(Some(change))) =
        tokio::time::timeout(std::time::Duration::from_secs(5), heard.recv()).await
    {
        if change.0 == mine.id {
            notified = Some(change);
            break;
        }
    }
    assert_eq!(
        notified,
        Some((mine.id, done.version)),
        "the reference's completion was notified"
    );
    stop.cancel();
    listening.await.expect("join").expect("stopped");
    let seen = reference::run(db.dsn(), ns, false, &["get", &id_of(&before).to_string()]).await;
    assert_eq!(seen["status"], json!("succeeded"));
    let done = b.get(ns, mine.id).await.expect("get").expect("found");
    assert_eq!(done.status.as_str(), "succeeded");
    // A sleeping execution on the shared tables: the reference reads it waiting, then its result.
    onestep_testkit::backend_cases::reference::parked_execution_as_the_reference_sees_it(
        &b,
        &b,
        &reference::py_dsn(db.dsn()),
        ns,
    )
    .await;
    b.close().await.expect("close");
    db.drop_database().await.expect("drop");
}
