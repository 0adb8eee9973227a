//! Client-side cases: submit (T1), idempotency, get, submit_many, value round trips; the list
//! cases (paging, cursors, search) are in [`super::listing`], registered here in their order.

use chrono::{Duration, FixedOffset, TimeZone, Utc};
use onestep_core::request::SubmitRequest;
use onestep_core::{ExecutionError, ExecutionStatus};
use serde_json::json;

use super::{NS, TASK, case, get, listing, submit};
use crate::builders::{self, keyed, prepare};
use crate::suite::{Case, Fixture};

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case("submit_t1_columns_and_get", |fx| Box::pin(submit_t1(fx))),
        case("submit_expires_at_offset_stored_as_utc", |fx| {
            Box::pin(expires_at_utc(fx))
        }),
        case("submit_delay_and_microseconds", |fx| {
            Box::pin(delay_micros(fx))
        }),
        case("get_other_namespace_is_absent", |fx| {
            Box::pin(other_namespace(fx))
        }),
        case("list_cursor_owner", |fx| {
            Box::pin(listing::cursor_owner(fx))
        }),
        case("idempotent_replay_and_conflict", |fx| {
            Box::pin(replay_conflict(fx))
        }),
        case("submit_many_new_replay_conflict", |fx| {
            Box::pin(submit_many(fx))
        }),
        case("list_paging_identical_created_at", |fx| {
            Box::pin(listing::list_paging(fx))
        }),
        case("list_paging_mixed_v4_v7_ids", |fx| {
            Box::pin(listing::list_paging_mixed_ids(fx))
        }),
        case("new_ids_are_time_ordered_v7", |fx| Box::pin(new_ids_v7(fx))),
        case("list_search_filters", |fx| {
            Box::pin(listing::list_search(fx))
        }),
        case("list_search_window_bounds_a_page", |fx| {
            Box::pin(listing::list_search_window(fx))
        }),
        case("onestep_mapping_payload_round_trip", |fx| {
            Box::pin(mapping_round_trip(fx))
        }),
        case("versions_by_id_move_with_each_change", |fx| {
            Box::pin(versions_by_id(fx))
        }),
    ]
}

async fn submit_t1(fx: Fixture) {
    let now = fx.clock.now_value();
    let e = fx
        .store
        .submit(prepare(
            NS,
            &SubmitRequest {
                task_name: TASK.into(),
                payload: json!({"document_id": "doc-123", "n": [1, 2.5, true, null]}),
                metadata: Some(json!({"tenant": "t1"})),
                ..SubmitRequest::default()
            },
        ))
        .await
        .expect("submit");
    assert_eq!(e.status, ExecutionStatus::Queued);
    assert_eq!((e.attempts, e.version), (0, 0));
    assert_eq!(e.created_at, now);
    assert_eq!(e.available_at, now);
    assert_eq!(
        e.payload,
        json!({"document_id": "doc-123", "n": [1, 2.5, true, null]})
    );
    assert_eq!(e.metadata.get("tenant"), Some(&json!("t1")));
    assert!(e.result.is_none() && e.error.is_none());
    assert!(e.started_at.is_none() && e.finished_at.is_none() && e.expires_at.is_none());
    assert_eq!(get(&fx, e.id).await, e);
    let cols = fx.probe.lease_columns(e.id).await.expect("row");
    assert_eq!(cols.updated_at, now);
    assert!(cols.lease_token.is_none());
}

async fn expires_at_utc(fx: Fixture) {
    let plus8 = FixedOffset::east_opt(8 * 3600).expect("offset");
    let local = plus8
        .with_ymd_and_hms(2026, 8, 10, 20, 0, 0)
        .single()
        .expect("time")
        + Duration::microseconds(500);
    let e = fx
        .store
        .submit(prepare(
            NS,
            &SubmitRequest {
                task_name: TASK.into(),
                payload: json!(1),
                expires_at: Some(local),
                ..SubmitRequest::default()
            },
        ))
        .await
        .expect("submit");
    let utc = Utc
        .with_ymd_and_hms(2026, 8, 10, 12, 0, 0)
        .single()
        .expect("time")
        + Duration::microseconds(500);
    assert_eq!(e.expires_at, Some(utc));
    assert_eq!(get(&fx, e.id).await.expires_at, Some(utc));
}

async fn delay_micros(fx: Fixture) {
    fx.clock.advance(0.000_001);
    let now = fx.clock.now_value();
    let e = fx
        .store
        .submit(prepare(
            NS,
            &SubmitRequest {
                task_name: TASK.into(),
                payload: json!(null),
                delay_s: Some(1.5),
                ..SubmitRequest::default()
            },
        ))
        .await
        .expect("submit");
    assert_eq!(e.created_at, now);
    assert_eq!(e.available_at, now + Duration::microseconds(1_500_000));
    let back = get(&fx, e.id).await;
    assert_eq!(
        back.created_at.timestamp_subsec_micros(),
        now.timestamp_subsec_micros()
    );
    assert_eq!(back.payload, json!(null));
}

async fn other_namespace(fx: Fixture) {
    let e = submit(&fx, json!(1)).await;
    assert_eq!(fx.store.get("other", e.id).await.expect("get"), None);
    assert_eq!(
        fx.store.cancel("other", e.id, None).await.expect("cancel"),
        None
    );
    assert_eq!(
        fx.store.get(NS, uuid::Uuid::new_v4()).await.expect("get"),
        None
    );
}

/// `versions` answers every existing id of any namespace with the version `get` reads, leaves
/// out unknown ids, and moves when the execution changes.
async fn versions_by_id(fx: Fixture) {
    assert_eq!(fx.store.versions(&[]).await.expect("versions"), []);
    let a = submit(&fx, json!(1)).await;
    let b = fx
        .store
        .submit(prepare(
            "other",
            &SubmitRequest {
                task_name: TASK.into(),
                payload: json!(2),
                ..SubmitRequest::default()
            },
        ))
        .await
        .expect("submit other");
    let unknown = uuid::Uuid::new_v4();
    let mut v = fx
        .store
        .versions(&[a.id, unknown, b.id])
        .await
        .expect("versions");
    v.sort();
    let mut want = vec![(a.id, a.version), (b.id, b.version)];
    want.sort();
    assert_eq!(v, want);
    let cancelled = fx
        .store
        .cancel(NS, a.id, Some("stop".into()))
        .await
        .expect("cancel")
        .expect("present");
    assert!(cancelled.version > a.version);
    assert_eq!(
        fx.store.versions(&[a.id]).await.expect("versions"),
        [(a.id, cancelled.version)]
    );
    let many: Vec<uuid::Uuid> = (0..2500)
        .map(|_| uuid::Uuid::new_v4())
        .chain([b.id])
        .collect();
    assert_eq!(
        fx.store
            .versions(&many)
            .await
            .expect("versions of many ids"),
        [(b.id, b.version)]
    );
}

async fn replay_conflict(fx: Fixture) {
    let a = fx
        .store
        .submit(keyed(NS, TASK, "k-1", json!({"x": 1})))
        .await
        .expect("first");
    fx.clock.advance(1.0);
    let b = fx
        .store
        .submit(keyed(NS, TASK, "k-1", json!({"x": 1})))
        .await
        .expect("replay");
    assert_eq!(a, b, "a replay returns the stored execution");
    match fx
        .store
        .submit(keyed(NS, TASK, "k-1", json!({"x": 2})))
        .await
    {
        Err(ExecutionError::Conflict { existing_id }) => assert_eq!(existing_id, a.id),
        other => panic!("expected conflict, got {other:?}"),
    }
    // Another task name is another idempotency scope.
    let c = fx
        .store
        .submit(keyed(NS, "t2", "k-1", json!({"x": 2})))
        .await
        .expect("other task");
    assert_ne!(c.id, a.id);
    // Exact comparison on tables this crate creates is not required of reference tables, so
    // only the exact-case key is checked here.
    assert_eq!(fx.probe.count_executions().await, 2);
}

async fn submit_many(fx: Fixture) {
    let existing = fx
        .store
        .submit(keyed(NS, TASK, "k-old", json!(1)))
        .await
        .expect("seed");
    let conflicting = fx
        .store
        .submit(keyed(NS, TASK, "k-c", json!(1)))
        .await
        .expect("seed");
    let batch = vec![
        builders::prepared(NS, TASK, json!("plain")),
        keyed(NS, TASK, "k-new", json!("new")),
        keyed(NS, TASK, "k-old", json!(1)),
        keyed(NS, TASK, "k-c", json!(2)),
        keyed(NS, TASK, "k-new", json!("new")),
        keyed(NS, TASK, "k-new", json!("different")),
    ];
    let out = fx.store.submit_many(batch.clone()).await.expect("batch");
    assert_eq!(out.len(), 6);
    let first = out[0].as_ref().expect("plain");
    assert_eq!(first.id, batch[0].id);
    let new = out[1].as_ref().expect("new").clone();
    assert_eq!(out[2].as_ref().expect("replay").id, existing.id);
    match &out[3] {
        Err(ExecutionError::Conflict { existing_id }) => assert_eq!(*existing_id, conflicting.id),
        other => panic!("expected conflict, got {other:?}"),
    }
    assert_eq!(out[4].as_ref().expect("in-batch replay").id, new.id);
    assert!(matches!(out[5], Err(ExecutionError::Conflict { .. })));
    assert_eq!(fx.probe.count_executions().await, 4);
    assert!(
        fx.store
            .submit_many(Vec::new())
            .await
            .expect("empty")
            .is_empty()
    );
}

/// New execution ids (submit) and attempt ids (claim) are UUIDv7; the lease token stays random
/// (docs/semantics.md#time-ordered-ids).
async fn new_ids_v7(fx: Fixture) {
    let a = submit(&fx, json!(1)).await;
    let b = submit(&fx, json!(2)).await;
    assert_eq!(a.id.get_version_num(), 7, "{}", a.id);
    assert_eq!(b.id.get_version_num(), 7, "{}", b.id);
    assert!(
        a.id < b.id,
        "ids of one process increase: {} {}",
        a.id,
        b.id
    );
    let lease = super::claim_one(&fx, 30.0).await;
    assert_eq!(
        lease.attempt_id.get_version_num(),
        7,
        "{}",
        lease.attempt_id
    );
    assert_eq!(
        lease.lease_token.get_version_num(),
        4,
        "{}",
        lease.lease_token
    );
}

async fn mapping_round_trip(fx: Fixture) {
    let payload =
        json!({"$onestep": 1, "x": 1e16, "y": 100, "nested": {"$onestep": {"type": "x"}}});
    let e = submit(&fx, payload.clone()).await;
    assert_eq!(e.payload, payload);
    let back = get(&fx, e.id).await;
    assert_eq!(
        onestep_core::canonical::to_canonical_string(&back.payload),
        onestep_core::canonical::to_canonical_string(&payload)
    );
}
