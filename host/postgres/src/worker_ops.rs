//! Worker operations (docs/semantics.md#worker-operations, docs/postgres.md#statements): claim
//! (bounded maintenance, then a `FOR UPDATE SKIP LOCKED` read in claim-index order, then one
//! statement that writes the leases and inserts the attempts), the cancel poll (the set-based
//! heartbeat is in `heartbeat.rs`), complete, complete_many and release. Every write is fenced by the lease token,
//! the status and the lease's validity; a fence that matches no row is
//! [`ExecutionError::StaleLease`], and a refused write is rolled back at once (the whole
//! transaction, or the item's savepoint in `complete_many`).

use std::collections::HashMap;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use deadpool_postgres::{GenericClient, Transaction};
use onestep_core::diagnostics::LiveDiagnostics;
use onestep_core::error::UNDECODABLE_DEFER_S;
use onestep_core::execution::{Completion, HeartbeatResult, LeaseRef};
use onestep_core::plan::CompletionPlan;
use onestep_core::ports::LeaseStore;
use onestep_core::request::ClaimRequest;
use onestep_core::status::attempt_status_for;
use onestep_core::time::add_seconds;
use onestep_core::{Execution, ExecutionError, ExecutionLease, ExecutionStatus, StaleReason};
use uuid::Uuid;

use crate::backend::{PgBackend, commit};
use crate::errors::{OpError, OpResult};
use crate::rows::{EXECUTION_COLUMN_COUNT, decode_execution, error_text};

/// A row locked by `complete_many`: the execution, its lease token and lease expiry.
type Locked = (Execution, Option<Uuid>, Option<DateTime<Utc>>);

/// Most leases bound in one heartbeat or cancel-poll statement.
pub(crate) const MAX_LEASES_PER_STATEMENT: usize = 1000;

fn stale(reason: StaleReason) -> OpError {
    OpError::Domain(ExecutionError::StaleLease(reason))
}

fn statuses(list: &[ExecutionStatus]) -> Vec<String> {
    list.iter().map(|s| s.as_str().to_owned()).collect()
}

pub(crate) fn count(row: &tokio_postgres::Row, idx: usize) -> OpResult<i64> {
    row.try_get::<_, i64>(idx)
        .map_err(|e| OpError::Domain(ExecutionError::Undecodable(format!("row count: {e}"))))
}

/// The result text of a completion (`NULL` when absent).
fn result_text(plan: &CompletionPlan) -> Option<String> {
    plan.encoded_result.as_ref().map(crate::json_text::to_text)
}

/// `finished_at` of a completion: `NULL` for a retry, else `now`.
fn finished_at(plan: &CompletionPlan, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    (!plan.retrying).then_some(now)
}

/// Rolls back now (not when the pool recycles the connection), so that no row lock outlives
/// a refused write; a failure to roll back is only logged (the connection is dropped anyway).
async fn rollback(tx: Transaction<'_>) {
    if let Err(e) = tx.rollback().await {
        tracing::debug!(error = %e, "rollback failed");
    }
}

/// Commits `outcome` when it is a success, otherwise rolls back at once.
pub(crate) async fn finish<T>(tx: Transaction<'_>, outcome: OpResult<T>) -> OpResult<T> {
    match outcome {
        Ok(out) => {
            commit(tx).await?;
            Ok(out)
        }
        Err(e) => {
            rollback(tx).await;
            Err(e)
        }
    }
}

impl PgBackend {
    async fn claim_once(&self, req: &ClaimRequest) -> OpResult<Vec<ExecutionLease>> {
        let now = self.now();
        let lease_expires_at = add_seconds(now, "lease_duration_s", req.lease_duration_s)?;
        let mut conn = self.conn().await?;
        let tx = conn.transaction().await?;
        // Any failure rolls back at once (docs/lease-protocol.md#refused-writes).
        let outcome = self.claim_in(&tx, req, now, lease_expires_at).await;
        finish(tx, outcome).await
    }

    async fn claim_in(
        &self,
        tx: &Transaction<'_>,
        req: &ClaimRequest,
        now: DateTime<Utc>,
        lease_expires_at: DateTime<Utc>,
    ) -> OpResult<Vec<ExecutionLease>> {
        let st = tx.prepare_cached(&self.sql().maintain).await?;
        tx.query_one(&st, &[&now]).await?;
        let st = tx.prepare_cached(&self.sql().claim_select).await?;
        let limit = i64::from(req.limit);
        let rows = tx
            .query(&st, &[&req.namespace, &req.task_names, &now, &limit])
            .await?;
        let mut leases = Vec::with_capacity(rows.len());
        let mut deferred: Vec<Uuid> = Vec::new();
        for row in &rows {
            // docs/semantics.md#undecodable-rows: an undecodable row is not claimed; it is
            // deferred (its `available_at` moved on) so that it cannot hold a place at the head
            // of the queue; the rest of the batch is claimed.
            let mut execution = match decode_execution(row) {
                Ok(e) => e,
                Err(e) => {
                    tracing::error!(error = %e, defer_s = UNDECODABLE_DEFER_S,
                        "claim skipped an undecodable row and deferred it");
                    deferred.extend(row.try_get::<_, Uuid>("id").ok());
                    continue;
                }
            };
            let attempt_no = execution.attempts.saturating_add(1);
            execution.status = ExecutionStatus::Running;
            execution.attempts = attempt_no;
            execution.started_at = execution.started_at.or(Some(now));
            execution.version += 1;
            leases.push(ExecutionLease {
                execution,
                // docs/semantics.md#time-ordered-ids
                attempt_id: self.attempt_ids.new_id(),
                attempt_no,
                lease_token: Uuid::new_v4(),
                lease_expires_at,
                trace_parent: None,
            });
        }
        if !deferred.is_empty() {
            let until = add_seconds(now, "undecodable defer", UNDECODABLE_DEFER_S)?;
            let sql = format!(
                "UPDATE {} SET available_at = $1 WHERE id = ANY($2)",
                crate::schema::q(&self.tables().executions)
            );
            tx.execute(&sql, &[&until, &deferred]).await?;
        }
        if leases.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<Uuid> = leases.iter().map(|l| l.execution.id).collect();
        let tokens: Vec<Uuid> = leases.iter().map(|l| l.lease_token).collect();
        let aids: Vec<Uuid> = leases.iter().map(|l| l.attempt_id).collect();
        let nos: Vec<i32> = leases
            .iter()
            .map(|l| i32::try_from(l.attempt_no).unwrap_or(i32::MAX))
            .collect();
        let st = tx.prepare_cached(&self.sql().claim_write).await?;
        let inserted = tx
            .execute(
                &st,
                &[
                    &ids,
                    &tokens,
                    &aids,
                    &nos,
                    &lease_expires_at,
                    &req.worker_id,
                    &now,
                ],
            )
            .await?;
        if inserted != leases.len() as u64 {
            return Err(ExecutionError::Encoding(format!(
                "claim wrote {inserted} of {} locked rows",
                leases.len()
            ))
            .into());
        }
        let mut trace_parents = self.trace_parents(tx, &ids).await?;
        for l in &mut leases {
            l.trace_parent = trace_parents.remove(&l.execution.id);
        }
        Ok(leases)
    }

    async fn cancel_requested_once(&self, leases: &[LeaseRef]) -> OpResult<Vec<Uuid>> {
        let now = self.now();
        let conn = self.conn().await?;
        let st = conn.prepare_cached(&self.sql().cancel_poll).await?;
        let mut out = Vec::new();
        for chunk in leases.chunks(MAX_LEASES_PER_STATEMENT) {
            let ids: Vec<Uuid> = chunk.iter().map(|l| l.execution_id).collect();
            let tokens: Vec<Uuid> = chunk.iter().map(|l| l.lease_token).collect();
            for row in conn.query(&st, &[&ids, &tokens, &now]).await? {
                let id: Uuid = row.try_get(0)?;
                if !out.contains(&id) {
                    out.push(id);
                }
            }
        }
        Ok(out)
    }

    fn plan(
        &self,
        current: &Execution,
        completion: &Completion,
        now: DateTime<Utc>,
    ) -> OpResult<CompletionPlan> {
        Ok(CompletionPlan::new(
            current,
            completion,
            now,
            self.inner.limits.max_result_bytes,
        )?)
    }

    /// docs/semantics.md#completion inside `tx`: lock the row, plan, then one statement writes
    /// the execution (fenced) and its running attempt. Domain failures leave `tx` changed; the
    /// caller rolls back (the whole transaction or the item's savepoint).
    async fn complete_in_tx<C: GenericClient>(
        &self,
        tx: &C,
        lease: &LeaseRef,
        completion: &Completion,
        now: DateTime<Utc>,
    ) -> OpResult<Execution> {
        let st = tx.prepare_cached(&self.sql().by_id_lock).await?;
        let row = tx
            .query_opt(&st, &[&lease.execution_id])
            .await?
            .ok_or_else(|| stale(StaleReason::ExecutionMissing))?;
        let current = decode_execution(&row)?;
        let plan = self.plan(&current, completion, now)?;
        let st = tx.prepare_cached(&self.sql().complete_one).await?;
        let error = error_text(plan.error.as_ref())?;
        let row = tx
            .query_opt(
                &st,
                &[
                    &plan.effective.as_str(),
                    &now,
                    &result_text(&plan),
                    &error,
                    &plan.available_at,
                    &finished_at(&plan, now),
                    &lease.execution_id,
                    &lease.lease_token,
                    &statuses(completion.status.allowed_sources()),
                    &attempt_status_for(plan.effective).as_str(),
                    &lease.attempt_id,
                ],
            )
            .await?;
        let Some(row) = row else {
            // `current` is locked, so it is still what the fence saw: replay or stale.
            return if plan.is_replay_of(&current) {
                Ok(current)
            } else {
                Err(stale(StaleReason::LeaseInvalid))
            };
        };
        if count(&row, EXECUTION_COLUMN_COUNT)? != 1 {
            return Err(stale(StaleReason::AttemptInvalid));
        }
        Ok(decode_execution(&row)?)
    }

    async fn complete_once(
        &self,
        lease: &LeaseRef,
        completion: &Completion,
    ) -> OpResult<Execution> {
        let now = self.now();
        let mut conn = self.conn().await?;
        let tx = conn.transaction().await?;
        let outcome = self.complete_in_tx(&tx, lease, completion, now).await;
        // The final diagnostics ride in the completion's transaction
        // (docs/observability.md#attempt-diagnostics), only for a completion that wrote.
        let outcome = match (outcome, completion.diagnostics.as_deref()) {
            (Ok(x), Some(d)) => self
                .write_final_diagnostics(&tx, &[(lease, d)], now)
                .await
                .map(|()| x),
            (o, _) => o,
        };
        finish(tx, outcome).await
    }

    async fn complete_many_once(
        &self,
        items: &[(LeaseRef, Completion)],
    ) -> OpResult<Vec<Result<Execution, ExecutionError>>> {
        let now = self.now();
        let mut conn = self.conn().await?;
        let tx = conn.transaction().await?;
        // Any failure rolls back at once (docs/lease-protocol.md#refused-writes).
        let outcome = self.complete_many_in(&tx, items, now).await;
        finish(tx, outcome).await
    }

    async fn complete_many_in(
        &self,
        tx: &Transaction<'_>,
        items: &[(LeaseRef, Completion)],
        now: DateTime<Utc>,
    ) -> OpResult<Vec<Result<Execution, ExecutionError>>> {
        let mut out: Vec<Option<Result<Execution, ExecutionError>>> =
            (0..items.len()).map(|_| None).collect();
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
            self.complete_set(tx, items, pending, ids, now, &mut out)
                .await?
        } else {
            pending
        };
        for i in stragglers {
            let (lease, completion) = &items[i];
            tx.batch_execute("SAVEPOINT onestep_item").await?;
            match self.complete_in_tx(tx, lease, completion, now).await {
                Ok(x) => {
                    tx.batch_execute("RELEASE SAVEPOINT onestep_item").await?;
                    out[i] = Some(Ok(x));
                }
                Err(OpError::Domain(e)) => {
                    tx.batch_execute("ROLLBACK TO SAVEPOINT onestep_item")
                        .await?;
                    out[i] = Some(Err(e));
                }
                Err(e) => return Err(e),
            }
        }
        // The final diagnostics of the completions that wrote, in the same transaction
        // (docs/observability.md#attempt-diagnostics); a failure rolls the call back (finish).
        let written: Vec<(&LeaseRef, &onestep_core::diagnostics::AttemptDiagnostics)> = items
            .iter()
            .zip(&out)
            .filter(|(_, o)| matches!(o, Some(Ok(_))))
            .filter_map(|((lease, c), _)| c.diagnostics.as_deref().map(|d| (lease, d)))
            .collect();
        self.write_final_diagnostics(tx, &written, now).await?;
        Ok(out
            .into_iter()
            .map(|o| {
                o.unwrap_or(Err(ExecutionError::StaleLease(
                    StaleReason::ExecutionMissing,
                )))
            })
            .collect())
    }

    /// The set-based part of `complete_many` for distinct executions: one locking read of every
    /// row (in id order), then — for the items whose fence holds on the locked row — one
    /// statement that writes the executions and their attempts (each row still fenced by its
    /// own token, its locked status and its live lease) and returns the new rows. When the
    /// counts differ from the items, the writes are rolled back to a savepoint and every item
    /// takes the per-item path. Returns the items left for the per-item path.
    async fn complete_set(
        &self,
        tx: &Transaction<'_>,
        items: &[(LeaseRef, Completion)],
        pending: Vec<usize>,
        ids: Vec<Uuid>,
        now: DateTime<Utc>,
        out: &mut [Option<Result<Execution, ExecutionError>>],
    ) -> OpResult<Vec<usize>> {
        let st = tx.prepare_cached(&self.sql().lock_many).await?;
        let rows = tx.query(&st, &[&ids]).await?;
        let mut locked: HashMap<Uuid, Locked> = HashMap::with_capacity(rows.len());
        for row in &rows {
            // An undecodable row is left out: its item takes the per-item path, which reports
            // the decoding error for that item alone (docs/semantics.md#undecodable-rows).
            let decoded = (
                row.try_get::<_, Option<Uuid>>(EXECUTION_COLUMN_COUNT),
                row.try_get::<_, Option<DateTime<Utc>>>(EXECUTION_COLUMN_COUNT + 1),
                decode_execution(row),
            );
            if let (Ok(token), Ok(expiry), Ok(e)) = decoded {
                locked.insert(e.id, (e, token, expiry));
            }
        }
        let mut fast: Vec<(usize, CompletionPlan, ExecutionStatus)> = Vec::new();
        let mut rest = Vec::new();
        for i in pending {
            let (lease, completion) = &items[i];
            let Some((current, token, expiry)) = locked.get(&lease.execution_id) else {
                rest.push(i);
                continue;
            };
            let fenced = *token == Some(lease.lease_token)
                && expiry.is_some_and(|x| x > now)
                && completion
                    .status
                    .allowed_sources()
                    .contains(&current.status);
            if !fenced {
                rest.push(i);
                continue;
            }
            match self.plan(current, completion, now) {
                Ok(plan) => fast.push((i, plan, current.status)),
                Err(OpError::Domain(e)) => out[i] = Some(Err(e)),
                Err(e) => return Err(e),
            }
        }
        if fast.len() < 2 {
            rest.extend(fast.into_iter().map(|(i, _, _)| i));
            return Ok(rest);
        }
        let lease = |i: usize| &items[i].0;
        let ids: Vec<Uuid> = fast
            .iter()
            .map(|(i, _, _)| lease(*i).execution_id)
            .collect();
        let tokens: Vec<Uuid> = fast.iter().map(|(i, _, _)| lease(*i).lease_token).collect();
        let cur: Vec<&str> = fast.iter().map(|(_, _, s)| s.as_str()).collect();
        let st_new: Vec<&str> = fast.iter().map(|(_, p, _)| p.effective.as_str()).collect();
        let res: Vec<Option<String>> = fast.iter().map(|(_, p, _)| result_text(p)).collect();
        let err: Vec<Option<String>> = fast
            .iter()
            .map(|(_, p, _)| error_text(p.error.as_ref()))
            .collect::<Result<_, _>>()?;
        let avail: Vec<DateTime<Utc>> = fast.iter().map(|(_, p, _)| p.available_at).collect();
        let fin: Vec<Option<DateTime<Utc>>> =
            fast.iter().map(|(_, p, _)| finished_at(p, now)).collect();
        let aids: Vec<Uuid> = fast.iter().map(|(i, _, _)| lease(*i).attempt_id).collect();
        let ast: Vec<&str> = fast
            .iter()
            .map(|(_, p, _)| attempt_status_for(p.effective).as_str())
            .collect();
        tx.batch_execute("SAVEPOINT onestep_batch").await?;
        let st = tx.prepare_cached(&self.sql().complete_set).await?;
        let rows = tx
            .query(
                &st,
                &[
                    &ids, &tokens, &cur, &st_new, &res, &err, &avail, &fin, &aids, &ast, &now,
                ],
            )
            .await?;
        let attempts_written = match rows.first() {
            Some(r) => count(r, EXECUTION_COLUMN_COUNT)?,
            None => 0,
        };
        if rows.len() != fast.len() || attempts_written != fast.len() as i64 {
            tx.batch_execute("ROLLBACK TO SAVEPOINT onestep_batch")
                .await?;
            rest.extend(fast.into_iter().map(|(i, _, _)| i));
            return Ok(rest);
        }
        tx.batch_execute("RELEASE SAVEPOINT onestep_batch").await?;
        let mut by_id = HashMap::with_capacity(rows.len());
        for r in &rows {
            let e = decode_execution(r)?;
            by_id.insert(e.id, e);
        }
        for (i, _, _) in fast {
            out[i] = Some(
                by_id
                    .remove(&items[i].0.execution_id)
                    .ok_or(ExecutionError::StaleLease(StaleReason::ExecutionMissing)),
            );
        }
        Ok(rest)
    }

    async fn release_in<C: GenericClient>(
        &self,
        tx: &C,
        lease: &LeaseRef,
        now: DateTime<Utc>,
    ) -> OpResult<Execution> {
        let st = tx.prepare_cached(&self.sql().by_id_lock).await?;
        if tx.query_opt(&st, &[&lease.execution_id]).await?.is_none() {
            return Err(stale(StaleReason::ExecutionMissing));
        }
        let st = tx.prepare_cached(&self.sql().release).await?;
        let row = tx
            .query_opt(
                &st,
                &[
                    &now,
                    &lease.execution_id,
                    &lease.lease_token,
                    &lease.attempt_id,
                ],
            )
            .await?
            .ok_or_else(|| stale(StaleReason::LeaseInvalid))?;
        if count(&row, EXECUTION_COLUMN_COUNT)? != 1 {
            return Err(stale(StaleReason::AttemptInvalid));
        }
        Ok(decode_execution(&row)?)
    }

    async fn release_once(&self, lease: &LeaseRef) -> OpResult<Execution> {
        let now = self.now();
        let mut conn = self.conn().await?;
        let tx = conn.transaction().await?;
        let outcome = self.release_in(&tx, lease, now).await;
        finish(tx, outcome).await
    }
}

#[async_trait]
impl LeaseStore for PgBackend {
    async fn claim(&self, req: &ClaimRequest) -> Result<Vec<ExecutionLease>, ExecutionError> {
        let req = req.validate()?;
        self.run("fetch", || self.claim_once(&req)).await
    }

    async fn heartbeat(
        &self,
        lease: &LeaseRef,
        lease_duration_s: f64,
    ) -> Result<HeartbeatResult, ExecutionError> {
        self.heartbeat_one(lease, lease_duration_s).await
    }

    async fn heartbeat_many(
        &self,
        leases: &[LeaseRef],
        lease_duration_s: f64,
    ) -> Result<Vec<Result<HeartbeatResult, ExecutionError>>, ExecutionError> {
        self.heartbeat_leases(leases, lease_duration_s).await
    }

    async fn record_live(
        &self,
        items: &[(LeaseRef, LiveDiagnostics)],
    ) -> Result<bool, ExecutionError> {
        self.write_live(items).await
    }

    async fn cancel_requested(&self, leases: &[LeaseRef]) -> Result<Vec<Uuid>, ExecutionError> {
        if leases.is_empty() {
            return Ok(Vec::new());
        }
        self.run("cancel_poll", || self.cancel_requested_once(leases))
            .await
    }

    async fn complete(
        &self,
        lease: &LeaseRef,
        completion: &Completion,
    ) -> Result<Execution, ExecutionError> {
        completion.validate()?;
        self.run("ack", || self.complete_once(lease, completion))
            .await
    }

    async fn complete_many(
        &self,
        items: &[(LeaseRef, Completion)],
    ) -> Result<Vec<Result<Execution, ExecutionError>>, ExecutionError> {
        if items.is_empty() {
            return Ok(Vec::new());
        }
        self.run("ack", || self.complete_many_once(items)).await
    }

    async fn release(&self, lease: &LeaseRef) -> Result<Execution, ExecutionError> {
        self.run("release", || self.release_once(lease)).await
    }
}
