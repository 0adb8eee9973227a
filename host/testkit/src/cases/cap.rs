//! A task's fleet-wide running cap (docs/semantics.md#max-running): a claim with `max_running`
//! takes at most the cap minus the task's `running`/`cancel_requested` executions (of every
//! namespace), concurrent claimers together never exceed it, and a slot comes back when an
//! execution completes or when maintenance reclaims an expired lease. On tables without the
//! buckets table (reference tables before `onestep migrate --upgrade`), which holds the cap
//! lock on PostgreSQL and MySQL/MariaDB, a capped claim is refused with the upgrade message,
//! which [`supported`] checks before a case returns early.

use std::sync::Arc;

use onestep_core::execution::Completion;
use onestep_core::request::ClaimRequest;
use onestep_core::store::cap::CAP_LOCK_TABLE_ABSENT;
use onestep_core::{AttemptStatus, ExecutionLease};
use serde_json::json;

use super::{NS, TASK, case, submit};
use crate::builders;
use crate::suite::{Case, Fixture};

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case("max_running_sequential_claims", |fx| {
            Box::pin(sequential(fx))
        }),
        case("max_running_concurrent_claimers", |fx| {
            Box::pin(concurrent(fx))
        }),
        case("max_running_slot_back_after_reclaim", |fx| {
            Box::pin(reclaim(fx))
        }),
    ]
}

fn capped(limit: u32, cap: u32, lease_s: f64, worker: &str) -> ClaimRequest {
    ClaimRequest {
        max_running: Some(cap),
        ..builders::claim(NS, TASK, limit, lease_s, worker)
    }
}

async fn claim_with(fx: &Fixture, req: &ClaimRequest) -> Vec<ExecutionLease> {
    fx.leases.claim(req).await.expect("claim")
}

/// Whether the store runs capped claims; `false` (checked: the refusal naming the upgrade) on
/// tables without the buckets table.
async fn supported(fx: &Fixture) -> bool {
    match fx.leases.claim(&capped(1, 1, 30.0, "probe")).await {
        Ok(v) => {
            assert!(v.is_empty(), "nothing was submitted yet");
            true
        }
        Err(e) => {
            let text = e.to_string();
            assert_eq!(e.code(), "invalid_argument", "{text}");
            assert!(
                text.contains(CAP_LOCK_TABLE_ABSENT) && text.contains("onestep migrate --upgrade"),
                "{text}"
            );
            false
        }
    }
}

async fn done(fx: &Fixture, lease: &ExecutionLease) {
    fx.leases
        .complete(&lease.lease_ref(), &Completion::succeeded(json!("ok")))
        .await
        .expect("complete");
}

async fn sequential(fx: Fixture) {
    if !supported(&fx).await {
        return;
    }
    for i in 0..8 {
        submit(&fx, json!(i)).await;
        fx.clock.advance(0.001);
    }
    // One execution of the task in another namespace runs: it counts against the cap.
    fx.store
        .submit(builders::prepared("other", TASK, json!("o")))
        .await
        .expect("submit");
    let other = claim_with(&fx, &builders::claim("other", TASK, 1, 30.0, "w0")).await;
    assert_eq!(other.len(), 1);
    let first = claim_with(&fx, &capped(10, 3, 30.0, "w1")).await;
    assert_eq!(
        first.len(),
        2,
        "3 minus the one running in another namespace"
    );
    assert!(claim_with(&fx, &capped(10, 3, 30.0, "w2")).await.is_empty());
    // The limit still bounds a claim with room to spare.
    done(&fx, &other[0]).await;
    done(&fx, &first[0]).await;
    let one = claim_with(&fx, &capped(1, 3, 30.0, "w2")).await;
    assert_eq!(one.len(), 1, "limit 1 under room 2");
    let two = claim_with(&fx, &capped(5, 3, 30.0, "w2")).await;
    assert_eq!(two.len(), 1, "room 1 left");
    // A cancel request keeps the slot until the execution completes.
    fx.store
        .cancel(NS, two[0].execution.id, None)
        .await
        .expect("cancel")
        .expect("present");
    assert!(claim_with(&fx, &capped(5, 3, 30.0, "w3")).await.is_empty());
    fx.leases
        .complete(&two[0].lease_ref(), &Completion::cancelled(None))
        .await
        .expect("cancelled");
    let after = claim_with(&fx, &capped(5, 3, 30.0, "w3")).await;
    assert_eq!(after.len(), 1, "the cancelled execution's slot is free");
    // A claim without the cap (another source of the task) is not held to it.
    let free = claim_with(&fx, &builders::claim(NS, TASK, 2, 30.0, "w4")).await;
    assert_eq!(free.len(), 2);
    assert!(claim_with(&fx, &capped(5, 5, 30.0, "w5")).await.is_empty());
    // Another task is not counted.
    fx.store
        .submit(builders::prepared(NS, "u", json!("u")))
        .await
        .expect("submit");
    let u = ClaimRequest {
        max_running: Some(1),
        ..builders::claim(NS, "u", 5, 30.0, "w6")
    };
    assert_eq!(claim_with(&fx, &u).await.len(), 1);
}

async fn concurrent(fx: Fixture) {
    if !supported(&fx).await {
        return;
    }
    const CAP: u32 = 5;
    const ROUNDS: usize = 12;
    for i in 0..(CAP as usize * ROUNDS + 10) {
        submit(&fx, json!(i)).await;
    }
    fx.clock.advance(1.0);
    for round in 0..ROUNDS {
        // Eight claimers at once, each asking for 1 to 3 and claiming until it gets nothing.
        let mut joins = Vec::new();
        for w in 0..8 {
            let leases = Arc::clone(&fx.leases);
            joins.push(tokio::spawn(async move {
                let mut got = Vec::new();
                loop {
                    let req = capped(1 + w % 3, CAP, 60.0, &format!("w{w}"));
                    let more = leases.claim(&req).await.expect("claim");
                    if more.is_empty() {
                        return got;
                    }
                    got.extend(more);
                }
            }));
        }
        let mut all = Vec::new();
        for j in joins {
            all.extend(j.await.expect("claimer"));
        }
        assert_eq!(all.len(), CAP as usize, "round {round}: exactly the cap");
        let mut ids: Vec<_> = all.iter().map(|l| l.execution.id).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(
            ids.len(),
            CAP as usize,
            "round {round}: distinct executions"
        );
        for l in &all {
            done(&fx, l).await;
        }
    }
}

async fn reclaim(fx: Fixture) {
    if !supported(&fx).await {
        return;
    }
    for i in 0..6 {
        submit(&fx, json!(i)).await;
        fx.clock.advance(0.001);
    }
    let crashed = claim_with(&fx, &capped(10, 2, 5.0, "crashed")).await;
    assert_eq!(crashed.len(), 2);
    // Still valid leases hold their slots.
    fx.clock.advance(4.9);
    assert!(claim_with(&fx, &capped(10, 2, 5.0, "w2")).await.is_empty());
    // Expired: the claim's maintenance reclaims them first, so they no longer count.
    fx.clock.advance(0.2);
    let next = claim_with(&fx, &capped(10, 2, 5.0, "w2")).await;
    assert_eq!(next.len(), 2, "the reclaimed leases' slots are free");
    for l in &crashed {
        let a = fx.probe.attempts(l.execution.id).await;
        assert_eq!(a[0].status, AttemptStatus::LeaseLost, "reclaimed: {a:?}");
    }
    assert!(claim_with(&fx, &capped(10, 2, 5.0, "w3")).await.is_empty());
}
