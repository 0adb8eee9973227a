//! Worker operations (docs/semantics.md#worker-operations, docs/postgres.md#statements): claim
//! (bounded maintenance, then a `FOR UPDATE SKIP LOCKED` read in claim-index order, then one
//! statement that writes the leases and inserts the attempts), the cancel poll (the set-based
//! heartbeat is in `heartbeat.rs`), complete, complete_many (its bookkeeping is
//! `onestep_core::store::batch`; here its statements) and release; the port itself is written
//! by `onestep_core::impl_lease_store!`. Every write is fenced by the lease token, the status
//! and the lease's validity; a fence that matches no row is [`ExecutionError::StaleLease`], and
//! a refused write is rolled back at once (the whole transaction, or the item's savepoint in
//! `complete_many`).

use chrono::{DateTime, Utc};
use deadpool_postgres::{GenericClient, Transaction};
use onestep_core::error::UNDECODABLE_DEFER_S;
use onestep_core::execution::{Completion, LeaseRef};
use onestep_core::plan::CompletionPlan;
use onestep_core::request::ClaimRequest;
use onestep_core::status::attempt_status_for;
use onestep_core::store::batch::{CompletionTx, LockedRow, LockedRows, SetItem, SetWrite};
use onestep_core::store::fair::plain_claim_namespace;
use onestep_core::store::lease::{LeaseWindow, claim_rows};
use onestep_core::time::add_seconds;
use onestep_core::{Execution, ExecutionError, ExecutionLease, ExecutionStatus, StaleReason};
use uuid::Uuid;

use crate::backend::{PgBackend, commit};
use crate::errors::{OpError, OpResult};
use crate::rows::{EXECUTION_COLUMN_COUNT, decode_execution, error_text};

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
    pub(crate) async fn claim_once(&self, req: &ClaimRequest) -> OpResult<Vec<ExecutionLease>> {
        let window = LeaseWindow::new(self.now(), req.lease_duration_s)?;
        let mut conn = self.conn().await?;
        let tx = conn.transaction().await?;
        // Any failure rolls back at once (docs/lease-protocol.md#refused-writes).
        let outcome = self.claim_in(&tx, req, window.now, window.expires_at).await;
        let leases = finish(tx, outcome).await?;
        self.analyze_keys_if_grown(&conn).await;
        Ok(leases)
    }

    async fn claim_in(
        &self,
        tx: &Transaction<'_>,
        req: &ClaimRequest,
        now: DateTime<Utc>,
        lease_expires_at: DateTime<Utc>,
    ) -> OpResult<Vec<ExecutionLease>> {
        // docs/semantics.md#fair-claim: single-task claims on tables with the keys table.
        let fair = match (self.inner.fair.as_ref(), req.task_names.as_slice()) {
            (Some(sql), [task]) => Some((sql, task.as_str())),
            _ => None,
        };
        let namespace = match fair {
            Some(_) => None,
            None => Some(plain_claim_namespace(req, self.inner.fair.is_some())?),
        };
        let st = tx.prepare_cached(&self.sql().maintain).await?;
        tx.query_one(&st, &[&now]).await?;
        // docs/semantics.md#max-running: after maintenance (a reclaimed lease no longer counts).
        let limit = self.cap_limit(tx, req, now).await?;
        if limit == 0 {
            return Ok(Vec::new());
        }
        let capped;
        let req = if limit == req.limit {
            req
        } else {
            capped = ClaimRequest {
                limit,
                ..req.clone()
            };
            &capped
        };
        if let Some((sql, task)) = fair {
            return self
                .fair_claim_in(tx, sql, req, task, now, lease_expires_at)
                .await;
        }
        let namespace = namespace.unwrap_or_default();
        let limit = i64::from(req.limit);
        let rows = match req.task_names.as_slice() {
            [one] => {
                let st = tx.prepare_cached(&self.sql().claim_select_one).await?;
                tx.query(&st, &[&namespace, one, &now, &limit]).await?
            }
            _ => {
                let st = tx.prepare_cached(&self.sql().claim_select).await?;
                tx.query(&st, &[&namespace, &req.task_names, &now, &limit])
                    .await?
            }
        };
        let keyed = rows
            .iter()
            .map(|r| (r.try_get::<_, Uuid>("id").ok(), decode_execution(r)));
        let (mut leases, deferred) =
            claim_rows(keyed, self.attempt_ids, lease_expires_at, now, |e| {
                tracing::error!(error = %e, defer_s = UNDECODABLE_DEFER_S,
                    "claim skipped an undecodable row and deferred it");
            });
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
        self.write_claims(tx, &mut leases, req, now, lease_expires_at)
            .await?;
        Ok(leases)
    }

    /// T2 for the locked rows of `leases` (one statement: the leases and their attempts), then
    /// their trace parents.
    pub(crate) async fn write_claims(
        &self,
        tx: &Transaction<'_>,
        leases: &mut [ExecutionLease],
        req: &ClaimRequest,
        now: DateTime<Utc>,
        lease_expires_at: DateTime<Utc>,
    ) -> OpResult<()> {
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
        for l in leases.iter_mut() {
            l.trace_parent = trace_parents.remove(&l.execution.id);
        }
        Ok(())
    }

    pub(crate) async fn cancel_requested_once(&self, leases: &[LeaseRef]) -> OpResult<Vec<Uuid>> {
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
        let limit = self.inner.limits.max_result_bytes;
        let plan = CompletionPlan::new(&current, completion, now, limit)?;
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

    // complete_once, complete_many_once
    onestep_core::complete_once_methods!(
        OpError,
        |conn| conn.transaction().await?,
        |b, tx| b.completing(&tx),
        |outcome| finish(tx, outcome).await
    );

    /// `tx`, for the completion bookkeeping of `onestep_core::store::batch`.
    fn completing<'a, 't>(&'a self, tx: &'a Transaction<'t>) -> Completing<'a, 't> {
        Completing { backend: self, tx }
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

    /// T15 inside `tx` (docs/steps.md#sleep; the port's `park` is
    /// `onestep_core::store::batch::park_one` over this): one statement parks the execution
    /// while it is `running` under the lease and ends its attempt `parked`. `None` when the
    /// execution did not match (nothing written).
    pub(crate) async fn park_in_tx<C: GenericClient>(
        &self,
        tx: &C,
        lease: &LeaseRef,
        wake_at: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> OpResult<Option<Execution>> {
        let st = tx.prepare_cached(&self.sql().park).await?;
        let row = tx
            .query_opt(
                &st,
                &[
                    &now,
                    &lease.execution_id,
                    &lease.lease_token,
                    &lease.attempt_id,
                    &wake_at,
                ],
            )
            .await
            .map_err(parked_status_refused)?;
        let Some(row) = row else {
            return Ok(None);
        };
        if count(&row, EXECUTION_COLUMN_COUNT)? != 1 {
            return Err(stale(StaleReason::AttemptInvalid));
        }
        Ok(Some(decode_execution(&row)?))
    }

    /// How many attempts of the execution ended `parked`.
    pub(crate) async fn parked_attempts_once(&self, id: Uuid) -> OpResult<u32> {
        let conn = self.conn().await?;
        let st = conn.prepare_cached(&self.sql().parked_count).await?;
        let row = conn.query_one(&st, &[&id]).await?;
        Ok(u32::try_from(count(&row, 0)?).unwrap_or(u32::MAX))
    }

    pub(crate) async fn release_once(&self, lease: &LeaseRef) -> OpResult<Execution> {
        let now = self.now();
        let mut conn = self.conn().await?;
        let tx = conn.transaction().await?;
        let outcome = self.release_in(&tx, lease, now).await;
        finish(tx, outcome).await
    }
}

/// A violated `CHECK` (SQLSTATE 23514) on the attempt's status is a table whose constraint
/// predates `parked`: the error names the upgrade.
fn parked_status_refused(e: tokio_postgres::Error) -> OpError {
    if e.code() == Some(&tokio_postgres::error::SqlState::CHECK_VIOLATION) {
        OpError::Domain(crate::errors::backend_error(
            "park",
            onestep_core::ConnectorKind::Misconfigured,
            onestep_core::park::PARKED_STATUS_REFUSED,
            &[],
        ))
    } else {
        OpError::Db(e)
    }
}

onestep_core::impl_lease_store!(PgBackend, single_heartbeat: batch);

onestep_core::impl_domain_outcome!(OpError);

/// One open transaction of this backend, as the shared completion bookkeeping drives it.
struct Completing<'a, 't> {
    backend: &'a PgBackend,
    tx: &'a Transaction<'t>,
}

impl CompletionTx for Completing<'_, '_> {
    // type Error, savepoint, complete_one, write_final_diagnostics
    onestep_core::completion_tx_common!(
        OpError,
        batch_execute("SAVEPOINT", "RELEASE SAVEPOINT", "ROLLBACK TO SAVEPOINT")
    );

    /// One read of every row, without locking them: the set-based write repeats the whole
    /// fence (token, status, live lease) in SQL, so a row that changed after this read makes
    /// the counts differ and every item takes the per-item path, which locks its row
    /// (docs/postgres.md#completion-without-a-locking-read). A `FOR UPDATE` here cost a
    /// `Heap/LOCK` WAL record and a dirtied page per row. An undecodable row is left out
    /// (docs/semantics.md#undecodable-rows).
    async fn lock_rows(&mut self, ids: &[Uuid]) -> OpResult<LockedRows> {
        let st = self
            .tx
            .prepare_cached(&self.backend.sql().lock_many)
            .await?;
        let rows = self.tx.query(&st, &[&ids]).await?;
        let mut locked = LockedRows::with_capacity(rows.len());
        for row in &rows {
            let decoded = (
                row.try_get::<_, Option<Uuid>>(EXECUTION_COLUMN_COUNT),
                row.try_get::<_, Option<DateTime<Utc>>>(EXECUTION_COLUMN_COUNT + 1),
                decode_execution(row),
            );
            if let (Ok(lease_token), Ok(lease_expires_at), Ok(execution)) = decoded {
                let row = LockedRow {
                    execution,
                    lease_token,
                    lease_expires_at,
                };
                locked.insert(row.execution.id, row);
            }
        }
        Ok(locked)
    }

    /// One statement writes the executions and their attempts (each row still fenced by its
    /// own token, its locked status and its live lease) and returns the new rows; `None` when
    /// the counts differ from the items.
    async fn write_set(&mut self, write: SetWrite<'_>) -> OpResult<Option<Vec<Execution>>> {
        let SetWrite { items, set, now } = write;
        let lease = |s: &SetItem| &items[s.index].0;
        // In execution-id order, the order in which a plan that walks the array takes the row
        // locks, as the heartbeat takes its own (no lock-order deadlock between the two).
        let mut sorted: Vec<&SetItem> = set.iter().collect();
        sorted.sort_unstable_by_key(|s| lease(s).execution_id);
        let set = sorted;
        let ids: Vec<Uuid> = set.iter().map(|s| lease(s).execution_id).collect();
        let tokens: Vec<Uuid> = set.iter().map(|s| lease(s).lease_token).collect();
        let cur: Vec<&str> = set.iter().map(|s| s.current.as_str()).collect();
        let st_new: Vec<&str> = set.iter().map(|s| s.plan.effective.as_str()).collect();
        let res: Vec<Option<String>> = set.iter().map(|s| result_text(&s.plan)).collect();
        let err: Vec<Option<String>> = set
            .iter()
            .map(|s| error_text(s.plan.error.as_ref()))
            .collect::<Result<_, _>>()?;
        let avail: Vec<DateTime<Utc>> = set.iter().map(|s| s.plan.available_at).collect();
        let fin: Vec<Option<DateTime<Utc>>> =
            set.iter().map(|s| finished_at(&s.plan, now)).collect();
        let aids: Vec<Uuid> = set.iter().map(|s| lease(s).attempt_id).collect();
        let ast: Vec<&str> = set
            .iter()
            .map(|s| attempt_status_for(s.plan.effective).as_str())
            .collect();
        let sql = self.backend.sql();
        let st = self.tx.prepare_cached(&sql.complete_set).await?;
        let rows = self
            .tx
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
        if rows.len() != set.len() || attempts_written != set.len() as i64 {
            return Ok(None);
        }
        let mut written = Vec::with_capacity(rows.len());
        for r in &rows {
            written.push(decode_execution(r)?);
        }
        Ok(Some(written))
    }
}
