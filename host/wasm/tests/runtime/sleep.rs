//! World `0.3.0`'s `sleep` and `sleep-until` (docs/steps.md#sleep) through the `steps` guest:
//! the first attempt records the wake time as a step and stops at once (the runtime reports
//! `Parked`); an attempt before the wake time parks again until the same instant, recording
//! nothing; an attempt after it goes on past the sleep with every earlier step loaded and counts
//! a wake; out-of-range wake times, a key holding a foreign step and a missing store come back
//! to the guest as its `step-error`.

use std::sync::{Arc, Mutex};

use chrono::{DateTime, Duration, Utc};
use onestep_core::execution::LeaseRef;
use onestep_core::park::{MAX_SLEEP_MS, parse_sleep_record};
use onestep_core::steps::{MemorySteps, StepStore};
use onestep_core::time::Clock;
use onestep_wasm::{CancelHandle, DurableSteps, Outcome, Report, SandboxSettings};
use uuid::Uuid;

use crate::common::{ctx, load, shared};

/// A clock the test moves.
#[derive(Debug)]
struct TestClock(Mutex<DateTime<Utc>>);

impl TestClock {
    fn new() -> Arc<Self> {
        let start = DateTime::parse_from_rfc3339("2026-03-01T10:00:00Z")
            .expect("instant")
            .to_utc();
        Arc::new(TestClock(Mutex::new(start)))
    }
    fn advance(&self, seconds: i64) {
        let mut t = self.0.lock().expect("clock");
        *t += Duration::seconds(seconds);
    }
}

impl Clock for TestClock {
    fn now(&self) -> DateTime<Utc> {
        *self.0.lock().expect("clock")
    }
}

async fn run(
    store: Option<Arc<dyn StepStore>>,
    clock: Arc<TestClock>,
    execution_id: Uuid,
    attempt: u32,
    payload: &str,
) -> Report {
    let handler = load("steps");
    let mut c = ctx(attempt);
    c.steps = store.map(|store| DurableSteps {
        store,
        lease: LeaseRef {
            execution_id,
            attempt_id: Uuid::new_v4(),
            lease_token: Uuid::new_v4(),
        },
        clock,
    });
    handler
        .invoke_report(
            &SandboxSettings::default(),
            c,
            payload,
            CancelHandle::new(),
            Some(std::time::Duration::from_secs(30)),
        )
        .await
}

fn output(outcome: &Outcome) -> serde_json::Value {
    match outcome {
        Outcome::Succeeded(text) => serde_json::from_str(text).expect("JSON output"),
        other => panic!("expected success, got {other:?}"),
    }
}

async fn keys(store: &Arc<dyn StepStore>, id: Uuid) -> Vec<String> {
    store
        .list(id)
        .await
        .expect("list")
        .into_iter()
        .map(|r| r.key)
        .collect()
}

#[tokio::test]
async fn a_sleep_parks_and_the_attempt_after_the_wake_time_goes_on() {
    let _g = shared();
    let clock = TestClock::new();
    let store: Arc<dyn StepStore> = Arc::new(MemorySteps::new(clock.clone()));
    let id = Uuid::new_v4();
    let payload = r#"{"n": 4, "step_ms": 1, "sleep_ms": 10000, "sleep_after": 2}"#;
    let wake = clock.now() + Duration::seconds(10);
    // Attempt 1: two steps, then the sleep records its wake time and parks.
    let first = run(Some(store.clone()), clock.clone(), id, 1, payload).await;
    assert_eq!(first.outcome, Outcome::Parked { wake_at: wake });
    assert_eq!(first.wakes, 0);
    assert_eq!(keys(&store, id).await, ["step-0", "step-1", "nap"]);
    let nap = store
        .load(id, "nap")
        .await
        .expect("load")
        .expect("recorded");
    assert_eq!(parse_sleep_record(&nap), Ok(wake));
    // Attempt 2 before the wake time (a crash between the record and the park, or a skewed
    // clock): parks again until the same instant, recording nothing new.
    clock.advance(5);
    let early = run(Some(store.clone()), clock.clone(), id, 2, payload).await;
    assert_eq!(early.outcome, Outcome::Parked { wake_at: wake });
    assert_eq!(keys(&store, id).await, ["step-0", "step-1", "nap"]);
    assert_eq!(store.load(id, "nap").await.expect("load"), Some(nap));
    // Attempt 3 at the wake time: the recorded steps load, the sleep is over, the rest runs.
    clock.advance(5);
    let woke = run(Some(store.clone()), clock.clone(), id, 3, payload).await;
    let out = output(&woke.outcome);
    assert_eq!(out["attempts"], serde_json::json!([1, 1, 3, 3]));
    assert_eq!(
        (out["ran_here"].as_u64(), out["woke_in_attempt"].as_u64()),
        (Some(2), Some(3))
    );
    assert_eq!(woke.wakes, 1);
    assert_eq!(
        keys(&store, id).await,
        ["step-0", "step-1", "nap", "step-2", "step-3"]
    );
}

#[tokio::test]
async fn sleep_until_an_instant_already_passed_does_not_park() {
    let _g = shared();
    let clock = TestClock::new();
    let store: Arc<dyn StepStore> = Arc::new(MemorySteps::new(clock.clone()));
    let id = Uuid::new_v4();
    let past = (clock.now() - Duration::seconds(1)).timestamp_millis();
    let payload =
        format!(r#"{{"n": 2, "step_ms": 1, "sleep_until_ms": {past}, "sleep_after": 1}}"#);
    let r = run(Some(store.clone()), clock.clone(), id, 1, &payload).await;
    assert_eq!(output(&r.outcome)["woke_in_attempt"].as_u64(), Some(1));
    assert_eq!(
        keys(&store, id).await,
        ["step-0", "step-1"],
        "nothing recorded"
    );
    // A future instant parks until it, to the millisecond.
    let at = clock.now() + Duration::milliseconds(90_500);
    let payload = format!(
        r#"{{"n": 2, "step_ms": 1, "sleep_until_ms": {}, "sleep_after": 1}}"#,
        at.timestamp_millis()
    );
    let other = Uuid::new_v4();
    let r = run(Some(store.clone()), clock.clone(), other, 1, &payload).await;
    assert_eq!(r.outcome, Outcome::Parked { wake_at: at });
    assert_eq!(keys(&store, other).await, ["step-0", "nap-until"]);
}

/// The handler error the guest makes of a refused sleep.
fn refused(outcome: &Outcome) -> String {
    match outcome {
        Outcome::HandlerError { message, .. } => message.clone(),
        other => panic!("expected the refused sleep, got {other:?}"),
    }
}

#[tokio::test]
async fn refused_sleeps_reach_the_guest_and_park_nothing() {
    let _g = shared();
    let clock = TestClock::new();
    let store: Arc<dyn StepStore> = Arc::new(MemorySteps::new(clock.clone()));
    // Over 365 days.
    let id = Uuid::new_v4();
    let payload = format!(
        r#"{{"n": 1, "sleep_ms": {}, "sleep_after": 0}}"#,
        MAX_SLEEP_MS + 1
    );
    let r = run(Some(store.clone()), clock.clone(), id, 1, &payload).await;
    let m = refused(&r.outcome);
    assert!(
        m.contains("InvalidWake") && m.contains("over the limit"),
        "{m}"
    );
    assert!(keys(&store, id).await.is_empty());
    // The key holds a step the handler saved itself.
    let id = Uuid::new_v4();
    let lease = LeaseRef {
        execution_id: id,
        attempt_id: Uuid::new_v4(),
        lease_token: Uuid::new_v4(),
    };
    store
        .save(&lease, "nap", r#"{"pages": 3}"#)
        .await
        .expect("save");
    let payload = r#"{"n": 1, "sleep_ms": 1000, "sleep_after": 0}"#;
    let m = refused(
        &run(Some(store.clone()), clock.clone(), id, 1, payload)
            .await
            .outcome,
    );
    assert!(
        m.contains("InvalidWake") && m.contains("not a recorded sleep"),
        "{m}"
    );
    // No store: unavailable.
    let m = refused(
        &run(None, clock.clone(), Uuid::new_v4(), 1, payload)
            .await
            .outcome,
    );
    assert!(
        m.contains("Unavailable") && m.contains("keeps no steps"),
        "{m}"
    );
    // A sleep of 0 ms is over at once and records nothing.
    let id = Uuid::new_v4();
    let payload = r#"{"n": 1, "step_ms": 1, "sleep_ms": 0, "sleep_after": 0}"#;
    let r = run(Some(store.clone()), clock.clone(), id, 1, payload).await;
    assert_eq!(output(&r.outcome)["woke_in_attempt"].as_u64(), Some(1));
    assert_eq!(keys(&store, id).await, ["step-0"]);
}
