//! Quota cases (docs/semantics.md#quotas): a submission carrying a [`SubmitQuota`] is refused
//! with [`ExecutionError::QuotaExceeded`] when its namespace, or its fairness key inside it,
//! already has the limit's number of executions waiting (queued or retrying); running and
//! finished executions do not count; the replay of an accepted submission still replays; a
//! batch answers per item; concurrent submitters never take a namespace past its limit.

use std::sync::Arc;

use onestep_core::quota::{QuotaKind, QuotaRefusal, SubmitQuota};
use onestep_core::request::{PreparedSubmission, SubmitRequest};
use onestep_core::{ExecutionError, ExecutionStatus};
use serde_json::{Value, json};

use super::{NS, TASK, case, claim, get, success};
use crate::builders::{handler_error, prepare};
use crate::suite::{Case, Fixture};

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case("quota_namespace_limit", |fx| Box::pin(namespace_limit(fx))),
        case("quota_key_limit", |fx| Box::pin(key_limit(fx))),
        case("quota_replay_over_quota_still_replays", |fx| {
            Box::pin(replay_over_quota(fx))
        }),
        case("quota_retrying_rows_count", |fx| {
            Box::pin(retrying_counts(fx))
        }),
        case("quota_running_and_finished_rows_do_not_count", |fx| {
            Box::pin(running_and_finished_do_not_count(fx))
        }),
        case("quota_batch_answers_per_item", |fx| Box::pin(batch(fx))),
        case("quota_concurrent_submitters_stop_at_the_limit", |fx| {
            Box::pin(concurrent(fx))
        }),
    ]
}

fn limits(max_queued: Option<u32>, max_queued_per_key: Option<u32>) -> SubmitQuota {
    SubmitQuota {
        max_queued,
        max_queued_per_key,
    }
}

/// A submission of `ns` with `quota`, an optional idempotency key and fairness key.
fn sub(
    ns: &str,
    quota: SubmitQuota,
    key: Option<&str>,
    fairness_key: Option<&str>,
    payload: Value,
) -> PreparedSubmission {
    let mut p = prepare(
        ns,
        &SubmitRequest {
            task_name: TASK.into(),
            payload,
            idempotency_key: key.map(str::to_owned),
            fairness_key: fairness_key.map(str::to_owned),
            ..SubmitRequest::default()
        },
    );
    p.quota = Some(quota);
    p
}

/// The refusal of `r`, failing on anything else.
fn refusal<T: std::fmt::Debug>(r: Result<T, ExecutionError>) -> QuotaRefusal {
    match r {
        Err(ExecutionError::QuotaExceeded(q)) => {
            let e = ExecutionError::QuotaExceeded(q.clone());
            assert_eq!(e.code(), "quota_exceeded");
            assert!(!e.is_transient(), "a refusal is not a storage failure");
            *q
        }
        other => panic!("expected QuotaExceeded, got {other:?}"),
    }
}

async fn namespace_limit(fx: Fixture) {
    let q = limits(Some(3), None);
    for i in 0..3 {
        fx.store
            .submit(sub(NS, q, None, None, json!(i)))
            .await
            .expect("within the quota");
    }
    let r = refusal(fx.store.submit(sub(NS, q, None, None, json!(3))).await);
    assert_eq!(r.quota, QuotaKind::MaxQueued);
    assert_eq!(
        (r.namespace.as_str(), r.key.as_deref(), r.limit),
        (NS, None, 3)
    );
    let text = ExecutionError::QuotaExceeded(Box::new(r)).to_string();
    assert!(
        text.contains("namespace \"ns\"") && text.contains("max_queued") && text.contains('3'),
        "{text}"
    );
    // A refusal writes nothing.
    let page = fx
        .store
        .list(
            NS,
            &onestep_core::request::ListQuery::default()
                .validate()
                .expect("query"),
        )
        .await
        .expect("list");
    assert_eq!(page.items.len(), 3);
    // Another namespace has its own count; a submission without a quota is not held to it
    // (the direct `onestep submit --dsn` path).
    fx.store
        .submit(sub("other", q, None, None, json!("other")))
        .await
        .expect("another namespace");
    let mut free = sub(NS, q, None, None, json!("free"));
    free.quota = None;
    fx.store.submit(free).await.expect("no quota");
    // A higher limit admits again.
    fx.store
        .submit(sub(NS, limits(Some(5), None), None, None, json!(5)))
        .await
        .expect("a higher limit");
}

/// Whether the table has the fairness-key column (reference tables before `onestep migrate
/// --upgrade` refuse a fairness key: checked).
async fn keys_supported(fx: &Fixture) -> bool {
    let probe = sub("probe", limits(None, Some(100)), None, Some("k"), json!(0));
    match fx.store.submit(probe).await {
        Ok(_) => true,
        Err(e) => {
            assert_eq!(e.code(), "invalid_argument", "{e}");
            assert!(e.to_string().contains("onestep migrate --upgrade"), "{e}");
            false
        }
    }
}

async fn key_limit(fx: Fixture) {
    let q = limits(Some(100), Some(2));
    // Without a fairness key, the key is the namespace.
    for i in 0..2 {
        fx.store
            .submit(sub(NS, q, None, None, json!(i)))
            .await
            .expect("within the key's quota");
    }
    let r = refusal(fx.store.submit(sub(NS, q, None, None, json!(2))).await);
    assert_eq!(r.quota, QuotaKind::MaxQueuedPerKey);
    assert_eq!(r.key.as_deref(), Some(NS));
    assert_eq!(r.limit, 2);
    if !keys_supported(&fx).await {
        return;
    }
    for i in 0..2 {
        fx.store
            .submit(sub(NS, q, None, Some("a"), json!(i)))
            .await
            .expect("key a within its quota");
    }
    let r = refusal(fx.store.submit(sub(NS, q, None, Some("a"), json!(9))).await);
    assert_eq!(r.quota, QuotaKind::MaxQueuedPerKey);
    assert_eq!(
        (r.namespace.as_str(), r.key.as_deref(), r.limit),
        (NS, Some("a"), 2)
    );
    let text = ExecutionError::QuotaExceeded(Box::new(r)).to_string();
    assert!(
        text.contains("fairness key \"a\"") && text.contains("max_queued_per_key"),
        "{text}"
    );
    // Another key, and the same key in another namespace, have their own counts.
    fx.store
        .submit(sub(NS, q, None, Some("b"), json!(0)))
        .await
        .expect("key b");
    fx.store
        .submit(sub("other", q, None, Some("a"), json!(0)))
        .await
        .expect("key a of another namespace");
    // The namespace limit still holds across keys: 5 waiting in NS now.
    let r = refusal(
        fx.store
            .submit(sub(NS, limits(Some(5), Some(2)), None, Some("c"), json!(0)))
            .await,
    );
    assert_eq!((r.quota, r.limit), (QuotaKind::MaxQueued, 5));
}

async fn replay_over_quota(fx: Fixture) {
    let q = limits(Some(2), None);
    let first = fx
        .store
        .submit(sub(NS, q, Some("k1"), None, json!(1)))
        .await
        .expect("k1");
    fx.store
        .submit(sub(NS, q, Some("k2"), None, json!(2)))
        .await
        .expect("k2");
    // Full: the replay of k1 answers k1's execution, a different body under k1 its conflict,
    // a new key the refusal.
    let again = fx
        .store
        .submit(sub(NS, q, Some("k1"), None, json!(1)))
        .await
        .expect("a replay over the quota");
    assert_eq!(again.id, first.id);
    match fx
        .store
        .submit(sub(NS, q, Some("k1"), None, json!("other")))
        .await
    {
        Err(ExecutionError::Conflict { existing_id }) => assert_eq!(existing_id, first.id),
        other => panic!("expected the key's conflict, got {other:?}"),
    }
    refusal(
        fx.store
            .submit(sub(NS, q, Some("k3"), None, json!(3)))
            .await,
    );
    // The replay of a finished execution replays too.
    let leases = claim(&fx, 2, 30.0, "w").await;
    for l in &leases {
        fx.leases
            .complete(&l.lease_ref(), &success(json!(null)))
            .await
            .expect("complete");
    }
    assert_eq!(get(&fx, first.id).await.status, ExecutionStatus::Succeeded);
    let again = fx
        .store
        .submit(sub(NS, limits(Some(1), None), Some("k1"), None, json!(1)))
        .await
        .expect("a replay of a finished execution");
    assert_eq!(again.id, first.id);
}

async fn retrying_counts(fx: Fixture) {
    let q = limits(Some(1), None);
    let first = fx
        .store
        .submit(sub(NS, q, None, None, json!(1)))
        .await
        .expect("first");
    let lease = claim(&fx, 1, 30.0, "w").await.pop().expect("a lease");
    // Running: not waiting.
    let second = fx
        .store
        .submit(sub(NS, q, None, None, json!(2)))
        .await
        .expect("the running one does not count");
    // Cancel the second so that only the retrying one waits.
    fx.store
        .cancel(NS, second.id, None)
        .await
        .expect("cancel")
        .expect("present");
    let x = fx
        .leases
        .complete(
            &lease.lease_ref(),
            &onestep_core::execution::Completion::retrying(handler_error("Boom"), 60.0),
        )
        .await
        .expect("retry");
    assert_eq!(x.id, first.id);
    assert_eq!(x.status, ExecutionStatus::Retrying);
    let r = refusal(fx.store.submit(sub(NS, q, None, None, json!(3))).await);
    assert_eq!(r.limit, 1);
}

async fn running_and_finished_do_not_count(fx: Fixture) {
    let q = limits(Some(1), Some(1));
    fx.store
        .submit(sub(NS, q, None, None, json!(1)))
        .await
        .expect("first");
    refusal(fx.store.submit(sub(NS, q, None, None, json!(2))).await);
    let lease = claim(&fx, 1, 30.0, "w").await.pop().expect("a lease");
    fx.store
        .submit(sub(NS, q, None, None, json!(3)))
        .await
        .expect("the running one does not count");
    fx.leases
        .complete(&lease.lease_ref(), &success(json!(null)))
        .await
        .expect("complete");
    let lease = claim(&fx, 1, 30.0, "w").await.pop().expect("a lease");
    fx.leases
        .complete(
            &lease.lease_ref(),
            &onestep_core::execution::Completion::failed(handler_error("Boom")),
        )
        .await
        .expect("fail");
    // One succeeded, one failed, none waiting: one more fits, then the limit holds.
    fx.store
        .submit(sub(NS, q, None, None, json!(4)))
        .await
        .expect("finished ones do not count");
    refusal(fx.store.submit(sub(NS, q, None, None, json!(5))).await);
}

async fn batch(fx: Fixture) {
    let q = limits(Some(3), None);
    let held = fx
        .store
        .submit(sub(NS, q, Some("held"), None, json!("held")))
        .await
        .expect("held");
    let items = vec![
        sub(NS, q, Some("a"), None, json!("a")),
        sub(NS, q, Some("held"), None, json!("held")),
        sub(NS, q, Some("b"), None, json!("b")),
        sub(NS, q, Some("c"), None, json!("c")),
        sub(NS, q, Some("held"), None, json!("conflict")),
        sub(NS, q, None, None, json!("d")),
    ];
    let ids: Vec<_> = items.iter().map(|s| s.id).collect();
    let out = fx.store.submit_many(items).await.expect("the batch");
    assert_eq!(out.len(), 6);
    assert_eq!(out[0].as_ref().expect("a fits").id, ids[0]);
    assert_eq!(out[1].as_ref().expect("the replay").id, held.id);
    assert_eq!(out[2].as_ref().expect("b fits").id, ids[2]);
    let r = refusal(out[3].clone());
    assert_eq!((r.quota, r.limit), (QuotaKind::MaxQueued, 3));
    match &out[4] {
        Err(ExecutionError::Conflict { existing_id }) => assert_eq!(*existing_id, held.id),
        other => panic!("expected the conflict, got {other:?}"),
    }
    refusal(out[5].clone());
    // Exactly what was accepted is stored.
    for id in [ids[0], ids[2]] {
        assert_eq!(get(&fx, id).await.status, ExecutionStatus::Queued);
    }
    for id in [ids[3], ids[5]] {
        assert!(fx.store.get(NS, id).await.expect("get").is_none());
    }
}

async fn concurrent(fx: Fixture) {
    const TASKS: usize = 8;
    const EACH: usize = 20;
    const LIMIT: u32 = 50;
    let q = limits(Some(LIMIT), None);
    let store = Arc::clone(&fx.store);
    let mut handles = Vec::new();
    for t in 0..TASKS {
        let store = Arc::clone(&store);
        handles.push(tokio::spawn(async move {
            let mut accepted = Vec::new();
            let mut refused = 0usize;
            for i in 0..EACH {
                let s = sub(NS, q, None, None, json!([t, i]));
                match store.submit(s).await {
                    Ok(x) => accepted.push(x.id),
                    Err(ExecutionError::QuotaExceeded(_)) => refused += 1,
                    Err(e) => panic!("submit: {e}"),
                }
            }
            (accepted, refused)
        }));
    }
    let mut accepted = Vec::new();
    let mut refused = 0;
    for h in handles {
        let (a, r) = h.await.expect("task");
        accepted.extend(a);
        refused += r;
    }
    assert_eq!(
        accepted.len(),
        LIMIT as usize,
        "exactly the limit is accepted"
    );
    assert_eq!(refused, TASKS * EACH - LIMIT as usize);
    // Every accepted submission is stored, and nothing else.
    for id in &accepted {
        assert_eq!(get(&fx, *id).await.status, ExecutionStatus::Queued);
    }
    let filter = onestep_core::request::ListQuery {
        limit: 100,
        ..Default::default()
    }
    .validate()
    .expect("query");
    let page = fx.store.list(NS, &filter).await.expect("list");
    assert_eq!(page.items.len(), LIMIT as usize);
}
