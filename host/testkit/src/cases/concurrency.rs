//! Concurrency cases: idempotency races, competing claimers, the cancel/complete race.

use std::collections::HashSet;

use futures::future::join_all;
use onestep_core::{ExecutionError, ExecutionStatus};
use serde_json::json;

use super::{NS, TASK, case, check_invariants, claim_one, get, submit, success};
use crate::builders::{self, keyed};
use crate::suite::{Case, Fixture};

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case("concurrent_identical_submits_16", |fx| {
            Box::pin(identical(fx))
        }),
        case("concurrent_conflicting_submits_16", |fx| {
            Box::pin(conflicting(fx))
        }),
        case("concurrent_claimers_8_over_1000", |fx| {
            Box::pin(claimers(fx))
        }),
        case("cancel_complete_race_100_rounds", |fx| Box::pin(race(fx))),
    ]
}

async fn identical(fx: Fixture) {
    let tasks = (0..16).map(|_| {
        let store = fx.store.clone();
        tokio::spawn(async move { store.submit(keyed(NS, TASK, "same", json!({"v": 1}))).await })
    });
    let results = join_all(tasks).await;
    let ids: HashSet<_> = results
        .into_iter()
        .map(|r| r.expect("task").expect("submit").id)
        .collect();
    assert_eq!(ids.len(), 1, "all return the one row");
    assert_eq!(fx.probe.count_executions().await, 1);
}

async fn conflicting(fx: Fixture) {
    let tasks = (0..16).map(|i| {
        let store = fx.store.clone();
        tokio::spawn(async move { store.submit(keyed(NS, TASK, "same", json!({"v": i}))).await })
    });
    let results: Vec<_> = join_all(tasks)
        .await
        .into_iter()
        .map(|r| r.expect("task"))
        .collect();
    let ok: Vec<_> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
    assert_eq!(ok.len(), 1, "exactly one submission wins");
    let winner = ok[0].id;
    for r in &results {
        match r {
            Ok(e) => assert_eq!(e.id, winner),
            Err(ExecutionError::Conflict { existing_id }) => assert_eq!(*existing_id, winner),
            Err(e) => panic!("unexpected error {e:?}"),
        }
    }
    assert_eq!(fx.probe.count_executions().await, 1);
}

async fn claimers(fx: Fixture) {
    let batch: Vec<_> = (0..1000)
        .map(|i| builders::prepared(NS, TASK, json!(i)))
        .collect();
    for chunk in batch.chunks(250) {
        let out = fx.store.submit_many(chunk.to_vec()).await.expect("seed");
        assert!(out.iter().all(Result::is_ok));
    }
    let tasks = (0..8).map(|w| {
        let leases = fx.leases.clone();
        tokio::spawn(async move {
            let mut mine = Vec::new();
            loop {
                let got = leases
                    .claim(&builders::claim(NS, TASK, 25, 60.0, &format!("w{w}")))
                    .await
                    .expect("claim must not surface a deadlock");
                if got.is_empty() {
                    break;
                }
                mine.extend(got.into_iter().map(|l| l.execution.id));
            }
            mine
        })
    });
    let all: Vec<_> = join_all(tasks)
        .await
        .into_iter()
        .flat_map(|r| r.expect("task"))
        .collect();
    let unique: HashSet<_> = all.iter().collect();
    assert_eq!(all.len(), 1000, "every row claimed");
    assert_eq!(unique.len(), 1000, "exactly once");
}

async fn race(fx: Fixture) {
    let mut cancelled = 0;
    let mut succeeded = 0;
    for round in 0..100 {
        let e = submit(&fx, json!(round)).await;
        let lease = claim_one(&fx, 60.0).await;
        let store = fx.store.clone();
        let leases = fx.leases.clone();
        let id = e.id;
        let c = tokio::spawn(async move { store.cancel(NS, id, None).await });
        let d = tokio::spawn(async move {
            leases
                .complete(&lease.lease_ref(), &success(json!("r")))
                .await
        });
        let cancel = c.await.expect("task").expect("cancel").expect("row");
        let done = d.await.expect("task").expect("complete");
        let fin = get(&fx, e.id).await;
        match fin.status {
            ExecutionStatus::Succeeded => {
                // Success landed first; the cancel saw a terminal row and changed nothing.
                succeeded += 1;
                assert_eq!(cancel.status, ExecutionStatus::Succeeded);
                assert_eq!(fin.result, Some(json!("r")));
                assert_eq!(fin.cancel_requested_at, None);
                assert_eq!(fin.version, 2);
            }
            ExecutionStatus::Cancelled => {
                cancelled += 1;
                assert_eq!(cancel.status, ExecutionStatus::CancelRequested);
                assert_eq!(fin.result, None, "cancel wins: no result");
                assert!(fin.cancel_requested_at.is_some());
                assert_eq!(fin.version, 3);
            }
            other => panic!("unexpected final status {other}"),
        }
        assert_eq!(done, fin);
        check_invariants(&fx, e.id).await;
    }
    eprintln!("cancel/complete race: {succeeded} succeeded first, {cancelled} cancelled");
}
