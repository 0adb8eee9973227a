//! Priority and fairness-key cases (docs/semantics.md#priority-and-fairness-key): claims take
//! lower priority numbers first, then the oldest; executions without a priority run at 5, rows
//! written without the columns (the reference's insert) read and claim as 5; a retried
//! execution keeps its priority. On tables without the columns (reference tables before
//! `onestep migrate --upgrade`) a submit that sets either field is refused with the upgrade
//! message, and the claim stays oldest-first.

use onestep_core::execution::Completion;
use onestep_core::request::SubmitRequest;
use onestep_core::{Execution, ExecutionError, ExecutionStatus};
use serde_json::json;
use uuid::Uuid;

use super::{NS, TASK, case, claim, get, submit};
use crate::builders::{handler_error, prepare};
use crate::suite::{Case, Fixture};

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case("priority_claim_order_then_fifo", |fx| {
            Box::pin(priority_order(fx))
        }),
        case("priority_default_for_rows_without_the_columns", |fx| {
            Box::pin(reference_rows(fx))
        }),
        case("priority_kept_by_a_retrying_execution", |fx| {
            Box::pin(retry_keeps_priority(fx))
        }),
    ]
}

/// Submits one execution with `priority` / `fairness_key`; `Err` when the store refused it.
async fn submit_scheduled(
    fx: &Fixture,
    payload: &str,
    priority: Option<i64>,
    fairness_key: Option<&str>,
) -> Result<Execution, ExecutionError> {
    fx.store
        .submit(prepare(
            NS,
            &SubmitRequest {
                task_name: TASK.into(),
                payload: json!(payload),
                priority,
                fairness_key: fairness_key.map(str::to_owned),
                ..SubmitRequest::default()
            },
        ))
        .await
}

/// `true` when the store keeps priorities; `false` when it refused a non-default one with the
/// upgrade message (tables without the columns), which is then checked.
fn kept(r: &Result<Execution, ExecutionError>) -> bool {
    match r {
        Ok(_) => true,
        Err(e) => {
            let text = e.to_string();
            assert_eq!(e.code(), "invalid_argument", "{text}");
            assert!(text.contains("onestep migrate --upgrade"), "{text}");
            false
        }
    }
}

async fn claim_ids(fx: &Fixture, limit: u32) -> Vec<Uuid> {
    claim(fx, limit, 30.0, "w")
        .await
        .iter()
        .map(|l| l.execution.id)
        .collect()
}

async fn priority_order(fx: Fixture) {
    // Oldest first: 9, then 5 (default), then 0, 0, 5, each a second apart.
    let low = submit_scheduled(&fx, "low", Some(9), None).await;
    if !kept(&low) {
        // Tables without the columns: defaults only, oldest first, keys refused too.
        assert!(!kept(
            &submit_scheduled(&fx, "k", None, Some("tenant-1")).await
        ));
        let a = submit(&fx, json!("a")).await;
        fx.clock.advance(1.0);
        let b = submit(&fx, json!("b")).await;
        assert_eq!((a.priority, a.fairness_key.as_deref()), (5, None));
        assert_eq!(claim_ids(&fx, 10).await, vec![a.id, b.id]);
        return;
    }
    let low = low.expect("kept");
    fx.clock.advance(1.0);
    let default = submit(&fx, json!("default")).await;
    fx.clock.advance(1.0);
    let urgent_a = submit_scheduled(&fx, "urgent_a", Some(0), Some("tenant-1"))
        .await
        .expect("urgent a");
    fx.clock.advance(1.0);
    let urgent_b = submit_scheduled(&fx, "urgent_b", Some(0), None)
        .await
        .expect("urgent b");
    fx.clock.advance(1.0);
    let default_b = submit_scheduled(&fx, "default_b", Some(5), None)
        .await
        .expect("explicit 5");
    // Stored and read back as submitted; the default is 5 with no key.
    assert_eq!((low.priority, default.priority), (9, 5));
    assert_eq!(default.fairness_key, None);
    let a = get(&fx, urgent_a.id).await;
    assert_eq!(
        (a.priority, a.fairness_key.as_deref()),
        (0, Some("tenant-1"))
    );
    assert_eq!(a.effective_fairness_key(), "tenant-1");
    assert_eq!(get(&fx, default.id).await.effective_fairness_key(), NS);
    // Lower numbers first; within one priority, the oldest first (FIFO).
    assert_eq!(
        claim_ids(&fx, 3).await,
        vec![urgent_a.id, urgent_b.id, default.id]
    );
    // A later, more urgent submission overtakes what is still queued.
    let late = submit_scheduled(&fx, "late", Some(1), None)
        .await
        .expect("late");
    assert_eq!(
        claim_ids(&fx, 10).await,
        vec![late.id, default_b.id, low.id]
    );
    // A list shows them as get does.
    let filter = onestep_core::request::ListQuery::default()
        .validate()
        .expect("query");
    let listed = fx.store.list(NS, &filter).await.expect("list");
    let by_id = |id: Uuid| listed.items.iter().find(|e| e.id == id).expect("listed");
    assert_eq!(by_id(urgent_a.id).fairness_key.as_deref(), Some("tenant-1"));
    assert_eq!(by_id(low.id).priority, 9);
}

async fn reference_rows(fx: Fixture) {
    // A row the reference inserts names none of the new columns.
    let Some(old) = fx
        .probe
        .insert_without_schedule(NS, TASK, fx.clock.now_value())
        .await
    else {
        return; // a store without a raw insert (in memory): nothing to check
    };
    let x = get(&fx, old).await;
    assert_eq!((x.priority, x.fairness_key.as_deref()), (5, None));
    assert_eq!(x.status, ExecutionStatus::Queued);
    fx.clock.advance(1.0);
    let newer = submit(&fx, json!("newer")).await;
    let urgent = submit_scheduled(&fx, "urgent", Some(0), None).await;
    if kept(&urgent) {
        let urgent = urgent.expect("kept");
        assert_eq!(claim_ids(&fx, 10).await, vec![urgent.id, old, newer.id]);
    } else {
        // FIFO with the reference's own row first.
        assert_eq!(claim_ids(&fx, 10).await, vec![old, newer.id]);
    }
}

async fn retry_keeps_priority(fx: Fixture) {
    let first = submit(&fx, json!("older, default priority")).await;
    fx.clock.advance(1.0);
    // The same fairness key as the older row (its namespace): priority orders within a key.
    let urgent = submit_scheduled(&fx, "urgent", Some(0), Some(NS)).await;
    if !kept(&urgent) {
        return; // covered by priority_claim_order_then_fifo on such tables
    }
    let urgent = urgent.expect("kept");
    fx.clock.advance(1.0);
    let lease = claim(&fx, 1, 30.0, "w").await.remove(0);
    assert_eq!(lease.execution.id, urgent.id);
    assert_eq!(lease.execution.priority, 0);
    let retried = fx
        .leases
        .complete(
            &lease.lease_ref(),
            &Completion::retrying(handler_error("Flaky"), 0.0),
        )
        .await
        .expect("retrying");
    assert_eq!(retried.status, ExecutionStatus::Retrying);
    assert_eq!(
        (retried.priority, retried.fairness_key.as_deref()),
        (0, Some(NS))
    );
    // Still ahead of the older priority-5 execution.
    fx.clock.advance(1.0);
    let again = claim(&fx, 2, 30.0, "w").await;
    let ids: Vec<Uuid> = again.iter().map(|l| l.execution.id).collect();
    assert_eq!(ids, vec![urgent.id, first.id]);
    assert_eq!(again[0].attempt_no, 2);
    assert_eq!(again[0].execution.priority, 0);
}
