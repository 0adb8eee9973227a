//! Fenced worker writes (docs/semantics.md#heartbeat, docs/semantics.md#completion, docs/semantics.md#release): heartbeat (T8), complete (T9–T13, cancel wins,
//! idempotent replay), complete_many (set-based writes for the items whose fence holds on the
//! locked rows, savepoint per item for the rest) and release (T14).

use std::collections::HashMap;

use chrono::{DateTime, NaiveDateTime, Utc};
use mysql_async::prelude::Queryable;
use mysql_async::{Params, Row, Transaction, Value as DbValue};
use onestep_core::canonical::to_canonical_string;
use onestep_core::codec::{ValueField, encode_value};
use onestep_core::execution::{Completion, HeartbeatResult, LeaseRef};
use onestep_core::request::validate_lease_duration;
use onestep_core::status::attempt_status_for;
use onestep_core::time::add_seconds;
use onestep_core::{
    CompletionStatus, ErrorObject, Execution, ExecutionError, ExecutionStatus, StaleReason,
};
use serde_json::Value;
use uuid::Uuid;

use crate::backend::{MySqlBackend, begin, commit};
use crate::errors::{OpError, OpResult};
use crate::rows::{
    EXECUTION_COLUMN_COUNT, EXECUTION_COLUMNS, bind_error, bind_time, bind_uuid, decode_execution,
    parse_uuid, placeholders,
};

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

/// A row locked by `complete_many`: the execution, its lease token and lease expiry.
type Locked = (Execution, Option<Uuid>, Option<DateTime<Utc>>);

/// What one completion writes, derived from the locked row (docs/semantics.md#completion steps 2–4).
struct Plan {
    cancel_won: bool,
    requested_result: Value,
    encoded_result: Option<Value>,
    effective: ExecutionStatus,
    error: Option<ErrorObject>,
    retrying: bool,
    available_at: DateTime<Utc>,
}

impl Plan {
    fn result_param(&self) -> DbValue {
        self.encoded_result.as_ref().map(|r| r.to_string()).into()
    }

    fn finished_at_param(&self, now: DateTime<Utc>) -> DbValue {
        if self.retrying {
            DbValue::NULL
        } else {
            bind_time(now)
        }
    }

    /// Step 6: the CAS matched nothing; the locked row is an identical terminal completion.
    fn is_replay_of(&self, current: &Execution) -> bool {
        current.status == self.effective
            && !self.retrying
            && !self.cancel_won
            && current.status.is_terminal()
            && to_canonical_string(current.result.as_ref().unwrap_or(&Value::Null))
                == to_canonical_string(if self.encoded_result.is_some() {
                    &self.requested_result
                } else {
                    &Value::Null
                })
            && current.error == self.error
    }
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

    /// docs/semantics.md#completion steps 1–8 inside `tx`. Domain failures (stale lease, encoding) leave `tx`
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
        let plan = self.plan(&current, completion, now)?;
        let sql = format!(
            "UPDATE `{}` SET status = ?, updated_at = ?, version = version + 1, lease_token = NULL, \
             lease_expires_at = NULL, worker_id = NULL, result = ?, error = ?, available_at = ?, \
             finished_at = ? WHERE id = ? AND lease_token = ? AND lease_expires_at IS NOT NULL \
             AND lease_expires_at > ? AND status IN ({})",
            self.t(),
            status_list(completion.status.allowed_sources())
        );
        let params: Vec<DbValue> = vec![
            plan.effective.as_str().into(),
            bind_time(now),
            plan.result_param(),
            bind_error(plan.error.as_ref())?,
            bind_time(plan.available_at),
            plan.finished_at_param(now),
            bind_uuid(lease.execution_id),
            bind_uuid(lease.lease_token),
            bind_time(now),
        ];
        tx.exec_drop(sql, Params::Positional(params)).await?;
        if tx.affected_rows() != 1 {
            // `current` is locked, so it is still what the CAS saw: replay or stale (step 6).
            return if plan.is_replay_of(&current) {
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
            attempt_status_for(plan.effective).as_str().into(),
            bind_error(plan.error.as_ref())?,
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

    /// Steps 2–4 of docs/semantics.md#completion for the locked row `current`: cancel wins over success, the result
    /// is encoded and size-checked, and the values the CAS writes are derived.
    fn plan(
        &self,
        current: &Execution,
        completion: &Completion,
        now: DateTime<Utc>,
    ) -> OpResult<Plan> {
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
            completion.error.clone()
        };
        let retrying = effective == ExecutionStatus::Retrying;
        let available_at = if retrying {
            add_seconds(now, "delay_s", completion.delay_s.unwrap_or(0.0))?
        } else {
            current.available_at
        };
        Ok(Plan {
            cancel_won,
            requested_result,
            encoded_result,
            effective,
            error,
            retrying,
            available_at,
        })
    }

    async fn complete_once(
        &self,
        lease: &LeaseRef,
        completion: &Completion,
    ) -> OpResult<Execution> {
        let now = self.now();
        let mut conn = self.conn().await?;
        let mut tx = begin(&mut conn).await?;
        match self.complete_in_tx(&mut tx, lease, completion, now).await {
            Ok(out) => {
                commit(self, tx).await?;
                Ok(out)
            }
            Err(e) => {
                // Release the row lock before returning (see `release_once`).
                let _ = tx.rollback().await;
                Err(e)
            }
        }
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
        let mut out: Vec<Option<Result<Execution, ExecutionError>>> =
            (0..items.len()).map(|_| None).collect();
        let mut pending = Vec::with_capacity(items.len());
        for (i, (_, completion)) in items.iter().enumerate() {
            match completion.validate() {
                Ok(()) => pending.push(i),
                Err(e) => out[i] = Some(Err(e)),
            }
        }
        let mut ids: Vec<_> = pending.iter().map(|&i| items[i].0.execution_id).collect();
        ids.sort_unstable();
        ids.dedup();
        let stragglers = if pending.len() >= 2 && ids.len() == pending.len() {
            self.complete_set(&mut tx, items, pending, now, &mut out)
                .await?
        } else {
            pending
        };
        for i in stragglers {
            let (lease, completion) = &items[i];
            tx.query_drop("SAVEPOINT onestep_item").await?;
            match self.complete_in_tx(&mut tx, lease, completion, now).await {
                Ok(x) => {
                    tx.query_drop("RELEASE SAVEPOINT onestep_item").await?;
                    out[i] = Some(Ok(x));
                }
                Err(OpError::Domain(e)) => {
                    tx.query_drop("ROLLBACK TO SAVEPOINT onestep_item").await?;
                    out[i] = Some(Err(e));
                }
                Err(e) => return Err(e),
            }
        }
        commit(self, tx).await?;
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
    /// row, then — for the items whose fence (token, live lease, allowed status) holds on the
    /// locked row — one UPDATE of the executions and one of the attempts (per-row values through
    /// `CASE`, each row still fenced by its own token in the WHERE clause) and one read-back.
    /// The matched-row counts must equal the predicted items, otherwise the set-based writes are
    /// rolled back to a savepoint and every item takes the per-item path. Returns the items left
    /// for the per-item path (stale, replayed or missing rows), whose outcome it decides exactly
    /// as for a single completion.
    async fn complete_set(
        &self,
        tx: &mut Transaction<'_>,
        items: &[(LeaseRef, Completion)],
        pending: Vec<usize>,
        now: DateTime<Utc>,
        out: &mut [Option<Result<Execution, ExecutionError>>],
    ) -> OpResult<Vec<usize>> {
        let sql = format!(
            "SELECT {EXECUTION_COLUMNS}, lease_token, lease_expires_at FROM `{}` WHERE id IN ({}) \
             FOR UPDATE",
            self.t(),
            placeholders(pending.len())
        );
        let params: Vec<DbValue> = pending
            .iter()
            .map(|&i| bind_uuid(items[i].0.execution_id))
            .collect();
        let rows: Vec<Row> = tx.exec(sql, Params::Positional(params)).await?;
        let mut locked: HashMap<Uuid, Locked> = HashMap::with_capacity(rows.len());
        for mut r in rows {
            let token = match r.take::<DbValue, _>(EXECUTION_COLUMN_COUNT) {
                None | Some(DbValue::NULL) => None,
                Some(v) => Some(parse_uuid(&v).map_err(ExecutionError::Encoding)?),
            };
            let expiry = r
                .take::<Option<NaiveDateTime>, _>(EXECUTION_COLUMN_COUNT + 1)
                .flatten()
                .map(|t| t.and_utc());
            let e = decode_execution(r)?;
            locked.insert(e.id, (e, token, expiry));
        }
        let mut fast: Vec<(usize, Plan)> = Vec::with_capacity(pending.len());
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
                Ok(plan) => fast.push((i, plan)),
                Err(OpError::Domain(e)) => out[i] = Some(Err(e)),
                Err(e) => return Err(e),
            }
        }
        if fast.len() < 2 {
            rest.extend(fast.into_iter().map(|(i, _)| i));
            return Ok(rest);
        }
        tx.query_drop("SAVEPOINT onestep_batch").await?;
        if !self.write_set(tx, items, &fast, now).await? {
            tx.query_drop("ROLLBACK TO SAVEPOINT onestep_batch").await?;
            rest.extend(fast.into_iter().map(|(i, _)| i));
            return Ok(rest);
        }
        tx.query_drop("RELEASE SAVEPOINT onestep_batch").await?;
        let sql = format!(
            "SELECT {EXECUTION_COLUMNS} FROM `{}` WHERE id IN ({})",
            self.t(),
            placeholders(fast.len())
        );
        let params: Vec<DbValue> = fast
            .iter()
            .map(|(i, _)| bind_uuid(items[*i].0.execution_id))
            .collect();
        let rows: Vec<Row> = tx.exec(sql, Params::Positional(params)).await?;
        let mut by_id = HashMap::with_capacity(rows.len());
        for r in rows {
            let e = decode_execution(r)?;
            by_id.insert(e.id, e);
        }
        for (i, _) in fast {
            out[i] = Some(
                by_id
                    .remove(&items[i].0.execution_id)
                    .ok_or(ExecutionError::StaleLease(StaleReason::ExecutionMissing)),
            );
        }
        Ok(rest)
    }

    /// The two set-based CAS writes of [`Self::complete_set`]; `false` when a count differs from
    /// the items (the caller rolls back to its savepoint).
    async fn write_set(
        &self,
        tx: &mut Transaction<'_>,
        items: &[(LeaseRef, Completion)],
        fast: &[(usize, Plan)],
        now: DateTime<Utc>,
    ) -> OpResult<bool> {
        let n = fast.len();
        let case: String = fast.iter().map(|_| " WHEN ? THEN ?").collect();
        let fences: Vec<String> = fast
            .iter()
            .map(|(i, _)| {
                format!(
                    "(id = ? AND lease_token = ? AND status IN ({}))",
                    status_list(items[*i].1.status.allowed_sources())
                )
            })
            .collect();
        let sql = format!(
            "UPDATE `{t}` SET status = CASE id{case} END, updated_at = ?, version = version + 1, \
             lease_token = NULL, lease_expires_at = NULL, worker_id = NULL, \
             result = CASE id{case} END, error = CASE id{case} END, \
             available_at = CASE id{case} END, finished_at = CASE id{case} END \
             WHERE id IN ({ids}) AND lease_expires_at IS NOT NULL AND lease_expires_at > ? \
             AND ({fences})",
            t = self.t(),
            ids = placeholders(n),
            fences = fences.join(" OR "),
        );
        let id_of = |i: usize| bind_uuid(items[i].0.execution_id);
        let mut params: Vec<DbValue> = Vec::with_capacity(n * 14 + 2);
        for (i, p) in fast {
            params.push(id_of(*i));
            params.push(p.effective.as_str().into());
        }
        params.push(bind_time(now));
        for (i, p) in fast {
            params.push(id_of(*i));
            params.push(p.result_param());
        }
        for (i, p) in fast {
            params.push(id_of(*i));
            params.push(bind_error(p.error.as_ref())?);
        }
        for (i, p) in fast {
            params.push(id_of(*i));
            params.push(bind_time(p.available_at));
        }
        for (i, p) in fast {
            params.push(id_of(*i));
            params.push(p.finished_at_param(now));
        }
        params.extend(fast.iter().map(|(i, _)| id_of(*i)));
        params.push(bind_time(now));
        for (i, _) in fast {
            params.push(id_of(*i));
            params.push(bind_uuid(items[*i].0.lease_token));
        }
        tx.exec_drop(sql, Params::Positional(params)).await?;
        if tx.affected_rows() != n as u64 {
            return Ok(false);
        }
        let fences = vec!["(id = ? AND execution_id = ? AND lease_token = ?)"; n].join(" OR ");
        let sql = format!(
            "UPDATE `{a}` SET status = CASE id{case} END, error = CASE id{case} END, \
             finished_at = ? WHERE id IN ({ids}) AND status = 'running' AND ({fences})",
            a = self.a(),
            ids = placeholders(n),
        );
        let attempt_of = |i: usize| bind_uuid(items[i].0.attempt_id);
        let mut params: Vec<DbValue> = Vec::with_capacity(n * 8 + 1);
        for (i, p) in fast {
            params.push(attempt_of(*i));
            params.push(attempt_status_for(p.effective).as_str().into());
        }
        for (i, p) in fast {
            params.push(attempt_of(*i));
            params.push(bind_error(p.error.as_ref())?);
        }
        params.push(bind_time(now));
        params.extend(fast.iter().map(|(i, _)| attempt_of(*i)));
        for (i, _) in fast {
            let lease = &items[*i].0;
            params.push(attempt_of(*i));
            params.push(bind_uuid(lease.execution_id));
            params.push(bind_uuid(lease.lease_token));
        }
        tx.exec_drop(sql, Params::Positional(params)).await?;
        Ok(tx.affected_rows() == n as u64)
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
        match self.release_in(&mut tx, lease, now).await {
            Ok(out) => {
                commit(self, tx).await?;
                Ok(out)
            }
            Err(e) => {
                // Roll back now, not when the pool recycles the connection: the row lock taken
                // by the locking read must be gone before the caller's next claim, which would
                // otherwise skip the row (SKIP LOCKED).
                let _ = tx.rollback().await;
                Err(e)
            }
        }
    }

    async fn release_in(
        &self,
        tx: &mut mysql_async::Transaction<'_>,
        lease: &LeaseRef,
        now: chrono::DateTime<chrono::Utc>,
    ) -> OpResult<Execution> {
        let tx = &mut *tx;
        if self
            .select_by_id(tx, lease.execution_id, None, true)
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
        self.select_by_id(tx, lease.execution_id, None, false)
            .await?
            .ok_or_else(|| stale(StaleReason::ExecutionMissing))
    }

    pub(crate) async fn release_impl(&self, lease: &LeaseRef) -> Result<Execution, ExecutionError> {
        self.run("release", || self.release_once(lease)).await
    }
}
