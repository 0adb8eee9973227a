//! Claim (docs/semantics.md#claim-and-maintenance): bounded maintenance, then a `FOR UPDATE SKIP LOCKED` read of the whole
//! rows in claim-index order, then set-based writes — one UPDATE for the whole batch (per-row
//! token via `CASE`), one multi-row INSERT of attempts — all in one transaction. The leases are
//! built from the locked rows plus the UPDATE's known changes, so there is no read-back.
//! A claim of one task name on tables with the keys table is the fair claim ([`crate::fair`],
//! docs/semantics.md#fair-claim), which shares the maintenance and the writes.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use mysql_async::prelude::Queryable;
use mysql_async::{Params, Row, Transaction, Value as DbValue};
use onestep_core::error::UNDECODABLE_DEFER_S;
use onestep_core::request::ClaimRequest;
use onestep_core::store::fair::plain_claim_namespace;
use onestep_core::store::lease::{LeaseWindow, claim_rows};
use onestep_core::time::add_seconds;
use onestep_core::{ExecutionError, ExecutionLease};
use uuid::Uuid;

use crate::backend::{MySqlBackend, begin};
use crate::errors::OpResult;
use crate::rows::{bind_time, bind_uuid, decode_execution, padded, placeholders};
use crate::schema::{ix_claim_priority, ix_claimable};

impl MySqlBackend {
    /// The locking read of step 4. On tables with the `claimable` column the read is forced onto
    /// `ix_<T>_claimable`, whose prefix `(namespace, task_name, claimable)` excludes finished rows
    /// and whose suffix `(available_at, created_at, id)` is the claim order, so the scan stops
    /// after `limit` matching rows (no filesort for a single task name).
    /// On tables with the priority columns the order starts with `priority` (lower first,
    /// docs/semantics.md#priority-and-fairness-key) and the read is forced onto
    /// `ix_<T>_claim_priority`, the same prefix with `priority` before the suffix.
    fn claim_select_sql(&self, task_count: usize, limit: u32) -> String {
        let f = &self.inner.features;
        let hint = if f.claim_priority_index && f.priority_columns {
            format!(" FORCE INDEX (`{}`)", ix_claim_priority(&self.inner.names))
        } else if f.claimable_index {
            format!(" FORCE INDEX (`{}`)", ix_claimable(&self.inner.names))
        } else {
            String::new()
        };
        let priority = if f.priority_columns {
            "e.priority, "
        } else {
            ""
        };
        let task = if task_count == 1 {
            "e.task_name = ?".to_owned()
        } else {
            format!("e.task_name IN ({})", placeholders(task_count))
        };
        format!(
            "SELECT {cols_e} FROM `{t}` e{hint} \
             WHERE e.namespace = ? AND {task} AND {claimable} AND e.available_at <= ? \
             AND (e.expires_at IS NULL OR e.expires_at > ? OR {lost}) \
             ORDER BY {priority}e.available_at, e.created_at, e.id LIMIT {limit} \
             FOR UPDATE SKIP LOCKED",
            cols_e = self.cols_e(),
            t = self.t(),
            claimable = self.claimable_sql(),
            lost = self.lease_lost_retry_sql(),
        )
    }

    /// The read statements a plain claim runs (several task names, or tables without the keys
    /// table; the fair claim's are [`Self::fair_claim_read_statements`]), with `?`
    /// placeholders, for EXPLAIN tooling and tests:
    /// `(label, sql)` for the T5, T6 and T7 candidate reads and the locking claim read (binds:
    /// now; now; now; namespace, task names…, now, now).
    pub fn claim_read_statements(
        &self,
        task_count: usize,
        limit: u32,
    ) -> Vec<(&'static str, String)> {
        let mut v = self.maintenance_read_statements();
        v.push(("claim", self.claim_select_sql(task_count, limit)));
        v
    }

    pub(crate) async fn claim_once(&self, req: &ClaimRequest) -> OpResult<Vec<ExecutionLease>> {
        let window = LeaseWindow::new(self.now(), req.lease_duration_s)?;
        let mut conn = self.conn().await?;
        let mut tx = begin(&mut conn).await?;
        // Any failure rolls back at once (docs/lease-protocol.md#refused-writes).
        let outcome = self
            .claim_in(&mut tx, req, window.now, window.expires_at)
            .await;
        self.finish(tx, outcome).await
    }

    async fn claim_in(
        &self,
        tx: &mut Transaction<'_>,
        req: &ClaimRequest,
        now: DateTime<Utc>,
        lease_expires_at: DateTime<Utc>,
    ) -> OpResult<Vec<ExecutionLease>> {
        // docs/semantics.md#fair-claim: one task name on tables with the keys table.
        let fair = self.inner.features.fair_keys && req.task_names.len() == 1;
        let namespace = if fair {
            ""
        } else {
            plain_claim_namespace(req, self.inner.features.fair_keys)?
        };
        self.maintain(tx, now).await?;
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
        if fair {
            return self.fair_claim(tx, req, now, lease_expires_at).await;
        }

        let mut params: Vec<DbValue> = vec![namespace.into()];
        params.extend(req.task_names.iter().map(|t| DbValue::from(t.as_str())));
        params.push(bind_time(now));
        params.push(bind_time(now));
        let sql = self.claim_select_sql(req.task_names.len(), req.limit);
        let rows: Vec<Row> = tx.exec(sql, Params::Positional(params)).await?;
        let rows = rows
            .into_iter()
            .map(|r| (r.as_ref(0).cloned(), decode_execution(r)));
        let (mut picked, deferred) =
            claim_rows(rows, self.attempt_ids, lease_expires_at, now, |e| {
                tracing::error!(error = %e, defer_s = UNDECODABLE_DEFER_S,
                    "claim skipped an undecodable row and deferred it");
            });
        if !deferred.is_empty() {
            self.defer_undecodable(tx, deferred, now).await?;
        }
        if picked.is_empty() {
            return Ok(Vec::new());
        }
        self.write_claims(tx, &picked, &req.worker_id, now, lease_expires_at)
            .await?;
        let mut trace_parents = self.trace_parents(tx, &picked).await?;
        for l in &mut picked {
            l.trace_parent = trace_parents.remove(&l.execution.id);
        }
        Ok(picked)
    }

    /// Moves the undecodable rows a claim read (locked, by their stored id) to
    /// `now + UNDECODABLE_DEFER_S`, nothing else changed (docs/semantics.md#undecodable-rows).
    pub(crate) async fn defer_undecodable(
        &self,
        tx: &mut Transaction<'_>,
        ids: Vec<DbValue>,
        now: DateTime<Utc>,
    ) -> OpResult<()> {
        let until = add_seconds(now, "undecodable defer", UNDECODABLE_DEFER_S)?;
        let sql = format!(
            "UPDATE `{}` SET available_at = ? WHERE id IN ({})",
            self.t(),
            placeholders(ids.len())
        );
        let mut params = Vec::with_capacity(ids.len() + 1);
        params.push(bind_time(until));
        params.extend(ids);
        tx.exec_drop(sql, Params::Positional(params)).await?;
        Ok(())
    }

    /// The stored traceparents of the claimed executions (docs/observability.md#traces): one
    /// primary-key lookup per claim batch, and none while traces are off.
    pub(crate) async fn trace_parents(
        &self,
        tx: &mut Transaction<'_>,
        picked: &[ExecutionLease],
    ) -> OpResult<HashMap<Uuid, String>> {
        let Some(table) = self.tr() else {
            return Ok(HashMap::new());
        };
        let sql = format!(
            "SELECT execution_id, traceparent FROM `{table}` WHERE execution_id IN ({})",
            placeholders(picked.len())
        );
        let params: Vec<DbValue> = picked.iter().map(|p| bind_uuid(p.execution.id)).collect();
        let rows: Vec<(String, String)> = tx.exec(sql, Params::Positional(params)).await?;
        Ok(rows
            .into_iter()
            .filter_map(|(id, tp)| Uuid::try_parse(&id).ok().map(|id| (id, tp)))
            .collect())
    }

    /// Step 5, set-based: one UPDATE (T2) and one multi-row INSERT of `running` attempts.
    pub(crate) async fn write_claims(
        &self,
        tx: &mut Transaction<'_>,
        picked: &[ExecutionLease],
        worker_id: &str,
        now: DateTime<Utc>,
        lease_expires_at: DateTime<Utc>,
    ) -> OpResult<()> {
        // Padded (a repeated id sets the same token once): one text per power of two.
        let rows = padded(picked);
        let case: String = rows.iter().map(|_| " WHEN ? THEN ?").collect();
        let sql = format!(
            "UPDATE `{t}` SET status = 'running', attempts = attempts + 1, \
             lease_token = CASE id{case} END, lease_expires_at = ?, worker_id = ?, \
             started_at = COALESCE(started_at, ?), updated_at = ?, version = version + 1 \
             WHERE id IN ({ids})",
            t = self.t(),
            ids = placeholders(rows.len()),
        );
        let mut params: Vec<DbValue> = Vec::with_capacity(rows.len() * 3 + 4);
        for p in &rows {
            params.push(bind_uuid(p.execution.id));
            params.push(bind_uuid(p.lease_token));
        }
        params.push(bind_time(lease_expires_at));
        params.push(worker_id.into());
        params.push(bind_time(now));
        params.push(bind_time(now));
        params.extend(rows.iter().map(|p| bind_uuid(p.execution.id)));
        tx.exec_drop(sql, Params::Positional(params)).await?;
        let matched = tx.affected_rows();
        if matched != picked.len() as u64 {
            return Err(ExecutionError::Encoding(format!(
                "claim updated {matched} of {} locked rows",
                picked.len()
            ))
            .into());
        }
        let row = format!("({})", placeholders(8));
        let sql = format!(
            "INSERT INTO `{a}` (id, execution_id, attempt_no, lease_token, worker_id, status, \
             started_at, heartbeat_at) VALUES {}",
            vec![row; picked.len()].join(", "),
            a = self.a(),
        );
        let mut params: Vec<DbValue> = Vec::with_capacity(picked.len() * 8);
        for p in picked {
            params.extend([
                bind_uuid(p.attempt_id),
                bind_uuid(p.execution.id),
                p.attempt_no.into(),
                bind_uuid(p.lease_token),
                worker_id.into(),
                "running".into(),
                bind_time(now),
                bind_time(now),
            ]);
        }
        tx.exec_drop(sql, Params::Positional(params)).await?;
        Ok(())
    }
}
