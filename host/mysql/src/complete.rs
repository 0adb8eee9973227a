//! Fenced worker writes (spec §8.2–§8.4): heartbeat (T8), complete (T9–T13, cancel wins,
//! idempotent replay), complete_many (savepoint per item) and release (T14).

use chrono::{DateTime, Utc};
use mysql_async::prelude::Queryable;
use mysql_async::{Params, Transaction, Value as DbValue};
use onestep_core::canonical::to_canonical_string;
use onestep_core::codec::{ValueField, encode_value};
use onestep_core::execution::{Completion, HeartbeatResult, LeaseRef};
use onestep_core::request::validate_lease_duration;
use onestep_core::status::attempt_status_for;
use onestep_core::time::add_seconds;
use onestep_core::{CompletionStatus, Execution, ExecutionError, ExecutionStatus, StaleReason};
use serde_json::Value;

use crate::backend::{MySqlBackend, begin, commit};
use crate::errors::{OpError, OpResult};
use crate::rows::{bind_error, bind_time, bind_uuid};

fn stale(reason: StaleReason) -> OpError {
    OpError::Domain(ExecutionError::StaleLease(reason))
}

fn status_list(statuses: &[ExecutionStatus]) -> String {
    statuses
        .iter()
        .map(|s| format!("'{}'", s.as_str()))
        .collect::<Vec<_>>()
        .join(",")
}

impl MySqlBackend {
    async fn heartbeat_once(
        &self,
        lease: &LeaseRef,
        lease_duration_s: f64,
    ) -> OpResult<HeartbeatResult> {
        let now = self.now();
        let new_expiry = add_seconds(now, "lease_duration_s", lease_duration_s)?;
        let mut conn = self.conn().await?;
        let mut tx = begin(&mut conn).await?;
        let sql = format!(
            "UPDATE `{}` SET lease_expires_at = ?, updated_at = ? WHERE id = ? AND lease_token = ? \
             AND status IN ('running','cancel_requested') AND lease_expires_at IS NOT NULL \
             AND lease_expires_at > ?",
            self.t()
        );
        tx.exec_drop(
            sql,
            (
                bind_time(new_expiry),
                bind_time(now),
                bind_uuid(lease.execution_id),
                bind_uuid(lease.lease_token),
                bind_time(now),
            ),
        )
        .await?;
        if tx.affected_rows() != 1 {
            return Err(stale(StaleReason::LeaseInvalid));
        }
        let sql = format!(
            "UPDATE `{}` SET heartbeat_at = ? WHERE id = ? AND execution_id = ? AND lease_token = ? \
             AND status = 'running'",
            self.a()
        );
        tx.exec_drop(
            sql,
            (
                bind_time(now),
                bind_uuid(lease.attempt_id),
                bind_uuid(lease.execution_id),
                bind_uuid(lease.lease_token),
            ),
        )
        .await?;
        if tx.affected_rows() != 1 {
            return Err(stale(StaleReason::LeaseInvalid));
        }
        let status: Option<String> = tx
            .exec_first(
                format!("SELECT status FROM `{}` WHERE id = ?", self.t()),
                (bind_uuid(lease.execution_id),),
            )
            .await?;
        commit(self, tx).await?;
        Ok(HeartbeatResult {
            lease_expires_at: new_expiry,
            cancel_requested: status.as_deref() == Some(ExecutionStatus::CancelRequested.as_str()),
        })
    }

    pub(crate) async fn heartbeat_impl(
        &self,
        lease: &LeaseRef,
        lease_duration_s: f64,
    ) -> Result<HeartbeatResult, ExecutionError> {
        validate_lease_duration(lease_duration_s)?;
        self.run("heartbeat", || self.heartbeat_once(lease, lease_duration_s))
            .await
    }

    /// Spec §8.3 steps 1–8 inside `tx`. Domain failures (stale lease, encoding) leave `tx`
    /// unchanged only if the caller rolls back (whole transaction or savepoint).
    async fn complete_in_tx(
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
        let cancel_won = completion.status == CompletionStatus::Succeeded
            && current.status == ExecutionStatus::CancelRequested;
        let requested_result: Value = completion.result.clone().unwrap_or(Value::Null);
        let encoded_result = if completion.status == CompletionStatus::Succeeded && !cancel_won {
            let encoded = encode_value(&requested_result, ValueField::Result)?;
            if to_canonical_string(&encoded).len() > self.inner.limits.max_result_bytes {
                return Err(ExecutionError::Encoding(
                    "execution result exceeds the configured limit".into(),
                )
                .into());
            }
            Some(encoded)
        } else {
            None
        };
        let effective = if cancel_won {
            ExecutionStatus::Cancelled
        } else {
            completion.status.execution_status()
        };
        let error = if cancel_won {
            None
        } else {
            completion.error.as_ref()
        };
        let retrying = effective == ExecutionStatus::Retrying;
        let available_at = if retrying {
            add_seconds(now, "delay_s", completion.delay_s.unwrap_or(0.0))?
        } else {
            current.available_at
        };
        let sql = format!(
            "UPDATE `{}` SET status = ?, updated_at = ?, version = version + 1, lease_token = NULL, \
             lease_expires_at = NULL, worker_id = NULL, result = ?, error = ?, available_at = ?, \
             finished_at = ? WHERE id = ? AND lease_token = ? AND lease_expires_at IS NOT NULL \
             AND lease_expires_at > ? AND status IN ({})",
            self.t(),
            status_list(completion.status.allowed_sources())
        );
        let params: Vec<DbValue> = vec![
            effective.as_str().into(),
            bind_time(now),
            encoded_result.as_ref().map(|r| r.to_string()).into(),
            bind_error(error)?,
            bind_time(available_at),
            if retrying {
                DbValue::NULL
            } else {
                bind_time(now)
            },
            bind_uuid(lease.execution_id),
            bind_uuid(lease.lease_token),
            bind_time(now),
        ];
        tx.exec_drop(sql, Params::Positional(params)).await?;
        if tx.affected_rows() != 1 {
            // `current` is locked, so it is still what the CAS saw: replay or stale (step 6).
            let replay = current.status == effective
                && !retrying
                && !cancel_won
                && current.status.is_terminal()
                && to_canonical_string(current.result.as_ref().unwrap_or(&Value::Null))
                    == to_canonical_string(if encoded_result.is_some() {
                        &requested_result
                    } else {
                        &Value::Null
                    })
                && current.error.as_ref() == error;
            return if replay {
                Ok(current)
            } else {
                Err(stale(StaleReason::LeaseInvalid))
            };
        }
        let sql = format!(
            "UPDATE `{}` SET status = ?, error = ?, finished_at = ? WHERE id = ? AND execution_id = ? \
             AND lease_token = ? AND status = 'running'",
            self.a()
        );
        let params: Vec<DbValue> = vec![
            attempt_status_for(effective).as_str().into(),
            bind_error(error)?,
            bind_time(now),
            bind_uuid(lease.attempt_id),
            bind_uuid(lease.execution_id),
            bind_uuid(lease.lease_token),
        ];
        tx.exec_drop(sql, Params::Positional(params)).await?;
        if tx.affected_rows() != 1 {
            return Err(stale(StaleReason::AttemptInvalid));
        }
        self.select_by_id(tx, lease.execution_id, None, false)
            .await?
            .ok_or_else(|| stale(StaleReason::ExecutionMissing))
    }

    async fn complete_once(
        &self,
        lease: &LeaseRef,
        completion: &Completion,
    ) -> OpResult<Execution> {
        let now = self.now();
        let mut conn = self.conn().await?;
        let mut tx = begin(&mut conn).await?;
        let out = self.complete_in_tx(&mut tx, lease, completion, now).await?;
        commit(self, tx).await?;
        Ok(out)
    }

    pub(crate) async fn complete_impl(
        &self,
        lease: &LeaseRef,
        completion: &Completion,
    ) -> Result<Execution, ExecutionError> {
        completion.validate()?;
        self.run("ack", || self.complete_once(lease, completion))
            .await
    }

    async fn complete_many_once(
        &self,
        items: &[(LeaseRef, Completion)],
    ) -> OpResult<Vec<Result<Execution, ExecutionError>>> {
        let now = self.now();
        let mut conn = self.conn().await?;
        let mut tx = begin(&mut conn).await?;
        let mut out = Vec::with_capacity(items.len());
        for (lease, completion) in items {
            if let Err(e) = completion.validate() {
                out.push(Err(e));
                continue;
            }
            tx.query_drop("SAVEPOINT onestep_item").await?;
            match self.complete_in_tx(&mut tx, lease, completion, now).await {
                Ok(x) => {
                    tx.query_drop("RELEASE SAVEPOINT onestep_item").await?;
                    out.push(Ok(x));
                }
                Err(OpError::Domain(e)) => {
                    tx.query_drop("ROLLBACK TO SAVEPOINT onestep_item").await?;
                    out.push(Err(e));
                }
                Err(e) => return Err(e),
            }
        }
        commit(self, tx).await?;
        Ok(out)
    }

    pub(crate) async fn complete_many_impl(
        &self,
        items: &[(LeaseRef, Completion)],
    ) -> Result<Vec<Result<Execution, ExecutionError>>, ExecutionError> {
        if items.is_empty() {
            return Ok(Vec::new());
        }
        self.run("ack", || self.complete_many_once(items)).await
    }

    async fn release_once(&self, lease: &LeaseRef) -> OpResult<Execution> {
        let now = self.now();
        let mut conn = self.conn().await?;
        let mut tx = begin(&mut conn).await?;
        if self
            .select_by_id(&mut tx, lease.execution_id, None, true)
            .await?
            .is_none()
        {
            return Err(stale(StaleReason::ExecutionMissing));
        }
        let sql = format!(
            "UPDATE `{}` SET status = 'queued', available_at = ?, updated_at = ?, lease_token = NULL, \
             lease_expires_at = NULL, worker_id = NULL, version = version + 1 WHERE id = ? \
             AND lease_token = ? AND status = 'running' AND lease_expires_at IS NOT NULL \
             AND lease_expires_at > ?",
            self.t()
        );
        tx.exec_drop(
            sql,
            (
                bind_time(now),
                bind_time(now),
                bind_uuid(lease.execution_id),
                bind_uuid(lease.lease_token),
                bind_time(now),
            ),
        )
        .await?;
        if tx.affected_rows() != 1 {
            return Err(stale(StaleReason::LeaseInvalid));
        }
        let sql = format!(
            "UPDATE `{}` SET status = 'lease_lost', finished_at = ? WHERE id = ? AND execution_id = ? \
             AND lease_token = ? AND status = 'running'",
            self.a()
        );
        tx.exec_drop(
            sql,
            (
                bind_time(now),
                bind_uuid(lease.attempt_id),
                bind_uuid(lease.execution_id),
                bind_uuid(lease.lease_token),
            ),
        )
        .await?;
        if tx.affected_rows() != 1 {
            return Err(stale(StaleReason::AttemptInvalid));
        }
        let out = self
            .select_by_id(&mut tx, lease.execution_id, None, false)
            .await?
            .ok_or_else(|| stale(StaleReason::ExecutionMissing))?;
        commit(self, tx).await?;
        Ok(out)
    }

    pub(crate) async fn release_impl(&self, lease: &LeaseRef) -> Result<Execution, ExecutionError> {
        self.run("release", || self.release_once(lease)).await
    }
}
