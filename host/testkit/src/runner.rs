//! [`FakeRunner`], a scripted [`TaskRunner`] for worker tests: each call follows the next step of
//! its execution's script (or of the shared script, or the default), can block until a test
//! releases it or the worker cancels it, and is recorded (invocation, whether the cancellation
//! token fired, outcome) so tests can wait on calls instead of sleeping.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;
use onestep_core::retry::FailureKind;
use onestep_core::runner::{Invocation, RunFailure, RunOutcome, TaskRunner};
use serde_json::Value;
use tokio::sync::{oneshot, watch};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// What one call does.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Returns this outcome at once.
    Return(RunOutcome),
    /// Waits until [`FakeRunner::release`] (returns the released outcome) or until the
    /// cancellation token fires (returns `on_cancel`, e.g. [`RunOutcome::Cancelled`] or a
    /// handler error of a cooperative handler).
    Block {
        /// The outcome when the token fires first.
        on_cancel: RunOutcome,
    },
}

impl Step {
    /// Succeeds with `value`.
    pub fn succeed(value: Value) -> Step {
        Step::Return(RunOutcome::Succeeded(value))
    }

    /// Fails with a handler error of `kind`; `retryable = false` is a fatal error.
    pub fn fail(kind: FailureKind, retryable: bool) -> Step {
        Step::Return(RunOutcome::Failed(failure(kind, retryable)))
    }

    /// Blocks; returns [`RunOutcome::Cancelled`] when cancelled.
    pub fn block() -> Step {
        Step::Block {
            on_cancel: RunOutcome::Cancelled,
        }
    }
}

/// A handler failure of `kind` (`HandlerError`, or `TimeoutError` for timeouts).
pub fn failure(kind: FailureKind, retryable: bool) -> RunFailure {
    RunFailure {
        kind,
        exception_type: match kind {
            FailureKind::Timeout => "TimeoutError".into(),
            _ => "HandlerError".into(),
        },
        retryable,
        retry_after_s: None,
        message: "scripted failure".into(),
    }
}

/// One recorded call.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    /// What the worker passed.
    pub invocation: Invocation,
    /// Whether the cancellation token had fired when the call returned.
    pub cancelled: bool,
    /// The outcome returned; `None` while the call runs.
    pub outcome: Option<RunOutcome>,
}

#[derive(Debug, Default)]
struct State {
    calls: Vec<Call>,
    per_execution: HashMap<Uuid, VecDeque<Step>>,
    shared: VecDeque<Step>,
    default: Option<Step>,
    blocked: HashMap<usize, oneshot::Sender<RunOutcome>>,
}

/// The scripted runner (see the module docs). By default every call succeeds with `null`.
#[derive(Debug)]
pub struct FakeRunner {
    state: Mutex<State>,
    changes: watch::Sender<u64>,
}

impl Default for FakeRunner {
    fn default() -> Self {
        FakeRunner::new()
    }
}

impl FakeRunner {
    /// A runner whose calls succeed with `null` until scripted otherwise.
    pub fn new() -> Self {
        FakeRunner {
            state: Mutex::new(State::default()),
            changes: watch::Sender::new(0),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn changed(&self) {
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// The step of calls that match no script (instead of succeeding with `null`).
    pub fn set_default(&self, step: Step) {
        self.state().default = Some(step);
    }

    /// Appends steps for the next calls of any execution without a script of its own.
    pub fn push(&self, steps: impl IntoIterator<Item = Step>) {
        self.state().shared.extend(steps);
    }

    /// Appends steps for the next calls (attempts) of `execution_id`.
    pub fn script(&self, execution_id: Uuid, steps: impl IntoIterator<Item = Step>) {
        self.state()
            .per_execution
            .entry(execution_id)
            .or_default()
            .extend(steps);
    }

    /// Releases the running blocked call of `execution_id` with `outcome`; false when none blocks.
    pub fn release(&self, execution_id: Uuid, outcome: RunOutcome) -> bool {
        let sender = {
            let mut s = self.state();
            let index = s
                .blocked
                .keys()
                .copied()
                .find(|i| s.calls[*i].invocation.execution_id == execution_id);
            index.and_then(|i| s.blocked.remove(&i))
        };
        sender.is_some_and(|tx| tx.send(outcome).is_ok())
    }

    /// Releases every blocked call with `outcome`; returns how many.
    pub fn release_all(&self, outcome: RunOutcome) -> usize {
        let senders: Vec<_> = self.state().blocked.drain().map(|(_, tx)| tx).collect();
        senders
            .into_iter()
            .filter(|tx| !tx.is_closed())
            .map(|tx| tx.send(outcome.clone()).is_ok())
            .filter(|sent| *sent)
            .count()
    }

    /// Every call so far, in call order.
    pub fn calls(&self) -> Vec<Call> {
        self.state().calls.clone()
    }

    /// The calls of `execution_id`, in attempt order.
    pub fn calls_for(&self, execution_id: Uuid) -> Vec<Call> {
        self.state()
            .calls
            .iter()
            .filter(|c| c.invocation.execution_id == execution_id)
            .cloned()
            .collect()
    }

    /// Number of calls so far.
    pub fn call_count(&self) -> usize {
        self.state().calls.len()
    }

    /// Calls currently blocked.
    pub fn blocked(&self) -> usize {
        self.state().blocked.len()
    }

    /// Waits until `cond` holds over the recorded calls, re-checked after every call event.
    pub async fn wait_until<F: FnMut(&[Call]) -> bool>(&self, mut cond: F) {
        let mut rx = self.changes.subscribe();
        loop {
            rx.borrow_and_update();
            if cond(&self.state().calls) {
                return;
            }
            if rx.changed().await.is_err() {
                return;
            }
        }
    }

    /// Waits until at least `n` calls have started.
    pub async fn wait_for_calls(&self, n: usize) {
        self.wait_until(|c| c.len() >= n).await;
    }

    /// Waits until at least `n` calls have returned.
    pub async fn wait_for_finished(&self, n: usize) {
        self.wait_until(|c| c.iter().filter(|c| c.outcome.is_some()).count() >= n)
            .await;
    }
}

#[async_trait]
impl TaskRunner for FakeRunner {
    async fn run(&self, invocation: Invocation, cancel: CancellationToken) -> RunOutcome {
        let (index, step, released) = {
            let mut s = self.state();
            let id = invocation.execution_id;
            let step = s
                .per_execution
                .get_mut(&id)
                .and_then(VecDeque::pop_front)
                .or_else(|| s.shared.pop_front())
                .or_else(|| s.default.clone())
                .unwrap_or(Step::Return(RunOutcome::Succeeded(Value::Null)));
            let index = s.calls.len();
            s.calls.push(Call {
                invocation,
                cancelled: false,
                outcome: None,
            });
            let released = match step {
                Step::Block { .. } => {
                    let (tx, rx) = oneshot::channel();
                    s.blocked.insert(index, tx);
                    Some(rx)
                }
                Step::Return(_) => None,
            };
            (index, step, released)
        };
        self.changed();
        let outcome = match (step, released) {
            (Step::Block { on_cancel }, Some(rx)) => {
                tokio::select! {
                    r = rx => r.unwrap_or(on_cancel),
                    _ = cancel.cancelled() => on_cancel,
                }
            }
            (Step::Return(outcome), _) | (Step::Block { on_cancel: outcome }, None) => outcome,
        };
        {
            let mut s = self.state();
            s.blocked.remove(&index);
            if let Some(call) = s.calls.get_mut(index) {
                call.cancelled = cancel.is_cancelled();
                call.outcome = Some(outcome.clone());
            }
        }
        self.changed();
        outcome
    }
}
