//! The bookkeeping of the batched worker writes, shared by the storage backends with no SQL
//! and no driver types (docs/semantics.md#worker-operations).
//!
//! `complete_many` ([`complete_many`]): every item is validated; distinct executions whose
//! fence (token, live lease, allowed status) holds on the rows of one locking read are written
//! set-based; the others, and every item when the set-based counts disagree, take the
//! single-completion path under a savepoint each, so a stale item does not undo the rest. The
//! outcomes come back one per item, in input order. A backend implements [`CompletionTx`] over
//! its open transaction: its own SQL, row decoding and savepoint statements.

use std::collections::HashMap;
use std::future::Future;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::diagnostics::AttemptDiagnostics;
use crate::error::{ExecutionError, StaleReason};
use crate::execution::{Completion, Execution, LeaseRef};
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

/// What [`CompletionTx::write_set`] writes: the items of `set` (indexes into `items`) at `now`.
#[derive(Debug, Clone, Copy)]
pub struct SetWrite<'a> {
    /// The call's items.
    pub items: &'a [(LeaseRef, Completion)],
    /// The items written set-based (at least two).
    pub set: &'a [SetItem],
    /// The transaction's "now".
    pub now: DateTime<Utc>,
}

/// The result of one item of `complete_many`.
pub type ItemOutcome = Result<Execution, ExecutionError>;

/// The final diagnostics of the completions that wrote, by lease.
pub type FinalDiagnostics<'a> = [(&'a LeaseRef, &'a AttemptDiagnostics)];

/// One open transaction of a backend, as `complete_many` drives it, with the transaction's
/// "now" (read once from the injected clock) passed in. Each method runs the backend's own
/// statements inside the transaction; a domain error
/// ([`DomainOutcome::into_domain`]) is that item's outcome, any other error fails the call
/// (the backend rolls the transaction back).
pub trait CompletionTx: Send {
    /// The backend's error of one attempt.
    type Error: DomainOutcome + Send;

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
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<Execution, Self::Error>> + Send;

    /// Reads the rows of `ids` (sorted, distinct) and returns the decodable ones. A backend
    /// may lock them (MySQL/MariaDB) or not (PostgreSQL, where a row lock is a write:
    /// docs/postgres.md#completion-without-a-locking-read); one that does not must repeat the
    /// whole fence in [`Self::write_set`], so that a row changed since this read makes the
    /// counts differ. An undecodable row is left out: its item takes the per-item path, which
    /// reports the decoding error for that item alone (docs/semantics.md#undecodable-rows).
    fn lock_rows(
        &mut self,
        ids: &[Uuid],
    ) -> impl Future<Output = Result<LockedRows, Self::Error>> + Send;

    /// The set-based writes of `write.set` (at least two items of `write.items`), each row
    /// still fenced by its own token, its status and its live lease: the written executions,
    /// or `None` when a matched-row count differs from the items (the caller rolls back to
    /// [`Savepoint::Batch`] and every item takes the per-item path).
    fn write_set(
        &mut self,
        write: SetWrite<'_>,
    ) -> impl Future<Output = Result<Option<Vec<Execution>>, Self::Error>> + Send;

    /// Writes the final diagnostics of the completions that wrote
    /// (docs/observability.md#attempt-diagnostics).
    fn write_final_diagnostics(
        &mut self,
        written: &FinalDiagnostics<'_>,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// T15's two writes (docs/state-machine.md): where the execution is `running` under
    /// `lease` (token, lease live at `now`), it becomes `queued` with `available_at =
    /// wake_at`, lease cleared, `version + 1`, and its running attempt `parked` with
    /// `finished_at = now`. `None` when the execution's write matched no row (nothing written);
    /// a missing running attempt after a written execution is the attempt's stale-lease error
    /// (the caller rolls back).
    fn park_write(
        &mut self,
        lease: &LeaseRef,
        wake_at: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<Option<Execution>, Self::Error>> + Send;
}

/// `park` inside `tx` (T15, docs/steps.md#sleep): the park's writes and its diagnostics; when
/// the execution is not `running` under the lease, the completion `cancelled` (with
/// [`cancel_error`](crate::park::cancel_error)) of the same lease instead, which writes only
/// where a cancel was requested under it (T11: cancel wins over a sleep) and otherwise answers
/// the completion's stale-lease error.
pub async fn park_one<T: CompletionTx>(
    tx: &mut T,
    lease: &LeaseRef,
    park: &crate::park::Park,
    now: DateTime<Utc>,
) -> Result<Execution, T::Error> {
    let execution = match tx.park_write(lease, park.wake_at, now).await? {
        Some(parked) => parked,
        None => {
            let cancel = Completion::cancelled(Some(crate::park::cancel_error()));
            tx.complete_one(lease, &cancel, now).await?
        }
    };
    if let Some(d) = park.diagnostics.as_deref() {
        tx.write_final_diagnostics(&[(lease, d)], now).await?;
    }
    Ok(execution)
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
    now: DateTime<Utc>,
) -> Result<Execution, T::Error> {
    let execution = tx.complete_one(lease, completion, now).await?;
    if let Some(d) = completion.diagnostics.as_deref() {
        tx.write_final_diagnostics(&[(lease, d)], now).await?;
    }
    Ok(execution)
}

/// `complete_many` inside `tx` at `now` (see the module documentation), with the backend's
/// result limit (docs/semantics.md#completion): one outcome per item, in input order. An error
/// fails the whole call; the caller rolls back.
pub async fn complete_many<T: CompletionTx>(
    tx: &mut T,
    items: &[(LeaseRef, Completion)],
    now: DateTime<Utc>,
    max_result_bytes: usize,
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
        let at = (now, max_result_bytes);
        complete_set(tx, items, pending, &ids, at, &mut out).await?
    } else {
        pending
    };
    for i in stragglers {
        let (lease, completion) = &items[i];
        tx.savepoint(SavepointStep::Set, Savepoint::Item).await?;
        match tx.complete_one(lease, completion, now).await {
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
    tx.write_final_diagnostics(&written, now).await?;
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
    (now, max_result_bytes): (DateTime<Utc>, usize),
    out: &mut [Option<ItemOutcome>],
) -> Result<Vec<usize>, T::Error> {
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
        match CompletionPlan::new(current, completion, now, max_result_bytes) {
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
    let write = SetWrite {
        items,
        set: &set,
        now,
    };
    let Some(written) = tx.write_set(write).await? else {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error_object::ErrorObject;
    use crate::store::test_support::block_on;
    use serde_json::json;

    #[derive(Debug)]
    enum FakeError {
        Domain(ExecutionError),
    }

    impl DomainOutcome for FakeError {
        fn into_domain(self) -> Result<ExecutionError, Self> {
            let FakeError::Domain(e) = self;
            Ok(e)
        }
    }

    /// A store of locked rows that logs what the bookkeeping asks of it.
    struct Fake {
        now: DateTime<Utc>,
        rows: LockedRows,
        set_matches: bool,
        log: Vec<String>,
    }

    fn written(row: &LockedRow, completion: &Completion) -> Execution {
        let mut e = row.execution.clone();
        e.status = completion.status.execution_status();
        e
    }

    impl CompletionTx for Fake {
        type Error = FakeError;

        async fn savepoint(&mut self, step: SavepointStep, sp: Savepoint) -> Result<(), FakeError> {
            self.log.push(format!("{step:?} {sp:?}"));
            Ok(())
        }

        async fn complete_one(
            &mut self,
            lease: &LeaseRef,
            completion: &Completion,
            _: DateTime<Utc>,
        ) -> Result<Execution, FakeError> {
            self.log.push("one".into());
            match self.rows.get(&lease.execution_id) {
                Some(r) if r.lease_token == Some(lease.lease_token) => Ok(written(r, completion)),
                _ => Err(FakeError::Domain(ExecutionError::StaleLease(
                    StaleReason::LeaseInvalid,
                ))),
            }
        }

        async fn lock_rows(&mut self, ids: &[Uuid]) -> Result<LockedRows, FakeError> {
            self.log.push(format!("lock {}", ids.len()));
            Ok(ids
                .iter()
                .filter_map(|id| self.rows.get(id).map(|r| (*id, r.clone())))
                .collect())
        }

        async fn write_set(
            &mut self,
            SetWrite { items, set, .. }: SetWrite<'_>,
        ) -> Result<Option<Vec<Execution>>, FakeError> {
            self.log.push(format!("set {}", set.len()));
            Ok(self.set_matches.then(|| {
                set.iter()
                    .map(|s| {
                        let (lease, completion) = &items[s.index];
                        written(&self.rows[&lease.execution_id], completion)
                    })
                    .collect()
            }))
        }

        async fn write_final_diagnostics(
            &mut self,
            written: &FinalDiagnostics<'_>,
            _: DateTime<Utc>,
        ) -> Result<(), FakeError> {
            self.log.push(format!("diagnostics {}", written.len()));
            Ok(())
        }

        async fn park_write(
            &mut self,
            lease: &LeaseRef,
            _: DateTime<Utc>,
            _: DateTime<Utc>,
        ) -> Result<Option<Execution>, FakeError> {
            self.log.push("park".into());
            Ok(self
                .rows
                .get(&lease.execution_id)
                .map(|r| r.execution.clone()))
        }
    }

    /// `n` running executions with live leases, and the leases.
    fn fake(n: usize, set_matches: bool) -> (Fake, Vec<LeaseRef>) {
        let now = Utc::now();
        let mut rows = LockedRows::new();
        let mut leases = Vec::new();
        for _ in 0..n {
            let execution = Execution {
                id: Uuid::now_v7(),
                namespace: "ns".into(),
                task_name: "t".into(),
                status: ExecutionStatus::Running,
                payload: json!({}),
                metadata: serde_json::Map::new(),
                result: None,
                error: None,
                attempts: 1,
                created_at: now,
                available_at: now,
                started_at: Some(now),
                finished_at: None,
                cancel_requested_at: None,
                expires_at: None,
                version: 2,
                priority: 5,
                fairness_key: None,
            };
            let lease = LeaseRef {
                execution_id: execution.id,
                attempt_id: Uuid::now_v7(),
                lease_token: Uuid::new_v4(),
            };
            let row = LockedRow {
                execution,
                lease_token: Some(lease.lease_token),
                lease_expires_at: Some(now + chrono::Duration::seconds(30)),
            };
            rows.insert(lease.execution_id, row);
            leases.push(lease);
        }
        let tx = Fake {
            now,
            rows,
            set_matches,
            log: Vec::new(),
        };
        (tx, leases)
    }

    fn statuses(out: &[ItemOutcome]) -> Vec<Result<ExecutionStatus, String>> {
        out.iter()
            .map(|o| o.as_ref().map(|e| e.status).map_err(ToString::to_string))
            .collect()
    }

    #[test]
    fn fenced_items_go_set_based_and_the_rest_one_by_one_in_input_order() {
        let (mut tx, leases) = fake(4, true);
        let stale = LeaseRef {
            lease_token: Uuid::new_v4(),
            ..leases[1]
        };
        let invalid = Completion::retrying(ErrorObject::new("k", "E", None), -1.0);
        let items = vec![
            (leases[0], Completion::succeeded(json!(1))),
            (stale, Completion::succeeded(json!(2))),
            (leases[2], invalid),
            (leases[3], Completion::succeeded(json!(3))),
        ];
        let now = tx.now;
        let out = block_on(complete_many(&mut tx, &items, now, 1024)).expect("no storage failure");
        let stale_lease = ExecutionError::StaleLease(StaleReason::LeaseInvalid).to_string();
        let got = statuses(&out);
        assert_eq!(got[0], Ok(ExecutionStatus::Succeeded));
        assert_eq!(got[1], Err(stale_lease));
        assert!(
            matches!(out[2], Err(ExecutionError::InvalidArgument(_))),
            "{got:?}"
        );
        assert_eq!(got[3], Ok(ExecutionStatus::Succeeded));
        assert_eq!(
            tx.log,
            [
                "lock 3",
                "Set Batch",
                "set 2",
                "Release Batch",
                "Set Item",
                "one",
                "RollbackTo Item",
                "diagnostics 0",
            ]
        );
    }

    #[test]
    fn a_set_count_mismatch_rolls_back_and_completes_every_item_on_its_own() {
        let (mut tx, leases) = fake(2, false);
        let items: Vec<_> = leases
            .iter()
            .map(|l| (*l, Completion::succeeded(json!(null))))
            .collect();
        let now = tx.now;
        let out = block_on(complete_many(&mut tx, &items, now, 1024)).expect("no storage failure");
        assert!(out.iter().all(Result::is_ok), "{out:?}");
        assert_eq!(
            tx.log,
            [
                "lock 2",
                "Set Batch",
                "set 2",
                "RollbackTo Batch",
                "Set Item",
                "one",
                "Release Item",
                "Set Item",
                "one",
                "Release Item",
                "diagnostics 0",
            ]
        );
    }

    #[test]
    fn an_execution_given_twice_takes_the_per_item_path_without_a_locking_read() {
        let (mut tx, leases) = fake(1, true);
        let items = vec![
            (leases[0], Completion::succeeded(json!(1))),
            (leases[0], Completion::succeeded(json!(1))),
        ];
        let now = tx.now;
        let out = block_on(complete_many(&mut tx, &items, now, 1024)).expect("no storage failure");
        assert_eq!(out.len(), 2);
        assert!(
            !tx.log.iter().any(|l| l.starts_with("lock")),
            "{:?}",
            tx.log
        );
    }
}
