//! The in-memory reference store: [`MemoryStore`] implements both core storage ports
//! ([`ExecutionStore`](onestep_core::ports::ExecutionStore) and
//! [`LeaseStore`](onestep_core::ports::LeaseStore)) and the suite's [`Probe`](crate::suite::Probe)
//! with the same contract as the SQL backends, so the conformance suite has a reference
//! implementation that runs in milliseconds and worker tests need no database.
//!
//! What it owns: the rows (executions with their hidden lease columns and attempt rows), the
//! idempotency index, and test controls — an operation log, injected failures
//! ([`MemoryStore::fail_next`]), gates that hold an operation until released
//! ([`MemoryStore::pause`]) and a change signal to wait on ([`MemoryStore::wait_until`]).
//!
//! Semantics (the same rules as the MySQL backend; see `docs/semantics.md`): every operation
//! reads "now" once from the injected clock and runs as one atomic step under a lock, checking
//! every fence before it changes anything, so a refused write changes nothing. State rules come
//! from core (`ExecutionStatus`, `CompletionStatus::allowed_sources`, `attempt_status_for`),
//! values go through the core codec, and list pages use the core cursor.

mod callbacks;
mod client;
mod components;
mod deployments;
mod factory;
mod lease;
mod steps;

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard};

use chrono::{DateTime, Utc};
use onestep_core::codec::decode_value;
use onestep_core::time::SharedClock;
use onestep_core::{Execution, ExecutionError, ExecutionStatus, Limits};
use serde_json::Value;
use tokio::sync::watch;
use uuid::Uuid;

use crate::suite::{AttemptRow, LeaseColumns};

pub use components::MemoryComponents;
pub use deployments::MemoryDeployments;
pub use factory::MemoryFactory;

/// Default bound of each maintenance step per claim (the SQL backends' default).
pub const DEFAULT_RECLAIM_BATCH_SIZE: usize = 100;

/// A storage operation, for the log, injected failures and gates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// `ExecutionStore::submit`.
    Submit,
    /// `ExecutionStore::submit_many`.
    SubmitMany,
    /// `ExecutionStore::get`.
    Get,
    /// `ExecutionStore::list`.
    List,
    /// `ExecutionStore::cancel`.
    Cancel,
    /// `LeaseStore::claim`.
    Claim,
    /// `LeaseStore::heartbeat`.
    Heartbeat,
    /// `LeaseStore::heartbeat_many` (the worker's heartbeat ticker; one call is one fenced
    /// statement set of the SQL backends for up to 1000 leases).
    HeartbeatMany,
    /// `LeaseStore::cancel_requested` (the cancel poll; one call is one statement of the SQL
    /// backends for up to 1000 leases).
    CancelPoll,
    /// `LeaseStore::complete`.
    Complete,
    /// `LeaseStore::complete_many`.
    CompleteMany,
    /// `LeaseStore::release`.
    Release,
    /// `LeaseStore::park`.
    Park,
}

/// One entry of the operation log.
#[derive(Debug, Clone, PartialEq)]
pub struct OpRecord {
    /// The operation.
    pub op: Op,
    /// Items it carried: the batch length for `submit_many`/`complete_many`/`heartbeat_many`,
    /// the number of leases a claim returned, the number of leases a cancel poll asked about,
    /// otherwise 1 (an injected failure is always 1).
    pub items: usize,
    /// Whether it returned `Ok` (an injected failure is `false`).
    pub ok: bool,
    /// Items of a batch (`submit_many`, `complete_many`, `heartbeat_many`) answered with their
    /// own error, e.g. a stale lease; 0 for every other operation.
    pub refused: usize,
    /// The store clock's "now" when it ran.
    pub at: DateTime<Utc>,
}

/// One execution row with the columns the domain object hides, and its attempt rows.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    pub(crate) execution: Execution,
    pub(crate) digest: Option<String>,
    pub(crate) lease_token: Option<Uuid>,
    pub(crate) lease_expires_at: Option<DateTime<Utc>>,
    pub(crate) worker_id: Option<String>,
    pub(crate) cancel_reason: Option<String>,
    pub(crate) updated_at: DateTime<Utc>,
    /// By attempt number.
    pub(crate) attempts: Vec<AttemptRow>,
}

impl Row {
    /// Whether the lease fence holds: same token and the lease has not run out at `now`.
    pub(crate) fn lease_live(&self, token: Uuid, now: DateTime<Utc>) -> bool {
        self.lease_token == Some(token) && self.lease_expires_at.is_some_and(|x| x > now)
    }

    /// Index of the running attempt `attempt_id` issued with `token`.
    pub(crate) fn running_attempt(&self, attempt_id: Uuid, token: Uuid) -> Option<usize> {
        self.attempts.iter().position(|a| {
            a.id == attempt_id
                && a.lease_token == token
                && a.status == onestep_core::AttemptStatus::Running
        })
    }

    /// Drops the lease columns (every transition out of a leased status does).
    pub(crate) fn clear_lease(&mut self) {
        self.lease_token = None;
        self.lease_expires_at = None;
        self.worker_id = None;
    }

    /// A retry whose latest attempt lost its lease, or a `queued` execution whose latest
    /// attempt parked (docs/steps.md#sleep): started, waiting to go on, never expired by
    /// maintenance.
    pub(crate) fn is_lease_lost_retry(&self) -> bool {
        let latest = |status| {
            self.attempts
                .iter()
                .any(|a| a.attempt_no == self.execution.attempts && a.status == status)
        };
        match self.execution.status {
            ExecutionStatus::Retrying => latest(onestep_core::AttemptStatus::LeaseLost),
            ExecutionStatus::Queued => latest(onestep_core::AttemptStatus::Parked),
            _ => false,
        }
    }
}

#[derive(Debug, Default)]
pub(crate) struct State {
    pub(crate) rows: HashMap<Uuid, Row>,
    /// `(namespace, task_name, idempotency_key)` → execution id.
    pub(crate) keys: HashMap<(String, String, String), Uuid>,
    /// The fair claim's passes: `(task_name, namespace, fairness key)` → pass, for keys with
    /// pending work (docs/semantics.md#fair-claim).
    pub(crate) passes: HashMap<(String, String, String), i64>,
    /// Completion webhooks by execution id (docs/semantics.md#completion-webhooks).
    pub(crate) callbacks: HashMap<Uuid, callbacks::MemCallback>,
    /// Recorded steps by execution id (docs/steps.md).
    pub(crate) steps: HashMap<Uuid, onestep_core::steps::MemoryExecutionSteps>,
}

#[derive(Debug, Default)]
struct Controls {
    log: Vec<OpRecord>,
    failures: HashMap<Op, VecDeque<ExecutionError>>,
    paused: HashMap<Op, bool>,
    waiting: HashMap<Op, usize>,
}

/// The in-memory store (see the module docs). Cheap to share behind an `Arc`.
#[derive(Debug)]
pub struct MemoryStore {
    clock: SharedClock,
    limits: Limits,
    reclaim_batch_size: usize,
    state: Mutex<State>,
    controls: Mutex<Controls>,
    changes: watch::Sender<u64>,
    components: std::sync::Arc<MemoryComponents>,
    deployments: std::sync::Arc<MemoryDeployments>,
}

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// `cannot decode execution <id>: <reason>`, as the SQL backends word an undecodable row.
pub(crate) fn decoded(id: Uuid, v: &Value) -> Result<Value, ExecutionError> {
    decode_value(v).map_err(|reason| {
        ExecutionError::Encoding(format!("cannot decode execution {id}: {reason}"))
    })
}

impl MemoryStore {
    /// An empty store reading "now" from `clock`, with `limits` for results.
    pub fn new(clock: SharedClock, limits: Limits) -> Self {
        let components = std::sync::Arc::new(MemoryComponents::new(clock.clone()));
        MemoryStore {
            limits,
            reclaim_batch_size: DEFAULT_RECLAIM_BATCH_SIZE,
            state: Mutex::new(State::default()),
            controls: Mutex::new(Controls::default()),
            changes: watch::Sender::new(0),
            deployments: std::sync::Arc::new(MemoryDeployments::new(
                clock.clone(),
                components.clone(),
            )),
            components,
            clock,
        }
    }

    /// The component store beside this store, on the same clock.
    pub fn components(&self) -> std::sync::Arc<MemoryComponents> {
        self.components.clone()
    }

    /// The deployment store beside this store, on the same clock, over its components.
    pub fn deployments(&self) -> std::sync::Arc<MemoryDeployments> {
        self.deployments.clone()
    }

    /// Bounds each maintenance step (expiry, dead cancel requests, reclaim) to `n` rows per claim.
    pub fn with_reclaim_batch_size(mut self, n: usize) -> Self {
        self.reclaim_batch_size = n.max(1);
        self
    }

    pub(crate) fn now(&self) -> DateTime<Utc> {
        onestep_core::time::truncate_micros(self.clock.now())
    }

    pub(crate) fn limits(&self) -> &Limits {
        &self.limits
    }

    pub(crate) fn reclaim_batch_size(&self) -> usize {
        self.reclaim_batch_size
    }

    pub(crate) fn state(&self) -> MutexGuard<'_, State> {
        locked(&self.state)
    }

    fn changed(&self) {
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Runs before every operation: waits while `op` is paused, then pops an injected failure.
    pub(crate) async fn enter(&self, op: Op) -> Result<(), ExecutionError> {
        let mut rx = self.changes.subscribe();
        let mut counted = false;
        loop {
            rx.borrow_and_update();
            if !locked(&self.controls)
                .paused
                .get(&op)
                .copied()
                .unwrap_or(false)
            {
                break;
            }
            if !counted {
                *locked(&self.controls).waiting.entry(op).or_default() += 1;
                counted = true;
                self.changed();
            }
            if rx.changed().await.is_err() {
                break;
            }
        }
        if counted {
            if let Some(n) = locked(&self.controls).waiting.get_mut(&op) {
                *n = n.saturating_sub(1);
            }
            self.changed();
        }
        let failure = locked(&self.controls)
            .failures
            .get_mut(&op)
            .and_then(VecDeque::pop_front);
        match failure {
            Some(e) => {
                self.record(op, 1, false);
                Err(e)
            }
            None => Ok(()),
        }
    }

    /// Appends to the log and signals waiters.
    pub(crate) fn record(&self, op: Op, items: usize, ok: bool) {
        self.push_record(OpRecord {
            op,
            items,
            ok,
            refused: 0,
            at: self.now(),
        });
    }

    /// Logs a batch that returned `Ok` with `answers`, counting the refused items.
    pub(crate) fn record_batch<T>(&self, op: Op, answers: &[Result<T, ExecutionError>]) {
        self.push_record(OpRecord {
            op,
            items: answers.len(),
            ok: true,
            refused: answers.iter().filter(|a| a.is_err()).count(),
            at: self.now(),
        });
    }

    fn push_record(&self, record: OpRecord) {
        locked(&self.controls).log.push(record);
        self.changed();
    }

    /// Makes the next call of `op` fail with `error` before it does anything (queued: several
    /// calls fail in order).
    pub fn fail_next(&self, op: Op, error: ExecutionError) {
        locked(&self.controls)
            .failures
            .entry(op)
            .or_default()
            .push_back(error);
    }

    /// Makes the next `times` calls of `op` fail with `error`.
    pub fn fail_times(&self, op: Op, times: usize, error: ExecutionError) {
        let mut c = locked(&self.controls);
        let q = c.failures.entry(op).or_default();
        q.extend(std::iter::repeat_n(error, times));
    }

    /// Drops every injected failure not yet used.
    pub fn clear_failures(&self) {
        locked(&self.controls).failures.clear();
    }

    /// Holds every call of `op` at its start until [`MemoryStore::resume`].
    pub fn pause(&self, op: Op) {
        locked(&self.controls).paused.insert(op, true);
        self.changed();
    }

    /// Lets held and later calls of `op` run.
    pub fn resume(&self, op: Op) {
        locked(&self.controls).paused.insert(op, false);
        self.changed();
    }

    /// Calls of `op` currently held by [`MemoryStore::pause`].
    pub fn waiting(&self, op: Op) -> usize {
        locked(&self.controls)
            .waiting
            .get(&op)
            .copied()
            .unwrap_or(0)
    }

    /// The operation log, oldest first.
    pub fn log(&self) -> Vec<OpRecord> {
        locked(&self.controls).log.clone()
    }

    /// Number of calls of `op` so far (failed ones included).
    pub fn calls(&self, op: Op) -> usize {
        locked(&self.controls)
            .log
            .iter()
            .filter(|r| r.op == op)
            .count()
    }

    /// Waits until `cond` holds, re-checking after every change of the store (an operation, a
    /// gate). Never sleeps: with tokio's paused time the runtime advances timers while it waits.
    pub async fn wait_until<F: FnMut(&MemoryStore) -> bool>(&self, mut cond: F) {
        let mut rx = self.changes.subscribe();
        loop {
            rx.borrow_and_update();
            if cond(self) {
                return;
            }
            if rx.changed().await.is_err() {
                return;
            }
        }
    }

    /// Signals waiters without an operation (e.g. after a test changed something they watch).
    pub fn notify(&self) {
        self.changed();
    }

    /// The execution `id` in any namespace.
    pub fn execution(&self, id: Uuid) -> Option<Execution> {
        self.state().rows.get(&id).map(|r| r.execution.clone())
    }

    /// The status of execution `id`.
    pub fn status(&self, id: Uuid) -> Option<ExecutionStatus> {
        self.state().rows.get(&id).map(|r| r.execution.status)
    }

    /// The attempt rows of execution `id`, by attempt number.
    pub fn attempt_rows(&self, id: Uuid) -> Vec<AttemptRow> {
        self.state()
            .rows
            .get(&id)
            .map(|r| r.attempts.clone())
            .unwrap_or_default()
    }

    /// The hidden columns of execution `id`.
    pub fn lease_columns_of(&self, id: Uuid) -> Option<LeaseColumns> {
        self.state().rows.get(&id).map(|r| LeaseColumns {
            lease_token: r.lease_token,
            lease_expires_at: r.lease_expires_at,
            worker_id: r.worker_id.clone(),
            cancel_reason: r.cancel_reason.clone(),
            updated_at: r.updated_at,
        })
    }

    /// Number of execution rows.
    pub fn len(&self) -> usize {
        self.state().rows.len()
    }

    /// Whether the store holds no execution.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
