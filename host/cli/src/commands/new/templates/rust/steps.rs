//! Durable steps (onestep's docs/steps.md) over the `onestep:handler/durable@0.3.0` import:
//! `step(key, || work())` returns the value an earlier attempt of this execution recorded under
//! `key`, or runs `work`, records its value (as JSON) and returns it. A later attempt (after a
//! crash, a lost lease or a retryable error) so skips the work an earlier one finished:
//!
//! ```ignore
//! let pages: Vec<String> = step("fetch-pages", || fetch())?;
//! let reply: Value = step(&format!("model-{turn}"), || ask(&messages))?;
//! ```
//!
//! Keys must name the same unit of work in every attempt: derive them from the position in the
//! work (`model-{turn}`, `page-{n}`), never from the clock or randomness. A step is
//! at-least-once: its work runs again when the attempt stops between the work and the save.
//! Values are JSON, at most 1 MiB each and 16 MiB per execution; 1,000 steps per execution.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::HandlerError;
use crate::onestep::handler::durable::{StepError, step_load, step_save};

/// Runs `work` as the durable step `key` (see the module's documentation). An error of `work` is
/// returned as it is and records nothing; a refused step call is [`step_error`]'s.
pub fn step<T, F>(key: &str, work: F) -> Result<T, HandlerError>
where
    T: Serialize + DeserializeOwned,
    F: FnOnce() -> Result<T, HandlerError>,
{
    if let Some(text) = step_load(key).map_err(|e| step_error(key, "loaded", e))? {
        return serde_json::from_str(&text).map_err(|e| HandlerError {
            retryable: false,
            message: format!("step '{key}': its recorded value does not decode: {e}"),
            retry_after_ms: None,
        });
    }
    let value = work()?;
    let text = serde_json::to_string(&value).map_err(|e| HandlerError {
        retryable: false,
        message: format!("step '{key}': its value does not encode as JSON: {e}"),
        retry_after_ms: None,
    })?;
    step_save(key, &text).map_err(|e| step_error(key, "saved", e))?;
    Ok(value)
}

/// A refused step call (`what`: "loaded" or "saved") as the handler's error: a lost lease
/// (`fenced`) or an unreachable store is worth another attempt, which resumes from the steps
/// recorded so far; a refused key or value, or a cap reached, would fail the same way again.
pub fn step_error(key: &str, what: &str, e: StepError) -> HandlerError {
    let (retryable, why) = match e {
        StepError::Fenced => (
            true,
            "this attempt no longer holds the execution (another attempt took over, or its lease \
             ran out)"
                .to_owned(),
        ),
        StepError::Unavailable(m) => (true, format!("the step store is unavailable: {m}")),
        StepError::InvalidKey(m) => (
            false,
            format!("invalid key ({m}): 1 to 255 bytes of UTF-8, no control characters"),
        ),
        StepError::InvalidValue(m) => (false, format!("the value is not one JSON document: {m}")),
        StepError::TooLarge(bytes) => (
            false,
            format!("the value is {bytes} bytes, over the cap of 1 MiB per step"),
        ),
        StepError::TooManySteps => (
            false,
            "the execution has the most steps it may record (the cap: 1,000 per execution)"
                .to_owned(),
        ),
        StepError::ExecutionBudget(bytes) => (
            false,
            format!(
                "the execution's steps would hold {bytes} bytes, over the cap of 16 MiB per execution"
            ),
        ),
        StepError::InvalidWake(m) => (false, format!("invalid wake time: {m}")),
    };
    HandlerError {
        retryable,
        message: format!("step '{key}' not {what}: {why}"),
        retry_after_ms: None,
    }
}
