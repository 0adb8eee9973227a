//! World `0.3.0`'s durable steps (docs/steps.md) through the `steps` guest: a second attempt
//! of the same execution loads what the first recorded instead of working again; a fenced save
//! stops the attempt; caps come back to the guest as its `step-error`; without a step store a
//! step call answers `unavailable`.

use std::sync::Arc;

use async_trait::async_trait;
use onestep_core::ExecutionError;
use onestep_core::execution::LeaseRef;
use onestep_core::steps::{MemorySteps, StepError, StepRecord, StepStore};
use onestep_core::time::SystemClock;
use onestep_wasm::{CancelHandle, DurableSteps, Outcome, SandboxSettings};
use uuid::Uuid;

use crate::common::{ctx, load, shared};

fn lease(execution_id: Uuid) -> LeaseRef {
    LeaseRef {
        execution_id,
        attempt_id: Uuid::new_v4(),
        lease_token: Uuid::new_v4(),
    }
}

async fn run(
    store: Option<Arc<dyn StepStore>>,
    execution_id: Uuid,
    attempt: u32,
    payload: &str,
) -> Outcome {
    let handler = load("steps");
    let mut c = ctx(attempt);
    c.steps = store.map(|store| DurableSteps {
        store,
        lease: lease(execution_id),
        clock: Arc::new(SystemClock),
    });
    handler
        .invoke(
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

#[tokio::test]
async fn a_later_attempt_loads_the_recorded_steps() {
    let _g = shared();
    let store: Arc<dyn StepStore> = Arc::new(MemorySteps::new(Arc::new(SystemClock)));
    let id = Uuid::new_v4();
    let payload = r#"{"n": 4, "step_ms": 1}"#;
    let first = output(&run(Some(store.clone()), id, 1, payload).await);
    assert_eq!(first["attempts"], serde_json::json!([1, 1, 1, 1]));
    assert_eq!(first["ran_here"], 4);
    let keys: Vec<String> = store
        .list(id)
        .await
        .expect("list")
        .into_iter()
        .map(|r| r.key)
        .collect();
    assert_eq!(keys, ["step-0", "step-1", "step-2", "step-3"]);
    // Attempt 2 of the same execution works no step again.
    let second = output(&run(Some(store.clone()), id, 2, payload).await);
    assert_eq!(second["attempts"], serde_json::json!([1, 1, 1, 1]));
    assert_eq!(second["ran_here"], 0);
    // Another execution starts with none.
    let other = output(&run(Some(store), Uuid::new_v4(), 1, payload).await);
    assert_eq!(other["ran_here"], 4);
}

#[tokio::test]
async fn caps_reach_the_guest_as_its_step_error() {
    let _g = shared();
    let store: Arc<dyn StepStore> = Arc::new(MemorySteps::new(Arc::new(SystemClock)));
    let bytes = onestep_core::steps::MAX_STEP_BYTES;
    match run(
        Some(store.clone()),
        Uuid::new_v4(),
        1,
        &format!(r#"{{"value_bytes": {bytes}}}"#),
    )
    .await
    {
        Outcome::HandlerError {
            retryable, message, ..
        } => {
            assert!(!retryable);
            assert_eq!(
                message,
                format!("step 'big' not saved: StepError::TooLarge({})", bytes + 2)
            );
        }
        other => panic!("expected the refused save, got {other:?}"),
    }
    let fits = bytes - 2;
    let out = output(
        &run(
            Some(store),
            Uuid::new_v4(),
            1,
            &format!(r#"{{"value_bytes": {fits}}}"#),
        )
        .await,
    );
    assert_eq!(out["saved"], fits);
}

#[tokio::test]
async fn without_a_store_a_step_is_unavailable() {
    let _g = shared();
    match run(None, Uuid::new_v4(), 1, r#"{"n": 1}"#).await {
        Outcome::HandlerError {
            retryable, message, ..
        } => {
            assert!(retryable);
            assert!(message.contains("Unavailable"), "{message}");
            assert!(message.contains("keeps no steps"), "{message}");
        }
        other => panic!("expected unavailable, got {other:?}"),
    }
}

/// A store whose every save is fenced, counting the calls.
struct Fenced(std::sync::atomic::AtomicUsize);

#[async_trait]
impl StepStore for Fenced {
    async fn load(&self, _: Uuid, _: &str) -> Result<Option<String>, ExecutionError> {
        Ok(None)
    }
    async fn save(&self, _: &LeaseRef, _: &str, _: &str) -> Result<(), StepError> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Err(StepError::Fenced)
    }
    async fn list(&self, _: Uuid) -> Result<Vec<StepRecord>, ExecutionError> {
        Ok(Vec::new())
    }
}

#[tokio::test]
async fn a_fenced_save_stops_the_attempt() {
    let _g = shared();
    let store = Arc::new(Fenced(Default::default()));
    let outcome = run(
        Some(store.clone()),
        Uuid::new_v4(),
        1,
        r#"{"n": 5, "step_ms": 1}"#,
    )
    .await;
    // The guest returns its error at once (or is stopped after the cancel grace); it never
    // goes on to the next step.
    match &outcome {
        Outcome::HandlerError { message, .. } => {
            assert!(message.contains("Fenced"), "{message}")
        }
        Outcome::Trapped { .. } => {}
        other => panic!("expected the attempt stopped, got {other:?}"),
    }
    assert_eq!(store.0.load(std::sync::atomic::Ordering::SeqCst), 1);
}
