//! What one completion writes, derived from the execution row it completes: cancel wins over
//! success, the result is encoded and size-checked before any write, the effective status,
//! error and `available_at` follow, and an identical replay of a terminal completion is
//! recognised. Every backend (the SQL ones and the in-memory reference store) computes its
//! fenced write from this one plan (docs/semantics.md#completion).

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::canonical::to_canonical_string;
use crate::codec::{ValueField, encode_storable};
use crate::error::ExecutionError;
use crate::error_object::ErrorObject;
use crate::execution::{Completion, Execution};
use crate::status::{CompletionStatus, ExecutionStatus};
use crate::time::add_seconds;

/// The stored form of a handler's result: encoded, storable on every backend
/// (docs/semantics.md#storable-values) and within `max_result_bytes`. The worker checks a result
/// with this before it completes the attempt, so a result no backend could store fails the
/// attempt as a handler failure instead of failing the write.
///
/// Errors: `ExecutionError::Encoding` with `cannot encode execution result: …`, `cannot store
/// execution result: …` or `execution result exceeds the configured limit`.
pub fn encode_result(result: &Value, max_result_bytes: usize) -> Result<Value, ExecutionError> {
    let encoded = encode_storable(result, ValueField::Result)?;
    if crate::canonical::canonical_len(&encoded) > max_result_bytes {
        return Err(ExecutionError::Encoding(
            "execution result exceeds the configured limit".into(),
        ));
    }
    Ok(encoded)
}

/// The values a completion writes onto `current` (steps 2–4 of docs/semantics.md#completion).
#[derive(Debug, Clone, PartialEq)]
pub struct CompletionPlan {
    /// A success arrived while cancellation was requested: the execution ends `cancelled`.
    pub cancel_won: bool,
    /// The result the worker sent (`null` when none); what a replay is compared against.
    pub requested_result: Value,
    /// The encoded result to store (`Some` only for a success that was not overruled).
    pub encoded_result: Option<Value>,
    /// The status the execution moves to.
    pub effective: ExecutionStatus,
    /// The error object to store (`None` when cancel won).
    pub error: Option<ErrorObject>,
    /// Whether the execution goes back to `retrying` (no `finished_at`).
    pub retrying: bool,
    /// When the execution may be claimed again: `now + delay_s` for a retry, else unchanged.
    pub available_at: DateTime<Utc>,
}

impl CompletionPlan {
    /// Plans `completion` of the row `current` at `now`. Fails before any write when the
    /// result cannot be encoded or its canonical form is over `max_result_bytes`.
    pub fn new(
        current: &Execution,
        completion: &Completion,
        now: DateTime<Utc>,
        max_result_bytes: usize,
    ) -> Result<CompletionPlan, ExecutionError> {
        let cancel_won = completion.status == CompletionStatus::Succeeded
            && current.status == ExecutionStatus::CancelRequested;
        let requested_result = completion.result.clone().unwrap_or(Value::Null);
        let encoded_result = if completion.status == CompletionStatus::Succeeded && !cancel_won {
            Some(encode_result(&requested_result, max_result_bytes)?)
        } else {
            None
        };
        let effective = if cancel_won {
            ExecutionStatus::Cancelled
        } else {
            completion.status.execution_status()
        };
        let retrying = effective == ExecutionStatus::Retrying;
        let available_at = if retrying {
            add_seconds(now, "delay_s", completion.delay_s.unwrap_or(0.0))?
        } else {
            current.available_at
        };
        Ok(CompletionPlan {
            cancel_won,
            requested_result,
            encoded_result,
            effective,
            error: if cancel_won {
                None
            } else {
                completion.error.clone()
            },
            retrying,
            available_at,
        })
    }

    /// Whether `current` (a row the fence refused) already holds exactly this completion: a
    /// terminal status equal to the effective one, the same result and the same error. Such a
    /// replay is accepted and returns the row unchanged.
    pub fn is_replay_of(&self, current: &Execution) -> bool {
        current.status == self.effective
            && !self.retrying
            && !self.cancel_won
            && current.status.is_terminal()
            && to_canonical_string(current.result.as_ref().unwrap_or(&Value::Null))
                == to_canonical_string(if self.encoded_result.is_some() {
                    &self.requested_result
                } else {
                    &Value::Null
                })
            && current.error == self.error
    }
}
