//! Completion-webhook outbox cases (docs/semantics.md#completion-webhooks): a submit's callback
//! is written with its new execution only (a replay adds none), a callback is due only once its
//! execution has ended, a claim holds it for its lease and then lets it go (a killed sender loses
//! nothing), attempts are recorded once per number, a failure waits until its next try, `dead`
//! and `delivered` are final until a redelivery starts a new round, and everything is scoped to
//! the namespace. The `started` and `progress` events are derived from the execution's durable
//! state: `started` is due once the first attempt started, `progress` when an attempt reported
//! progress newer than the last passed and the throttle ran out, the terminal event last; a
//! passed event starts a new round. A store without an outbox (`Fixture::callbacks` is `None`)
//! skips them loudly; one keeping no progress reports skips the progress case loudly.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use onestep_core::Completion;
use onestep_core::ExecutionLease;
use onestep_core::callback::{
    CallbackSpec, CallbackState, CallbackStore, DeliveryOutcome, DueCallback, PassedEvent,
    TERMINAL_EVENT, message_id, progress_message_id,
};
use onestep_core::diagnostics::{AttemptProgress, LiveDiagnostics};
use onestep_core::request::PreparedSubmission;
use serde_json::json;
use uuid::Uuid;

use super::{NS, TASK, case};
use crate::builders;
use crate::suite::{Case, Fixture};

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case("callbacks_written_with_new_executions_only", |fx| {
            Box::pin(written(fx))
        }),
        case(
            "callbacks_due_once_terminal_and_retried_after_backoff",
            |fx| Box::pin(due_and_retried(fx)),
        ),
        case("callbacks_claim_lease_runs_out", |fx| Box::pin(lease(fx))),
        case("callbacks_dead_then_redelivered", |fx| Box::pin(dead(fx))),
        case("callbacks_started_before_terminal", |fx| {
            Box::pin(started(fx))
        }),
        case("callbacks_progress_throttled_never_after_terminal", |fx| {
            Box::pin(progress(fx))
        }),
    ]
}

const URL: &str = "https://hooks.example.com/in";
const LEASE: Duration = Duration::from_secs(30);

/// The store's outbox; `None` (said loudly) when it keeps none, or on tables without the
/// outbox tables (reference tables before `onestep migrate --upgrade`), where every call is
/// refused with the message naming the upgrade (checked).
async fn store(fx: &Fixture) -> Option<Arc<dyn CallbackStore>> {
    let Some(cb) = fx.callbacks.clone() else {
        eprintln!("SKIPPED: this store keeps no completion-webhook outbox");
        return None;
    };
    match cb.claim_due(1, LEASE).await {
        Ok(due) => {
            assert!(due.is_empty(), "a fresh store has nothing due");
            Some(cb)
        }
        Err(e) => {
            let text = e.to_string();
            assert_eq!(e.code(), "invalid_argument", "{text}");
            assert!(
                text.contains("completion-webhook tables are absent")
                    && text.contains("onestep migrate --upgrade"),
                "{text}"
            );
            // A submit with a callback is refused the same way, and writes nothing.
            let refused = fx
                .store
                .submit(with_callback(builders::prepared(NS, TASK, json!(0))))
                .await
                .expect_err("a callback without the outbox tables");
            assert!(
                refused.to_string().contains("onestep migrate --upgrade"),
                "{refused}"
            );
            eprintln!("SKIPPED: the tables lack the outbox (before migrate --upgrade)");
            None
        }
    }
}

fn with_callback(mut sub: PreparedSubmission) -> PreparedSubmission {
    sub.callback = Some(CallbackSpec {
        url: URL.into(),
        events: vec![TERMINAL_EVENT.into()],
    });
    sub
}

/// Submits with a callback and cancels (queued → cancelled: terminal).
async fn ended(fx: &Fixture) -> Uuid {
    let e = fx
        .store
        .submit(with_callback(builders::prepared(NS, TASK, json!(1))))
        .await
        .expect("submit");
    fx.store
        .cancel(NS, e.id, None)
        .await
        .expect("cancel")
        .expect("row");
    e.id
}

fn outcome(
    d: &DueCallback,
    at: DateTime<Utc>,
    status: Option<u16>,
    state: CallbackState,
    next_at: Option<DateTime<Utc>>,
) -> DeliveryOutcome {
    DeliveryOutcome {
        execution_id: d.execution_id,
        attempt_no: d.attempts + 1,
        event: "execution.cancelled".into(),
        webhook_id: message_id(d.execution_id, TERMINAL_EVENT),
        at,
        status,
        error: (state != CallbackState::Delivered).then(|| "the receiver answered HTTP 500".into()),
        state,
        next_at,
        passed: None,
    }
}

async fn written(fx: Fixture) {
    let Some(cb) = store(&fx).await else { return };
    let plain = fx
        .store
        .submit(builders::prepared(NS, TASK, json!(0)))
        .await
        .expect("submit");
    assert_eq!(cb.deliveries(NS, plain.id).await.expect("read"), None);
    let sub = with_callback(builders::keyed(NS, TASK, "k1", json!(1)));
    let first = fx.store.submit(sub.clone()).await.expect("submit");
    let rec = cb
        .deliveries(NS, first.id)
        .await
        .expect("read")
        .expect("the callback");
    assert_eq!(rec.url, URL);
    assert_eq!(rec.events, vec![TERMINAL_EVENT]);
    assert_eq!(rec.state, CallbackState::Pending);
    assert_eq!((rec.attempts, rec.deliveries.len()), (0, 0));
    // A replay (same key, another prepared id) writes no second callback.
    let mut again = sub;
    again.id = onestep_core::ids::new_row_id();
    let replay = fx.store.submit(again.clone()).await.expect("replay");
    assert_eq!(replay.id, first.id);
    assert_eq!(cb.deliveries(NS, again.id).await.expect("read"), None);
    // Batch submits write the callbacks of their new executions.
    let batch = vec![
        with_callback(builders::prepared(NS, TASK, json!(2))),
        builders::prepared(NS, TASK, json!(3)),
    ];
    let out = fx.store.submit_many(batch).await.expect("batch");
    let ids: Vec<Uuid> = out.into_iter().map(|r| r.expect("item").id).collect();
    assert!(cb.deliveries(NS, ids[0]).await.expect("read").is_some());
    assert!(cb.deliveries(NS, ids[1]).await.expect("read").is_none());
    // Scoped to the namespace.
    assert_eq!(cb.deliveries("other", first.id).await.expect("read"), None);
    assert!(!cb.redeliver("other", first.id).await.expect("redeliver"));
}

async fn due_and_retried(fx: Fixture) {
    let Some(cb) = store(&fx).await else { return };
    let queued = fx
        .store
        .submit(with_callback(builders::prepared(NS, TASK, json!(0))))
        .await
        .expect("submit");
    assert!(
        cb.claim_due(10, LEASE).await.expect("claim").is_empty(),
        "a queued execution's callback is not due"
    );
    let id = ended(&fx).await;
    let due = cb.claim_due(10, LEASE).await.expect("claim");
    assert_eq!(due.len(), 1, "{due:?}");
    assert_eq!(due[0].execution_id, id);
    assert_eq!(due[0].namespace, NS);
    assert_eq!(due[0].url, URL);
    assert_eq!((due[0].attempts, due[0].round_start), (0, 0));
    assert!(
        cb.claim_due(10, LEASE).await.expect("claim").is_empty(),
        "a claimed callback is not claimed twice"
    );
    let now = fx.clock.now_value();
    let next = now + chrono::Duration::seconds(10);
    cb.record_delivery(&outcome(
        &due[0],
        now,
        Some(500),
        CallbackState::Pending,
        Some(next),
    ))
    .await
    .expect("record");
    assert!(
        cb.claim_due(10, LEASE).await.expect("claim").is_empty(),
        "not due before its next try"
    );
    fx.clock.advance(11.0);
    let due = cb.claim_due(10, LEASE).await.expect("claim");
    assert_eq!(due.len(), 1);
    assert_eq!(due[0].attempts, 1);
    let at = fx.clock.now_value();
    let ok = outcome(&due[0], at, Some(204), CallbackState::Delivered, None);
    cb.record_delivery(&ok).await.expect("record");
    // The same attempt recorded again (a sender whose claim ran out) is kept once.
    cb.record_delivery(&ok).await.expect("record twice");
    assert!(cb.claim_due(10, LEASE).await.expect("claim").is_empty());
    let rec = cb
        .deliveries(NS, id)
        .await
        .expect("read")
        .expect("callback");
    assert_eq!(rec.state, CallbackState::Delivered);
    assert_eq!(rec.attempts, 2);
    assert_eq!(rec.next_at, None);
    let got: Vec<(u32, Option<u16>)> = rec
        .deliveries
        .iter()
        .map(|d| (d.attempt_no, d.status))
        .collect();
    assert_eq!(got, vec![(1, Some(500)), (2, Some(204))]);
    assert_eq!(rec.deliveries[0].webhook_id, rec.deliveries[1].webhook_id);
    assert!(rec.deliveries[0].error.is_some() && rec.deliveries[1].error.is_none());
    // The queued one is still waiting.
    let rec = cb
        .deliveries(NS, queued.id)
        .await
        .expect("read")
        .expect("cb");
    assert_eq!(rec.state, CallbackState::Pending);
}

async fn lease(fx: Fixture) {
    let Some(cb) = store(&fx).await else { return };
    let id = ended(&fx).await;
    let due = cb.claim_due(10, LEASE).await.expect("claim");
    assert_eq!(due.len(), 1);
    // The sender dies without recording: the claim holds until its lease runs out.
    fx.clock.advance(29.0);
    assert!(cb.claim_due(10, LEASE).await.expect("claim").is_empty());
    fx.clock.advance(2.0);
    let again = cb.claim_due(10, LEASE).await.expect("claim");
    assert_eq!(again.len(), 1, "claimed again after the lease");
    assert_eq!(again[0].execution_id, id);
    assert_eq!(again[0].attempts, 0);
}

async fn dead(fx: Fixture) {
    let Some(cb) = store(&fx).await else { return };
    let id = ended(&fx).await;
    let due = cb.claim_due(10, LEASE).await.expect("claim");
    let now = fx.clock.now_value();
    cb.record_delivery(&outcome(&due[0], now, None, CallbackState::Dead, None))
        .await
        .expect("record");
    fx.clock.advance(3600.0);
    assert!(
        cb.claim_due(10, LEASE).await.expect("claim").is_empty(),
        "dead is final"
    );
    let rec = cb
        .deliveries(NS, id)
        .await
        .expect("read")
        .expect("callback");
    assert_eq!((rec.state, rec.attempts), (CallbackState::Dead, 1));
    assert!(cb.redeliver(NS, id).await.expect("redeliver"));
    let due = cb.claim_due(10, LEASE).await.expect("claim");
    assert_eq!(due.len(), 1);
    assert_eq!((due[0].attempts, due[0].round_start), (1, 1));
    assert!(!cb.redeliver(NS, Uuid::nil()).await.expect("redeliver"));
}

fn with_events(mut sub: PreparedSubmission, events: &[&str]) -> PreparedSubmission {
    sub.callback = Some(CallbackSpec {
        url: URL.into(),
        events: events.iter().map(|e| (*e).to_owned()).collect(),
    });
    sub
}

/// Claims the one queued execution of `TASK` (its first attempt starts).
async fn start(fx: &Fixture) -> ExecutionLease {
    let mut got = fx
        .leases
        .claim(&builders::claim(NS, TASK, 1, 300.0, "w1"))
        .await
        .expect("claim");
    assert_eq!(got.len(), 1, "one claimed");
    got.remove(0)
}

/// An attempt that passes a non-terminal event (acknowledged): pending, due at once.
fn passing(
    d: &DueCallback,
    at: DateTime<Utc>,
    event: &str,
    webhook_id: String,
    passed: PassedEvent,
) -> DeliveryOutcome {
    DeliveryOutcome {
        execution_id: d.execution_id,
        attempt_no: d.attempts + 1,
        event: event.into(),
        webhook_id,
        at,
        status: Some(204),
        error: None,
        state: CallbackState::Pending,
        next_at: Some(at),
        passed: Some(passed),
    }
}

async fn started(fx: Fixture) {
    let Some(cb) = store(&fx).await else { return };
    let e = fx
        .store
        .submit(with_events(
            builders::prepared(NS, TASK, json!(0)),
            &["started", "terminal"],
        ))
        .await
        .expect("submit");
    // Terminal only: not due while running.
    fx.store
        .submit(with_callback(builders::prepared(NS, "other", json!(0))))
        .await
        .expect("submit");
    assert!(
        cb.claim_due(10, LEASE).await.expect("claim").is_empty(),
        "queued: nothing due"
    );
    let lease = start(&fx).await;
    assert_eq!(lease.execution.id, e.id);
    let due = cb.claim_due(10, LEASE).await.expect("claim");
    assert_eq!(
        due.len(),
        1,
        "started is due once the attempt started: {due:?}"
    );
    assert_eq!(due[0].execution_id, e.id);
    assert_eq!(due[0].events, vec!["started", "terminal"]);
    assert!(!due[0].started_done);
    // A failed attempt keeps it pending until its next try, still `started`.
    let now = fx.clock.now_value();
    let mut failed = outcome(
        &due[0],
        now,
        Some(500),
        CallbackState::Pending,
        Some(now + chrono::Duration::seconds(5)),
    );
    failed.event = "execution.started".into();
    failed.webhook_id = message_id(e.id, "started");
    cb.record_delivery(&failed).await.expect("record");
    assert!(cb.claim_due(10, LEASE).await.expect("claim").is_empty());
    fx.clock.advance(6.0);
    let due = cb.claim_due(10, LEASE).await.expect("claim");
    assert_eq!(due.len(), 1);
    assert_eq!((due[0].attempts, due[0].round_start), (1, 0));
    assert!(!due[0].started_done);
    let at = fx.clock.now_value();
    let ok = passing(
        &due[0],
        at,
        "execution.started",
        message_id(e.id, "started"),
        PassedEvent::Started,
    );
    cb.record_delivery(&ok).await.expect("record");
    cb.record_delivery(&ok).await.expect("record twice");
    assert!(
        cb.claim_due(10, LEASE).await.expect("claim").is_empty(),
        "started passed, still running: nothing due"
    );
    let rec = cb.deliveries(NS, e.id).await.expect("read").expect("cb");
    assert_eq!(rec.state, CallbackState::Pending);
    assert_eq!(rec.attempts, 2);
    // The execution ends: the terminal event, in a new round.
    fx.leases
        .complete(&lease.lease_ref(), &Completion::succeeded(json!(1)))
        .await
        .expect("complete");
    let due = cb.claim_due(10, LEASE).await.expect("claim");
    assert_eq!(due.len(), 1);
    assert!(due[0].started_done);
    assert_eq!((due[0].attempts, due[0].round_start), (2, 2));
    let at = fx.clock.now_value();
    let mut last = outcome(&due[0], at, Some(200), CallbackState::Delivered, None);
    last.event = "execution.succeeded".into();
    cb.record_delivery(&last).await.expect("record");
    let rec = cb.deliveries(NS, e.id).await.expect("read").expect("cb");
    assert_eq!(rec.state, CallbackState::Delivered);
    let events: Vec<&str> = rec.deliveries.iter().map(|d| d.event.as_str()).collect();
    assert_eq!(
        events,
        vec![
            "execution.started",
            "execution.started",
            "execution.succeeded"
        ]
    );
    // Cancelled while queued: no started, the terminal only.
    let q = fx
        .store
        .submit(with_events(
            builders::prepared(NS, "third", json!(0)),
            &["started", "terminal"],
        ))
        .await
        .expect("submit");
    fx.store.cancel(NS, q.id, None).await.expect("cancel");
    let due = cb.claim_due(10, LEASE).await.expect("claim");
    let ids: Vec<Uuid> = due.iter().map(|d| d.execution_id).collect();
    assert!(ids.contains(&q.id), "{due:?}");
    assert!(due.iter().all(|d| !d.started_done));
}

async fn progress(fx: Fixture) {
    let Some(cb) = store(&fx).await else { return };
    let e = fx
        .store
        .submit(with_events(
            builders::prepared(NS, TASK, json!(0)),
            &["progress", "terminal"],
        ))
        .await
        .expect("submit");
    let lease = start(&fx).await;
    assert!(
        cb.claim_due(10, LEASE).await.expect("claim").is_empty(),
        "running without a report: nothing due"
    );
    let report = |done: u64, at: DateTime<Utc>| LiveDiagnostics {
        progress: Some(AttemptProgress {
            done,
            total: 10,
            note: format!("step {done}"),
            at,
        }),
        log: None,
    };
    let t1 = fx.clock.now_value();
    let kept = fx
        .leases
        .record_live(&[(lease.lease_ref(), report(1, t1))])
        .await
        .expect("live");
    if !kept {
        eprintln!("SKIPPED: this store keeps no progress reports");
        return;
    }
    let due = cb.claim_due(10, LEASE).await.expect("claim");
    assert_eq!(due.len(), 1, "a report: progress is due");
    assert_eq!((due[0].progress_seq, due[0].progress_sent_at), (0, None));
    let at = fx.clock.now_value();
    let throttle = at + chrono::Duration::seconds(5);
    cb.record_delivery(&passing(
        &due[0],
        at,
        "execution.progress",
        progress_message_id(e.id, 1),
        PassedEvent::Progress {
            seq: 1,
            progress_at: t1,
            after: throttle,
        },
    ))
    .await
    .expect("record");
    assert!(
        cb.claim_due(10, LEASE).await.expect("claim").is_empty(),
        "the same report is not delivered twice"
    );
    fx.clock.advance(1.0);
    let t2 = fx.clock.now_value();
    fx.leases
        .record_live(&[(lease.lease_ref(), report(2, t2))])
        .await
        .expect("live");
    assert!(
        cb.claim_due(10, LEASE).await.expect("claim").is_empty(),
        "a newer report waits for the throttle"
    );
    fx.clock.advance(5.0);
    let due = cb.claim_due(10, LEASE).await.expect("claim");
    assert_eq!(due.len(), 1, "the throttle ran out");
    assert_eq!(due[0].progress_seq, 1);
    assert_eq!(due[0].progress_sent_at, Some(t1));
    assert_eq!(due[0].round_start, 1);
    let at = fx.clock.now_value();
    cb.record_delivery(&passing(
        &due[0],
        at,
        "execution.progress",
        progress_message_id(e.id, 2),
        PassedEvent::Progress {
            seq: 2,
            progress_at: t2,
            after: at + chrono::Duration::seconds(5),
        },
    ))
    .await
    .expect("record");
    // A third report inside the throttle, then the end: the terminal event is due at once,
    // throttle or not (the sender then delivers the terminal status, never progress).
    fx.clock.advance(1.0);
    let t3 = fx.clock.now_value();
    fx.leases
        .record_live(&[(lease.lease_ref(), report(3, t3))])
        .await
        .expect("live");
    assert!(cb.claim_due(10, LEASE).await.expect("claim").is_empty());
    fx.leases
        .complete(&lease.lease_ref(), &Completion::succeeded(json!(1)))
        .await
        .expect("complete");
    let due = cb.claim_due(10, LEASE).await.expect("claim");
    assert_eq!(due.len(), 1, "terminal is due inside the throttle");
    assert_eq!(due[0].progress_seq, 2);
    assert_eq!(due[0].progress_sent_at, Some(t2));
    let rec = cb.deliveries(NS, e.id).await.expect("read").expect("cb");
    let ids: Vec<&str> = rec
        .deliveries
        .iter()
        .map(|d| d.webhook_id.as_str())
        .collect();
    assert_eq!(
        ids,
        vec![
            progress_message_id(e.id, 1).as_str(),
            progress_message_id(e.id, 2).as_str()
        ]
    );
}
