//! The fenced worker writes of one lease: heartbeat (T8; the set-based `heartbeat_many` is in
//! `heartbeat_batch.rs` and falls back to the per-lease step here), complete (T9–T13: cancel wins over
//! success, an identical replay of a terminal completion is accepted; `complete` and
//! `complete_many` run it through `complete_batch.rs`) and release (T14), plus what they share
//! with the batched completion: the two fenced UPDATEs (the execution row while its lease
//! holds, then its running attempt) and the [`Plan`] of what a completion writes. The
//! `LeaseStore` port over these is written by `onestep_core::impl_lease_store!`.
//!
//! A fence that matches no row is [`ExecutionError::StaleLease`]; a transition writes both rows
//! or, after a rollback, neither.

use chrono::{DateTime, Utc};
use mysql_async::prelude::Queryable;
use mysql_async::{Params, Transaction, Value as DbValue};
use onestep_core::execution::{Completion, HeartbeatResult, LeaseRef};
use onestep_core::plan::CompletionPlan;
use onestep_core::request::validate_lease_duration;
use onestep_core::status::attempt_status_for;
use onestep_core::store::lease::LeaseWindow;
use onestep_core::{Execution, ExecutionError, ExecutionStatus, StaleReason};

use crate::backend::{MySqlBackend, begin, commit};
use crate::errors::{OpError, OpResult};
use crate::rows::{bind_error, bind_time, bind_uuid};

/// The statuses a heartbeat may extend the lease of.
pub(crate) const HEARTBEAT_SOURCES: [ExecutionStatus; 2] =
    [ExecutionStatus::Running, ExecutionStatus::CancelRequested];

pub(crate) fn stale(reason: StaleReason) -> OpError {
    OpError::Domain(ExecutionError::StaleLease(reason))
}

/// `'a','b'`: statuses as SQL string literals for an `IN (…)` list.
pub(crate) fn status_list(statuses: &[ExecutionStatus]) -> String {
    statuses
        .iter()
        .map(|s| format!("'{}'", s.as_str()))
        .collect::<Vec<_>>()
        .join(",")
}

/// What one completion writes: the backend-neutral [`CompletionPlan`], bound as SQL parameters.
pub(crate) type Plan = CompletionPlan;

/// The `result` parameter of a completion's UPDATE.
pub(crate) fn result_param(plan: &Plan) -> DbValue {
    plan.encoded_result.as_ref().map(|r| r.to_string()).into()
}

/// The `finished_at` parameter: `NULL` for a retry, else `now`.
pub(crate) fn finished_at_param(plan: &Plan, now: DateTime<Utc>) -> DbValue {
    if plan.retrying {
        DbValue::NULL
    } else {
        bind_time(now)
    }
}

impl MySqlBackend {
    /// The execution side of a fenced transition: `UPDATE <executions> SET <set>` on the row of
    /// `lease` while its token holds, its lease is live at `now` and its status is one of
    /// `sources`. `values` bind the placeholders of `set`. `false` when no row matched.
    pub(crate) async fn update_leased_execution(
        &self,
        tx: &mut Transaction<'_>,
        lease: &LeaseRef,
        sources: &[ExecutionStatus],
        set: &str,
        mut values: Vec<DbValue>,
        now: DateTime<Utc>,
    ) -> OpResult<bool> {
        let sql = format!(
            "UPDATE `{}` SET {set} WHERE id = ? AND lease_token = ? AND status IN ({}) \
             AND lease_expires_at IS NOT NULL AND lease_expires_at > ?",
            self.t(),
            status_list(sources)
        );
        values.extend([
            bind_uuid(lease.execution_id),
            bind_uuid(lease.lease_token),
            bind_time(now),
        ]);
        tx.exec_drop(sql, Params::Positional(values)).await?;
        Ok(tx.affected_rows() == 1)
    }

    /// The attempt side of a fenced transition: `UPDATE <attempts> SET <set>` on the attempt of
    /// `lease` while it is `running` under the lease's token. `false` when no row matched.
    pub(crate) async fn update_running_attempt(
        &self,
        tx: &mut Transaction<'_>,
        lease: &LeaseRef,
        set: &str,
        mut values: Vec<DbValue>,
    ) -> OpResult<bool> {
        let sql = format!(
            "UPDATE `{}` SET {set} WHERE id = ? AND execution_id = ? AND lease_token = ? \
             AND status = 'running'",
            self.a()
        );
        values.extend([
            bind_uuid(lease.attempt_id),
            bind_uuid(lease.execution_id),
            bind_uuid(lease.lease_token),
        ]);
        tx.exec_drop(sql, Params::Positional(values)).await?;
        Ok(tx.affected_rows() == 1)
    }

    /// Ends a transaction of one lease: commits `outcome` when it is a success; otherwise rolls
    /// back now, not when the pool recycles the connection, so that the row lock taken by the
    /// locking read is gone before the caller's next claim (which would skip the row: SKIP
    /// LOCKED).
    pub(crate) async fn finish<T>(&self, tx: Transaction<'_>, outcome: OpResult<T>) -> OpResult<T> {
        match outcome {
            Ok(out) => {
                commit(self, tx).await?;
                Ok(out)
            }
            Err(e) => {
                let _ = tx.rollback().await;
                Err(e)
            }
        }
    }

    /// T8 for one lease inside `tx` (docs/semantics.md#heartbeat): extend the execution's lease
    /// to `new_expiry`, stamp the running attempt, read the status. A miss of either write is
    /// a stale lease; the caller rolls back (the whole transaction or its savepoint), so a
    /// refused heartbeat persists nothing.
    pub(crate) async fn heartbeat_in_tx(
        &self,
        tx: &mut Transaction<'_>,
        lease: &LeaseRef,
        now: DateTime<Utc>,
        new_expiry: DateTime<Utc>,
    ) -> OpResult<HeartbeatResult> {
        let extended = self
            .update_leased_execution(
                tx,
                lease,
                &HEARTBEAT_SOURCES,
                "lease_expires_at = ?, updated_at = ?",
                vec![bind_time(new_expiry), bind_time(now)],
                now,
            )
            .await?;
        if !extended {
            return Err(stale(StaleReason::LeaseInvalid));
        }
        let beat = self
            .update_running_attempt(tx, lease, "heartbeat_at = ?", vec![bind_time(now)])
            .await?;
        if !beat {
            return Err(stale(StaleReason::LeaseInvalid));
        }
        let status: Option<String> = tx
            .exec_first(
                format!("SELECT status FROM `{}` WHERE id = ?", self.t()),
                (bind_uuid(lease.execution_id),),
            )
            .await?;
        Ok(HeartbeatResult {
            lease_expires_at: new_expiry,
            cancel_requested: status.as_deref() == Some(ExecutionStatus::CancelRequested.as_str()),
        })
    }

    async fn heartbeat_once(
        &self,
        lease: &LeaseRef,
        lease_duration_s: f64,
    ) -> OpResult<HeartbeatResult> {
        let window = LeaseWindow::new(self.now(), lease_duration_s)?;
        let mut conn = self.conn().await?;
        let mut tx = begin(&mut conn).await?;
        let outcome = self
            .heartbeat_in_tx(&mut tx, lease, window.now, window.expires_at)
            .await;
        self.finish(tx, outcome).await
    }

    /// The single heartbeat of the port (T8): one transaction for one lease.
    pub(crate) async fn heartbeat_one(
        &self,
        lease: &LeaseRef,
        lease_duration_s: f64,
    ) -> Result<HeartbeatResult, ExecutionError> {
        validate_lease_duration(lease_duration_s)?;
        self.run("heartbeat", || self.heartbeat_once(lease, lease_duration_s))
            .await
    }

    /// docs/semantics.md#completion steps 1–8 inside `tx`. Domain failures (stale lease, encoding) leave `tx`
    /// unchanged only if the caller rolls back (whole transaction or savepoint).
    pub(crate) async fn complete_in_tx(
        &self,
        tx: &mut Transaction<'_>,
        lease: &LeaseRef,
        completion: &Completion,
        now: DateTime<Utc>,
    ) -> OpResult<Execution> {
        let current = self
            .select_by_id(tx, lease.execution_id, None, true)
            .await?
            .ok_or_else(|| stale(StaleReason::ExecutionMissing))?;
        let limit = self.inner.limits.max_result_bytes;
        let plan = CompletionPlan::new(&current, completion, now, limit)?;
        let written = self
            .update_leased_execution(
                tx,
                lease,
                completion.status.allowed_sources(),
                "status = ?, updated_at = ?, version = version + 1, lease_token = NULL, \
                 lease_expires_at = NULL, worker_id = NULL, result = ?, error = ?, \
                 available_at = ?, finished_at = ?",
                vec![
                    plan.effective.as_str().into(),
                    bind_time(now),
                    result_param(&plan),
                    bind_error(plan.error.as_ref())?,
                    bind_time(plan.available_at),
                    finished_at_param(&plan, now),
                ],
                now,
            )
            .await?;
        if !written {
            // `current` is locked, so it is still what the CAS saw: replay or stale (step 6).
            return if plan.is_replay_of(&current) {
                Ok(current)
            } else {
                Err(stale(StaleReason::LeaseInvalid))
            };
        }
        let ended = self
            .update_running_attempt(
                tx,
                lease,
                "status = ?, error = ?, finished_at = ?",
                vec![
                    attempt_status_for(plan.effective).as_str().into(),
                    bind_error(plan.error.as_ref())?,
                    bind_time(now),
                ],
            )
            .await?;
        if !ended {
            return Err(stale(StaleReason::AttemptInvalid));
        }
        self.select_by_id(tx, lease.execution_id, None, false)
            .await?
            .ok_or_else(|| stale(StaleReason::ExecutionMissing))
    }

    /// T15's writes inside `tx` (docs/steps.md#sleep; the port's `park` is
    /// `onestep_core::store::batch::park_one` over this): the execution back to `queued` until
    /// `wake_at` while it is `running` under the lease, then its attempt `parked`. `None` when
    /// the execution did not match (nothing written). Three statements: two fenced UPDATEs
    /// (the first takes the row lock, no locking read before it) and the read-back.
    pub(crate) async fn park_in_tx(
        &self,
        tx: &mut Transaction<'_>,
        lease: &LeaseRef,
        wake_at: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> OpResult<Option<Execution>> {
        let parked = self
            .update_leased_execution(
                tx,
                lease,
                &[ExecutionStatus::Running],
                "status = 'queued', available_at = ?, updated_at = ?, lease_token = NULL, \
                 lease_expires_at = NULL, worker_id = NULL, version = version + 1",
                vec![bind_time(wake_at), bind_time(now)],
                now,
            )
            .await?;
        if !parked {
            return Ok(None);
        }
        let ended = self
            .update_running_attempt(
                tx,
                lease,
                "status = 'parked', finished_at = ?",
                vec![bind_time(now)],
            )
            .await
            .map_err(parked_status_refused)?;
        if !ended {
            return Err(stale(StaleReason::AttemptInvalid));
        }
        self.select_by_id(tx, lease.execution_id, None, false)
            .await?
            .map(Some)
            .ok_or_else(|| stale(StaleReason::ExecutionMissing))
    }

    /// How many attempts of the execution ended `parked` (one read of the attempts' unique
    /// `(execution_id, attempt_no)` index range).
    pub(crate) async fn parked_attempts_once(&self, id: uuid::Uuid) -> OpResult<u32> {
        let mut conn = self.conn().await?;
        let n: Option<i64> = conn
            .exec_first(
                format!(
                    "SELECT COUNT(*) FROM `{}` WHERE execution_id = ? AND status = 'parked'",
                    self.a()
                ),
                (bind_uuid(id),),
            )
            .await?;
        Ok(u32::try_from(n.unwrap_or(0)).unwrap_or(u32::MAX))
    }

    pub(crate) async fn release_once(&self, lease: &LeaseRef) -> OpResult<Execution> {
        let now = self.now();
        let mut conn = self.conn().await?;
        let mut tx = begin(&mut conn).await?;
        let outcome = self.release_in(&mut tx, lease, now).await;
        self.finish(tx, outcome).await
    }

    async fn release_in(
        &self,
        tx: &mut Transaction<'_>,
        lease: &LeaseRef,
        now: DateTime<Utc>,
    ) -> OpResult<Execution> {
        if self
            .select_by_id(tx, lease.execution_id, None, true)
            .await?
            .is_none()
        {
            return Err(stale(StaleReason::ExecutionMissing));
        }
        let requeued = self
            .update_leased_execution(
                tx,
                lease,
                &[ExecutionStatus::Running],
                "status = 'queued', available_at = ?, updated_at = ?, lease_token = NULL, \
                 lease_expires_at = NULL, worker_id = NULL, version = version + 1",
                vec![bind_time(now), bind_time(now)],
                now,
            )
            .await?;
        if !requeued {
            return Err(stale(StaleReason::LeaseInvalid));
        }
        let lost = self
            .update_running_attempt(
                tx,
                lease,
                "status = 'lease_lost', finished_at = ?",
                vec![bind_time(now)],
            )
            .await?;
        if !lost {
            return Err(stale(StaleReason::AttemptInvalid));
        }
        self.select_by_id(tx, lease.execution_id, None, false)
            .await?
            .ok_or_else(|| stale(StaleReason::ExecutionMissing))
    }
}

/// A violated `CHECK` on the attempt's status (MySQL 3819, MariaDB 4025) is a table whose
/// constraint predates `parked`: the error names the upgrade.
fn parked_status_refused(e: OpError) -> OpError {
    match &e {
        OpError::Db(db) if matches!(crate::errors::server_code(db), Some(3819 | 4025)) => {
            OpError::Domain(crate::errors::backend_error(
                "park",
                onestep_core::ConnectorKind::Misconfigured,
                onestep_core::park::PARKED_STATUS_REFUSED,
                &[],
            ))
        }
        _ => e,
    }
}

onestep_core::impl_lease_store!(MySqlBackend);
