//! Fair-claim cases (docs/semantics.md#fair-claim): keys with pending work are served
//! round-robin (least pass first, ties by namespace then key), weighted, within a per-key
//! running cap counted across claimers; priorities order rows within a key only; a claim serves
//! one namespace, a list, or all. On tables without the fairness-keys table (reference tables
//! before `onestep migrate --upgrade`) a claim that needs it is refused with the upgrade
//! message, which [`supported`] checks before a case returns early.

use onestep_core::execution::Completion;
use onestep_core::request::{ClaimRequest, NamespaceScope, SubmitRequest};
use onestep_core::schedule::FairShare;
use onestep_core::{ExecutionLease, ExecutionStatus};
use serde_json::json;
use uuid::Uuid;

use super::{NS, TASK, case};
use crate::builders::prepare;
use crate::suite::{Case, Fixture};

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case("fair_round_robin_across_keys", |fx| {
            Box::pin(round_robin(fx))
        }),
        case("fair_weights_share_a_claim", |fx| Box::pin(weights(fx))),
        case("fair_cap_per_key_across_claimers", |fx| {
            Box::pin(cap_per_key(fx))
        }),
        case("fair_namespace_scopes", |fx| Box::pin(scopes(fx))),
        case("fair_priority_orders_within_a_key_only", |fx| {
            Box::pin(priority_within_key(fx))
        }),
    ]
}

fn request(scope: NamespaceScope, fair: FairShare, limit: u32) -> ClaimRequest {
    ClaimRequest {
        namespaces: scope,
        task_names: vec![TASK.to_owned()],
        limit,
        lease_duration_s: 30.0,
        worker_id: "w".into(),
        fair,
        max_running: None,
    }
}

/// Whether the store runs fair claims; `false` (checked: the refusal naming the upgrade) on
/// tables without the fairness-keys table.
async fn supported(fx: &Fixture) -> bool {
    match fx
        .leases
        .claim(&request(NamespaceScope::All, FairShare::default(), 1))
        .await
    {
        Ok(v) => {
            assert!(v.is_empty(), "nothing was submitted yet");
            true
        }
        Err(e) => {
            let text = e.to_string();
            assert_eq!(e.code(), "invalid_argument", "{text}");
            assert!(
                text.contains(onestep_core::store::fair::FAIR_CLAIM_UNSUPPORTED)
                    && text.contains("onestep migrate --upgrade"),
                "{text}"
            );
            false
        }
    }
}

async fn submit_to(fx: &Fixture, ns: &str, key: Option<&str>, priority: Option<i64>) -> Uuid {
    fx.store
        .submit(prepare(
            ns,
            &SubmitRequest {
                task_name: TASK.into(),
                payload: json!({"key": key}),
                priority,
                fairness_key: key.map(str::to_owned),
                ..SubmitRequest::default()
            },
        ))
        .await
        .expect("submit")
        .id
}

async fn claim_with(fx: &Fixture, req: &ClaimRequest) -> Vec<ExecutionLease> {
    fx.leases.claim(req).await.expect("claim")
}

fn keys_of(leases: &[ExecutionLease]) -> Vec<String> {
    leases
        .iter()
        .map(|l| l.execution.effective_fairness_key().to_owned())
        .collect()
}

async fn round_robin(fx: Fixture) {
    if !supported(&fx).await {
        return;
    }
    // A burst of six from key a, then two from b and one from c.
    for _ in 0..6 {
        submit_to(&fx, NS, Some("a"), None).await;
        fx.clock.advance(0.001);
    }
    for _ in 0..2 {
        submit_to(&fx, NS, Some("b"), None).await;
        fx.clock.advance(0.001);
    }
    submit_to(&fx, NS, Some("c"), None).await;
    fx.clock.advance(1.0);
    let one = request(NamespaceScope::One(NS.into()), FairShare::default(), 1);
    let mut order = Vec::new();
    for _ in 0..9 {
        let got = claim_with(&fx, &one).await;
        assert_eq!(
            got.len(),
            1,
            "one lease per claim while work is queued: {order:?}"
        );
        order.extend(keys_of(&got));
    }
    // b and c are not stuck behind a's burst: each round serves every key with work.
    assert_eq!(order, ["a", "b", "c", "a", "b", "a", "a", "a", "a"]);
    assert!(claim_with(&fx, &one).await.is_empty());
    // A key that drained and comes back enters at the back of the current round.
    for _ in 0..3 {
        submit_to(&fx, NS, Some("a"), None).await;
    }
    submit_to(&fx, NS, Some("d"), None).await;
    fx.clock.advance(1.0);
    let got = claim_with(
        &fx,
        &request(NamespaceScope::One(NS.into()), FairShare::default(), 2),
    )
    .await;
    let mut keys = keys_of(&got);
    keys.sort();
    assert_eq!(keys, ["a", "d"]);
}

async fn weights(fx: Fixture) {
    if !supported(&fx).await {
        return;
    }
    for _ in 0..20 {
        submit_to(&fx, NS, Some("big"), None).await;
        submit_to(&fx, NS, Some("small"), None).await;
        fx.clock.advance(0.001);
    }
    fx.clock.advance(1.0);
    let mut fair = FairShare::default();
    fair.weights.insert("big".into(), 3);
    let count = |v: &[String], k: &str| v.iter().filter(|x| *x == k).count();
    let first = keys_of(
        &claim_with(
            &fx,
            &request(NamespaceScope::One(NS.into()), fair.clone(), 8),
        )
        .await,
    );
    assert_eq!(
        (count(&first, "big"), count(&first, "small")),
        (6, 2),
        "{first:?}"
    );
    let second = keys_of(
        &claim_with(
            &fx,
            &request(NamespaceScope::One(NS.into()), fair.clone(), 4),
        )
        .await,
    );
    assert_eq!(
        (count(&second, "big"), count(&second, "small")),
        (3, 1),
        "{second:?}"
    );
    // Without weights the same backlog shares evenly.
    let even = keys_of(
        &claim_with(
            &fx,
            &request(NamespaceScope::One(NS.into()), FairShare::default(), 4),
        )
        .await,
    );
    assert_eq!(even.len(), 4);
    assert!(count(&even, "small") >= 2, "{even:?}");
}

async fn cap_per_key(fx: Fixture) {
    if !supported(&fx).await {
        return;
    }
    for _ in 0..5 {
        submit_to(&fx, NS, Some("a"), None).await;
        fx.clock.advance(0.001);
    }
    submit_to(&fx, NS, Some("b"), None).await;
    fx.clock.advance(1.0);
    let fair = FairShare {
        max_running_per_key: Some(2),
        ..FairShare::default()
    };
    let req = request(NamespaceScope::One(NS.into()), fair, 10);
    // Two claimers (workers) share the cap: it counts every running lease of the key.
    let first = claim_with(&fx, &req).await;
    let mut keys = keys_of(&first);
    keys.sort();
    assert_eq!(keys, ["a", "a", "b"]);
    fx.clock.advance(1.0);
    let mut other = req.clone();
    other.worker_id = "w2".into();
    assert!(claim_with(&fx, &other).await.is_empty(), "a is at its cap");
    // A completion frees one slot.
    let a = first
        .iter()
        .find(|l| l.execution.effective_fairness_key() == "a")
        .expect("an a lease");
    fx.leases
        .complete(&a.lease_ref(), &Completion::succeeded(json!(1)))
        .await
        .expect("complete");
    fx.clock.advance(1.0);
    let next = claim_with(&fx, &other).await;
    assert_eq!(keys_of(&next), ["a"]);
    assert!(
        claim_with(&fx, &other).await.is_empty(),
        "a is at its cap again"
    );
    // Leases that expire stop counting once maintenance reclaims them: the two running rows
    // go back to retrying and two rows of a (the reclaimed ones first) are claimed again.
    fx.clock.advance(60.0);
    let again = claim_with(&fx, &other).await;
    let a_again: Vec<&ExecutionLease> = again
        .iter()
        .filter(|l| l.execution.effective_fairness_key() == "a")
        .collect();
    assert_eq!(
        a_again.len(),
        2,
        "cap applies after the reclaim too: {again:?}"
    );
    for l in &again {
        assert_eq!(l.execution.status, ExecutionStatus::Running);
    }
}

async fn scopes(fx: Fixture) {
    if !supported(&fx).await {
        return;
    }
    for ns in ["n1", "n2", "n3"] {
        for _ in 0..2 {
            submit_to(&fx, ns, None, None).await;
            fx.clock.advance(0.001);
        }
    }
    fx.clock.advance(1.0);
    let many = request(
        NamespaceScope::Many(vec!["n1".into(), "n2".into()]),
        FairShare::default(),
        10,
    );
    let got = claim_with(&fx, &many).await;
    let mut ns: Vec<&str> = got.iter().map(|l| l.execution.namespace.as_str()).collect();
    ns.sort_unstable();
    assert_eq!(ns, ["n1", "n1", "n2", "n2"]);
    // Without a key the namespace is the key: one row of each per round.
    let one_each = claim_with(&fx, &request(NamespaceScope::All, FairShare::default(), 1)).await;
    assert_eq!(one_each.len(), 1);
    assert_eq!(one_each[0].execution.namespace, "n3");
    let rest = claim_with(&fx, &request(NamespaceScope::All, FairShare::default(), 10)).await;
    assert_eq!(rest.len(), 1);
    assert_eq!(rest[0].execution.namespace, "n3");
    assert!(claim_with(&fx, &many).await.is_empty());
}

async fn priority_within_key(fx: Fixture) {
    if !supported(&fx).await {
        return;
    }
    let a_low = submit_to(&fx, NS, Some("a"), Some(9)).await;
    fx.clock.advance(0.001);
    let b = submit_to(&fx, NS, Some("b"), Some(5)).await;
    fx.clock.advance(0.001);
    let a_urgent = submit_to(&fx, NS, Some("a"), Some(0)).await;
    fx.clock.advance(1.0);
    let one = request(NamespaceScope::One(NS.into()), FairShare::default(), 1);
    let mut ids = Vec::new();
    for _ in 0..3 {
        let got = claim_with(&fx, &one).await;
        assert_eq!(got.len(), 1);
        ids.push(got[0].execution.id);
    }
    // a's urgent row overtakes a's older one, but not b's turn.
    assert_eq!(ids, vec![a_urgent, b, a_low]);
}
