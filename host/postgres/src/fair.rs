//! The fair claim on PostgreSQL (docs/semantics.md#fair-claim, docs/postgres.md#fair-claim):
//! the sweep (a skip scan of `ix_<T>_fair` that registers keys with pending rows in `<T>_keys`
//! and wakes waiting keys that have a row due), then the claim over the keys table — candidates
//! by pass, their rows locked in primary-key order, the running counts of a cap, the slots split
//! by [`FairPlan`], each key's head rows locked `SKIP LOCKED` in one `LATERAL` statement, and
//! the keys' passes and `ready_at` written back. Every statement that locks several key rows
//! locks them in primary-key order (`ORDER BY namespace, fairness_key` within one task), and
//! execution rows are only locked with `SKIP LOCKED` while key locks are held, so claimers never
//! deadlock.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use deadpool_postgres::Transaction;
use onestep_core::ExecutionLease;
use onestep_core::error::UNDECODABLE_DEFER_S;
use onestep_core::names::TableNames;
use onestep_core::request::ClaimRequest;
use onestep_core::store::fair::{
    CAP_RECHECK_MS, FairPlan, KeyOutcome, LockedKey, sort_in_claim_order,
};
use onestep_core::store::lease::claim_rows;
use onestep_core::time::add_seconds;
use uuid::Uuid;

use crate::backend::PgBackend;
use crate::errors::OpResult;
use crate::rows::{EXECUTION_COLUMNS_E, decode_execution};
use crate::schema::{KEY_EXPR, keys_table, q};

/// The fair claim's statements of one table pair.
#[derive(Debug, Clone)]
pub(crate) struct FairSql {
    sweep_insert: String,
    sweep_wake: String,
    candidates_in: String,
    candidates_all: String,
    lock: String,
    running: String,
    heads: String,
    set_keys: String,
    pending_min: String,
    delete: String,
    analyze: String,
}

const PENDING: &str = "status IN ('queued', 'retrying')";

impl FairSql {
    pub(crate) fn new(names: &TableNames) -> FairSql {
        let t = q(&names.executions);
        let a = q(&names.attempts);
        let k = q(&keys_table(names));
        // `OFFSET 0` keeps the EXISTS a per-row probe of the attempts' (execution_id,
        // attempt_no) index: without it the planner may hash it, i.e. read every attempt row of
        // the table once per claim that reaches it (docs/postgres.md#claim-cost-at-scale).
        // … and a parked execution (docs/steps.md#sleep) is exempt from expiry the same way.
        let lost = format!(
            "((e.status = 'retrying' AND EXISTS (SELECT 1 FROM {a} la \
             WHERE la.execution_id = e.id AND la.attempt_no = e.attempts \
             AND la.status = 'lease_lost' OFFSET 0)) \
             OR (e.status = 'queued' AND e.attempts > 0 AND EXISTS (SELECT 1 FROM {a} lp \
             WHERE lp.execution_id = e.id AND lp.attempt_no = e.attempts \
             AND lp.status = 'parked' OFFSET 0)))"
        );
        // The distinct (key, namespace) of the task's pending rows: one probe of ix_<T>_fair per
        // key (a recursive skip scan), never the rows themselves.
        let sweep_insert = format!(
            "WITH RECURSIVE s(fkey, ns) AS ( \
               (SELECT {KEY_EXPR}, namespace FROM {t} WHERE task_name = $1 AND {PENDING} \
                ORDER BY {KEY_EXPR}, namespace LIMIT 1) \
               UNION ALL \
               SELECT n.fkey, n.ns FROM s CROSS JOIN LATERAL ( \
                 SELECT {KEY_EXPR} AS fkey, namespace AS ns FROM {t} \
                 WHERE task_name = $1 AND {PENDING} AND ({KEY_EXPR}, namespace) > (s.fkey, s.ns) \
                 ORDER BY {KEY_EXPR}, namespace LIMIT 1) n) \
             INSERT INTO {k} (task_name, namespace, fairness_key, pass, ready_at) \
             SELECT $1, s.ns, s.fkey, \
               COALESCE((SELECT min(pass) FROM {k} WHERE task_name = $1), 0), $2 \
             FROM s WHERE NOT EXISTS (SELECT 1 FROM {k} x WHERE x.task_name = $1 \
               AND x.namespace = s.ns AND x.fairness_key = s.fkey) \
             ORDER BY s.ns, s.fkey \
             ON CONFLICT DO NOTHING"
        );
        // Waiting keys with a row due now (a submit or a retry after the key's ready_at was
        // pushed out): ready now. Only keys waiting past `$3` (now + CAP_RECHECK_MS): a key at
        // its cap keeps its short wait, or a claim's forced sweep would hand the full key to its
        // second round again. SKIP LOCKED: a key a claimer holds is its business. A scalar
        // subquery (not EXISTS, which the planner may turn into a hash join over every pending
        // row) probes ix_<T>_fair once per waiting key.
        let sweep_wake = format!(
            "WITH w AS (SELECT x.namespace, x.fairness_key FROM {k} x \
               WHERE x.task_name = $1 AND x.ready_at > $3 AND ( \
                 SELECT 1 FROM {t} e WHERE e.task_name = $1 \
                 AND {KEY_EXPR_E} = x.fairness_key AND e.namespace = x.namespace \
                 AND e.{PENDING} AND e.available_at <= $2 LIMIT 1) IS NOT NULL \
               ORDER BY x.namespace, x.fairness_key FOR UPDATE SKIP LOCKED) \
             UPDATE {k} x SET ready_at = $2 FROM w WHERE x.task_name = $1 \
               AND x.namespace = w.namespace AND x.fairness_key = w.fairness_key",
            KEY_EXPR_E = "COALESCE(e.fairness_key, e.namespace)",
        );
        let candidates = |scope: &str| {
            format!(
                "SELECT namespace, fairness_key FROM {k} \
                 WHERE task_name = $1 AND ready_at <= $2{scope} \
                 ORDER BY pass, namespace, fairness_key LIMIT $3"
            )
        };
        // The row's ctid addresses its one write in this transaction (`set_keys`, `delete`).
        let lock = format!(
            "SELECT x.namespace, x.fairness_key, x.pass, x.ctid::text FROM {k} x \
             JOIN unnest($2::text[], $3::text[]) AS v(ns, fkey) \
               ON x.namespace = v.ns AND x.fairness_key = v.fkey \
             WHERE x.task_name = $1 ORDER BY x.namespace, x.fairness_key FOR UPDATE OF x"
        );
        // Scalar subqueries: one probe of an index per key (a join may be planned as a hash
        // join over every row of the task).
        let running = format!(
            "SELECT v.ns, v.fkey, (SELECT count(*) FROM {t} e WHERE e.task_name = $1 \
               AND COALESCE(e.fairness_key, e.namespace) = v.fkey AND e.namespace = v.ns \
               AND e.status IN ('running', 'cancel_requested')) \
             FROM unnest($2::text[], $3::text[]) AS v(ns, fkey)"
        );
        // `v.n` is a key's slots plus one: a key that returns no more than its slots has no
        // other claimable row now. `v.i` names the key of each row.
        let heads = format!(
            "SELECT h.*, v.i FROM unnest($2::text[], $3::text[], $4::int8[]) \
               WITH ORDINALITY AS v(ns, fkey, n, i) \
             CROSS JOIN LATERAL ( \
               SELECT {EXECUTION_COLUMNS_E} FROM {t} e \
               WHERE e.task_name = $1 AND COALESCE(e.fairness_key, e.namespace) = v.fkey \
               AND e.namespace = v.ns AND e.{PENDING} AND e.available_at <= $5 \
               AND (e.expires_at IS NULL OR e.expires_at > $5 OR {lost}) \
               ORDER BY e.priority, e.available_at, e.created_at, e.id LIMIT v.n \
               FOR UPDATE OF e SKIP LOCKED) h"
        );
        // The locked key rows by ctid (a TID scan, whatever the statistics say); a NULL keeps
        // the column.
        let set_keys = format!(
            "UPDATE {k} x SET pass = COALESCE(v.pass, x.pass), ready_at = COALESCE(v.at, x.ready_at) \
             FROM unnest($1::text[]::tid[], $2::int8[], $3::timestamptz[]) AS v(t, pass, at) \
             WHERE x.ctid = ANY($1::text[]::tid[]) AND x.ctid = v.t"
        );
        let pending_min = format!(
            "SELECT v.ns, v.fkey, (SELECT min(e.available_at) FROM {t} e \
               WHERE e.task_name = $1 AND COALESCE(e.fairness_key, e.namespace) = v.fkey \
               AND e.namespace = v.ns AND e.{PENDING}) \
             FROM unnest($2::text[], $3::text[]) AS v(ns, fkey)"
        );
        let delete = format!("DELETE FROM {k} WHERE ctid = ANY($1::text[]::tid[])");
        let analyze = format!("ANALYZE {k}");
        FairSql {
            sweep_insert,
            sweep_wake,
            candidates_in: candidates(" AND namespace = ANY($4)"),
            candidates_all: candidates(""),
            lock,
            running,
            heads,
            set_keys,
            pending_min,
            delete,
            analyze,
        }
    }

    /// Every statement of the claim transaction, named, for EXPLAIN in tests and docs (not
    /// the `ANALYZE` that runs after it).
    pub(crate) fn named(&self) -> Vec<(&'static str, &str)> {
        vec![
            ("sweep_insert", &self.sweep_insert),
            ("sweep_wake", &self.sweep_wake),
            ("candidates_in", &self.candidates_in),
            ("candidates_all", &self.candidates_all),
            ("lock", &self.lock),
            ("running", &self.running),
            ("heads", &self.heads),
            ("set_keys", &self.set_keys),
            ("pending_min", &self.pending_min),
            ("delete", &self.delete),
        ]
    }
}

type KeyId = (String, String);

fn split(keys: &[KeyId]) -> (Vec<String>, Vec<String>) {
    keys.iter().cloned().unzip()
}

impl PgBackend {
    /// The fair claim's statements by name (docs/postgres.md#fair-claim), for EXPLAIN in tests;
    /// empty when the tables lack the keys table.
    pub fn fair_claim_statements(&self) -> Vec<(&'static str, String)> {
        self.inner.fair.as_ref().map_or_else(Vec::new, |f| {
            f.named()
                .into_iter()
                .map(|(n, s)| (n, s.to_owned()))
                .collect()
        })
    }

    /// The fair claim of one task (docs/semantics.md#fair-claim) inside `tx`, after maintenance.
    pub(crate) async fn fair_claim_in(
        &self,
        tx: &Transaction<'_>,
        sql: &FairSql,
        req: &ClaimRequest,
        task: &str,
        now: DateTime<Utc>,
        lease_expires_at: DateTime<Utc>,
    ) -> OpResult<Vec<ExecutionLease>> {
        let swept = self.inner.gate.due(task, now, false);
        if swept {
            self.sweep(tx, sql, task, now).await?;
        }
        let leases = self
            .fair_round(tx, sql, req, task, now, lease_expires_at)
            .await?;
        if !leases.is_empty() || swept || !self.inner.gate.due(task, now, true) {
            return Ok(leases);
        }
        self.sweep(tx, sql, task, now).await?;
        self.fair_round(tx, sql, req, task, now, lease_expires_at)
            .await
    }

    /// After a committed claim: `ANALYZE <T>_keys` once this handle's sweeps inserted
    /// [`ANALYZE_AFTER_KEYS`] keys since the last time (docs/postgres.md#fair-claim). The
    /// candidate read only walks the pass index in order when the planner knows the table is
    /// large; a table that grew from nothing in one sweep would otherwise be read whole by every
    /// claim until autovacuum analyzes it. A failure is logged, never the claim's.
    pub(crate) async fn analyze_keys_if_grown(&self, conn: &deadpool_postgres::Object) {
        use std::sync::atomic::Ordering;
        let Some(sql) = self.inner.fair.as_ref() else {
            return;
        };
        if self.inner.keys_inserted.load(Ordering::Relaxed) < ANALYZE_AFTER_KEYS {
            return;
        }
        self.inner.keys_inserted.store(0, Ordering::Relaxed);
        if let Err(e) = conn.batch_execute(&sql.analyze).await {
            tracing::warn!(error = %e, "could not analyze the fairness-keys table");
        }
    }

    async fn sweep(
        &self,
        tx: &Transaction<'_>,
        sql: &FairSql,
        task: &str,
        now: DateTime<Utc>,
    ) -> OpResult<()> {
        let started = std::time::Instant::now();
        let st = tx.prepare_cached(&sql.sweep_insert).await?;
        let inserted = tx.execute(&st, &[&task, &now]).await?;
        let st = tx.prepare_cached(&sql.sweep_wake).await?;
        let recheck = now + chrono::Duration::milliseconds(CAP_RECHECK_MS);
        tx.execute(&st, &[&task, &now, &recheck]).await?;
        self.inner.gate.swept(task, started.elapsed());
        self.inner
            .keys_inserted
            .fetch_add(inserted, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    async fn fair_round(
        &self,
        tx: &Transaction<'_>,
        sql: &FairSql,
        req: &ClaimRequest,
        task: &str,
        now: DateTime<Utc>,
        lease_expires_at: DateTime<Utc>,
    ) -> OpResult<Vec<ExecutionLease>> {
        let limit = i64::from(req.limit);
        // 1. Candidates by pass.
        let rows = match req.namespaces.listed() {
            Some(list) => {
                let list: Vec<&str> = list;
                let st = tx.prepare_cached(&sql.candidates_in).await?;
                tx.query(&st, &[&task, &now, &limit, &list]).await?
            }
            None => {
                let st = tx.prepare_cached(&sql.candidates_all).await?;
                tx.query(&st, &[&task, &now, &limit]).await?
            }
        };
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let mut candidates: Vec<KeyId> = Vec::with_capacity(rows.len());
        for r in &rows {
            candidates.push((r.try_get(0)?, r.try_get(1)?));
        }
        // 2. Lock them in primary-key order.
        let (ns, fkeys) = split(&candidates);
        let st = tx.prepare_cached(&sql.lock).await?;
        let mut locked = Vec::with_capacity(candidates.len());
        let mut tids: HashMap<KeyId, String> = HashMap::with_capacity(candidates.len());
        for r in tx.query(&st, &[&task, &ns, &fkeys]).await? {
            let key = LockedKey {
                namespace: r.try_get(0)?,
                key: r.try_get(1)?,
                pass: r.try_get(2)?,
            };
            tids.insert((key.namespace.clone(), key.key.clone()), r.try_get(3)?);
            locked.push(key);
        }
        // 3. The running counts of a cap.
        let mut running: HashMap<KeyId, u64> = HashMap::new();
        if req.fair.max_running_per_key.is_some() && !locked.is_empty() {
            let ids: Vec<KeyId> = locked
                .iter()
                .map(|k| (k.namespace.clone(), k.key.clone()))
                .collect();
            let (ns, fkeys) = split(&ids);
            let st = tx.prepare_cached(&sql.running).await?;
            for r in tx.query(&st, &[&task, &ns, &fkeys]).await? {
                let n: i64 = r.try_get(2)?;
                running.insert(
                    (r.try_get(0)?, r.try_get(1)?),
                    u64::try_from(n).unwrap_or(0),
                );
            }
        }
        // 4. Slots per key.
        let plan = FairPlan::new(locked, &running, &req.fair, req.limit);
        let wanted: Vec<(usize, &LockedKey, u32)> = plan.wanted().collect();
        let mut claimed = Vec::new();
        let mut more = vec![true; plan.keys.len()];
        let mut leases = Vec::new();
        if !wanted.is_empty() {
            // 5. Each key's head rows, one more than its slots.
            let ns: Vec<&str> = wanted.iter().map(|w| w.1.namespace.as_str()).collect();
            let fkeys: Vec<&str> = wanted.iter().map(|w| w.1.key.as_str()).collect();
            let n: Vec<i64> = wanted.iter().map(|w| i64::from(w.2) + 1).collect();
            let st = tx.prepare_cached(&sql.heads).await?;
            let rows = tx.query(&st, &[&task, &ns, &fkeys, &n, &now]).await?;
            let mut got = vec![0u32; wanted.len()];
            let mut kept = Vec::with_capacity(rows.len());
            for r in &rows {
                let i: i64 = r.try_get("i")?;
                let Some(j) = usize::try_from(i).ok().and_then(|i| i.checked_sub(1)) else {
                    continue;
                };
                let Some(w) = wanted.get(j) else {
                    continue;
                };
                got[j] += 1;
                if got[j] <= w.2 {
                    kept.push(r);
                }
            }
            for (j, w) in wanted.iter().enumerate() {
                more[w.0] = got[j] > w.2;
            }
            let keyed = kept
                .into_iter()
                .map(|r| (r.try_get::<_, Uuid>("id").ok(), decode_execution(r)));
            let (picked, deferred) =
                claim_rows(keyed, self.attempt_ids, lease_expires_at, now, |e| {
                    tracing::error!(error = %e, defer_s = UNDECODABLE_DEFER_S,
                        "claim skipped an undecodable row and deferred it");
                });
            if !deferred.is_empty() {
                let until = add_seconds(now, "undecodable defer", UNDECODABLE_DEFER_S)?;
                let stmt = format!(
                    "UPDATE {} SET available_at = $1 WHERE id = ANY($2)",
                    q(&self.tables().executions)
                );
                tx.execute(&stmt, &[&until, &deferred]).await?;
            }
            claimed = plan.claimed(&picked);
            leases = picked;
        }
        // 6. The claims, then the keys' rows (a drained key's pending rows no longer include
        // the ones just claimed).
        if !leases.is_empty() {
            sort_in_claim_order(&mut leases);
            self.write_claims(tx, &mut leases, req, now, lease_expires_at)
                .await?;
        }
        self.key_outcomes(tx, sql, task, &plan, &claimed, &more, &tids, now)
            .await?;
        Ok(leases)
    }

    #[allow(
        clippy::too_many_arguments,
        reason = "one claim's state, passed along once"
    )]
    async fn key_outcomes(
        &self,
        tx: &Transaction<'_>,
        sql: &FairSql,
        task: &str,
        plan: &FairPlan,
        claimed: &[u32],
        more: &[bool],
        tids: &HashMap<KeyId, String>,
        now: DateTime<Utc>,
    ) -> OpResult<()> {
        // Per key: its new pass and/or ready_at; the keys whose pending rows decide.
        let mut set: HashMap<KeyId, (Option<i64>, Option<DateTime<Utc>>)> = HashMap::new();
        let mut recompute: Vec<KeyId> = Vec::new();
        for (i, outcome) in plan.outcomes_drained(claimed, more, now) {
            let k = &plan.keys[i];
            let id = (k.namespace.clone(), k.key.clone());
            match outcome {
                KeyOutcome::Advance(p) => {
                    set.insert(id, (Some(p), None));
                }
                KeyOutcome::Full(at) => {
                    set.insert(id, (None, Some(at)));
                }
                KeyOutcome::Empty => recompute.push(id),
                KeyOutcome::Drained(p) => {
                    set.insert(id.clone(), (Some(p), None));
                    recompute.push(id);
                }
            }
        }
        let mut gone: Vec<String> = Vec::new();
        if !recompute.is_empty() {
            // The key is still locked: its pending rows' least available_at, or none.
            let (ns, fkeys) = split(&recompute);
            let st = tx.prepare_cached(&sql.pending_min).await?;
            let mut next: HashMap<KeyId, DateTime<Utc>> = HashMap::new();
            for r in tx.query(&st, &[&task, &ns, &fkeys]).await? {
                if let Some(at) = r.try_get::<_, Option<DateTime<Utc>>>(2)? {
                    next.insert((r.try_get(0)?, r.try_get(1)?), at);
                }
            }
            for id in recompute {
                match next.remove(&id) {
                    Some(at) => set.entry(id).or_insert((None, None)).1 = Some(at),
                    None => {
                        set.remove(&id);
                        if let Some(t) = tids.get(&id) {
                            gone.push(t.clone());
                        }
                    }
                }
            }
        }
        if !gone.is_empty() {
            let st = tx.prepare_cached(&sql.delete).await?;
            tx.execute(&st, &[&gone]).await?;
        }
        if !set.is_empty() {
            let mut t = Vec::with_capacity(set.len());
            let mut passes: Vec<Option<i64>> = Vec::with_capacity(set.len());
            let mut ats: Vec<Option<DateTime<Utc>>> = Vec::with_capacity(set.len());
            for (id, (p, at)) in set {
                if let Some(tid) = tids.get(&id) {
                    t.push(tid.clone());
                    passes.push(p);
                    ats.push(at);
                }
            }
            let st = tx.prepare_cached(&sql.set_keys).await?;
            tx.execute(&st, &[&t, &passes, &ats]).await?;
        }
        Ok(())
    }
}

/// How many keys this handle's sweeps insert before it analyzes the keys table.
pub(crate) const ANALYZE_AFTER_KEYS: u64 = 1000;
