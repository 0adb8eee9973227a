//! The bookkeeping of the batched worker writes, shared by the storage backends with no SQL
//! and no driver types (docs/semantics.md#worker-operations).
//!
//! `complete_many` ([`complete_many`]): every item is validated; distinct executions whose
//! fence (token, live lease, allowed status) holds on the rows of one locking read are written
//! set-based; the others, and every item when the set-based counts disagree, take the
//! single-completion path under a savepoint each, so a stale item does not undo the rest. The
//! outcomes come back one per item, in input order. A backend implements [`CompletionTx`] over
//! its open transaction: its own SQL, row decoding and savepoint statements.
//!
//! Also here: the lease a claim hands out ([`claimed`]) and the answer of the set-based
//! heartbeat for one lease ([`heartbeat_answer`]).

use std::collections::HashMap;
use std::future::Future;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::diagnostics::AttemptDiagnostics;
use crate::error::{ExecutionError, StaleReason};
use crate::execution::{Completion, Execution, ExecutionLease, HeartbeatResult, LeaseRef};
use crate::plan::CompletionPlan;
use crate::status::ExecutionStatus;

/// A backend's error of one attempt at an operation, which is either a domain outcome (stale
/// lease, encoding…) that belongs to one item of a batch, or a failure of the whole call.
pub trait DomainOutcome: Sized {
    /// The domain outcome this error carries, or the error itself when it fails the call.
    fn into_domain(self) -> Result<ExecutionError, Self>;
}

/// The savepoints a batched write sets inside its transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Savepoint {
    /// Around one item on the per-item path of `complete_many`.
    Item,
    /// Around the set-based writes of `complete_many`.
    Batch,
}

/// What to do with a [`Savepoint`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SavepointStep {
    /// Set it.
    Set,
    /// Keep what was written since it was set.
    Release,
    /// Undo what was written since it was set.
    RollbackTo,
}

/// A row of the locking read of `complete_many`: the execution with its lease token and expiry.
#[derive(Debug, Clone)]
pub struct LockedRow {
    /// The execution as locked.
    pub execution: Execution,
    /// Its lease token (`None` when it holds no lease).
    pub lease_token: Option<Uuid>,
    /// Its lease expiry (`None` when it holds no lease).
    pub lease_expires_at: Option<DateTime<Utc>>,
}

/// The decodable rows of the locking read, by execution id.
pub type LockedRows = HashMap<Uuid, LockedRow>;

/// One item written set-based: its index in the call's items, its plan, and the status the
/// fence saw on the locked row.
#[derive(Debug, Clone)]
pub struct SetItem {
    /// Index into the call's items.
    pub index: usize,
    /// What the completion writes.
    pub plan: CompletionPlan,
    /// The locked row's status (the set-based write is fenced on it).
    pub current: ExecutionStatus,
}

/// The result of one item of `complete_many`.
pub type ItemOutcome = Result<Execution, ExecutionError>;

/// One open transaction of a backend, as `complete_many` drives it. Each method runs the
/// backend's own statements inside the transaction; a domain error
/// ([`DomainOutcome::into_domain`]) is that item's outcome, any other error fails the call
/// (the backend rolls the transaction back).
pub trait CompletionTx: Send {
    /// The backend's error of one attempt.
    type Error: DomainOutcome + Send;

    /// The transaction's "now" (read once from the injected clock).
    fn now(&self) -> DateTime<Utc>;

    /// The backend's result limit (docs/semantics.md#completion).
    fn max_result_bytes(&self) -> usize;

    /// Sets, releases or rolls back to `savepoint`.
    fn savepoint(
        &mut self,
        step: SavepointStep,
        savepoint: Savepoint,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// The single completion of one lease (docs/semantics.md#completion), without its
    /// diagnostics.
    fn complete_one(
        &mut self,
        lease: &LeaseRef,
        completion: &Completion,
    ) -> impl Future<Output = Result<Execution, Self::Error>> + Send;

    /// Locks the rows of `ids` (sorted, distinct) and returns the decodable ones. An
    /// undecodable row is left out: its item takes the per-item path, which reports the
    /// decoding error for that item alone (docs/semantics.md#undecodable-rows).
    fn lock_rows(
        &mut self,
        ids: &[Uuid],
    ) -> impl Future<Output = Result<LockedRows, Self::Error>> + Send;

    /// The set-based writes of `set` (at least two items of `items`), each row still fenced
    /// by its own token, its status and its live lease: the written executions, or `None`
    /// when a matched-row count differs from the items (the caller rolls back to
    /// [`Savepoint::Batch`] and every item takes the per-item path).
    fn write_set(
        &mut self,
        items: &[(LeaseRef, Completion)],
        set: &[SetItem],
    ) -> impl Future<Output = Result<Option<Vec<Execution>>, Self::Error>> + Send;

    /// Writes the final diagnostics of the completions that wrote
    /// (docs/observability.md#attempt-diagnostics).
    fn write_final_diagnostics(
        &mut self,
        written: &[(&LeaseRef, &AttemptDiagnostics)],
    ) -> impl Future<Output = Result<(), Self::Error>> + Send;
}

fn missing() -> ExecutionError {
    ExecutionError::StaleLease(StaleReason::ExecutionMissing)
}

/// `complete` inside `tx`: the single completion, then its final diagnostics in the same
/// transaction (only for a completion that wrote).
pub async fn complete_one<T: CompletionTx>(
    tx: &mut T,
    lease: &LeaseRef,
    completion: &Completion,
) -> Result<Execution, T::Error> {
    let execution = tx.complete_one(lease, completion).await?;
    if let Some(d) = completion.diagnostics.as_deref() {
        tx.write_final_diagnostics(&[(lease, d)]).await?;
    }
    Ok(execution)
}

/// `complete_many` inside `tx` (see the module documentation): one outcome per item, in
/// input order. An error fails the whole call; the caller rolls back.
pub async fn complete_many<T: CompletionTx>(
    tx: &mut T,
    items: &[(LeaseRef, Completion)],
) -> Result<Vec<ItemOutcome>, T::Error> {
    let mut out: Vec<Option<ItemOutcome>> = (0..items.len()).map(|_| None).collect();
    let mut pending = Vec::with_capacity(items.len());
    for (i, (_, completion)) in items.iter().enumerate() {
        match completion.validate() {
            Ok(()) => pending.push(i),
            Err(e) => out[i] = Some(Err(e)),
        }
    }
    let mut ids: Vec<Uuid> = pending.iter().map(|&i| items[i].0.execution_id).collect();
    ids.sort_unstable();
    ids.dedup();
    let stragglers = if pending.len() >= 2 && ids.len() == pending.len() {
        complete_set(tx, items, pending, &ids, &mut out).await?
    } else {
        pending
    };
    for i in stragglers {
        let (lease, completion) = &items[i];
        tx.savepoint(SavepointStep::Set, Savepoint::Item).await?;
        match tx.complete_one(lease, completion).await {
            Ok(x) => {
                tx.savepoint(SavepointStep::Release, Savepoint::Item)
                    .await?;
                out[i] = Some(Ok(x));
            }
            Err(e) => {
                let e = e.into_domain()?;
                tx.savepoint(SavepointStep::RollbackTo, Savepoint::Item)
                    .await?;
                out[i] = Some(Err(e));
            }
        }
    }
    // The final diagnostics of the completions that wrote, in the same transaction
    // (docs/observability.md#attempt-diagnostics); a failure fails the call.
    let written: Vec<(&LeaseRef, &AttemptDiagnostics)> = items
        .iter()
        .zip(&out)
        .filter(|(_, o)| matches!(o, Some(Ok(_))))
        .filter_map(|((lease, c), _)| c.diagnostics.as_deref().map(|d| (lease, d)))
        .collect();
    tx.write_final_diagnostics(&written).await?;
    Ok(out
        .into_iter()
        .map(|o| o.unwrap_or_else(|| Err(missing())))
        .collect())
}

/// The set-based part of [`complete_many`] for the distinct executions `ids` of `pending`: one
/// locking read; for the items whose fence holds on the locked row, the set-based writes
/// under [`Savepoint::Batch`]. Returns the items left for the per-item path (stale, replayed
/// or missing rows, or all of them when the counts differ), whose outcome it decides exactly
/// as for a single completion.
async fn complete_set<T: CompletionTx>(
    tx: &mut T,
    items: &[(LeaseRef, Completion)],
    pending: Vec<usize>,
    ids: &[Uuid],
    out: &mut [Option<ItemOutcome>],
) -> Result<Vec<usize>, T::Error> {
    let now = tx.now();
    let locked = tx.lock_rows(ids).await?;
    let mut set: Vec<SetItem> = Vec::with_capacity(pending.len());
    let mut rest = Vec::new();
    for i in pending {
        let (lease, completion) = &items[i];
        let Some(row) = locked.get(&lease.execution_id) else {
            rest.push(i);
            continue;
        };
        let current = &row.execution;
        let fenced = row.lease_token == Some(lease.lease_token)
            && row.lease_expires_at.is_some_and(|x| x > now)
            && completion
                .status
                .allowed_sources()
                .contains(&current.status);
        if !fenced {
            rest.push(i);
            continue;
        }
        match CompletionPlan::new(current, completion, now, tx.max_result_bytes()) {
            Ok(plan) => set.push(SetItem {
                index: i,
                plan,
                current: current.status,
            }),
            Err(e) => out[i] = Some(Err(e)),
        }
    }
    if set.len() < 2 {
        rest.extend(set.into_iter().map(|s| s.index));
        return Ok(rest);
    }
    tx.savepoint(SavepointStep::Set, Savepoint::Batch).await?;
    let Some(written) = tx.write_set(items, &set).await? else {
        tx.savepoint(SavepointStep::RollbackTo, Savepoint::Batch)
            .await?;
        rest.extend(set.into_iter().map(|s| s.index));
        return Ok(rest);
    };
    tx.savepoint(SavepointStep::Release, Savepoint::Batch)
        .await?;
    let mut by_id: HashMap<Uuid, Execution> = written.into_iter().map(|e| (e.id, e)).collect();
    for s in set {
        out[s.index] = Some(
            by_id
                .remove(&items[s.index].0.execution_id)
                .ok_or_else(missing),
        );
    }
    Ok(rest)
}

/// The answer of the set-based heartbeat for one lease: `Some(cancel_requested)` when its
/// lease was renewed to `new_expiry`, `None` when it no longer holds (a stale lease).
pub fn heartbeat_answer(
    renewed: Option<bool>,
    new_expiry: DateTime<Utc>,
) -> Result<HeartbeatResult, ExecutionError> {
    match renewed {
        Some(cancel_requested) => Ok(HeartbeatResult {
            lease_expires_at: new_expiry,
            cancel_requested,
        }),
        None => Err(ExecutionError::StaleLease(StaleReason::LeaseInvalid)),
    }
}

/// The lease a claim hands out for the locked row `execution` (no read-back): exactly the
/// columns the claim's write changes are applied — `status = 'running'`, `attempts + 1`,
/// `started_at` kept or set to `now`, `version + 1`. The trace parent is read separately.
pub fn claimed(
    mut execution: Execution,
    attempt_id: Uuid,
    lease_token: Uuid,
    lease_expires_at: DateTime<Utc>,
    now: DateTime<Utc>,
) -> ExecutionLease {
    let attempt_no = execution.attempts.saturating_add(1);
    execution.status = ExecutionStatus::Running;
    execution.attempts = attempt_no;
    execution.started_at = execution.started_at.or(Some(now));
    execution.version += 1;
    ExecutionLease {
        execution,
        attempt_id,
        attempt_no,
        lease_token,
        lease_expires_at,
        trace_parent: None,
    }
}
