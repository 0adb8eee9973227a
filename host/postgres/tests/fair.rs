//! The fair claim on PostgreSQL beyond the conformance cases (docs/postgres.md#fair-claim):
//! every statement's plan reads the fair indexes (never a sequential scan of the executions
//! table; with them the running count of a task's `max_running`), and a per-key cap holds exactly under concurrent claimers on separate connections.
#![allow(clippy::expect_used, clippy::panic)]

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use onestep_core::execution::Completion;
use onestep_core::ports::{ExecutionStore, LeaseStore};
use onestep_core::request::{ClaimRequest, NamespaceScope, SubmitRequest};
use onestep_core::schedule::FairShare;
use onestep_postgres::{PgBackend, StoreOptions};
use onestep_testkit::builders::prepare;
use serde_json::json;

async fn submit_keys(b: &PgBackend, keys: &[(&str, usize)]) {
    let mut batch = Vec::new();
    for (key, n) in keys {
        for i in 0..*n {
            batch.push(prepare(
                "ns",
                &SubmitRequest {
                    task_name: "t".into(),
                    payload: json!(i),
                    fairness_key: Some((*key).to_owned()),
                    ..SubmitRequest::default()
                },
            ));
        }
    }
    for chunk in batch.chunks(1000) {
        b.submit_many(chunk.to_vec()).await.expect("submit");
    }
}

fn request(limit: u32, cap: Option<u32>, worker: &str) -> ClaimRequest {
    ClaimRequest {
        namespaces: NamespaceScope::All,
        task_names: vec!["t".into()],
        limit,
        lease_duration_s: 60.0,
        worker_id: worker.into(),
        fair: FairShare {
            max_running_per_key: cap,
            ..FairShare::default()
        },
        max_running: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_statements_read_the_fair_indexes() {
    let db = common::scratch().await;
    let b = PgBackend::open(StoreOptions::new(db.dsn()))
        .await
        .expect("open");
    assert!(
        b.schema_report().features.fair_keys,
        "new tables have the keys table"
    );
    let keys: Vec<String> = (0..300).map(|i| format!("k{i}")).collect();
    let spec: Vec<(&str, usize)> = keys.iter().map(|k| (k.as_str(), 10)).collect();
    submit_keys(&b, &spec).await;
    // One claim registers the keys (the sweep) and serves 100 of them.
    let got = b.claim(&request(100, Some(5), "w")).await.expect("claim");
    assert_eq!(got.len(), 100);
    let mut per_key: HashMap<String, usize> = HashMap::new();
    for l in &got {
        *per_key
            .entry(l.execution.effective_fairness_key().to_owned())
            .or_default() += 1;
    }
    assert_eq!(per_key.len(), 100, "one row from each of 100 keys");
    let conn = b.test_pool().get().await.expect("conn");
    conn.batch_execute("ANALYZE onestep_executions; ANALYZE onestep_executions_keys")
        .await
        .expect("analyze");
    conn.batch_execute("SET plan_cache_mode = force_generic_plan")
        .await
        .expect("generic plans");
    // With them the statements of a task's running cap (docs/semantics.md#max-running).
    let cap: Vec<(&'static str, String)> = b.cap_statements().into_iter().collect();
    for (name, sql) in b.fair_claim_statements().into_iter().chain(cap) {
        // Generic plans (what the prepared statement runs with any parameters).
        let st = conn.prepare(&sql).await.expect("prepare");
        let n = st.params().len();
        let explain = format!(
            "EXPLAIN (COSTS OFF) EXECUTE fair_{name}({})",
            (0..n).map(|_| "NULL").collect::<Vec<_>>().join(", ")
        );
        conn.batch_execute(&format!("PREPARE fair_{name} AS {sql}"))
            .await
            .expect("prepare by name");
        let plan: Vec<String> = conn
            .query(&explain, &[])
            .await
            .expect("explain")
            .iter()
            .map(|r| r.get::<_, String>(0))
            .collect();
        let text = plan.join("\n");
        println!("-- {name}\n{text}\n");
        assert!(
            !text.contains("Seq Scan on onestep_executions "),
            "{name} scans the executions table:\n{text}"
        );
        if ["sweep_insert", "heads", "sweep_wake"].contains(&name) {
            assert!(
                text.contains("ix_onestep_executions_fair"),
                "{name}:\n{text}"
            );
        }
        // One key's earliest pending row: `ix_<T>_fair`, or the submit quotas' `ix_<T>_quota`
        // (the same key's pending rows, without the task: smaller, so the planner may take it).
        if name == "pending_min" {
            assert!(
                text.contains("ix_onestep_executions_fair")
                    || text.contains("ix_onestep_executions_quota"),
                "{name}:\n{text}"
            );
        }
        if ["set_keys", "delete"].contains(&name) {
            assert!(text.contains("ctid = ANY"), "{name}:\n{text}");
        }
        // The task's running count: a partial index of the running rows, never the task's
        // finished history.
        if name == "cap_running" {
            assert!(
                text.contains("ix_onestep_executions_fair_running")
                    || text.contains("ix_onestep_executions_lease"),
                "{name}:\n{text}"
            );
        }
        if name == "running" {
            assert!(
                text.contains("ix_onestep_executions_fair_running"),
                "{name}:\n{text}"
            );
        }
    }
    drop(conn);
    b.close().await.expect("close");
    db.drop_database().await.expect("drop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cap_holds_under_concurrent_claimers() {
    const CAP: u32 = 3;
    let db = common::scratch().await;
    let mut o = StoreOptions::new(db.dsn());
    o.pool_max = 16;
    let b = PgBackend::open(o).await.expect("open");
    submit_keys(&b, &[("a", 60), ("b", 60), ("c", 5)]).await;
    let stop = Arc::new(AtomicBool::new(false));
    // A sampler on its own connection: running rows per key, as often as it can.
    let sampler = {
        let pool = b.test_pool().clone();
        let stop = Arc::clone(&stop);
        tokio::spawn(async move {
            let conn = pool.get().await.expect("conn");
            let mut worst = 0i64;
            let mut samples = 0u32;
            while !stop.load(Ordering::Relaxed) {
                for r in conn
                    .query(
                        "SELECT count(*) FROM onestep_executions \
                         WHERE status IN ('running', 'cancel_requested') \
                         GROUP BY COALESCE(fairness_key, namespace)",
                        &[],
                    )
                    .await
                    .expect("sample")
                {
                    worst = worst.max(r.get::<_, i64>(0));
                }
                samples += 1;
            }
            (worst, samples)
        })
    };
    let mut workers = Vec::new();
    for w in 0..6 {
        let b = b.clone();
        workers.push(tokio::spawn(async move {
            let mut done = 0usize;
            let mut idle = 0u32;
            while idle < 50 {
                let got = b
                    .claim(&request(4, Some(CAP), &format!("w{w}")))
                    .await
                    .expect("claim");
                if got.is_empty() {
                    idle += 1;
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                    continue;
                }
                idle = 0;
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                for l in got {
                    b.complete(&l.lease_ref(), &Completion::succeeded(json!(1)))
                        .await
                        .expect("complete");
                    done += 1;
                }
            }
            done
        }));
    }
    let mut total = 0;
    for w in workers {
        total += w.await.expect("worker");
    }
    stop.store(true, Ordering::Relaxed);
    let (worst, samples) = sampler.await.expect("sampler");
    assert_eq!(total, 125, "every execution ran exactly once");
    assert!(samples > 10, "the sampler ran ({samples} samples)");
    assert!(
        worst <= i64::from(CAP),
        "a key ran {worst} at once (cap {CAP})"
    );
    assert!(worst >= 1);
    b.close().await.expect("close");
    db.drop_database().await.expect("drop");
}

/// The starvation case of issue 30 at the store: key A has 20,000 queued, keys B–K 50 each;
/// three claimers drain it. Every B–K execution starts before half of A's backlog has.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn small_keys_start_before_half_of_a_big_backlog() {
    let db = common::scratch().await;
    let mut o = StoreOptions::new(db.dsn());
    o.pool_max = 8;
    let b = PgBackend::open(o).await.expect("open");
    let mut spec: Vec<(String, usize)> = vec![("A".to_owned(), 20_000)];
    spec.extend(('B'..='K').map(|c| (c.to_string(), 50)));
    let spec_ref: Vec<(&str, usize)> = spec.iter().map(|(k, n)| (k.as_str(), *n)).collect();
    submit_keys(&b, &spec_ref).await;
    let order = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let mut claimers = Vec::new();
    for w in 0..3 {
        let b = b.clone();
        let order = Arc::clone(&order);
        claimers.push(tokio::spawn(async move {
            loop {
                let got = b
                    .claim(&request(100, None, &format!("w{w}")))
                    .await
                    .expect("claim");
                if got.is_empty() {
                    break;
                }
                {
                    let mut o = order.lock().expect("order");
                    o.extend(
                        got.iter()
                            .map(|l| l.execution.effective_fairness_key().to_owned()),
                    );
                    // Stop once well past the point that matters.
                    if o.len() >= 12_000 {
                        break;
                    }
                }
                let refs: Vec<_> = got.iter().map(|l| l.lease_ref()).collect();
                for r in refs {
                    b.complete(&r, &Completion::succeeded(json!(1)))
                        .await
                        .expect("complete");
                }
            }
        }));
    }
    for c in claimers {
        c.await.expect("claimer");
    }
    let order = order.lock().expect("order").clone();
    let mut a_started = 0usize;
    let mut others = 0usize;
    for k in &order {
        if k == "A" {
            a_started += 1;
        } else {
            others += 1;
            assert!(
                a_started < 10_000,
                "a B–K execution started after {a_started} of A's"
            );
        }
    }
    assert_eq!(others, 500, "every B–K execution started");
    b.close().await.expect("close");
    db.drop_database().await.expect("drop");
}

/// A sweep that registers many keys at once is followed by `ANALYZE` of the keys table, so the
/// candidate read walks the pass index in order instead of reading every key; and a key whose
/// head read found nothing beyond its claimed rows leaves the table in the same claim
/// (docs/postgres.md#fair-claim).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_new_keys_are_analyzed_and_drained_keys_leave_at_once() {
    let db = common::scratch().await;
    let b = PgBackend::open(StoreOptions::new(db.dsn()))
        .await
        .expect("open");
    let keys: Vec<String> = (0..1200).map(|i| format!("k{i:04}")).collect();
    let mut spec: Vec<(&str, usize)> = keys.iter().map(|k| (k.as_str(), 1)).collect();
    spec.push(("two", 2));
    submit_keys(&b, &spec).await;
    let got = b.claim(&request(100, None, "w")).await.expect("claim");
    assert_eq!(got.len(), 100);
    let conn = b.test_pool().get().await.expect("conn");
    let left: i64 = conn
        .query_one("SELECT count(*) FROM onestep_executions_keys", &[])
        .await
        .expect("count")
        .get(0);
    assert_eq!(left, 1201 - 100, "the 100 served keys had one row each");
    let tuples: f32 = conn
        .query_one(
            "SELECT reltuples FROM pg_class WHERE relname = 'onestep_executions_keys'",
            &[],
        )
        .await
        .expect("reltuples")
        .get(0);
    assert!(tuples >= 1000.0, "the keys table was analyzed: {tuples}");
    let (_, candidates) = b
        .fair_claim_statements()
        .into_iter()
        .find(|(n, _)| *n == "candidates_all")
        .expect("candidates_all");
    let plan: Vec<String> = conn
        .query(
            &format!("EXPLAIN (COSTS OFF) {candidates}"),
            &[&"t", &chrono::Utc::now(), &100i64],
        )
        .await
        .expect("explain")
        .iter()
        .map(|r| r.get::<_, String>(0))
        .collect();
    let text = plan.join("\n");
    assert!(
        text.contains("Index Scan using ix_onestep_executions_keys_pass"),
        "{text}"
    );
    drop(conn);
    // Everything still drains, each row once.
    let mut seen = std::collections::HashSet::new();
    for l in &got {
        assert!(seen.insert(l.execution.id));
    }
    loop {
        let more = b.claim(&request(100, None, "w")).await.expect("claim");
        if more.is_empty() {
            break;
        }
        for l in &more {
            assert!(seen.insert(l.execution.id), "claimed twice");
        }
    }
    assert_eq!(seen.len(), 1202);
    b.close().await.expect("close");
    db.drop_database().await.expect("drop");
}
