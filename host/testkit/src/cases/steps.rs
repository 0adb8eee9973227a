//! Durable steps (docs/steps.md): a save is fenced by the attempt's lease, checked against the
//! caps and all or nothing; an overwrite replaces the value and keeps the key's place; a purge
//! removes the steps with their execution. On tables without the steps table every call is
//! refused with the upgrade message, which [`supported`] checks before a case returns early.

use onestep_core::diagnostics::PurgeRequest;
use onestep_core::steps::{
    MAX_STEP_BYTES, MAX_STEP_BYTES_PER_EXECUTION, MAX_STEPS_PER_EXECUTION, STEPS_TABLE_ABSENT,
    StepError,
};
use onestep_core::{ExecutionError, ExecutionStatus};
use serde_json::json;

use super::{NS, case, claim, claim_one, submit, success};
use crate::suite::{Case, Fixture};

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case("steps_save_then_load_and_list", |fx| {
            Box::pin(save_then_load(fx))
        }),
        case("steps_overwrite_by_the_same_attempt", |fx| {
            Box::pin(overwrite(fx))
        }),
        case("steps_stale_attempt_is_fenced", |fx| Box::pin(fenced(fx))),
        case("steps_finished_execution_is_fenced", |fx| {
            Box::pin(finished(fx))
        }),
        case("steps_caps_refused_and_nothing_written", |fx| {
            Box::pin(caps(fx))
        }),
        case("steps_purged_with_their_execution", |fx| {
            Box::pin(purged(fx))
        }),
        case("steps_concurrent_saves_keep_the_caps", |fx| {
            Box::pin(concurrent_caps(fx))
        }),
    ]
}

/// Whether the store keeps steps; `false` (checked: the refusal naming the upgrade) on tables
/// without the steps table.
async fn supported(fx: &Fixture) -> bool {
    match fx.steps.list(uuid::Uuid::new_v4()).await {
        Ok(v) => {
            assert!(v.is_empty());
            true
        }
        Err(e) => {
            let text = e.to_string();
            assert_eq!(e.code(), "invalid_argument", "{text}");
            assert!(
                text.contains(STEPS_TABLE_ABSENT) && text.contains("onestep migrate --upgrade"),
                "{text}"
            );
            false
        }
    }
}

async fn save_then_load(fx: Fixture) {
    if !supported(&fx).await {
        return;
    }
    let e = submit(&fx, json!(1)).await;
    let other = submit(&fx, json!(2)).await;
    let lease = claim_one(&fx, 30.0).await;
    assert_eq!(lease.execution.id, e.id);
    let l = lease.lease_ref();
    assert_eq!(fx.steps.load(e.id, "a").await.expect("load"), None);
    fx.steps.save(&l, "b", r#"{"n":1}"#).await.expect("save b");
    fx.clock.advance(1.0);
    fx.steps.save(&l, "a", "[1,2,3]").await.expect("save a");
    fx.steps
        .save(&l, "unicode ✓ key", r#""ünï""#)
        .await
        .expect("save unicode");
    assert_eq!(
        fx.steps.load(e.id, "b").await.expect("load").as_deref(),
        Some(r#"{"n":1}"#)
    );
    assert_eq!(
        fx.steps
            .load(e.id, "unicode ✓ key")
            .await
            .expect("load")
            .as_deref(),
        Some(r#""ünï""#)
    );
    // Keys are exact: another case, another key.
    assert_eq!(fx.steps.load(e.id, "A").await.expect("load"), None);
    // Another execution sees none of them.
    assert_eq!(fx.steps.load(other.id, "a").await.expect("load"), None);
    assert!(fx.steps.list(other.id).await.expect("list").is_empty());
    let listed = fx.steps.list(e.id).await.expect("list");
    let keys: Vec<&str> = listed.iter().map(|r| r.key.as_str()).collect();
    assert_eq!(keys, ["b", "a", "unicode ✓ key"], "first-save order");
    assert_eq!(listed[0].bytes, 7);
    assert_eq!(listed[1].bytes, 7);
    assert_eq!(listed[0].attempt_id, lease.attempt_id);
    assert_eq!(listed[0].attempt_no, 1);
    assert!(listed[1].saved_at > listed[0].saved_at);
}

async fn overwrite(fx: Fixture) {
    if !supported(&fx).await {
        return;
    }
    let e = submit(&fx, json!(1)).await;
    let l = claim_one(&fx, 30.0).await.lease_ref();
    fx.steps.save(&l, "first", "1").await.expect("save");
    fx.steps.save(&l, "k", r#""old""#).await.expect("save");
    fx.steps.save(&l, "last", "3").await.expect("save");
    fx.clock.advance(2.0);
    fx.steps
        .save(&l, "k", r#"{"new":true}"#)
        .await
        .expect("overwrite");
    assert_eq!(
        fx.steps.load(e.id, "k").await.expect("load").as_deref(),
        Some(r#"{"new":true}"#)
    );
    let listed = fx.steps.list(e.id).await.expect("list");
    let keys: Vec<&str> = listed.iter().map(|r| r.key.as_str()).collect();
    assert_eq!(keys, ["first", "k", "last"], "an overwrite keeps its place");
    assert_eq!(listed[1].bytes, 12);
    assert!(listed[1].saved_at > listed[2].saved_at, "saved_at moved");
}

async fn fenced(fx: Fixture) {
    if !supported(&fx).await {
        return;
    }
    let e = submit(&fx, json!(1)).await;
    let first = claim_one(&fx, 5.0).await;
    fx.steps
        .save(&first.lease_ref(), "k", r#""first""#)
        .await
        .expect("save by the first attempt");
    // The lease runs out: even before anyone reclaims it, the first attempt is fenced.
    fx.clock.advance(5.0);
    assert_eq!(
        fx.steps.save(&first.lease_ref(), "k", r#""late""#).await,
        Err(StepError::Fenced)
    );
    let second = claim(&fx, 1, 30.0, "w2").await;
    assert_eq!(second.len(), 1);
    assert_eq!((second[0].execution.id, second[0].attempt_no), (e.id, 2));
    // The new attempt sees the first one's step and replaces it.
    assert_eq!(
        fx.steps.load(e.id, "k").await.expect("load").as_deref(),
        Some(r#""first""#)
    );
    fx.steps
        .save(&second[0].lease_ref(), "k", r#""second""#)
        .await
        .expect("save by the second attempt");
    // The stale attempt can neither overwrite nor add.
    for key in ["k", "new-key"] {
        assert_eq!(
            fx.steps.save(&first.lease_ref(), key, r#""stale""#).await,
            Err(StepError::Fenced),
            "{key}"
        );
    }
    assert_eq!(
        fx.steps.load(e.id, "k").await.expect("load").as_deref(),
        Some(r#""second""#)
    );
    assert_eq!(fx.steps.load(e.id, "new-key").await.expect("load"), None);
    let listed = fx.steps.list(e.id).await.expect("list");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].attempt_id, second[0].attempt_id);
    assert_eq!(listed[0].attempt_no, 2);
}

async fn finished(fx: Fixture) {
    if !supported(&fx).await {
        return;
    }
    let e = submit(&fx, json!(1)).await;
    let lease = claim_one(&fx, 30.0).await;
    fx.steps
        .save(&lease.lease_ref(), "k", "1")
        .await
        .expect("save");
    fx.leases
        .complete(&lease.lease_ref(), &success(json!(1)))
        .await
        .expect("complete");
    assert_eq!(
        fx.steps.save(&lease.lease_ref(), "k", "2").await,
        Err(StepError::Fenced)
    );
    assert_eq!(
        fx.steps.load(e.id, "k").await.expect("load").as_deref(),
        Some("1"),
        "the steps of a finished execution stay readable"
    );
}

async fn caps(fx: Fixture) {
    if !supported(&fx).await {
        return;
    }
    let e = submit(&fx, json!(1)).await;
    let l = claim_one(&fx, 3600.0).await.lease_ref();
    // Bad keys and values, refused before the store.
    assert!(matches!(
        fx.steps.save(&l, "", "1").await,
        Err(StepError::InvalidKey(_))
    ));
    assert!(matches!(
        fx.steps.save(&l, &"k".repeat(256), "1").await,
        Err(StepError::InvalidKey(_))
    ));
    assert!(matches!(
        fx.steps.save(&l, "k", "{oops").await,
        Err(StepError::InvalidValue(_))
    ));
    let too_big = format!("\"{}\"", "x".repeat(MAX_STEP_BYTES - 1));
    assert_eq!(
        fx.steps.save(&l, "big", &too_big).await,
        Err(StepError::TooLarge {
            bytes: (MAX_STEP_BYTES + 1) as u64,
            max: MAX_STEP_BYTES as u64
        })
    );
    assert!(fx.steps.list(e.id).await.expect("list").is_empty());
    // The largest value fits; 255 bytes of key fit.
    let largest = format!("\"{}\"", "x".repeat(MAX_STEP_BYTES - 2));
    fx.steps
        .save(&l, &"k".repeat(255), &largest)
        .await
        .expect("the largest step");
    // The execution budget: fill to just under it with the largest values.
    let per = MAX_STEP_BYTES as u64;
    let fill = MAX_STEP_BYTES_PER_EXECUTION / per - 1; // with the one above: the whole budget
    for i in 0..fill {
        fx.steps
            .save(&l, &format!("fill-{i}"), &largest)
            .await
            .expect("fill");
    }
    assert_eq!(
        fx.steps.save(&l, "one-more", "1").await,
        Err(StepError::ExecutionBudget {
            bytes: MAX_STEP_BYTES_PER_EXECUTION + 1,
            max: MAX_STEP_BYTES_PER_EXECUTION
        })
    );
    assert_eq!(fx.steps.load(e.id, "one-more").await.expect("load"), None);
    // Replacing a value with a smaller one frees its bytes.
    fx.steps
        .save(&l, "fill-0", "0")
        .await
        .expect("a smaller value");
    fx.steps
        .save(&l, "one-more", "1")
        .await
        .expect("fits after the shrink");

    // The step count, on a second execution with small values.
    let e2 = submit(&fx, json!(2)).await;
    let l2 = claim_one(&fx, 3600.0).await.lease_ref();
    assert_eq!(l2.execution_id, e2.id);
    for i in 0..MAX_STEPS_PER_EXECUTION {
        fx.steps
            .save(&l2, &format!("s{i}"), "1")
            .await
            .expect("a step");
    }
    assert_eq!(
        fx.steps.save(&l2, "one-too-many", "1").await,
        Err(StepError::TooManySteps {
            max: MAX_STEPS_PER_EXECUTION
        })
    );
    assert_eq!(
        fx.steps.load(e2.id, "one-too-many").await.expect("load"),
        None
    );
    fx.steps
        .save(&l2, "s0", "2")
        .await
        .expect("an overwrite is not a new step");
    assert_eq!(
        fx.steps.list(e2.id).await.expect("list").len(),
        MAX_STEPS_PER_EXECUTION as usize
    );
}

async fn purged(fx: Fixture) {
    if !supported(&fx).await {
        return;
    }
    let done = submit(&fx, json!(1)).await;
    let kept = submit(&fx, json!(2)).await;
    let leases = claim(&fx, 2, 30.0, "w1").await;
    assert_eq!(leases.len(), 2);
    for l in &leases {
        fx.steps.save(&l.lease_ref(), "a", "1").await.expect("save");
        fx.steps.save(&l.lease_ref(), "b", "2").await.expect("save");
    }
    let finish = leases
        .iter()
        .find(|l| l.execution.id == done.id)
        .expect("claimed");
    fx.leases
        .complete(&finish.lease_ref(), &success(json!(1)))
        .await
        .expect("complete");
    fx.clock.advance(10.0);
    let request = |dry_run| PurgeRequest {
        namespace: Some(NS.into()),
        finished_before: fx.clock.now_value(),
        statuses: vec![ExecutionStatus::Succeeded],
        batch_size: 100,
        dry_run,
    };
    let dry = fx.retention.purge(&request(true)).await.expect("dry run");
    assert_eq!((dry.executions, dry.steps), (1, 2));
    assert_eq!(fx.steps.list(done.id).await.expect("list").len(), 2);
    let report = fx.retention.purge(&request(false)).await.expect("purge");
    assert_eq!((report.executions, report.steps), (1, 2));
    assert!(fx.steps.list(done.id).await.expect("list").is_empty());
    assert_eq!(fx.steps.load(done.id, "a").await.expect("load"), None);
    assert_eq!(
        fx.steps.list(kept.id).await.expect("list").len(),
        2,
        "a running execution's steps stay"
    );
    assert!(matches!(
        fx.store.get(NS, done.id).await,
        Ok(None) | Err(ExecutionError::NotFound { .. })
    ));
}

/// Saves running at once, all `Ok` or refused with `refusal`: how many were written.
async fn at_once(
    fx: &Fixture,
    lease: &onestep_core::execution::LeaseRef,
    keys: &[String],
    value: &str,
    refusal: &StepError,
) -> usize {
    let results =
        futures::future::join_all(keys.iter().map(|k| fx.steps.save(lease, k, value))).await;
    let mut written = 0;
    for (key, r) in keys.iter().zip(results) {
        match r {
            Ok(()) => written += 1,
            Err(e) => assert_eq!(&e, refusal, "{key}"),
        }
    }
    written
}

/// Saves of one lease running at the same time. A worker never issues them (a guest's calls
/// are sequential), but the store must not break under them: each save is written whole or
/// refused with the cap's error, and where the store says its caps are exact under concurrent
/// saves ([`onestep_core::steps::StepStore::caps_exact_under_concurrent_saves`]) exactly the
/// room left is written; elsewhere at least that, and at most one over per save at once.
async fn concurrent_caps(fx: Fixture) {
    if !supported(&fx).await {
        return;
    }
    const AT_ONCE: usize = 8;
    const ROOM: usize = 3;
    let exact = fx.steps.caps_exact_under_concurrent_saves();
    let check = |what: &str, written: usize| {
        if exact {
            assert_eq!(written, ROOM, "{what}: exactly the room left is written");
        } else {
            assert!(
                (ROOM..ROOM + AT_ONCE).contains(&written),
                "{what}: {written} written with room for {ROOM}"
            );
        }
    };

    // The step count: all but ROOM steps recorded, then AT_ONCE new keys at once.
    let e = submit(&fx, json!(1)).await;
    let l = claim_one(&fx, 3600.0).await.lease_ref();
    assert_eq!(l.execution_id, e.id);
    for i in 0..MAX_STEPS_PER_EXECUTION as usize - ROOM {
        fx.steps
            .save(&l, &format!("s{i}"), "1")
            .await
            .expect("a step");
    }
    let keys: Vec<String> = (0..AT_ONCE).map(|i| format!("new-{i}")).collect();
    let written = at_once(
        &fx,
        &l,
        &keys,
        "1",
        &StepError::TooManySteps {
            max: MAX_STEPS_PER_EXECUTION,
        },
    )
    .await;
    check("steps", written);
    let listed = fx.steps.list(e.id).await.expect("list");
    assert_eq!(
        listed.len(),
        MAX_STEPS_PER_EXECUTION as usize - ROOM + written
    );
    // Every written key is listed once, with its own place.
    let mut seqs: Vec<&str> = listed.iter().map(|r| r.key.as_str()).collect();
    seqs.sort_unstable();
    seqs.dedup();
    assert_eq!(seqs.len(), listed.len());

    // The byte budget: all but ROOM of the largest values, then AT_ONCE more at once.
    let e2 = submit(&fx, json!(2)).await;
    let l2 = claim_one(&fx, 3600.0).await.lease_ref();
    assert_eq!(l2.execution_id, e2.id);
    let largest = format!("\"{}\"", "x".repeat(MAX_STEP_BYTES - 2));
    let per = MAX_STEP_BYTES as u64;
    let fill = MAX_STEP_BYTES_PER_EXECUTION / per - ROOM as u64;
    for i in 0..fill {
        fx.steps
            .save(&l2, &format!("fill-{i}"), &largest)
            .await
            .expect("fill");
    }
    let results =
        futures::future::join_all(keys.iter().map(|k| fx.steps.save(&l2, k, &largest))).await;
    let mut written = 0;
    for (key, r) in keys.iter().zip(results) {
        match r {
            Ok(()) => written += 1,
            Err(StepError::ExecutionBudget { bytes, max }) => {
                assert_eq!(max, MAX_STEP_BYTES_PER_EXECUTION, "{key}");
                assert!(bytes > max, "{key}: {bytes}");
            }
            Err(e) => panic!("{key}: {e}"),
        }
    }
    check("bytes", written);
    let held: u64 = fx
        .steps
        .list(e2.id)
        .await
        .expect("list")
        .iter()
        .map(|r| r.bytes)
        .sum();
    assert_eq!(held, (fill + written as u64) * per);
    if exact {
        assert_eq!(held, MAX_STEP_BYTES_PER_EXECUTION);
    }
}
