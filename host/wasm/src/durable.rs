//! `onestep:handler@0.3.0`'s `durable` interface (docs/steps.md): `step-load` and `step-save`
//! over the execution store's [`StepStore`] port, scoped to the attempt's execution and fenced
//! by its lease. This crate knows no SQL: the worker hands each attempt a [`DurableSteps`]
//! (the port plus the attempt's [`LeaseRef`]) in its [`InvocationContext`](crate::InvocationContext).
//!
//! A save refused as [`StepError::Fenced`] (another attempt holds the execution, the lease ran
//! out or the execution finished) is answered `fenced` and the attempt's cancel handle fires:
//! the guest may return at once, and is stopped after the sandbox's `cancel_grace` if it does
//! not. Whatever it returns then is refused by the store, which fences the completion too.
//!
//! `sleep` and `sleep-until` (docs/steps.md#sleep) record the wake time as the step of their key
//! (a fenced save) and then trap: the guest stops at once, and the runtime reports
//! [`Outcome::Parked`](crate::Outcome::Parked), which the worker turns into the park of the
//! attempt. A later attempt finds the recorded wake time passed and the call returns `ok`.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use onestep_core::execution::LeaseRef;
use onestep_core::park;
use onestep_core::steps::{StepError, StepStore};
use onestep_core::time::SharedClock;
use wasmtime::component::{HasSelf, Linker};

use crate::bindings::v3;
use crate::bindings::v3::onestep::handler::durable::StepError as WitStepError;
use crate::error::Error;
use crate::state::State;

/// The steps of one attempt: the store and the attempt's lease.
#[derive(Clone)]
pub struct DurableSteps {
    /// Where the steps are kept (the execution store's port, or memory for `task run`).
    pub store: Arc<dyn StepStore>,
    /// The attempt's execution, attempt id and lease token: saves are fenced by it.
    pub lease: LeaseRef,
    /// "Now" of a sleep's wake time (the worker's clock, the store's in tests).
    pub clock: SharedClock,
}

impl std::fmt::Debug for DurableSteps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DurableSteps")
            .field("lease", &self.lease)
            .finish_non_exhaustive()
    }
}

/// Equal when of the same lease over the same store.
impl PartialEq for DurableSteps {
    fn eq(&self, other: &Self) -> bool {
        self.lease == other.lease && Arc::ptr_eq(&self.store, &other.store)
    }
}

impl Eq for DurableSteps {}

/// What one attempt's step calls did (reported in [`crate::Report::steps`]; the worker's
/// `onestep_step_saves_total`, `onestep_step_loads_total` and `onestep_step_saved_bytes_total`,
/// docs/observability.md#worker-metrics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StepCounts {
    /// Saves written.
    pub saved: u64,
    /// Bytes of the values those saves wrote.
    pub saved_bytes: u64,
    /// Saves answered `fenced` (the attempt no longer held the lease and was stopped).
    pub fenced: u64,
    /// Saves refused by a cap or as invalid (`invalid-key`, `invalid-value`, `too-large`,
    /// `too-many-steps`, `execution-budget`).
    pub save_refused: u64,
    /// Saves answered `unavailable` (a store failure, or a host keeping no steps).
    pub save_errors: u64,
    /// Loads that found a value.
    pub loaded: u64,
    /// Loads that found none.
    pub missed: u64,
    /// Loads refused for an invalid key.
    pub load_refused: u64,
    /// Loads answered `unavailable`.
    pub load_errors: u64,
}

impl StepCounts {
    /// Whether no step call was made.
    pub fn is_empty(&self) -> bool {
        *self == StepCounts::default()
    }
}

/// Adds the `0.3.0` versions of `types`, `host` and `durable` to the linker.
pub(crate) fn add_to_linker(linker: &mut Linker<State>) -> Result<(), Error> {
    v3::onestep::handler::types::add_to_linker::<State, HasSelf<State>>(linker, |s| s)
        .map_err(|e| Error::Engine(format!("host linker (0.3.0 types): {e:#}")))?;
    v3::onestep::handler::host::add_to_linker::<State, HasSelf<State>>(linker, |s| s)
        .map_err(|e| Error::Engine(format!("host linker (0.3.0 host): {e:#}")))?;
    v3::onestep::handler::durable::add_to_linker::<State, HasSelf<State>>(linker, |s| s)
        .map_err(|e| Error::Engine(format!("host linker (0.3.0 durable): {e:#}")))?;
    Ok(())
}

impl v3::onestep::handler::types::Host for State {}

impl v3::onestep::handler::host::Host for State {
    fn log(&mut self, level: v3::Level, message: String) {
        use crate::bindings::Level;
        let level = match level {
            v3::Level::Trace => Level::Trace,
            v3::Level::Debug => Level::Debug,
            v3::Level::Info => Level::Info,
            v3::Level::Warn => Level::Warn,
            v3::Level::Error => Level::Error,
        };
        crate::bindings::onestep::handler::host::Host::log(self, level, message)
    }

    fn cancel_requested(&mut self) -> bool {
        crate::bindings::onestep::handler::host::Host::cancel_requested(self)
    }

    fn progress(&mut self, done: u64, total: u64, note: String) {
        crate::bindings::onestep::handler::host::Host::progress(self, done, total, note)
    }
}

/// What a guest sees of a refused step call.
fn wit_error(e: StepError) -> WitStepError {
    match e {
        StepError::InvalidKey(m) => WitStepError::InvalidKey(m),
        StepError::InvalidValue(m) => WitStepError::InvalidValue(m),
        StepError::TooLarge { bytes, .. } => WitStepError::TooLarge(bytes),
        StepError::TooManySteps { .. } => WitStepError::TooManySteps,
        StepError::ExecutionBudget { bytes, .. } => WitStepError::ExecutionBudget(bytes),
        StepError::Fenced => WitStepError::Fenced,
        StepError::Store(e) => WitStepError::Unavailable(e.to_string()),
    }
}

/// The wake time a sleep asks for.
#[derive(Debug, Clone, Copy)]
enum Wake {
    /// `sleep(key, duration-ms)`.
    After(u64),
    /// `sleep-until(key, unix-ms)`.
    At(u64),
}

/// The trap that ends a parked attempt (docs/steps.md#sleep): the guest does not run on; the
/// runtime reports [`Outcome::Parked`](crate::Outcome::Parked) from the store's `parked`.
#[derive(Debug, thiserror::Error)]
#[error("the handler sleeps until {}: the attempt parks", park::rfc3339(*.0))]
struct Parked(DateTime<Utc>);

/// The answer of a host that was given no step store (e.g. a component run outside a worker).
const NO_STORE: &str = "this host keeps no steps for the attempt (no execution store)";

impl v3::onestep::handler::durable::Host for State {
    async fn step_load(&mut self, key: String) -> Result<Option<String>, WitStepError> {
        let Some(steps) = self.steps.clone() else {
            self.step_counts.load_errors += 1;
            return Err(WitStepError::Unavailable(NO_STORE.into()));
        };
        if let Err(e) = onestep_core::steps::validate_key(&key) {
            self.step_counts.load_refused += 1;
            return Err(wit_error(e));
        }
        match steps.store.load(steps.lease.execution_id, &key).await {
            Ok(v) => {
                match &v {
                    Some(_) => self.step_counts.loaded += 1,
                    None => self.step_counts.missed += 1,
                }
                self.step_event("step loaded", &key, v.as_ref().map(String::len));
                Ok(v)
            }
            Err(e) => {
                self.step_counts.load_errors += 1;
                Err(wit_error(StepError::Store(e)))
            }
        }
    }

    async fn step_save(&mut self, key: String, value: String) -> Result<(), WitStepError> {
        let Some(steps) = self.steps.clone() else {
            self.step_counts.save_errors += 1;
            return Err(WitStepError::Unavailable(NO_STORE.into()));
        };
        self.save_step(&steps, &key, &value).await
    }

    async fn sleep(
        &mut self,
        key: String,
        duration_ms: u64,
    ) -> wasmtime::Result<Result<(), WitStepError>> {
        self.sleep_keyed(key, Wake::After(duration_ms)).await
    }

    async fn sleep_until(
        &mut self,
        key: String,
        unix_ms: u64,
    ) -> wasmtime::Result<Result<(), WitStepError>> {
        self.sleep_keyed(key, Wake::At(unix_ms)).await
    }
}

impl State {
    /// `sleep` and `sleep-until` (docs/steps.md#sleep): `Ok(Ok(()))` when the sleep is over
    /// (its recorded wake time passed, or the asked one is not in the future), `Ok(Err(_))` for
    /// a refused call (nothing parked), and the trap [`Parked`] once the wake time is recorded
    /// as the step `key`, which ends the attempt.
    async fn sleep_keyed(
        &mut self,
        key: String,
        wake: Wake,
    ) -> wasmtime::Result<Result<(), WitStepError>> {
        let Some(steps) = self.steps.clone() else {
            return Ok(Err(WitStepError::Unavailable(NO_STORE.into())));
        };
        if let Err(e) = onestep_core::steps::validate_key(&key) {
            return Ok(Err(wit_error(e)));
        }
        let now = steps.clock.now();
        let recorded = match steps.store.load(steps.lease.execution_id, &key).await {
            Ok(v) => v,
            Err(e) => return Ok(Err(wit_error(StepError::Store(e)))),
        };
        let wake_at = match recorded {
            // A recorded sleep wins over the arguments.
            Some(text) => match park::parse_sleep_record(&text) {
                Ok(at) if at <= now => {
                    self.wakes = self.wakes.saturating_add(1);
                    self.step_event("sleep over", &key, None);
                    return Ok(Ok(()));
                }
                Ok(at) => at,
                Err(e) => return Ok(Err(WitStepError::InvalidWake(e.0))),
            },
            None => {
                let asked = match wake {
                    Wake::After(ms) => park::wake_after(now, ms),
                    Wake::At(ms) => park::wake_at_unix_ms(ms, now),
                };
                let at = match asked {
                    Ok(at) => at,
                    Err(e) => return Ok(Err(WitStepError::InvalidWake(e.0))),
                };
                if at <= now {
                    return Ok(Ok(()));
                }
                // Recorded before the park: should the attempt stop between the two, the next
                // one parks again until the same instant.
                if let Err(e) = self.save_step(&steps, &key, &park::sleep_record(at)).await {
                    return Ok(Err(e));
                }
                at
            }
        };
        tracing::info!(
            execution_id = %self.ids.execution_id,
            attempt_id = %self.ids.attempt_id,
            task = %self.ids.task_name,
            step = %key,
            wake_at = %park::rfc3339(wake_at),
            "handler sleeps: the attempt parks"
        );
        self.parked = Some(wake_at);
        Err(wasmtime::Error::new(Parked(wake_at)))
    }

    /// A fenced save of the attempt; a fence refusal stops the attempt (as `step-save`'s).
    async fn save_step(
        &mut self,
        steps: &DurableSteps,
        key: &str,
        value: &str,
    ) -> Result<(), WitStepError> {
        match steps.store.save(&steps.lease, key, value).await {
            Ok(()) => {
                self.step_counts.saved += 1;
                self.step_counts.saved_bytes += value.len() as u64;
                self.step_event("step saved", key, Some(value.len()));
                Ok(())
            }
            Err(StepError::Fenced) => {
                self.step_counts.fenced += 1;
                tracing::warn!(
                    execution_id = %self.ids.execution_id,
                    attempt_id = %self.ids.attempt_id,
                    task = %self.ids.task_name,
                    step = %key,
                    "step save fenced: the attempt no longer holds the execution's lease; \
                     stopping it"
                );
                self.cancel.cancel();
                Err(WitStepError::Fenced)
            }
            Err(e @ StepError::Store(_)) => {
                self.step_counts.save_errors += 1;
                Err(wit_error(e))
            }
            Err(e) => {
                self.step_counts.save_refused += 1;
                Err(wit_error(e))
            }
        }
    }

    fn step_event(&self, what: &'static str, key: &str, bytes: Option<usize>) {
        tracing::debug!(
            execution_id = %self.ids.execution_id,
            attempt_id = %self.ids.attempt_id,
            task = %self.ids.task_name,
            step = %key,
            bytes,
            "{what}"
        );
    }
}
