//! `complete_many`: several completions in one transaction, each fenced by its own token.
//! Distinct executions whose fence holds on the locked rows are written set-based (one locking
//! read, one UPDATE per table with per-row values through `CASE`, one read-back); the others,
//! and every item when the set-based counts disagree, take the single-completion path of
//! `fenced_writes.rs` under a savepoint each, so a stale item does not undo the rest.

use std::collections::HashMap;

use chrono::{DateTime, NaiveDateTime, Utc};
use mysql_async::prelude::Queryable;
use mysql_async::{Params, Row, Transaction, Value as DbValue};
use onestep_core::execution::{Completion, LeaseRef};
use onestep_core::status::attempt_status_for;
use onestep_core::{Execution, ExecutionError, StaleReason};
use uuid::Uuid;

use crate::backend::{MySqlBackend, begin};
use crate::errors::{OpError, OpResult};
use crate::fenced_writes::{Plan, finished_at_param, result_param, status_list};
use crate::rows::{
    EXECUTION_COLUMN_COUNT, EXECUTION_COLUMNS, bind_error, bind_time, bind_uuid, decode_execution,
    parse_uuid, placeholders,
};

/// A row locked by `complete_many`: the execution, its lease token and lease expiry.
type Locked = (Execution, Option<Uuid>, Option<DateTime<Utc>>);

impl MySqlBackend {
    async fn complete_many_once(
        &self,
        items: &[(LeaseRef, Completion)],
    ) -> OpResult<Vec<Result<Execution, ExecutionError>>> {
        let now = self.now();
        let mut conn = self.conn().await?;
        let mut tx = begin(&mut conn).await?;
        // Any failure rolls back at once, so no row lock outlives the call
        // (docs/lease-protocol.md#refused-writes).
        let outcome = self.complete_many_in(&mut tx, items, now).await;
        self.finish(tx, outcome).await
    }

    async fn complete_many_in(
        &self,
        tx: &mut Transaction<'_>,
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
        let mut ids: Vec<_> = pending.iter().map(|&i| items[i].0.execution_id).collect();
        ids.sort_unstable();
        ids.dedup();
        let stragglers = if pending.len() >= 2 && ids.len() == pending.len() {
            self.complete_set(tx, items, pending, now, &mut out).await?
        } else {
            pending
        };
        for i in stragglers {
            let (lease, completion) = &items[i];
            tx.query_drop("SAVEPOINT onestep_item").await?;
            match self.complete_in_tx(tx, lease, completion, now).await {
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
            // An undecodable row is left out: its item takes the per-item path, which reports
            // the decoding error for that item alone (docs/semantics.md#undecodable-rows).
            let token = match r.take::<DbValue, _>(EXECUTION_COLUMN_COUNT) {
                None | Some(DbValue::NULL) => None,
                Some(v) => match parse_uuid(&v) {
                    Ok(t) => Some(t),
                    Err(_) => continue,
                },
            };
            let expiry = r
                .take_opt::<Option<NaiveDateTime>, _>(EXECUTION_COLUMN_COUNT + 1)
                .and_then(Result::ok)
                .flatten()
                .map(|t| t.and_utc());
            let Ok(e) = decode_execution(r) else {
                continue;
            };
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
            params.push(result_param(p));
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
            params.push(finished_at_param(p, now));
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

    pub(crate) async fn complete_batch(
        &self,
        items: &[(LeaseRef, Completion)],
    ) -> Result<Vec<Result<Execution, ExecutionError>>, ExecutionError> {
        if items.is_empty() {
            return Ok(Vec::new());
        }
        self.run("ack", || self.complete_many_once(items)).await
    }
}
