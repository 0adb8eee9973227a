//! `onestep-durable`: durable steps (docs/steps.md) for Rust handlers of
//! `onestep:handler@0.3.0`, so that a step reads
//! `let page = step("fetch-page-3", || fetch(3))?;`.
//!
//! The crate reaches the host through its own bindings of a world that imports
//! only `onestep:handler/durable@0.3.0`: the imports have the same names as
//! those of the handler's world (`handler` or `compute`), so the component
//! imports the interface once, whichever crate calls it. A handler only
//! converts this crate's [`Error`] into its own `HandlerError`:
//!
//! ```ignore
//! impl From<onestep_durable::Error> for HandlerError {
//!     fn from(e: onestep_durable::Error) -> Self {
//!         HandlerError { retryable: e.retryable, message: e.message, retry_after_ms: None }
//!     }
//! }
//! ```

mod bindings {
    wit_bindgen::generate!({
        inline: "
            package onestep:durable-guest;
            world durable-only {
                import onestep:handler/durable@0.3.0;
            }
        ",
        path: "../../wit/v0.3",
        world: "onestep:durable-guest/durable-only",
        generate_all,
    });
}

use bindings::onestep::handler::durable;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// The host's answer to a refused step call (WIT `step-error`).
pub use bindings::onestep::handler::durable::StepError;

/// A step call that failed, as the handler error it should become: a lost
/// lease (`fenced`) or an unreachable store (`unavailable`) is worth another
/// attempt; a refused key, value or wake time, or a recorded value that no
/// longer decodes, is not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    /// Whether another attempt may succeed.
    pub retryable: bool,
    /// `step '<key>' not saved: <step-error>` (or what did not decode).
    pub message: String,
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

impl Error {
    /// The error of a refused step call on `key`.
    pub fn refused(key: &str, e: StepError) -> Error {
        Error {
            retryable: matches!(e, StepError::Fenced | StepError::Unavailable(_)),
            message: format!("step '{key}' not saved: {e:?}"),
        }
    }

    fn fatal(message: String) -> Error {
        Error {
            retryable: false,
            message,
        }
    }
}

/// Runs `work` as the durable step `key`: when an earlier attempt of this
/// execution recorded the step, its value is returned and `work` does not
/// run; otherwise `work` runs and its value is recorded (as JSON) before it
/// is returned. At-least-once: `work` runs again if the attempt stops between
/// the work and the save.
pub fn step<T, E, F>(key: &str, work: F) -> Result<T, E>
where
    T: Serialize + DeserializeOwned,
    E: From<Error>,
    F: FnOnce() -> Result<T, E>,
{
    if let Some(value) = load(key)? {
        return Ok(value);
    }
    let value = work()?;
    save(key, &value)?;
    Ok(value)
}

/// The value an attempt of this execution recorded under `key`, if any.
pub fn load<T: DeserializeOwned>(key: &str) -> Result<Option<T>, Error> {
    match durable::step_load(key).map_err(|e| Error::refused(key, e))? {
        None => Ok(None),
        Some(text) => serde_json::from_str(&text).map(Some).map_err(|e| {
            Error::fatal(format!("step '{key}': recorded value does not decode: {e}"))
        }),
    }
}

/// Records `value` under `key` (replacing an earlier value of the key).
pub fn save<T: Serialize>(key: &str, value: &T) -> Result<(), Error> {
    let text = serde_json::to_string(value)
        .map_err(|e| Error::fatal(format!("step '{key}': value does not encode: {e}")))?;
    durable::step_save(key, &text).map_err(|e| Error::refused(key, e))
}

/// Sleeps `ms` milliseconds under the step key `key` (docs/steps.md#sleep):
/// the first call records the wake time and does not return (the attempt
/// parks); at the wake time the execution runs again from the top and the
/// same call returns `Ok` at once.
pub fn sleep(key: &str, ms: u64) -> Result<(), Error> {
    durable::sleep(key, ms).map_err(|e| Error::refused(key, e))
}

/// Sleeps until `unix_ms` milliseconds after the Unix epoch, like [`sleep`].
pub fn sleep_until(key: &str, unix_ms: u64) -> Result<(), Error> {
    durable::sleep_until(key, unix_ms).map_err(|e| Error::refused(key, e))
}
