//! Worker-side cases beyond single transitions: claim order and limits, result size limit,
//! complete_many, stale-token fencing after a re-claim, the cancel poll.

use onestep_core::execution::Completion;
use onestep_core::request::SubmitRequest;
use onestep_core::{ExecutionError, ExecutionStatus, Limits, StaleReason};
use serde_json::json;

use super::{
    NS, TASK, assert_stale, case, check_invariants, claim, claim_one, get, submit, success,
};
use crate::builders::{handler_error, prepare};
use crate::suite::{Case, Fixture};

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case("claim_order_limit_and_task_list", |fx| {
            Box::pin(claim_order(fx))
        }),
        crate::suite::Case {
            name: "result_over_limit_refused_nothing_changed",
            limits: Limits {
                max_result_bytes: 64,
                ..Limits::default()
            },
            run: |fx| Box::pin(result_limit(fx)),
        },
        case("complete_many_with_one_stale_item", |fx| {
            Box::pin(complete_many(fx))
        }),
        case("stale_token_fencing_after_reclaim", |fx| {
            Box::pin(fencing(fx))
        }),
        case("cancel_poll_reports_cancel_requested_leases", |fx| {
            Box::pin(cancel_poll(fx))
        }),
    ]
}

/// docs/semantics.md#cancel-poll: the ids of the given leases whose row is `cancel_requested`
/// under that token while the lease is valid, nothing else, and nothing written.
async fn cancel_poll(fx: Fixture) {
    for p in ["a", "b", "c", "d"] {
        submit(&fx, json!(p)).await;
    }
    let leases = claim(&fx, 4, 30.0, "w1").await;
    assert_eq!(leases.len(), 4);
    let refs: Vec<_> = leases.iter().map(|l| l.lease_ref()).collect();
    let id = |i: usize| leases[i].execution.id;
    let poll = |refs: Vec<onestep_core::LeaseRef>| {
        let leases = fx.leases.clone();
        async move {
            let mut ids = leases.cancel_requested(&refs).await.expect("cancel poll");
            ids.sort();
            ids
        }
    };
    let sorted = |mut v: Vec<uuid::Uuid>| {
        v.sort();
        v
    };
    assert!(poll(Vec::new()).await.is_empty(), "no leases, no answer");
    assert!(poll(refs.clone()).await.is_empty(), "nothing cancelled yet");

    for i in [0, 1] {
        let c = fx
            .store
            .cancel(NS, id(i), Some("stop".into()))
            .await
            .expect("cancel")
            .expect("row");
        assert_eq!(c.status, ExecutionStatus::CancelRequested);
    }
    let before = fx.probe.lease_columns(id(1)).await.expect("row");
    let version = get(&fx, id(1)).await.version;
    fx.clock.advance(1.0);
    assert_eq!(poll(refs.clone()).await, sorted(vec![id(0), id(1)]));
    assert_eq!(
        poll(vec![refs[1]]).await,
        vec![id(1)],
        "a subset asks about that subset only"
    );
    // The poll writes nothing: no lease extension, no version or updated_at change.
    assert_eq!(fx.probe.lease_columns(id(1)).await, Some(before));
    assert_eq!(get(&fx, id(1)).await.version, version);

    // Another token for the same row (an old or forged lease) does not answer.
    let mut forged = refs[1];
    forged.lease_token = uuid::Uuid::new_v4();
    assert!(poll(vec![forged]).await.is_empty(), "token must match");

    // Once completed, a cancel request is no longer reported.
    fx.leases
        .complete(&refs[0], &Completion::cancelled(None))
        .await
        .expect("cancelled");
    fx.leases
        .complete(&refs[2], &success(json!("done")))
        .await
        .expect("succeeded");
    assert_eq!(poll(refs.clone()).await, vec![id(1)]);

    // An expired lease does not answer, even before maintenance ran.
    fx.clock.advance(30.0);
    assert!(poll(refs.clone()).await.is_empty(), "lease expired");
    for i in 0..4 {
        check_invariants(&fx, id(i)).await;
    }
}

async fn claim_order(fx: Fixture) {
    // available_at order first (a delayed-but-due row created earlier comes after), then
    // created_at, then id.
    let late = fx
        .store
        .submit(prepare(
            NS,
            &SubmitRequest {
                task_name: TASK.into(),
                payload: json!("late"),
                delay_s: Some(5.0),
                ..SubmitRequest::default()
            },
        ))
        .await
        .expect("late");
    fx.clock.advance(1.0);
    let a = submit(&fx, json!("a")).await;
    fx.clock.advance(1.0);
    let b = submit(&fx, json!("b")).await;
    let c = fx
        .store
        .submit(crate::builders::prepared(NS, "t2", json!("c")))
        .await
        .expect("c");
    fx.clock.advance(10.0);
    let first = claim(&fx, 2, 30.0, "w").await;
    assert_eq!(
        first.iter().map(|l| l.execution.id).collect::<Vec<_>>(),
        vec![a.id, b.id]
    );
    let multi = fx
        .leases
        .claim(&onestep_core::request::ClaimRequest {
            namespaces: onestep_core::request::NamespaceScope::One(NS.into()),
            fair: Default::default(),
            task_names: vec![TASK.into(), "t2".into()],
            limit: 10,
            lease_duration_s: 30.0,
            worker_id: " w2 ".into(),
            max_running: None,
        })
        .await
        .expect("claim");
    assert_eq!(
        multi.iter().map(|l| l.execution.id).collect::<Vec<_>>(),
        vec![c.id, late.id]
    );
    assert_eq!(
        fx.probe
            .lease_columns(c.id)
            .await
            .expect("row")
            .worker_id
            .as_deref(),
        Some("w2"),
        "worker id trimmed"
    );
    for id in [a.id, b.id, c.id, late.id] {
        check_invariants(&fx, id).await;
    }
    assert!(
        fx.leases
            .claim(&crate::builders::claim(NS, TASK, 0, 1.0, "w"))
            .await
            .is_err()
    );
}

async fn result_limit(fx: Fixture) {
    let e = submit(&fx, json!(1)).await;
    let lease = claim_one(&fx, 30.0).await;
    let big = json!("x".repeat(100));
    match fx
        .leases
        .complete(&lease.lease_ref(), &success(big.clone()))
        .await
    {
        Err(ExecutionError::Encoding(m)) => {
            assert_eq!(m, "execution result exceeds the configured limit")
        }
        other => panic!("expected encoding error, got {other:?}"),
    }
    let x = get(&fx, e.id).await;
    assert_eq!(
        (x.status, x.version),
        (ExecutionStatus::Running, 1),
        "nothing changed"
    );
    check_invariants(&fx, e.id).await;
    // Exactly at the limit is allowed: a 64-byte canonical string.
    let exact = json!("y".repeat(62));
    let done = fx
        .leases
        .complete(&lease.lease_ref(), &success(exact.clone()))
        .await
        .expect("at limit");
    assert_eq!(done.result, Some(exact));
    // Cancel wins without checking the result size.
    let e2 = submit(&fx, json!(2)).await;
    let l2 = claim_one(&fx, 30.0).await;
    fx.store.cancel(NS, e2.id, None).await.expect("cancel");
    let c = fx
        .leases
        .complete(&l2.lease_ref(), &success(big))
        .await
        .expect("cancel wins");
    assert_eq!(c.status, ExecutionStatus::Cancelled);
}

async fn complete_many(fx: Fixture) {
    for i in 0..3 {
        submit(&fx, json!(i)).await;
    }
    let leases = claim(&fx, 3, 30.0, "w").await;
    assert_eq!(leases.len(), 3);
    let mut stale = leases[1].lease_ref();
    stale.lease_token = uuid::Uuid::new_v4();
    let items = vec![
        (leases[0].lease_ref(), success(json!("a"))),
        (stale, success(json!("b"))),
        (
            leases[2].lease_ref(),
            Completion::failed(handler_error("E")),
        ),
    ];
    let out = fx.leases.complete_many(&items).await.expect("batch");
    assert_eq!(
        out[0].as_ref().expect("first").status,
        ExecutionStatus::Succeeded
    );
    assert!(matches!(
        out[1],
        Err(ExecutionError::StaleLease(StaleReason::LeaseInvalid))
    ));
    assert_eq!(
        out[2].as_ref().expect("third").status,
        ExecutionStatus::Failed
    );
    assert_eq!(
        get(&fx, leases[1].execution.id).await.status,
        ExecutionStatus::Running
    );
    for l in &leases {
        check_invariants(&fx, l.execution.id).await;
    }
    // The untouched lease still completes normally.
    let done = fx
        .leases
        .complete(&leases[1].lease_ref(), &success(json!("b")))
        .await
        .expect("complete");
    assert_eq!(done.status, ExecutionStatus::Succeeded);
    assert!(
        fx.leases
            .complete_many(&[])
            .await
            .expect("empty")
            .is_empty()
    );
}

async fn fencing(fx: Fixture) {
    let e = submit(&fx, json!(1)).await;
    let a = claim_one(&fx, 1.0).await;
    fx.clock.advance(1.5);
    let b = claim(&fx, 1, 30.0, "w2").await;
    assert_eq!(b.len(), 1);
    assert_stale(
        fx.leases.heartbeat(&a.lease_ref(), 30.0).await,
        StaleReason::LeaseInvalid,
    );
    assert_stale(
        fx.leases
            .complete(&a.lease_ref(), &success(json!("a")))
            .await,
        StaleReason::LeaseInvalid,
    );
    assert_stale(
        fx.leases
            .complete(&a.lease_ref(), &Completion::cancelled(None))
            .await,
        StaleReason::LeaseInvalid,
    );
    assert_stale(
        fx.leases.release(&a.lease_ref()).await,
        StaleReason::LeaseInvalid,
    );
    // A stale token with the new attempt id still fails (token fences the execution).
    let mut mixed = b[0].lease_ref();
    mixed.lease_token = a.lease_token;
    assert_stale(
        fx.leases.complete(&mixed, &success(json!("x"))).await,
        StaleReason::LeaseInvalid,
    );
    let done = fx
        .leases
        .complete(&b[0].lease_ref(), &success(json!("b")))
        .await
        .expect("complete");
    assert_eq!(done.result, Some(json!("b")));
    let attempts = fx.probe.attempts(e.id).await;
    let st: Vec<_> = attempts.iter().map(|x| x.status.as_str()).collect();
    assert_eq!(st, ["lease_lost", "succeeded"]);
}
