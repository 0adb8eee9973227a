//! Durable steps (docs/steps.md): the recorded outputs of a handler's steps, kept per execution
//! so that a later attempt of the same execution skips the steps an earlier one finished.
//!
//! A handler of world `onestep:handler@0.3.0` calls `step-load(key)` before a unit of work and
//! `step-save(key, value)` after it. The host serves both through the [`StepStore`] port, which
//! every backend implements over its `<T>_steps` table (and [`MemorySteps`] in memory, for
//! `onestep task run` and `onestep replay`).
//!
//! Invariants every implementation keeps (the conformance cases check them):
//! - a save is **one statement** on the SQL backends (an upsert whose `WHERE` carries the fence
//!   and the caps), so no lock it takes outlives the server's run of that statement: a worker
//!   frozen (SIGSTOP) between two calls holds nothing that keeps another worker from taking
//!   the execution over;
//! - a save is **fenced by the attempt's lease**: it writes only while the execution row holds
//!   that attempt's lease token, is `running` or `cancel_requested` and its lease has not run
//!   out; otherwise it is [`StepError::Fenced`] and writes nothing, so a stale attempt never
//!   overwrites a newer attempt's step;
//! - the caps ([`MAX_STEP_BYTES`], [`MAX_STEPS_PER_EXECUTION`],
//!   [`MAX_STEP_BYTES_PER_EXECUTION`]) are checked by the same statement, and a refused save
//!   writes nothing; when it wrote no row, [`explain_unwritten`] tells the guest why;
//! - saving a key again replaces its value and keeps its place in [`StepStore::list`];
//! - steps are removed with their execution by `onestep purge`; a retry (`/retry`, rerun)
//!   creates a new execution, which starts with no steps.

use std::collections::HashMap;
use std::sync::Mutex;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::error::ExecutionError;
use crate::execution::LeaseRef;
use crate::time::SharedClock;

/// Why every step call is refused on tables without `<T>_steps` (the backends' message).
pub const STEPS_TABLE_ABSENT: &str = "the durable steps table is absent (tables created by an \
    older onestep or by the reference); add it online with `onestep migrate --upgrade`";

/// Longest step key, in bytes of UTF-8.
pub const MAX_STEP_KEY_BYTES: usize = 255;
/// Largest value of one step, in bytes of its JSON text (1 MiB).
pub const MAX_STEP_BYTES: usize = 1024 * 1024;
/// Most steps one execution may record.
pub const MAX_STEPS_PER_EXECUTION: u32 = 1_000;
/// Most bytes (sum of the values' JSON text) one execution's steps may hold (16 MiB).
pub const MAX_STEP_BYTES_PER_EXECUTION: u64 = 16 * 1024 * 1024;

/// Why a step was not saved (WIT `step-error` of `onestep:handler@0.3.0`).
#[derive(Debug, Clone, thiserror::Error)]
pub enum StepError {
    /// The key is empty, longer than [`MAX_STEP_KEY_BYTES`] or holds a control character.
    #[error("invalid step key: {0}")]
    InvalidKey(String),
    /// The value is not one JSON document.
    #[error("invalid step value: {0}")]
    InvalidValue(String),
    /// The value is over [`MAX_STEP_BYTES`].
    #[error("step value of {bytes} bytes is over the limit of {max} bytes per step")]
    TooLarge {
        /// Bytes of the value.
        bytes: u64,
        /// [`MAX_STEP_BYTES`].
        max: u64,
    },
    /// A new key would be one more than [`MAX_STEPS_PER_EXECUTION`].
    #[error("the execution already has {max} steps, the limit")]
    TooManySteps {
        /// [`MAX_STEPS_PER_EXECUTION`].
        max: u32,
    },
    /// The execution's steps would hold more than [`MAX_STEP_BYTES_PER_EXECUTION`].
    #[error("the execution's steps would hold {bytes} bytes, over the limit of {max}")]
    ExecutionBudget {
        /// Bytes the execution's steps would hold after the save.
        bytes: u64,
        /// [`MAX_STEP_BYTES_PER_EXECUTION`].
        max: u64,
    },
    /// The attempt no longer holds the execution's lease (another attempt took over, the lease
    /// ran out, or the execution finished): nothing was written and the attempt must stop.
    #[error("the attempt no longer holds the execution's lease")]
    Fenced,
    /// The store failed; nothing is known to have been written.
    #[error("step store: {0}")]
    Store(ExecutionError),
}

/// Equal when of the same kind with the same figures; two store failures are equal when their
/// messages are.
impl PartialEq for StepError {
    fn eq(&self, other: &Self) -> bool {
        use StepError::*;
        match (self, other) {
            (InvalidKey(a), InvalidKey(b)) | (InvalidValue(a), InvalidValue(b)) => a == b,
            (TooLarge { bytes: a, max: m }, TooLarge { bytes: b, max: n })
            | (ExecutionBudget { bytes: a, max: m }, ExecutionBudget { bytes: b, max: n }) => {
                a == b && m == n
            }
            (TooManySteps { max: a }, TooManySteps { max: b }) => a == b,
            (Fenced, Fenced) => true,
            (Store(a), Store(b)) => a.to_string() == b.to_string(),
            _ => false,
        }
    }
}

impl From<ExecutionError> for StepError {
    fn from(e: ExecutionError) -> Self {
        StepError::Store(e)
    }
}

/// One recorded step as [`StepStore::list`] shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepRecord {
    /// The step's key.
    pub key: String,
    /// Bytes of its value.
    pub bytes: u64,
    /// The attempt that saved the current value.
    pub attempt_id: Uuid,
    /// That attempt's number.
    pub attempt_no: u32,
    /// When the current value was saved.
    pub saved_at: DateTime<Utc>,
}

/// Checks a step key: 1..=[`MAX_STEP_KEY_BYTES`] bytes, no control characters.
pub fn validate_key(key: &str) -> Result<(), StepError> {
    if key.is_empty() {
        return Err(StepError::InvalidKey("the key is empty".into()));
    }
    if key.len() > MAX_STEP_KEY_BYTES {
        return Err(StepError::InvalidKey(format!(
            "the key is {} bytes, over the limit of {MAX_STEP_KEY_BYTES}",
            key.len()
        )));
    }
    if let Some(c) = key.chars().find(|c| c.is_control()) {
        return Err(StepError::InvalidKey(format!(
            "the key holds the control character {:?}",
            c
        )));
    }
    Ok(())
}

/// Checks a step value: at most [`MAX_STEP_BYTES`], then one JSON document.
pub fn validate_value(value: &str) -> Result<(), StepError> {
    if value.len() > MAX_STEP_BYTES {
        return Err(StepError::TooLarge {
            bytes: value.len() as u64,
            max: MAX_STEP_BYTES as u64,
        });
    }
    serde_json::from_str::<serde::de::IgnoredAny>(value)
        .map(|_| ())
        .map_err(|e| StepError::InvalidValue(format!("not JSON: {e}")))
}

/// Checks key and value before a store is asked (every implementation calls it first).
pub fn validate(key: &str, value: &str) -> Result<(), StepError> {
    validate_key(key)?;
    validate_value(value)
}

/// What an execution's steps hold when a save is checked against the caps, read under the
/// fence in the save's transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StepTotals {
    /// Steps recorded.
    pub steps: u32,
    /// Bytes of their values.
    pub bytes: u64,
    /// Bytes of the saved key's current value, when the key is recorded already.
    pub existing: Option<u64>,
}

impl StepTotals {
    /// Whether saving `new_bytes` under the key keeps the execution within the caps.
    pub fn admit(&self, new_bytes: u64) -> Result<(), StepError> {
        if self.existing.is_none() && self.steps >= MAX_STEPS_PER_EXECUTION {
            return Err(StepError::TooManySteps {
                max: MAX_STEPS_PER_EXECUTION,
            });
        }
        let after = self
            .bytes
            .saturating_sub(self.existing.unwrap_or(0))
            .saturating_add(new_bytes);
        if after > MAX_STEP_BYTES_PER_EXECUTION {
            return Err(StepError::ExecutionBudget {
                bytes: after,
                max: MAX_STEP_BYTES_PER_EXECUTION,
            });
        }
        Ok(())
    }
}

/// Why a save whose statement wrote no row was refused, from what a read after it found: the
/// fence (`fence_holds`: the execution row still holds the attempt's lease) first, then the
/// caps for `new_bytes` over `totals`. `None` when neither explains it (the rows changed
/// between the statement and the read): the caller runs the save again.
pub fn explain_unwritten(
    fence_holds: bool,
    totals: StepTotals,
    new_bytes: u64,
) -> Option<StepError> {
    if !fence_holds {
        return Some(StepError::Fenced);
    }
    totals.admit(new_bytes).err()
}

/// How many times a backend runs a save's statement when it wrote no row and the read after it
/// found no reason ([`explain_unwritten`] `None`) before answering a store error.
pub const UNEXPLAINED_SAVE_RETRIES: u32 = 3;

/// The store failure a backend answers after [`UNEXPLAINED_SAVE_RETRIES`] runs of a save that
/// wrote nothing for no reason found (a transient failure: the guest may retry the save).
pub fn unexplained_save(backend: &'static str) -> StepError {
    StepError::Store(ExecutionError::Backend(crate::error::BackendError {
        backend,
        operation: "step_save",
        kind: crate::error::ConnectorKind::Transient,
        message: "the step was not saved and no reason was found (the execution's steps kept \
                  changing); retry the save"
            .into(),
    }))
}

/// The steps of executions (docs/steps.md), served by every backend.
#[async_trait]
pub trait StepStore: Send + Sync {
    /// The value saved under `key` for `execution_id`, or `None`. Not fenced: reading a step
    /// changes nothing.
    async fn load(&self, execution_id: Uuid, key: &str) -> Result<Option<String>, ExecutionError>;

    /// Saves `value` (JSON text) under `key` for the execution of `lease`, replacing an earlier
    /// value, fenced by the lease and within the caps (module docs); all or nothing.
    async fn save(&self, lease: &LeaseRef, key: &str, value: &str) -> Result<(), StepError>;

    /// The execution's steps in the order their keys were first saved.
    async fn list(&self, execution_id: Uuid) -> Result<Vec<StepRecord>, ExecutionError>;

    /// Whether the caps hold exactly also when saves *of the same lease* run at the same time
    /// (each sees the rows of every save before it). A worker never does that — a guest's
    /// calls are sequential, and only the lease holder passes the fence — so with `false` the
    /// caps are still exact in use; the backend documents by how much they can be passed.
    fn caps_exact_under_concurrent_saves(&self) -> bool {
        true
    }
}

/// One execution's steps in memory: records in first-save order plus their values.
#[derive(Debug, Clone, Default)]
pub struct MemoryExecutionSteps {
    records: Vec<(StepRecord, String)>,
}

impl MemoryExecutionSteps {
    /// The value of `key`.
    pub fn load(&self, key: &str) -> Option<String> {
        self.records
            .iter()
            .find(|(r, _)| r.key == key)
            .map(|(_, v)| v.clone())
    }

    /// Checks the caps and saves (the caller has checked the fence and [`validate`]d).
    pub fn save(
        &mut self,
        key: &str,
        value: &str,
        attempt_id: Uuid,
        attempt_no: u32,
        now: DateTime<Utc>,
    ) -> Result<(), StepError> {
        let existing = self.records.iter().position(|(r, _)| r.key == key);
        let totals = StepTotals {
            steps: u32::try_from(self.records.len()).unwrap_or(u32::MAX),
            bytes: self.records.iter().map(|(r, _)| r.bytes).sum(),
            existing: existing.map(|i| self.records[i].0.bytes),
        };
        let bytes = value.len() as u64;
        totals.admit(bytes)?;
        let record = StepRecord {
            key: key.to_owned(),
            bytes,
            attempt_id,
            attempt_no,
            saved_at: now,
        };
        match existing {
            Some(i) => self.records[i] = (record, value.to_owned()),
            None => self.records.push((record, value.to_owned())),
        }
        Ok(())
    }

    /// The records in first-save order.
    pub fn list(&self) -> Vec<StepRecord> {
        self.records.iter().map(|(r, _)| r.clone()).collect()
    }

    /// The records with their values, in first-save order.
    pub fn entries(&self) -> &[(StepRecord, String)] {
        &self.records
    }
}

/// Steps in process memory, unfenced: for a single process that runs attempts itself
/// (`onestep task run`, `onestep replay`), where no other attempt can hold the execution. The
/// caps are those of every store. The attempt number recorded is 1.
#[derive(Debug)]
pub struct MemorySteps {
    clock: SharedClock,
    executions: Mutex<HashMap<Uuid, MemoryExecutionSteps>>,
}

impl MemorySteps {
    /// Empty, on `clock`.
    pub fn new(clock: SharedClock) -> MemorySteps {
        MemorySteps {
            clock,
            executions: Mutex::new(HashMap::new()),
        }
    }

    /// Records `value` under `key` for `execution_id` without checks of the fence (seeding
    /// from a recorded execution); caps and validation still apply.
    pub fn seed(&self, execution_id: Uuid, key: &str, value: &str) -> Result<(), StepError> {
        validate(key, value)?;
        let now = self.clock.now();
        let mut map = self
            .executions
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        map.entry(execution_id)
            .or_default()
            .save(key, value, Uuid::nil(), 0, now)
    }
}

#[async_trait]
impl StepStore for MemorySteps {
    async fn load(&self, execution_id: Uuid, key: &str) -> Result<Option<String>, ExecutionError> {
        let map = self
            .executions
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        Ok(map.get(&execution_id).and_then(|s| s.load(key)))
    }

    async fn save(&self, lease: &LeaseRef, key: &str, value: &str) -> Result<(), StepError> {
        validate(key, value)?;
        let now = self.clock.now();
        let mut map = self
            .executions
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        map.entry(lease.execution_id)
            .or_default()
            .save(key, value, lease.attempt_id, 1, now)
    }

    async fn list(&self, execution_id: Uuid) -> Result<Vec<StepRecord>, ExecutionError> {
        let map = self
            .executions
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        Ok(map.get(&execution_id).map(|s| s.list()).unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_values_are_checked() {
        assert!(validate("fetch-pages", "[1,2]").is_ok());
        assert!(matches!(validate("", "1"), Err(StepError::InvalidKey(_))));
        assert!(matches!(
            validate(&"k".repeat(256), "1"),
            Err(StepError::InvalidKey(_))
        ));
        assert!(matches!(
            validate("a\nb", "1"),
            Err(StepError::InvalidKey(_))
        ));
        assert!(matches!(
            validate("k", "{not json"),
            Err(StepError::InvalidValue(_))
        ));
        let big = format!("\"{}\"", "x".repeat(MAX_STEP_BYTES));
        assert_eq!(
            validate("k", &big),
            Err(StepError::TooLarge {
                bytes: big.len() as u64,
                max: MAX_STEP_BYTES as u64
            })
        );
    }

    #[test]
    fn caps_count_new_keys_and_replaced_bytes() {
        let full = StepTotals {
            steps: MAX_STEPS_PER_EXECUTION,
            bytes: 10,
            existing: None,
        };
        assert_eq!(
            full.admit(1),
            Err(StepError::TooManySteps {
                max: MAX_STEPS_PER_EXECUTION
            })
        );
        // Overwriting a recorded key is not a new step.
        let overwrite = StepTotals {
            existing: Some(5),
            ..full
        };
        assert!(overwrite.admit(1).is_ok());
        let heavy = StepTotals {
            steps: 1,
            bytes: MAX_STEP_BYTES_PER_EXECUTION - 10,
            existing: Some(10),
        };
        assert!(
            heavy.admit(20).is_ok(),
            "the replaced value's bytes are freed"
        );
        assert_eq!(
            heavy.admit(21),
            Err(StepError::ExecutionBudget {
                bytes: MAX_STEP_BYTES_PER_EXECUTION + 1,
                max: MAX_STEP_BYTES_PER_EXECUTION
            })
        );
    }
}
