//! Claim-time maintenance (docs/semantics.md#claim-and-maintenance steps 1–3): expire overdue queued work (T5), finish dead
//! cancel requests (T6), reclaim expired leases (T7). Each step reads at most
//! `reclaim_batch_size` candidates through an index range that holds only live rows, and every
//! write is a compare-and-set on what was read, so concurrent claimers deduplicate.

use chrono::{DateTime, Utc};
use mysql_async::prelude::Queryable;
use mysql_async::{Params, Row, Transaction, Value as DbValue};
use uuid::Uuid;

use crate::backend::MySqlBackend;
use crate::errors::OpResult;
use crate::rows::{bind_time, bind_uuid, parse_uuid, placeholders};

impl MySqlBackend {
    /// For the alias `e`, an execution that started and waits to go on, which expiry never
    /// ends (docs/semantics.md#lease-lost-retry): `retrying` with its latest attempt
    /// `lease_lost`, or `queued` with its latest attempt `parked` (a sleep,
    /// docs/steps.md#sleep). Each branch probes the attempts' unique index once.
    pub(crate) fn lease_lost_retry_sql(&self) -> String {
        format!(
            "((e.status = 'retrying' AND EXISTS (SELECT 1 FROM `{a}` la \
             WHERE la.execution_id = e.id AND la.attempt_no = e.attempts \
             AND la.status = 'lease_lost')) \
             OR (e.status = 'queued' AND e.attempts > 0 AND EXISTS (SELECT 1 FROM `{a}` lp \
             WHERE lp.execution_id = e.id AND lp.attempt_no = e.attempts \
             AND lp.status = 'parked')))",
            a = self.a()
        )
    }

    /// The "claimable status" predicate for alias `e`: the indexed generated column on tables
    /// this crate created, the plain status list otherwise.
    pub(crate) fn claimable_sql(&self) -> &'static str {
        if self.inner.features.claimable_column {
            "e.claimable = 1"
        } else {
            "e.status IN ('queued','retrying')"
        }
    }

    fn expire_select_sql(&self) -> String {
        self.expire_select_sql_with("e.id, e.version")
    }

    fn expire_select_sql_with(&self, columns: &str) -> String {
        format!(
            "SELECT {columns} FROM `{t}` e WHERE {claimable} \
             AND e.expires_at IS NOT NULL AND e.expires_at <= ? AND NOT {lost} \
             ORDER BY e.expires_at, e.id LIMIT {batch}",
            t = self.t(),
            claimable = self.claimable_sql(),
            lost = self.lease_lost_retry_sql(),
            batch = self.inner.reclaim_batch_size,
        )
    }

    fn lease_select_sql(&self, from: &str) -> String {
        self.lease_select_sql_with("id, lease_token, version", from)
    }

    fn lease_select_sql_with(&self, columns: &str, from: &str) -> String {
        format!(
            "SELECT {columns} FROM `{t}` WHERE status = '{from}' \
             AND lease_expires_at IS NOT NULL AND lease_expires_at <= ? \
             ORDER BY lease_expires_at, id LIMIT {batch}",
            t = self.t(),
            batch = self.inner.reclaim_batch_size,
        )
    }

    pub(crate) fn maintenance_read_statements(&self) -> Vec<(&'static str, String)> {
        vec![
            ("expire (T5)", self.expire_select_sql()),
            (
                "dead cancel (T6)",
                self.lease_select_sql("cancel_requested"),
            ),
            ("reclaim (T7)", self.lease_select_sql("running")),
        ]
    }

    /// The three candidate reads of [`Self::maintenance_read_statements`] as one statement
    /// (`UNION ALL` of the unchanged, individually bounded and ordered reads; binds: now, now,
    /// now). Columns: step (1 = T5, 2 = T6, 3 = T7), id, lease token (NULL for T5), version.
    fn maintenance_candidates_sql(&self) -> String {
        format!(
            "({}) UNION ALL ({}) UNION ALL ({})",
            self.expire_select_sql_with("1 AS step, e.id, NULL AS lease_token, e.version"),
            self.lease_select_sql_with("2, id, lease_token, version", "cancel_requested"),
            self.lease_select_sql_with("3, id, lease_token, version", "running"),
        )
    }

    /// Steps 1–3 of a claim, inside its transaction: one read of every step's candidates, then
    /// each step's compare-and-set writes (only when it has candidates). The steps' candidate
    /// sets are disjoint by status (T5 queued/retrying, T6 cancel_requested, T7 running), so
    /// reading them together before any write finds what reading them one after the other would.
    pub(crate) async fn maintain(
        &self,
        tx: &mut Transaction<'_>,
        now: DateTime<Utc>,
    ) -> OpResult<()> {
        let rows: Vec<Row> = tx
            .exec(
                self.maintenance_candidates_sql(),
                (bind_time(now), bind_time(now), bind_time(now)),
            )
            .await?;
        let mut expire: Vec<(Uuid, i64)> = Vec::new();
        let mut dead_cancel: Vec<(Uuid, Uuid, i64)> = Vec::new();
        let mut reclaim: Vec<(Uuid, Uuid, i64)> = Vec::new();
        for mut r in rows {
            let step: i64 = r.take(0).unwrap_or_default();
            let id = parse_uuid(&r.take::<DbValue, _>(1).unwrap_or(DbValue::NULL))
                .map_err(onestep_core::ExecutionError::from)?;
            let version: i64 = r.take(3).unwrap_or_default();
            if step == 1 {
                expire.push((id, version));
                continue;
            }
            let token = parse_uuid(&r.take::<DbValue, _>(2).unwrap_or(DbValue::NULL))
                .map_err(onestep_core::ExecutionError::from)?;
            if step == 2 {
                dead_cancel.push((id, token, version));
            } else {
                reclaim.push((id, token, version));
            }
        }
        if !expire.is_empty() {
            self.expire_overdue(tx, now, expire).await?;
        }
        if !dead_cancel.is_empty() {
            self.finish_expired_leases(tx, now, LeaseStep::DeadCancel, dead_cancel)
                .await?;
        }
        if !reclaim.is_empty() {
            self.finish_expired_leases(tx, now, LeaseStep::Reclaim, reclaim)
                .await?;
        }
        Ok(())
    }

    /// T5: ≤ B candidates read (index `ix_<T>_expiry` on our tables), then one set-based CAS
    /// UPDATE guarded by each row's version and the full predicate.
    async fn expire_overdue(
        &self,
        tx: &mut Transaction<'_>,
        now: DateTime<Utc>,
        cands: Vec<(Uuid, i64)>,
    ) -> OpResult<u64> {
        if cands.is_empty() {
            return Ok(0);
        }
        let case: String = cands.iter().map(|_| " WHEN ? THEN ?").collect();
        let sql = format!(
            "UPDATE `{t}` e SET e.status = 'expired', e.finished_at = ?, e.updated_at = ?, \
             e.version = e.version + 1 \
             WHERE e.id IN ({ids}) AND e.version = CASE e.id{case} END \
             AND e.status IN ('queued','retrying') AND e.expires_at IS NOT NULL \
             AND e.expires_at <= ? AND NOT {lost}",
            t = self.t(),
            ids = placeholders(cands.len()),
            lost = self.lease_lost_retry_sql(),
        );
        let mut params: Vec<DbValue> = vec![bind_time(now), bind_time(now)];
        params.extend(cands.iter().map(|(id, _)| bind_uuid(*id)));
        for (id, v) in &cands {
            params.push(bind_uuid(*id));
            params.push((*v).into());
        }
        params.push(bind_time(now));
        tx.exec_drop(sql, Params::Positional(params)).await?;
        Ok(tx.affected_rows())
    }

    /// T6 (dead cancel request → `cancelled`) or T7 (expired lease → `retrying`): ≤ B candidates
    /// from `ix_<T>_lease` (only leased rows have a non-NULL expiry), a per-row CAS on
    /// version + token + status + expiry, then one UPDATE of the matching `running` attempts of
    /// the rows this transaction actually changed.
    async fn finish_expired_leases(
        &self,
        tx: &mut Transaction<'_>,
        now: DateTime<Utc>,
        step: LeaseStep,
        candidates: Vec<(Uuid, Uuid, i64)>,
    ) -> OpResult<u64> {
        let (from, set, attempt_status) = match step {
            LeaseStep::DeadCancel => (
                "cancel_requested",
                "status = 'cancelled', finished_at = ?",
                "cancelled",
            ),
            LeaseStep::Reclaim => (
                "running",
                "status = 'retrying', available_at = ?",
                "lease_lost",
            ),
        };
        let update = format!(
            "UPDATE `{t}` SET {set}, updated_at = ?, lease_token = NULL, lease_expires_at = NULL, \
             worker_id = NULL, version = version + 1 \
             WHERE id = ? AND version = ? AND lease_token = ? AND status = '{from}' \
             AND lease_expires_at IS NOT NULL AND lease_expires_at <= ?",
            t = self.t()
        );
        let mut changed: Vec<(Uuid, Uuid)> = Vec::new();
        for (id, token, version) in candidates {
            let params: Vec<DbValue> = vec![
                bind_time(now),
                bind_time(now),
                bind_uuid(id),
                version.into(),
                bind_uuid(token),
                bind_time(now),
            ];
            tx.exec_drop(update.as_str(), Params::Positional(params))
                .await?;
            if tx.affected_rows() == 1 {
                changed.push((id, token));
            }
        }
        if changed.is_empty() {
            return Ok(0);
        }
        let pairs = vec!["(execution_id = ? AND lease_token = ?)"; changed.len()].join(" OR ");
        let sql = format!(
            "UPDATE `{a}` SET status = '{attempt_status}', finished_at = ? \
             WHERE status = 'running' AND execution_id IN ({ids}) AND ({pairs})",
            a = self.a(),
            ids = placeholders(changed.len()),
        );
        let mut params: Vec<DbValue> = vec![bind_time(now)];
        params.extend(changed.iter().map(|(id, _)| bind_uuid(*id)));
        for (id, token) in &changed {
            params.push(bind_uuid(*id));
            params.push(bind_uuid(*token));
        }
        tx.exec_drop(sql, Params::Positional(params)).await?;
        Ok(changed.len() as u64)
    }
}

#[derive(Debug, Clone, Copy)]
enum LeaseStep {
    DeadCancel,
    Reclaim,
}
