//! The fair claim on MariaDB and MySQL beyond the conformance cases
//! (docs/schema.md#fair-claim-keys): a per-key cap holds exactly under concurrent claimers on
//! separate connections, and small keys are not starved behind a big backlog.
// Test code: a helper that cannot set up its fixture panics, like an assertion (clippy.toml
// allows this inside #[test] functions; these helpers live outside them).
#![allow(clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use common::{Server, admin_pool, create_db, db_url, drop_db};
use mysql_async::prelude::Queryable;
use onestep_core::execution::Completion;
use onestep_core::ports::{ExecutionStore, LeaseStore};
use onestep_core::request::{ClaimRequest, NamespaceScope, SubmitRequest};
use onestep_core::schedule::FairShare;
use onestep_mysql::{MySqlBackend, StoreOptions};
use onestep_testkit::builders::prepare;
use serde_json::json;

async fn submit_keys(b: &MySqlBackend, keys: &[(&str, usize)]) {
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

/// A fresh database on `server` and a backend over it (`None` when the server is skipped).
async fn backend(server: Server, pool_max: usize) -> Option<(MySqlBackend, String, String)> {
    let url = server.admin_url()?;
    let admin = admin_pool(&url);
    let db = create_db(&admin).await;
    let mut o = StoreOptions::new(db_url(&url, &db));
    o.pool_max = pool_max;
    let b = MySqlBackend::open(o).await.expect("open");
    assert!(b.schema_report().features.fair_keys);
    Some((b, url, db))
}

async fn cap_holds(server: Server) {
    const CAP: u32 = 3;
    let Some((b, url, db)) = backend(server, 16).await else {
        return;
    };
    submit_keys(&b, &[("a", 60), ("b", 60), ("c", 5)]).await;
    let stop = Arc::new(AtomicBool::new(false));
    // A sampler on its own connection: running rows per key, as often as it can.
    let sampler = {
        let pool = b.test_pool().clone();
        let stop = Arc::clone(&stop);
        tokio::spawn(async move {
            let mut conn = pool.get_conn().await.expect("conn");
            let mut worst = 0i64;
            let mut samples = 0u32;
            while !stop.load(Ordering::Relaxed) {
                let counts: Vec<i64> = conn
                    .query(
                        "SELECT COUNT(*) FROM onestep_executions \
                         WHERE status IN ('running', 'cancel_requested') \
                         GROUP BY COALESCE(fairness_key, namespace)",
                    )
                    .await
                    .expect("sample");
                for n in counts {
                    worst = worst.max(n);
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
    drop_db(&admin_pool(&url), &db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cap_holds_under_concurrent_claimers_mariadb() {
    cap_holds(Server::MariaDb).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cap_holds_under_concurrent_claimers_mysql() {
    cap_holds(Server::MySql).await;
}

/// The starvation case of issue 30 at the store (smaller than PostgreSQL's): key A has 4,000
/// queued, keys B–K 50 each; three claimers drain it. Every B–K execution starts before half of
/// A's backlog has.
async fn small_keys_first(server: Server) {
    let Some((b, url, db)) = backend(server, 8).await else {
        return;
    };
    let mut spec: Vec<(String, usize)> = vec![("A".to_owned(), 4_000)];
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
                    if o.len() >= 2_600 {
                        break;
                    }
                }
                let items: Vec<_> = got
                    .iter()
                    .map(|l| (l.lease_ref(), Completion::succeeded(json!(1))))
                    .collect();
                for r in b.complete_many(&items).await.expect("complete") {
                    r.expect("completed");
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
                a_started < 2_000,
                "a B–K execution started after {a_started} of A's"
            );
        }
    }
    assert_eq!(others, 500, "every B–K execution started");
    b.close().await.expect("close");
    drop_db(&admin_pool(&url), &db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn small_keys_start_before_half_of_a_big_backlog_mariadb() {
    small_keys_first(Server::MariaDb).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn small_keys_start_before_half_of_a_big_backlog_mysql() {
    small_keys_first(Server::MySql).await;
}
