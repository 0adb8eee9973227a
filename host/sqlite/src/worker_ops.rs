//! Worker operations (docs/semantics.md#worker-operations, docs/sqlite.md#statements): claim
//! (bounded maintenance, then a read in claim-index order and the lease writes, in one
//! `BEGIN IMMEDIATE` transaction — the write lock is the claim's lock, so two workers never
//! claim one row), heartbeat, the cancel poll, complete, complete_many (its bookkeeping is
//! `onestep_core::store::batch`, every item on the per-item path) and release. Every write is
//! fenced by the lease token, the status and the lease's validity; a fence that matches no row
//! is [`ExecutionError::StaleLease`], and the transaction (or the item's savepoint) is rolled
//! back at once. The port itself is written by `onestep_core::impl_lease_store!`.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use onestep_core::error::UNDECODABLE_DEFER_S;
use onestep_core::execution::{Completion, HeartbeatResult, LeaseRef};
use onestep_core::plan::CompletionPlan;
use onestep_core::request::ClaimRequest;
use onestep_core::status::attempt_status_for;
use onestep_core::store::batch::{self, CompletionTx, LockedRows, SetWrite};
use onestep_core::store::cap::{capped_limit, capped_task};
use onestep_core::store::fair::plain_claim_namespace;
use onestep_core::store::lease::{LeaseWindow, claim_rows, heartbeat_answer};
use onestep_core::time::add_seconds;
use onestep_core::{Execution, ExecutionError, ExecutionLease, ExecutionStatus, StaleReason};
use rusqlite::{Connection, OptionalExtension, params};
use uuid::Uuid;

use crate::backend::SqliteBackend;
use crate::client_ops::{id_array, select_by_id};
use crate::errors::{OpError, OpResult};
use crate::fair::ReadRow;
use crate::rows::{decode_execution, error_text, json, ots, text, ts, uid};

fn stale(reason: StaleReason) -> OpError {
    OpError::Domain(ExecutionError::StaleLease(reason))
}

/// `status IN (…)` of `list`.
fn status_list(list: &[ExecutionStatus]) -> String {
    list.iter()
        .map(|s| format!("'{}'", s.as_str()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// docs/semantics.md#lease-lost-retry, for the executions alias `alias`: a lease-lost retry, or
/// a parked execution (`queued`, latest attempt `parked`, docs/steps.md#sleep), which expiry
/// never ends either.
pub(crate) fn lost(a: &str, alias: &str) -> String {
    format!(
        "(({alias}.status = 'retrying' AND EXISTS (SELECT 1 FROM {a} la \
         WHERE la.execution_id = {alias}.id AND la.attempt_no = {alias}.attempts \
         AND la.status = 'lease_lost')) \
         OR ({alias}.status = 'queued' AND {alias}.attempts > 0 \
         AND EXISTS (SELECT 1 FROM {a} lp \
         WHERE lp.execution_id = {alias}.id AND lp.attempt_no = {alias}.attempts \
         AND lp.status = 'parked')))"
    )
}

impl SqliteBackend {
    /// The bounded maintenance steps before a claim (T5 expiry, T6 dead cancel requests, T7
    /// expired leases), each at most `reclaim_batch_size` rows.
    fn maintain(&self, c: &Connection, now: &str) -> OpResult<()> {
        let (t, a) = (self.t(), self.a());
        let batch = self.reclaim_batch_size();
        c.prepare_cached(&format!(
            "UPDATE {t} SET status = 'expired', finished_at = ?1, updated_at = ?1, \
             version = version + 1 WHERE id IN (SELECT c.id FROM {t} c \
             WHERE c.status IN ('queued', 'retrying') AND c.expires_at IS NOT NULL \
             AND c.expires_at <= ?1 AND NOT {lost_c} ORDER BY c.expires_at, c.id LIMIT {batch})",
            lost_c = lost(a, "c"),
        ))?
        .execute(params![now])?;
        for (from, to, attempt_to, extra) in [
            (
                "cancel_requested",
                "cancelled",
                "cancelled",
                "finished_at = ?1,",
            ),
            ("running", "retrying", "lease_lost", "available_at = ?1,"),
        ] {
            let picked: Vec<(String, Option<String>)> = {
                // The `status IN (…)` term repeats the lease index's own WHERE, so that
                // SQLite uses that partial index (it does not infer it from `status = …`);
                // without it, each claim scanned every finished row of the table.
                let mut st = c.prepare_cached(&format!(
                    "SELECT id, lease_token FROM {t} WHERE status = '{from}' \
                     AND status IN ('running', 'cancel_requested') \
                     AND lease_expires_at IS NOT NULL AND lease_expires_at <= ?1 \
                     ORDER BY lease_expires_at, id LIMIT {batch}"
                ))?;
                let rows = st.query_map(params![now], |r| Ok((r.get(0)?, r.get(1)?)))?;
                rows.collect::<Result<_, _>>()?
            };
            for (id, token) in picked {
                c.prepare_cached(&format!(
                    "UPDATE {t} SET status = '{to}', {extra} updated_at = ?1, \
                     lease_token = NULL, lease_expires_at = NULL, worker_id = NULL, \
                     version = version + 1 WHERE id = ?2"
                ))?
                .execute(params![now, id])?;
                c.prepare_cached(&format!(
                    "UPDATE {a} SET status = '{attempt_to}', finished_at = ?1 \
                     WHERE execution_id = ?2 AND lease_token = ?3 AND status = 'running'"
                ))?
                .execute(params![now, id, token])?;
            }
        }
        Ok(())
    }

    /// The claim order's leading `e.priority, ` on tables with the column (lower numbers
    /// first, docs/semantics.md#priority-and-fairness-key), nothing before the upgrade.
    fn claim_priority_order(&self) -> &'static str {
        if self.schema_report().features.priority_columns {
            "e.priority, "
        } else {
            ""
        }
    }

    /// The claim (docs/semantics.md#claim-and-maintenance): the maintenance, then the fair
    /// claim of one task name on tables with the keys table (docs/semantics.md#fair-claim),
    /// else the plain claim of one namespace.
    fn claim_in(
        &self,
        c: &Connection,
        req: &ClaimRequest,
        window: LeaseWindow,
    ) -> OpResult<Vec<ExecutionLease>> {
        let has_keys = self.schema_report().features.fair_keys;
        let fair = has_keys && req.task_names.len() == 1;
        let namespace = if fair {
            None
        } else {
            Some(plain_claim_namespace(req, has_keys)?)
        };
        let now_s = ts(window.now);
        self.maintain(c, &now_s)?;
        // docs/semantics.md#max-running: after maintenance (a reclaimed lease no longer counts);
        // the transaction's write lock (`BEGIN IMMEDIATE`) is the cap's lock.
        let capped;
        let req = match capped_task(req) {
            None => req,
            Some(task) => {
                let running: i64 = c.query_row(
                    &format!(
                        "SELECT count(*) FROM {t} WHERE task_name = ?1 \
                         AND status IN ('running', 'cancel_requested')",
                        t = self.t()
                    ),
                    params![task],
                    |r| r.get(0),
                )?;
                let limit = capped_limit(req, u64::try_from(running).unwrap_or(0));
                if limit == 0 {
                    return Ok(Vec::new());
                }
                capped = ClaimRequest {
                    limit,
                    ..req.clone()
                };
                &capped
            }
        };
        match namespace {
            None => self.fair_claim_in(c, req, window),
            Some(ns) => {
                let rows = self.plain_read(c, req, ns, &now_s)?;
                self.claim_read_rows(c, req, window, rows)
            }
        }
    }

    /// The plain claim's read: up to `limit` claimable rows of the task names in `namespace`,
    /// in claim order.
    fn plain_read(
        &self,
        c: &Connection,
        req: &ClaimRequest,
        namespace: &str,
        now_s: &str,
    ) -> OpResult<Vec<ReadRow>> {
        let (t, a) = (self.t(), self.a());
        let sql = format!(
            "SELECT {cols} FROM {t} e \
             WHERE e.namespace = ?1 AND e.task_name IN (SELECT value FROM json_each(?2)) \
             AND e.status IN ('queued', 'retrying') AND e.available_at <= ?3 \
             AND (e.expires_at IS NULL OR e.expires_at > ?3 OR {lost_e}) \
             ORDER BY {priority}e.available_at, e.created_at, e.id LIMIT ?4",
            lost_e = lost(a, "e"),
            cols = self.cols(),
            priority = self.claim_priority_order(),
        );
        let tasks = serde_json::to_string(&req.task_names)
            .map_err(|e| ExecutionError::Encoding(format!("task names: {e}")))?;
        let mut st = c.prepare_cached(&sql)?;
        let rows = st.query_map(
            params![namespace, tasks, now_s, i64::from(req.limit)],
            |r| Ok((r.get::<_, String>(0).ok(), decode_execution(r))),
        )?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Claims the rows a claim read (T2 for each decodable row, its attempt and trace parent;
    /// an undecodable row is deferred instead), in the order read.
    pub(crate) fn claim_read_rows(
        &self,
        c: &Connection,
        req: &ClaimRequest,
        window: LeaseWindow,
        rows: Vec<ReadRow>,
    ) -> OpResult<Vec<ExecutionLease>> {
        let (now, lease_expires_at) = (window.now, window.expires_at);
        let now_s = ts(now);
        let (t, a) = (self.t(), self.a());
        let (mut leases, deferred) = claim_rows(
            rows.into_iter(),
            self.attempt_ids,
            lease_expires_at,
            now,
            |e| {
                tracing::error!(error = %e, defer_s = UNDECODABLE_DEFER_S,
                    "claim skipped an undecodable row and deferred it");
            },
        );
        if !deferred.is_empty() {
            let until = add_seconds(now, "undecodable defer", UNDECODABLE_DEFER_S)?;
            let mut st =
                c.prepare_cached(&format!("UPDATE {t} SET available_at = ?1 WHERE id = ?2"))?;
            for id in deferred {
                st.execute(params![ts(until), id])?;
            }
        }
        let expiry = ts(lease_expires_at);
        for l in &leases {
            let id = uid(l.execution.id);
            let n = c
                .prepare_cached(&format!(
                    "UPDATE {t} SET status = 'running', attempts = attempts + 1, \
                     lease_token = ?1, lease_expires_at = ?2, worker_id = ?3, \
                     started_at = COALESCE(started_at, ?4), updated_at = ?4, \
                     version = version + 1 WHERE id = ?5"
                ))?
                .execute(params![
                    uid(l.lease_token),
                    expiry,
                    req.worker_id,
                    now_s,
                    id
                ])?;
            c.prepare_cached(&format!(
                "INSERT INTO {a} (id, execution_id, attempt_no, lease_token, worker_id, status, \
                 started_at, heartbeat_at) VALUES (?1, ?2, ?3, ?4, ?5, 'running', ?6, ?6)"
            ))?
            .execute(params![
                uid(l.attempt_id),
                id,
                i64::from(l.attempt_no),
                uid(l.lease_token),
                req.worker_id,
                now_s
            ])?;
            if n != 1 {
                return Err(ExecutionError::Encoding(format!(
                    "claim wrote {n} rows for execution {id}"
                ))
                .into());
            }
        }
        let ids: Vec<Uuid> = leases.iter().map(|l| l.execution.id).collect();
        let mut parents = self.trace_parents(c, &ids)?;
        for l in &mut leases {
            l.trace_parent = parents.remove(&l.execution.id);
        }
        Ok(leases)
    }

    pub(crate) async fn claim_once(&self, req: &ClaimRequest) -> OpResult<Vec<ExecutionLease>> {
        let req = req.clone();
        let duration = req.lease_duration_s;
        self.write(move |b, c| {
            let window = LeaseWindow::new(b.now(), duration)?;
            b.claim_in(c, &req, window)
        })
        .await
    }

    pub(crate) async fn heartbeat_many_once(
        &self,
        leases: &[LeaseRef],
        window: LeaseWindow,
    ) -> OpResult<Vec<Result<HeartbeatResult, ExecutionError>>> {
        let leases = leases.to_vec();
        self.write(move |b, c| {
            // "now" of this transaction, taken once the write lock is held; the lease granted
            // is as long as the caller asked.
            let now = b.now();
            let new_expiry = now + (window.expires_at - window.now);
            let (t, a) = (b.t(), b.a());
            let (now_s, exp_s) = (ts(now), ts(new_expiry));
            let mut renewed: HashMap<LeaseRef, bool> = HashMap::with_capacity(leases.len());
            let mut seen = HashSet::with_capacity(leases.len());
            for l in leases.iter().filter(|l| seen.insert(**l)) {
                let status: Option<String> = c
                    .prepare_cached(&format!(
                        "SELECT e.status FROM {t} e JOIN {a} x ON x.id = ?3 \
                         AND x.execution_id = e.id AND x.lease_token = ?2 \
                         AND x.status = 'running' WHERE e.id = ?1 AND e.lease_token = ?2 \
                         AND e.status IN ('running', 'cancel_requested') \
                         AND e.lease_expires_at IS NOT NULL AND e.lease_expires_at > ?4"
                    ))?
                    .query_row(
                        params![
                            uid(l.execution_id),
                            uid(l.lease_token),
                            uid(l.attempt_id),
                            now_s
                        ],
                        |r| r.get(0),
                    )
                    .optional()?;
                let Some(status) = status else { continue };
                c.prepare_cached(&format!(
                    "UPDATE {t} SET lease_expires_at = ?1, updated_at = ?2 WHERE id = ?3"
                ))?
                .execute(params![exp_s, now_s, uid(l.execution_id)])?;
                c.prepare_cached(&format!("UPDATE {a} SET heartbeat_at = ?1 WHERE id = ?2"))?
                    .execute(params![now_s, uid(l.attempt_id)])?;
                renewed.insert(*l, status == ExecutionStatus::CancelRequested.as_str());
            }
            Ok(leases
                .iter()
                .map(|l| heartbeat_answer(renewed.get(l).copied(), new_expiry))
                .collect())
        })
        .await
    }

    pub(crate) async fn cancel_requested_once(&self, leases: &[LeaseRef]) -> OpResult<Vec<Uuid>> {
        let leases = leases.to_vec();
        self.read(move |b, c| {
            let now = ts(b.now());
            let mut st = c.prepare_cached(&format!(
                "SELECT id FROM {} WHERE id = ?1 AND lease_token = ?2 \
                 AND status = 'cancel_requested' AND lease_expires_at > ?3",
                b.t()
            ))?;
            let mut out = Vec::new();
            for l in &leases {
                let hit = st
                    .query_row(
                        params![uid(l.execution_id), uid(l.lease_token), now],
                        |_| Ok(()),
                    )
                    .optional()?;
                if hit.is_some() && !out.contains(&l.execution_id) {
                    out.push(l.execution_id);
                }
            }
            Ok(out)
        })
        .await
    }

    /// docs/semantics.md#completion inside the open transaction: read the row, plan, write the
    /// execution (fenced) and its running attempt. Domain failures leave the transaction
    /// changed; the caller rolls back (the whole transaction or the item's savepoint).
    fn complete_in_tx(
        &self,
        c: &Connection,
        lease: &LeaseRef,
        completion: &Completion,
        now: DateTime<Utc>,
    ) -> OpResult<Execution> {
        let current = select_by_id(self, c, lease.execution_id, None)?
            .ok_or_else(|| stale(StaleReason::ExecutionMissing))?;
        let limit = self.inner.limits.max_result_bytes;
        let plan = CompletionPlan::new(&current, completion, now, limit)?;
        let error = error_text(plan.error.as_ref())?;
        let now_s = ts(now);
        let sql = format!(
            "UPDATE {} SET status = ?1, updated_at = ?2, version = version + 1, \
             lease_token = NULL, lease_expires_at = NULL, worker_id = NULL, result = ?3, \
             error = ?4, available_at = ?5, finished_at = ?6 \
             WHERE id = ?7 AND lease_token = ?8 AND status IN ({}) \
             AND lease_expires_at IS NOT NULL AND lease_expires_at > ?2 \
             RETURNING {cols}",
            self.t(),
            status_list(completion.status.allowed_sources()),
            cols = self.cols(),
        );
        let row = c
            .prepare_cached(&sql)?
            .query_row(
                params![
                    plan.effective.as_str(),
                    now_s,
                    plan.encoded_result.as_ref().map(json),
                    error,
                    ts(plan.available_at),
                    ots((!plan.retrying).then_some(now)),
                    uid(lease.execution_id),
                    uid(lease.lease_token),
                ],
                |r| Ok(decode_execution(r)),
            )
            .optional()?;
        let Some(written) = row else {
            return if plan.is_replay_of(&current) {
                Ok(current)
            } else {
                Err(stale(StaleReason::LeaseInvalid))
            };
        };
        let n = c
            .prepare_cached(&format!(
                "UPDATE {} SET status = ?1, error = ?2, finished_at = ?3 \
                 WHERE id = ?4 AND execution_id = ?5 AND lease_token = ?6 AND status = 'running'",
                self.a()
            ))?
            .execute(params![
                attempt_status_for(plan.effective).as_str(),
                error,
                now_s,
                uid(lease.attempt_id),
                uid(lease.execution_id),
                uid(lease.lease_token),
            ])?;
        if n != 1 {
            return Err(stale(StaleReason::AttemptInvalid));
        }
        Ok(written?)
    }

    pub(crate) async fn complete_once(
        &self,
        lease: &LeaseRef,
        completion: &Completion,
    ) -> OpResult<Execution> {
        let (lease, completion) = (*lease, completion.clone());
        self.write(move |b, c| {
            let now = b.now();
            futures::executor::block_on(batch::complete_one(
                &mut Completing { b, c },
                &lease,
                &completion,
                now,
            ))
        })
        .await
    }

    pub(crate) async fn complete_many_once(
        &self,
        items: &[(LeaseRef, Completion)],
    ) -> OpResult<Vec<Result<Execution, ExecutionError>>> {
        let items = items.to_vec();
        self.write(move |b, c| {
            let now = b.now();
            let limit = b.inner.limits.max_result_bytes;
            futures::executor::block_on(batch::complete_many(
                &mut Completing { b, c },
                &items,
                now,
                limit,
            ))
        })
        .await
    }

    /// T15 inside the open transaction (docs/steps.md#sleep; the port's `park` is
    /// `onestep_core::store::batch::park_one` over this): the execution back to `queued` until
    /// `wake_at` while it is `running` under the lease, then its attempt `parked`. `None` when
    /// the execution did not match (nothing written).
    fn park_in_tx(
        &self,
        c: &Connection,
        lease: &LeaseRef,
        wake_at: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> OpResult<Option<Execution>> {
        let now = ts(now);
        let row = c
            .prepare_cached(&format!(
                "UPDATE {} SET status = 'queued', available_at = ?4, updated_at = ?1, \
                 lease_token = NULL, lease_expires_at = NULL, worker_id = NULL, \
                 version = version + 1 WHERE id = ?2 AND lease_token = ?3 \
                 AND status = 'running' AND lease_expires_at IS NOT NULL \
                 AND lease_expires_at > ?1 RETURNING {cols}",
                self.t(),
                cols = self.cols(),
            ))?
            .query_row(
                params![
                    now,
                    uid(lease.execution_id),
                    uid(lease.lease_token),
                    ts(wake_at)
                ],
                |r| Ok(decode_execution(r)),
            )
            .optional()?;
        let Some(row) = row else {
            return Ok(None);
        };
        let n = c
            .prepare_cached(&format!(
                "UPDATE {} SET status = 'parked', finished_at = ?1 WHERE id = ?2 \
                 AND execution_id = ?3 AND lease_token = ?4 AND status = 'running'",
                self.a()
            ))?
            .execute(params![
                now,
                uid(lease.attempt_id),
                uid(lease.execution_id),
                uid(lease.lease_token)
            ])
            .map_err(parked_status_refused)?;
        if n != 1 {
            return Err(stale(StaleReason::AttemptInvalid));
        }
        Ok(Some(row?))
    }

    pub(crate) async fn park_once(
        &self,
        lease: &LeaseRef,
        park: &onestep_core::park::Park,
    ) -> OpResult<Execution> {
        let (lease, park) = (*lease, park.clone());
        self.write(move |b, c| {
            let now = b.now();
            futures::executor::block_on(batch::park_one(
                &mut Completing { b, c },
                &lease,
                &park,
                now,
            ))
        })
        .await
    }

    /// How many attempts of the execution ended `parked`.
    pub(crate) async fn parked_attempts_once(&self, id: Uuid) -> OpResult<u32> {
        self.read(move |b, c| {
            let n: i64 = c
                .prepare_cached(&format!(
                    "SELECT count(*) FROM {} WHERE execution_id = ?1 AND status = 'parked'",
                    b.a()
                ))?
                .query_row(params![uid(id)], |r| r.get(0))?;
            Ok(u32::try_from(n).unwrap_or(u32::MAX))
        })
        .await
    }

    pub(crate) async fn release_once(&self, lease: &LeaseRef) -> OpResult<Execution> {
        let lease = *lease;
        self.write(move |b, c| {
            let now = ts(b.now());
            if select_by_id(b, c, lease.execution_id, None)?.is_none() {
                return Err(stale(StaleReason::ExecutionMissing));
            }
            let row = c
                .prepare_cached(&format!(
                    "UPDATE {} SET status = 'queued', available_at = ?1, updated_at = ?1, \
                     lease_token = NULL, lease_expires_at = NULL, worker_id = NULL, \
                     version = version + 1 WHERE id = ?2 AND lease_token = ?3 \
                     AND status = 'running' AND lease_expires_at IS NOT NULL \
                     AND lease_expires_at > ?1 RETURNING {cols}",
                    b.t(),
                    cols = b.cols(),
                ))?
                .query_row(
                    params![now, uid(lease.execution_id), uid(lease.lease_token)],
                    |r| Ok(decode_execution(r)),
                )
                .optional()?
                .ok_or_else(|| stale(StaleReason::LeaseInvalid))?;
            let n = c
                .prepare_cached(&format!(
                    "UPDATE {} SET status = 'lease_lost', finished_at = ?1 WHERE id = ?2 \
                     AND execution_id = ?3 AND lease_token = ?4 AND status = 'running'",
                    b.a()
                ))?
                .execute(params![
                    now,
                    uid(lease.attempt_id),
                    uid(lease.execution_id),
                    uid(lease.lease_token)
                ])?;
            if n != 1 {
                return Err(stale(StaleReason::AttemptInvalid));
            }
            Ok(row?)
        })
        .await
    }

    /// The stored traceparents of `ids` (none while traces are off).
    pub(crate) fn trace_parents(
        &self,
        c: &Connection,
        ids: &[Uuid],
    ) -> OpResult<HashMap<Uuid, String>> {
        let Some(table) = self.tr() else {
            return Ok(HashMap::new());
        };
        if ids.is_empty() {
            return Ok(HashMap::new());
        }
        let mut st = c.prepare_cached(&format!(
            "SELECT execution_id, traceparent FROM {table} \
             WHERE execution_id IN (SELECT value FROM json_each(?1))"
        ))?;
        let rows = st.query_map(params![id_array(ids.iter().copied())], |r| {
            Ok((
                crate::rows::uuid(r, 0, "execution_id"),
                text(r, 1, "traceparent"),
            ))
        })?;
        let mut out = HashMap::new();
        for r in rows {
            let (id, tp) = r?;
            out.insert(id?, tp?);
        }
        Ok(out)
    }

    /// Stores the submit's traceparent of a new execution (nothing while traces are off).
    pub(crate) fn store_trace_parent(
        &self,
        c: &Connection,
        id: Uuid,
        traceparent: Option<&str>,
        now: DateTime<Utc>,
    ) -> OpResult<()> {
        if let (Some(table), Some(tp)) = (self.tr(), traceparent) {
            c.prepare_cached(&format!(
                "INSERT INTO {table} (execution_id, traceparent, created_at) VALUES (?1, ?2, ?3)"
            ))?
            .execute(params![uid(id), tp, ts(now)])?;
        }
        Ok(())
    }
}

/// A violated status `CHECK` on the attempt (`SQLITE_CONSTRAINT_CHECK`) is a table whose
/// constraint predates `parked`: the error names the upgrade.
fn parked_status_refused(e: rusqlite::Error) -> OpError {
    match &e {
        rusqlite::Error::SqliteFailure(f, _)
            if f.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_CHECK =>
        {
            OpError::Domain(crate::errors::backend_error(
                "park",
                onestep_core::ConnectorKind::Misconfigured,
                onestep_core::park::PARKED_STATUS_REFUSED,
                &[],
            ))
        }
        _ => OpError::Db(e),
    }
}

onestep_core::impl_lease_store!(SqliteBackend, single_heartbeat: batch);

/// The writer's open transaction, as the shared completion bookkeeping drives it. SQLite has one
/// writer, so there is nothing to gain from the set-based path: no row is reported locked and
/// every item takes the per-item path under its savepoint.
struct Completing<'a> {
    b: &'a SqliteBackend,
    c: &'a mut Connection,
}

impl CompletionTx for Completing<'_> {
    type Error = OpError;

    async fn savepoint(
        &mut self,
        step: batch::SavepointStep,
        savepoint: batch::Savepoint,
    ) -> OpResult<()> {
        use batch::{Savepoint as S, SavepointStep as P};
        let name = match savepoint {
            S::Item => "onestep_item",
            S::Batch => "onestep_batch",
        };
        let verb = match step {
            P::Set => "SAVEPOINT",
            P::Release => "RELEASE SAVEPOINT",
            P::RollbackTo => "ROLLBACK TO SAVEPOINT",
        };
        self.c.execute_batch(&format!("{verb} {name}"))?;
        if step == P::RollbackTo {
            // SQLite's ROLLBACK TO keeps the savepoint open; release it as the others end.
            self.c.execute_batch(&format!("RELEASE SAVEPOINT {name}"))?;
        }
        Ok(())
    }

    async fn complete_one(
        &mut self,
        lease: &LeaseRef,
        completion: &Completion,
        now: DateTime<Utc>,
    ) -> OpResult<Execution> {
        self.b.complete_in_tx(self.c, lease, completion, now)
    }

    async fn lock_rows(&mut self, _ids: &[Uuid]) -> OpResult<LockedRows> {
        Ok(LockedRows::new())
    }

    async fn write_set(&mut self, _write: SetWrite<'_>) -> OpResult<Option<Vec<Execution>>> {
        Ok(None)
    }

    async fn write_final_diagnostics(
        &mut self,
        written: &batch::FinalDiagnostics<'_>,
        now: DateTime<Utc>,
    ) -> OpResult<()> {
        self.b.write_final_diagnostics(self.c, written, now)
    }

    async fn park_write(
        &mut self,
        lease: &LeaseRef,
        wake_at: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> OpResult<Option<Execution>> {
        self.b.park_in_tx(self.c, lease, wake_at, now)
    }
}
