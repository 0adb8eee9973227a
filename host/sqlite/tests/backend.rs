//! The shared SQL-backend cases of `onestep_testkit::backend_cases` on SQLite, through this
//! backend's small hooks: one undecodable row among good ones, history seeding (both id
//! versions, keys and none, two chunks) and the trace-context round trip. The statement-shape
//! checks at scale (`scale`, `shapes`) capture a server's statement log and the reference
//! client needs the reference's own tables: neither applies to an embedded file
//! (docs/sqlite.md#schema).
#![allow(clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;

use async_trait::async_trait;
use onestep_core::ExecutionError;
use onestep_core::Limits;
use onestep_sqlite::history::{HISTORY_CHUNK, HistoryIds, HistorySeed};
use onestep_sqlite::{SqliteBackend, StoreOptions};
use onestep_testkit::ManualClock;
use onestep_testkit::backend_cases::history::{self, HistoryRows};
use onestep_testkit::backend_cases::traces::{TraceRows, round_trip};
use onestep_testkit::backend_cases::undecodable::{self, RawRows};
use rusqlite::{Connection, params};
use uuid::Uuid;

/// Raw SQL on a connection of its own.
struct Rows(std::sync::Mutex<Connection>);

impl Rows {
    fn of(b: &SqliteBackend) -> Self {
        Rows(std::sync::Mutex::new(
            b.test_connection().expect("connection"),
        ))
    }
}

#[async_trait]
impl RawRows for Rows {
    async fn set_payload(&self, id: Uuid, payload: &str) {
        let c = self.0.lock().expect("lock");
        c.execute(
            "UPDATE onestep_executions SET payload = ?1 WHERE id = ?2",
            params![payload, id.to_string()],
        )
        .expect("corrupt");
    }

    async fn status(&self, id: Uuid) -> String {
        let c = self.0.lock().expect("lock");
        c.query_row(
            "SELECT status FROM onestep_executions WHERE id = ?1",
            params![id.to_string()],
            |r| r.get(0),
        )
        .expect("status")
    }

    /// SQLite locks the file, not a row: `BEGIN IMMEDIATE` without waiting fails while any
    /// other connection holds a write transaction.
    async fn lock_nowait(&self, _id: Uuid) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let c = self.0.lock().expect("lock");
        c.busy_timeout(std::time::Duration::ZERO)?;
        c.execute_batch("BEGIN IMMEDIATE")?;
        c.execute_batch("ROLLBACK")?;
        Ok(())
    }

    async fn deferred_s(&self, id: Uuid) -> i64 {
        let c = self.0.lock().expect("lock");
        c.query_row(
            "SELECT CAST(round((julianday(available_at) - julianday(created_at)) * 86400) AS INTEGER) \
             FROM onestep_executions WHERE id = ?1",
            params![id.to_string()],
            |r| r.get(0),
        )
        .expect("available_at")
    }
}

#[tokio::test]
async fn one_undecodable_row_alone() {
    let (_dir, dsn) = common::scratch();
    let clock = Arc::new(ManualClock::default());
    let b = common::open(&dsn, clock.clone(), Limits::default()).await;
    let rows = Rows::of(&b);
    undecodable::one_undecodable_row_alone(&b, &clock, &rows).await;
    b.close().await.expect("close");
}

/// The seeder and the stored rows.
struct Seeded<'a>(&'a SqliteBackend);

#[async_trait]
impl HistoryRows for Seeded<'_> {
    async fn check_rows(&self, seed: &HistorySeed) {
        let c = self.0.test_connection().expect("connection");
        let version = match seed.ids {
            HistoryIds::V7 => "7",
            HistoryIds::V4 => "4",
        };
        let got: Vec<i64> = c
            .query_row(
                "SELECT count(*), \
                 sum(status = 'succeeded' AND attempts = 1 AND version = 2 \
                   AND lease_token IS NULL AND finished_at > started_at), \
                 sum(namespace = 'bench' AND task_name = 'bench.noop'), \
                 sum(substr(id, 15, 1) = ?1), \
                 (SELECT count(*) FROM onestep_execution_attempts x \
                   JOIN onestep_executions e ON e.id = x.execution_id \
                   WHERE x.attempt_no = 1 AND x.status = 'succeeded' AND substr(x.id, 15, 1) = ?1) \
                 FROM onestep_executions",
                params![version],
                |r| (0..5).map(|i| r.get(i)).collect(),
            )
            .expect("count");
        let n = seed.count as i64;
        assert_eq!(got, vec![n; 5], "every row finished, one attempt each");
        let keys: (i64, i64) = c
            .query_row(
                "SELECT count(DISTINCT idempotency_key), \
                 count(*) FILTER (WHERE length(idempotency_key) = 32 \
                   AND length(submission_digest) = 64) FROM onestep_executions",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .expect("keys");
        let keyed = if seed.idempotency_keys { n } else { 0 };
        assert_eq!(keys, (keyed, keyed));
        if seed.ids == HistoryIds::V7 {
            // Id order is creation order.
            let out_of_order: i64 = c
                .query_row(
                    "SELECT count(*) FROM (SELECT id, lag(id) OVER (ORDER BY created_at) AS prev \
                     FROM onestep_executions) WHERE prev > id",
                    [],
                    |r| r.get(0),
                )
                .expect("order");
            assert_eq!(out_of_order, 0);
        }
    }

    async fn seed(&self, seed: &HistorySeed) -> Result<u64, ExecutionError> {
        self.0.seed_history(seed).await
    }
}

async fn seeded(ids: HistoryIds, count: u64) {
    let (_dir, dsn) = common::scratch();
    let clock = Arc::new(ManualClock::default());
    let b = common::open(&dsn, clock.clone(), Limits::default()).await;
    history::seeded(&b, &clock, &Seeded(&b), ids, count).await;
    b.close().await.expect("close");
}

#[tokio::test]
async fn history_two_chunks_v7() {
    seeded(HistoryIds::V7, HISTORY_CHUNK as u64 + 250).await;
}

#[tokio::test]
async fn history_v4() {
    seeded(HistoryIds::V4, 3_000).await;
}

/// One database file.
struct Db(String);

#[async_trait]
impl TraceRows for Db {
    type Store = SqliteBackend;

    async fn open(&self, traces: bool) -> SqliteBackend {
        let mut o = StoreOptions::new(&self.0);
        o.traces = traces;
        SqliteBackend::open(o).await.expect("open backend")
    }

    fn has_traces_table(store: &SqliteBackend) -> bool {
        store.schema_report().features.traces_table
    }

    async fn stored(&self) -> Vec<(String, String)> {
        let b = self.open(false).await;
        let rows = read_traces(&b);
        b.close().await.expect("close");
        rows
    }

    fn stored_id(id: Uuid) -> String {
        id.to_string()
    }
}

/// The rows of the trace-context table, on a connection of their own.
fn read_traces(b: &SqliteBackend) -> Vec<(String, String)> {
    let c = b.test_connection().expect("connection");
    let mut st = c
        .prepare(
            "SELECT execution_id, traceparent FROM onestep_executions_traces \
             ORDER BY execution_id",
        )
        .expect("prepare");
    st.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .expect("read the traces table")
        .collect::<Result<Vec<_>, _>>()
        .expect("rows")
}

#[tokio::test]
async fn trace_context_round_trip() {
    let (_dir, dsn) = common::scratch();
    round_trip(&Db(dsn)).await;
}

/// A file an older onestep wrote (no `priority`/`fairness_key`, the older claim index, no
/// fairness-keys table): open warns with the upgrade command, reads the defaults, refuses a
/// priority and a fair claim; `onestep migrate --upgrade` adds the columns, the claim index,
/// the keys table and the fair indexes; then priorities are kept and claimed first, and claims
/// are fair claims (docs/sqlite.md#schema, docs/semantics.md#priority-and-fairness-key,
/// docs/semantics.md#fair-claim).
#[tokio::test]
async fn upgrade_adds_the_priority_columns() {
    use onestep_core::ports::{ExecutionStore, LeaseStore};
    use onestep_core::request::SubmitRequest;
    use onestep_testkit::builders::{claim, prepare, prepared};

    let (_dir, dsn) = common::scratch();
    let clock = Arc::new(ManualClock::default());
    let b = common::open(&dsn, clock.clone(), Limits::default()).await;
    let c = b.test_connection().expect("connection");
    c.execute_batch(
        "DROP INDEX ix_onestep_executions_claim_priority; \
         DROP INDEX ix_onestep_executions_fair; \
         DROP INDEX ix_onestep_executions_fair_running; \
         DROP INDEX ix_onestep_executions_quota; \
         DROP TABLE onestep_executions_keys; \
         DROP TABLE onestep_executions_components; \
         DROP TABLE onestep_executions_component_holders; \
         DROP TABLE onestep_executions_component_chunks; \
         DROP TABLE onestep_executions_deployments; \
         DROP TABLE onestep_executions_deployment_events; \
         DROP TABLE onestep_executions_deployment_revision; \
         DROP TABLE onestep_executions_steps; \
         ALTER TABLE onestep_executions DROP COLUMN priority; \
         ALTER TABLE onestep_executions DROP COLUMN fairness_key; \
         CREATE INDEX ix_onestep_executions_claim ON onestep_executions \
         (namespace, task_name, available_at, created_at, id) \
         WHERE status IN ('queued', 'retrying')",
    )
    .expect("older tables");
    drop(c);
    b.close().await.expect("close");

    // Opened without auto_create, so that the file stays as the older onestep left it.
    let mut o = StoreOptions::new(&dsn);
    o.clock = clock.clone();
    o.auto_create = false;
    let older = SqliteBackend::open(o).await.expect("open older");
    assert!(!older.schema_report().features.priority_columns);
    assert!(!older.schema_report().features.fair_keys);
    assert!(older.schema_report().upgrade_command.is_some());
    let old = older
        .submit(prepared("ns", "t", serde_json::json!(1)))
        .await
        .expect("submit with defaults");
    assert_eq!((old.priority, old.fairness_key.as_deref()), (5, None));
    let urgent = |key: &str| {
        prepare(
            "ns",
            &SubmitRequest {
                task_name: "t".into(),
                payload: serde_json::json!(key),
                idempotency_key: Some(key.into()),
                priority: Some(0),
                ..SubmitRequest::default()
            },
        )
    };
    let refused = older.submit(urgent("u1")).await.expect_err("refused");
    assert!(
        refused.to_string().contains("onestep migrate --upgrade"),
        "{refused}"
    );
    // Without the keys table a claim of several namespaces is refused, naming the upgrade;
    // a claim of one namespace is the plain claim.
    let mut all = claim("ns", "t", 10, 30.0, "w");
    all.namespaces = onestep_core::request::NamespaceScope::All;
    let refused = older.claim(&all).await.expect_err("needs the keys table");
    let text = refused.to_string();
    assert!(
        text.contains(onestep_core::store::fair::FAIR_CLAIM_UNSUPPORTED)
            && text.contains("onestep migrate --upgrade"),
        "{text}"
    );
    // Without the component tables the component store refuses, naming the upgrade
    // (docs/semantics.md#component-store).
    let refused = onestep_core::Backend::components(&older)
        .put(b"component")
        .await
        .expect_err("needs the component tables");
    assert!(
        refused
            .to_string()
            .contains(onestep_core::components::COMPONENTS_TABLE_ABSENT),
        "{refused}"
    );
    older.close().await.expect("close");

    let report = SqliteBackend::upgrade(StoreOptions::new(&dsn))
        .await
        .expect("upgrade");
    assert_eq!(
        report.created,
        [
            "onestep_executions_keys",
            "onestep_executions_component_chunks",
            "onestep_executions_components",
            "onestep_executions_component_holders",
            "onestep_executions_deployments",
            "onestep_executions_deployment_events",
            "onestep_executions_deployment_revision",
            "onestep_executions_steps"
        ]
    );
    let added: Vec<&str> = report.steps.iter().map(|s| s.added.as_str()).collect();
    assert_eq!(
        added,
        [
            "column priority",
            "column fairness_key",
            "index ix_onestep_executions_claim_priority",
            "index ix_onestep_executions_fair",
            "index ix_onestep_executions_fair_running",
            "index ix_onestep_executions_quota",
        ]
    );
    let again = SqliteBackend::upgrade(StoreOptions::new(&dsn))
        .await
        .expect("second upgrade");
    assert!(again.steps.is_empty(), "idempotent: {again:?}");

    let b = common::open(&dsn, clock.clone(), Limits::default()).await;
    assert!(b.schema_report().features.priority_columns);
    assert!(b.schema_report().features.fair_keys);
    assert!(b.schema_report().features.components_tables);
    assert!(b.schema_report().features.deployments_tables);
    assert!(b.schema_report().features.steps_table);
    assert_eq!(b.schema_report().upgrade_command, None);
    clock.advance(1.0);
    let u = b.submit(urgent("u2")).await.expect("kept now");
    assert_eq!(u.priority, 0);
    let got = b
        .claim(&claim("ns", "t", 10, 30.0, "w"))
        .await
        .expect("claim");
    let ids: Vec<Uuid> = got.iter().map(|l| l.execution.id).collect();
    assert_eq!(ids, [u.id, old.id]);
    assert_eq!(got[1].execution.priority, 5);
    // The fair claim serves the upgraded tables: every namespace, the rows written before
    // the upgrade included.
    let late = b
        .submit(prepared("other", "t", serde_json::json!(2)))
        .await
        .expect("submit");
    let got = b.claim(&all).await.expect("fair claim");
    assert_eq!(
        got.iter().map(|l| l.execution.id).collect::<Vec<_>>(),
        [late.id]
    );
    b.close().await.expect("close");
}

/// The fair claim on a 200,000-row backlog of one task (150 keys over three namespaces, some
/// rows delayed): `EXPLAIN QUERY PLAN` of every fair-claim statement is an index search (no
/// scan of the executions table, no temporary B-tree), and claims stay fast and fair
/// (docs/sqlite.md#fair-claim). Run with `--nocapture` to print the plans and timings.
#[tokio::test]
async fn fair_claim_plans_and_a_200k_backlog() {
    use onestep_core::ports::LeaseStore;
    use onestep_core::request::NamespaceScope;
    use onestep_testkit::builders::claim;

    const ROWS: i64 = 200_000;
    let (_dir, dsn) = common::scratch();
    let clock = Arc::new(ManualClock::default());
    let b = common::open(&dsn, clock.clone(), Limits::default()).await;
    let c = b.test_connection().expect("connection");
    let now = clock.now_value();
    let past = onestep_sqlite::rows::ts(now - chrono::Duration::seconds(600));
    let later = onestep_sqlite::rows::ts(now + chrono::Duration::seconds(3600));
    let started = std::time::Instant::now();
    c.execute(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1) \
         INSERT INTO onestep_executions (id, namespace, task_name, status, payload, metadata, \
         attempts, available_at, created_at, updated_at, version, priority, fairness_key) \
         SELECT printf('00000000-0000-4000-8000-%012d', i), 'ns' || (i % 3), 't', 'queued', \
         '{}', '{}', 0, CASE WHEN i % 7 = 0 THEN ?3 ELSE ?2 END, ?2, ?2, 0, i % 10, \
         CASE WHEN i % 11 = 0 THEN NULL ELSE 'k' || (i % 50) END FROM n",
        params![ROWS, past, later],
    )
    .expect("seed the backlog");
    println!("seeded {ROWS} rows in {:?}", started.elapsed());

    // The search each statement must make (SQLite's own wording).
    let fair = "USING INDEX ix_onestep_executions_fair";
    let key_row = "USING PRIMARY KEY (task_name=? AND namespace=? AND fairness_key=?)";
    let expected = [
        ("first_key", format!("{fair} (task_name=?)")),
        (
            "next_namespace",
            format!("{fair} (task_name=? AND <expr>=? AND namespace>?)"),
        ),
        ("next_key", format!("{fair} (task_name=? AND <expr>>?)")),
        (
            "virtual_time",
            "USING COVERING INDEX ix_onestep_executions_keys_pass (task_name=?)".to_owned(),
        ),
        ("insert_key", String::new()),
        (
            "wake_keys",
            format!(
                "{fair} (task_name=? AND <expr>=? AND namespace=? AND priority=? \
                 AND available_at<?)"
            ),
        ),
        (
            "candidates_all",
            "USING INDEX ix_onestep_executions_keys_pass (task_name=?)".to_owned(),
        ),
        (
            "candidates_listed",
            "USING INDEX ix_onestep_executions_keys_pass (task_name=?)".to_owned(),
        ),
        (
            "running",
            "USING COVERING INDEX ix_onestep_executions_fair_running \
             (task_name=? AND <expr>=? AND namespace=? AND status=?)"
                .to_owned(),
        ),
        (
            "heads",
            format!("{fair} (task_name=? AND <expr>=? AND namespace=?)"),
        ),
        ("advance", key_row.to_owned()),
        ("ready_at", key_row.to_owned()),
        (
            "next_available",
            format!("{fair} (task_name=? AND <expr>=? AND namespace=? AND priority=?)"),
        ),
        ("delete_key", key_row.to_owned()),
    ];
    let plans = b.fair_query_plans(&c).expect("plans");
    assert_eq!(
        plans.iter().map(|p| p.0.as_str()).collect::<Vec<_>>(),
        expected.iter().map(|e| e.0).collect::<Vec<_>>()
    );
    for ((name, sql, plan), (_, search)) in plans.iter().zip(&expected) {
        assert!(
            search.is_empty() || plan.iter().any(|l| l.contains(search.as_str())),
            "{name}: expected {search} in {plan:?}\n{sql}"
        );
        println!("-- {name}: {sql}");
        for line in plan {
            println!("   {line}");
        }
        for line in plan {
            let scans_table = line.starts_with("SCAN ")
                && !line.contains("VIRTUAL TABLE")
                && !line.starts_with("SCAN CONSTANT ROW");
            assert!(
                !scans_table && !line.contains("TEMP B-TREE"),
                "{name}: {line}\n{sql}"
            );
        }
    }

    let mut all = claim("ns0", "t", 10, 300.0, "w");
    all.namespaces = NamespaceScope::All;
    let mut slowest = std::time::Duration::ZERO;
    let mut total = std::time::Duration::ZERO;
    let mut served = std::collections::BTreeMap::<String, usize>::new();
    const CLAIMS: u32 = 200;
    for i in 0..CLAIMS {
        clock.advance(0.25);
        let t0 = std::time::Instant::now();
        let got = b.claim(&all).await.expect("claim");
        let took = t0.elapsed();
        total += took;
        slowest = slowest.max(took);
        assert_eq!(got.len(), 10, "claim {i}");
        for l in &got {
            let e = &l.execution;
            *served
                .entry(format!("{}/{}", e.namespace, e.effective_fairness_key()))
                .or_default() += 1;
        }
    }
    println!(
        "{CLAIMS} claims of 10: mean {:?}, slowest {:?}",
        total / CLAIMS,
        slowest
    );
    // 153 keys (50 keys x 3 namespaces + the three namespaces' own), each served once per
    // round of 153 leases: after 2000 leases no key is more than one round ahead of another.
    let (min, max) = (
        served.values().min().copied().unwrap_or(0),
        served.values().max().copied().unwrap_or(0),
    );
    assert_eq!(served.len(), 153, "{served:?}");
    assert!(max - min <= 1, "{min}..{max}: {served:?}");
    b.close().await.expect("close");
}

/// An outbox an older onestep created (before the `started`/`progress` webhook events, without
/// their four columns): open treats the outbox as absent (callbacks refused, naming the
/// upgrade); `onestep migrate --upgrade` adds the columns, once (docs/semantics.md#completion-webhooks).
#[tokio::test]
async fn upgrade_adds_the_callback_event_columns() {
    use onestep_core::callback::CallbackPort;

    let (_dir, dsn) = common::scratch();
    let clock = Arc::new(ManualClock::default());
    let b = common::open(&dsn, clock.clone(), Limits::default()).await;
    let c = b.test_connection().expect("connection");
    c.execute_batch(
        "ALTER TABLE onestep_executions_callbacks DROP COLUMN started_done; \
         ALTER TABLE onestep_executions_callbacks DROP COLUMN progress_seq; \
         ALTER TABLE onestep_executions_callbacks DROP COLUMN progress_sent_at; \
         ALTER TABLE onestep_executions_callbacks DROP COLUMN progress_after",
    )
    .expect("older outbox");
    drop(c);
    b.close().await.expect("close");

    let mut o = StoreOptions::new(&dsn);
    o.clock = clock.clone();
    o.auto_create = false;
    let older = SqliteBackend::open(o).await.expect("open older");
    assert!(!older.schema_report().features.callbacks_tables);
    let outbox = older.callback_port().expect("port");
    let refused = outbox
        .claim_due(1, std::time::Duration::from_secs(30))
        .await
        .expect_err("refused before the upgrade");
    assert!(
        refused.to_string().contains("onestep migrate --upgrade"),
        "{refused}"
    );
    older.close().await.expect("close");

    let report = SqliteBackend::upgrade(StoreOptions::new(&dsn))
        .await
        .expect("upgrade");
    let added: Vec<&str> = report.steps.iter().map(|s| s.added.as_str()).collect();
    assert_eq!(
        added,
        [
            "column onestep_executions_callbacks.started_done",
            "column onestep_executions_callbacks.progress_seq",
            "column onestep_executions_callbacks.progress_sent_at",
            "column onestep_executions_callbacks.progress_after",
        ]
    );
    let again = SqliteBackend::upgrade(StoreOptions::new(&dsn))
        .await
        .expect("second upgrade");
    assert!(again.steps.is_empty(), "idempotent: {again:?}");
    let b = common::open(&dsn, clock, Limits::default()).await;
    assert!(b.schema_report().features.callbacks_tables);
    let due = b
        .callback_port()
        .expect("port")
        .claim_due(1, std::time::Duration::from_secs(30))
        .await
        .expect("claim after the upgrade");
    assert!(due.is_empty());
    b.close().await.expect("close");
}

/// An attempts table an older onestep created, whose status CHECK predates `parked`
/// (docs/steps.md#sleep): open warns with the upgrade, a park is refused naming it and writes
/// nothing; `onestep migrate --upgrade` widens the stored CHECK (writable_schema, the rows
/// untouched), once; then a park writes `parked`, the CHECK still refuses other values and the
/// file passes `PRAGMA integrity_check`.
#[tokio::test]
async fn upgrade_lets_the_attempts_table_hold_parked() {
    use onestep_core::park::{PARKED_STATUS_REFUSED, Park};
    use onestep_core::ports::{ExecutionStore, LeaseStore};

    let (_dir, dsn) = common::scratch();
    let clock = Arc::new(ManualClock::default());
    let b = common::open(&dsn, clock.clone(), Limits::default()).await;
    assert!(b.schema_report().features.parked_status);
    let c = b.test_connection().expect("connection");
    let names = onestep_core::names::TableNames::default();
    let old: Vec<String> = onestep_sqlite::schema::attempts_ddl(&names)
        .into_iter()
        .map(|s| s.replace(", 'parked'", ""))
        .collect();
    c.execute_batch("DROP TABLE onestep_execution_attempts")
        .expect("drop");
    for s in &old {
        c.execute_batch(s).expect("older attempts table");
    }
    drop(c);
    b.close().await.expect("close");

    let mut o = StoreOptions::new(&dsn);
    o.clock = clock.clone();
    o.auto_create = false;
    let older = SqliteBackend::open(o.clone()).await.expect("open older");
    assert!(!older.schema_report().features.parked_status);
    assert!(older.schema_report().upgrade_command.is_some());
    let e = older
        .submit(onestep_testkit::builders::prepared(
            "ns",
            "t",
            serde_json::json!(1),
        ))
        .await
        .expect("submit");
    let claim = onestep_testkit::builders::claim("ns", "t", 1, 30.0, "w");
    let lease = older
        .claim(&claim)
        .await
        .expect("claim")
        .pop()
        .expect("lease");
    let wake = clock.now_value() + chrono::Duration::seconds(60);
    let refused = older
        .park(&lease.lease_ref(), &Park::until(wake))
        .await
        .expect_err("refused before the upgrade");
    assert!(
        refused.to_string().contains(PARKED_STATUS_REFUSED),
        "{refused}"
    );
    let row = older.get("ns", e.id).await.expect("get").expect("row");
    assert_eq!(row.status.as_str(), "running", "nothing written");
    older.close().await.expect("close");

    let report = SqliteBackend::upgrade(StoreOptions::new(&dsn))
        .await
        .expect("upgrade");
    let added: Vec<&str> = report.steps.iter().map(|s| s.added.as_str()).collect();
    assert_eq!(
        added,
        ["status 'parked' on onestep_execution_attempts (its status CHECK widened)"]
    );
    let again = SqliteBackend::upgrade(StoreOptions::new(&dsn))
        .await
        .expect("second upgrade");
    assert!(again.steps.is_empty(), "idempotent: {again:?}");

    let b = SqliteBackend::open(o).await.expect("open upgraded");
    assert!(b.schema_report().features.parked_status);
    assert_eq!(b.schema_report().upgrade_command, None);
    let parked = b
        .park(&lease.lease_ref(), &Park::until(wake))
        .await
        .expect("park after the upgrade");
    assert_eq!(parked.status.as_str(), "queued");
    assert_eq!(b.parked_attempts(e.id).await.expect("count"), 1);
    let c = b.test_connection().expect("connection");
    let check: String = c
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .expect("integrity_check");
    assert_eq!(check, "ok");
    let bogus = c.execute(
        "UPDATE onestep_execution_attempts SET status = 'bogus' WHERE execution_id = ?1",
        params![e.id.hyphenated().to_string()],
    );
    assert!(bogus.is_err(), "the widened CHECK still holds: {bogus:?}");
    drop(c);
    b.close().await.expect("close");
}
