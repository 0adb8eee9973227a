//! The fair claim (docs/semantics.md#fair-claim, docs/schema.md#fair-claim-keys) on tables with
//! the keys table: sweep when due, read the candidate keys least pass first, lock them in
//! primary-key order, count the running rows of each under a cap, split the slots
//! (`FairPlan`), lock each key's head rows with `FOR UPDATE SKIP LOCKED` (one `UNION ALL` of
//! per-key selects, which both MariaDB and MySQL accept with locking clauses), claim them as the
//! plain claim does, then write each key's outcome. One transaction, one "now".
//!
//! A key `(namespace, key)` is matched on the executions table as `namespace = ? AND fair_key IS
//! NULL` when the key is the namespace, else `namespace = ? AND fair_key = ?` (the generated
//! column `fair_key` = `NULLIF(fairness_key, namespace)`, [`crate::schema::FAIR_KEY_DEF`]).
//!
//! Deadlock rule: every statement that locks several key rows locks them in primary-key order;
//! execution rows are only locked with SKIP LOCKED while key locks are held.

use std::collections::{BTreeSet, HashMap};

use chrono::{DateTime, Utc};
use mysql_async::prelude::Queryable;
use mysql_async::{Params, Row, Transaction, Value as DbValue};
use onestep_core::error::UNDECODABLE_DEFER_S;
use onestep_core::request::{ClaimRequest, NamespaceScope};
use onestep_core::store::fair::{
    CAP_RECHECK_MS, FairPlan, KeyOutcome, LockedKey, sort_in_claim_order,
};
use onestep_core::store::lease::claim_rows;
use onestep_core::{ExecutionError, ExecutionLease};

use crate::backend::MySqlBackend;
use crate::errors::OpResult;
use crate::rows::{bind_time, decode_execution, placeholders};
use crate::schema::{ix_fair, ix_fair_running, ix_keys_pass, keys_table};

/// Rows per multi-row INSERT of new keys.
const INSERT_CHUNK: usize = 500;

/// `(namespace, key)` of one fairness key.
type Key = (String, String);

/// The executions-table condition for one key (alias `e`), with its binds.
fn key_match(ns: &str, key: &str, out: &mut Vec<DbValue>) -> &'static str {
    out.push(ns.into());
    if key == ns {
        "e.namespace = ? AND e.fair_key IS NULL"
    } else {
        out.push(key.into());
        "e.namespace = ? AND e.fair_key = ?"
    }
}

fn text(v: Option<DbValue>, what: &str) -> Result<String, ExecutionError> {
    match v {
        Some(v) => mysql_async::from_value_opt::<String>(v)
            .map_err(|e| ExecutionError::Encoding(format!("fair claim: {what}: {e}"))),
        None => Err(ExecutionError::Encoding(format!(
            "fair claim: {what} missing"
        ))),
    }
}

fn opt_text(v: Option<DbValue>, what: &str) -> Result<Option<String>, ExecutionError> {
    match v {
        None | Some(DbValue::NULL) => Ok(None),
        v => text(v, what).map(Some),
    }
}

/// The `(namespace, key)` of a row read as `namespace, fair_key`.
fn row_key(mut r: Row) -> Result<Key, ExecutionError> {
    let ns = text(r.take(0), "namespace")?;
    let key = opt_text(r.take(1), "fair_key")?.unwrap_or_else(|| ns.clone());
    Ok((ns, key))
}

/// `(?, ?), (?, ?), …` over `keys` (primary-key tuples of the keys table after `task_name`).
fn key_tuples(keys: &[Key], params: &mut Vec<DbValue>) -> String {
    let mut sql = String::new();
    for (i, (ns, k)) in keys.iter().enumerate() {
        if i > 0 {
            sql.push_str(", ");
        }
        sql.push_str("(?, ?)");
        params.push(ns.as_str().into());
        params.push(k.as_str().into());
    }
    sql
}

impl MySqlBackend {
    fn kt(&self) -> String {
        keys_table(&self.inner.names)
    }

    /// Sweep step a: the distinct keys of the task's pending rows (one covering range of
    /// `ix_<T>_fair`, in index order).
    fn sweep_keys_sql(&self) -> String {
        format!(
            "SELECT e.namespace, e.fair_key FROM `{t}` e FORCE INDEX (`{ix}`) \
             WHERE e.task_name = ? AND e.claimable = 1 GROUP BY e.namespace, e.fair_key",
            t = self.t(),
            ix = ix_fair(&self.inner.names),
        )
    }

    /// Sweep step b: keys of the task waiting beyond the cap recheck that have a row available
    /// now (locked in primary-key order, skipping keys a claimer holds).
    ///
    /// The probe is a scalar sub-query (`(SELECT 1 … LIMIT 1) IS NOT NULL`), not `EXISTS`:
    /// both servers may turn an `EXISTS` into a semi-join and, with statistics that lag the
    /// table (a burst of submits after an `ANALYZE`), drive it from the executions — one
    /// MariaDB sweep over 1,000 keys read 2.3 million rows in 1.4 s that way
    /// (docs/benchmarks.md#claim-cost-at-scale-mysql-and-mariadb). A scalar sub-query is never
    /// flattened: it runs once per waiting key, one probe of `ix_<T>_fair`.
    fn sweep_wake_sql(&self) -> String {
        format!(
            "SELECT k.namespace, k.fairness_key FROM `{k}` k \
             WHERE k.task_name = ? AND k.ready_at > ? AND (SELECT 1 FROM `{t}` e \
             FORCE INDEX (`{ix}`) WHERE e.task_name = k.task_name AND e.claimable = 1 \
             AND e.namespace = k.namespace \
             AND e.fair_key <=> NULLIF(k.fairness_key, k.namespace) AND e.available_at <= ? \
             LIMIT 1) IS NOT NULL \
             ORDER BY k.namespace, k.fairness_key FOR UPDATE SKIP LOCKED",
            k = self.kt(),
            t = self.t(),
            ix = ix_fair(&self.inner.names),
        )
    }

    /// Step 2: up to `limit` ready keys of the task in scope, least pass first. `None` binds
    /// the limit as the last `?`, so that one text serves every limit (one server-side prepare
    /// per connection, not one per limit: docs/benchmarks.md#where-the-database-time-goes-issue-35).
    fn candidates_sql(&self, scope_len: Option<usize>, limit: Option<u32>) -> String {
        let scope = match scope_len {
            Some(n) => format!(" AND namespace IN ({})", placeholders(n)),
            None => String::new(),
        };
        let limit = limit.map_or_else(|| "?".to_owned(), |n| n.to_string());
        format!(
            "SELECT namespace, fairness_key FROM `{k}` FORCE INDEX (`{ix}`) \
             WHERE task_name = ? AND ready_at <= ?{scope} \
             ORDER BY pass, namespace, fairness_key LIMIT {limit}",
            k = self.kt(),
            ix = ix_keys_pass(&self.inner.names),
        )
    }

    /// Step 3: lock the candidate keys (`tuples`: `(?, ?), …`) in primary-key order.
    fn lock_keys_sql(&self, tuples: &str) -> String {
        format!(
            "SELECT namespace, fairness_key, pass FROM `{}` WHERE task_name = ? \
             AND (namespace, fairness_key) IN ({tuples}) \
             ORDER BY namespace, fairness_key FOR UPDATE",
            self.kt()
        )
    }

    /// Step 4, one key (`m`: its [`key_match`]): its running rows, labelled `j`.
    fn running_part(&self, j: usize, m: &str) -> String {
        format!(
            "(SELECT {j} AS k, COUNT(*) FROM `{t}` e FORCE INDEX (`{ix}`) \
             WHERE e.task_name = ? AND {m} AND e.status IN ('running','cancel_requested'))",
            t = self.t(),
            ix = ix_fair_running(&self.inner.names),
        )
    }

    /// Step 6, one key (labelled `j` in a last column): its `n` head rows in claim order,
    /// locked unless another claimer holds them. `None` binds `n` as the part's last `?`, as in
    /// [`Self::candidates_sql`].
    fn head_part(&self, j: usize, m: &str, n: Option<u32>) -> String {
        let n = n.map_or_else(|| "?".to_owned(), |n| n.to_string());
        format!(
            "(SELECT {cols}, {j} AS fair_i FROM `{t}` e FORCE INDEX (`{ix}`) \
             WHERE e.task_name = ? AND e.claimable = 1 AND {m} AND e.available_at <= ? \
             AND (e.expires_at IS NULL OR e.expires_at > ? OR {lost}) \
             ORDER BY e.priority, e.available_at, e.created_at, e.id LIMIT {n} \
             FOR UPDATE SKIP LOCKED)",
            cols = self.cols_e(),
            t = self.t(),
            ix = ix_fair(&self.inner.names),
            lost = self.lease_lost_retry_sql(),
        )
    }

    /// Step 7, one key without a claimable row: the least `available_at` of its pending rows.
    fn empty_part(&self, j: usize, m: &str) -> String {
        format!(
            "(SELECT {j} AS k, MIN(e.available_at) FROM `{t}` e FORCE INDEX (`{ix}`) \
             WHERE e.task_name = ? AND e.claimable = 1 AND {m})",
            t = self.t(),
            ix = ix_fair(&self.inner.names),
        )
    }

    /// The reads of the fair claim, with `?` placeholders, for EXPLAIN tooling and tests
    /// (docs/schema.md#fair-claim-keys), each for one key that is its namespace (binds:
    /// `fair_sweep` task; `fair_wake` task, now, now; `fair_candidates` task, now, namespace;
    /// `fair_lock` task, namespace, key; `fair_running` task, namespace; `fair_heads` task,
    /// namespace, now, now; `fair_empty` task, namespace).
    pub fn fair_claim_read_statements(&self, limit: u32) -> Vec<(&'static str, String)> {
        let m = "e.namespace = ? AND e.fair_key IS NULL";
        vec![
            ("fair_sweep", self.sweep_keys_sql()),
            ("fair_wake", self.sweep_wake_sql()),
            ("fair_candidates", self.candidates_sql(Some(1), Some(limit))),
            ("fair_lock", self.lock_keys_sql("(?, ?)")),
            ("fair_running", self.running_part(0, m)),
            ("fair_heads", self.head_part(0, m, Some(limit))),
            ("fair_empty", self.empty_part(0, m)),
        ]
    }

    /// The sweep (docs/semantics.md#fair-claim): inserts the keys of pending rows the keys
    /// table lacks at the virtual time, and wakes waiting keys that have a row available now.
    async fn sweep(
        &self,
        tx: &mut Transaction<'_>,
        task: &str,
        now: DateTime<Utc>,
    ) -> OpResult<()> {
        let rows: Vec<Row> = tx.exec(self.sweep_keys_sql(), (task,)).await?;
        let mut pending: BTreeSet<Key> = BTreeSet::new();
        for r in rows {
            pending.insert(row_key(r)?);
        }
        let known: Vec<(String, String, i64)> = tx
            .exec(
                format!(
                    "SELECT namespace, fairness_key, pass FROM `{}` WHERE task_name = ?",
                    self.kt()
                ),
                (task,),
            )
            .await?;
        let virtual_time = known.iter().map(|k| k.2).min().unwrap_or(0);
        for (ns, k, _) in &known {
            pending.remove(&(ns.clone(), k.clone()));
        }
        let missing: Vec<Key> = pending.into_iter().collect();
        for chunk in missing.chunks(INSERT_CHUNK) {
            let mut params: Vec<DbValue> = Vec::with_capacity(chunk.len() * 5);
            for (ns, k) in chunk {
                params.extend([
                    task.into(),
                    ns.as_str().into(),
                    k.as_str().into(),
                    virtual_time.into(),
                    bind_time(now),
                ]);
            }
            let row = format!("({})", placeholders(5));
            // IGNORE: a key another claimer inserted meanwhile stays as it is.
            let sql = format!(
                "INSERT IGNORE INTO `{}` (task_name, namespace, fairness_key, pass, ready_at) \
                 VALUES {}",
                self.kt(),
                vec![row; chunk.len()].join(", ")
            );
            tx.exec_drop(sql, Params::Positional(params)).await?;
        }
        // A key at its cap keeps its recheck time (CAP_RECHECK_MS) rather than being woken in
        // every sweep (docs/schema.md#fair-claim-keys).
        let recheck = now + chrono::Duration::milliseconds(CAP_RECHECK_MS);
        let wake: Vec<Row> = tx
            .exec(
                self.sweep_wake_sql(),
                (task, bind_time(recheck), bind_time(now)),
            )
            .await?;
        let mut woken = Vec::with_capacity(wake.len());
        for mut r in wake {
            woken.push((text(r.take(0), "namespace")?, text(r.take(1), "key")?));
        }
        if !woken.is_empty() {
            let mut params: Vec<DbValue> = vec![bind_time(now), task.into()];
            let tuples = key_tuples(&woken, &mut params);
            tx.exec_drop(
                format!(
                    "UPDATE `{}` SET ready_at = ? WHERE task_name = ? \
                     AND (namespace, fairness_key) IN ({tuples})",
                    self.kt()
                ),
                Params::Positional(params),
            )
            .await?;
        }
        Ok(())
    }

    /// The fair claim of one task name (module docs); maintenance has run.
    pub(crate) async fn fair_claim(
        &self,
        tx: &mut Transaction<'_>,
        req: &ClaimRequest,
        now: DateTime<Utc>,
        lease_expires_at: DateTime<Utc>,
    ) -> OpResult<Vec<ExecutionLease>> {
        let Some(task) = req.task_names.first().map(String::as_str) else {
            return Ok(Vec::new());
        };
        let swept = self.inner.last_sweep.due(task, now, false);
        if swept {
            let started = std::time::Instant::now();
            self.sweep(tx, task, now).await?;
            self.inner.last_sweep.swept(task, started.elapsed());
        }
        let leases = self
            .fair_round(tx, req, task, now, lease_expires_at)
            .await?;
        if !leases.is_empty() || swept || !self.inner.last_sweep.due(task, now, true) {
            return Ok(leases);
        }
        let started = std::time::Instant::now();
        self.sweep(tx, task, now).await?;
        self.inner.last_sweep.swept(task, started.elapsed());
        self.fair_round(tx, req, task, now, lease_expires_at).await
    }

    /// Steps 2–7 of the fair claim.
    async fn fair_round(
        &self,
        tx: &mut Transaction<'_>,
        req: &ClaimRequest,
        task: &str,
        now: DateTime<Utc>,
        lease_expires_at: DateTime<Utc>,
    ) -> OpResult<Vec<ExecutionLease>> {
        // 2. Candidates.
        let mut params: Vec<DbValue> = vec![task.into(), bind_time(now)];
        let scope_len = match &req.namespaces {
            NamespaceScope::One(ns) => {
                params.push(ns.as_str().into());
                Some(1)
            }
            NamespaceScope::Many(list) => {
                params.extend(list.iter().map(|n| DbValue::from(n.as_str())));
                Some(list.len())
            }
            NamespaceScope::All => None,
        };
        params.push(req.limit.into());
        let rows: Vec<(String, String)> = tx
            .exec(
                self.candidates_sql(scope_len, None),
                Params::Positional(params),
            )
            .await?;
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let mut candidates: Vec<Key> = rows;
        candidates.sort();
        // 3. Lock them in primary-key order (waits; never skips).
        let mut params: Vec<DbValue> = vec![task.into()];
        let tuples = key_tuples(&candidates, &mut params);
        let locked: Vec<(String, String, i64)> = tx
            .exec(self.lock_keys_sql(&tuples), Params::Positional(params))
            .await?;
        if locked.is_empty() {
            return Ok(Vec::new());
        }
        let keys: Vec<LockedKey> = locked
            .into_iter()
            .map(|(namespace, key, pass)| LockedKey {
                namespace,
                key,
                pass,
            })
            .collect();
        // 4. Running rows per key under a cap (a new statement: sees every committed claim).
        let running = if req.fair.max_running_per_key.is_some() {
            self.running_counts(tx, task, &keys).await?
        } else {
            HashMap::new()
        };
        // 5. The split.
        let plan = FairPlan::new(keys, &running, &req.fair, req.limit);
        // 6. Head rows of each key with slots.
        let wanted: Vec<(usize, &LockedKey, u32)> = plan.wanted().collect();
        let mut picked: Vec<ExecutionLease> = Vec::new();
        let mut more = vec![true; plan.keys.len()];
        if !wanted.is_empty() {
            let mut params: Vec<DbValue> = Vec::new();
            let mut parts = Vec::with_capacity(wanted.len());
            // One row more than each key's slots: a key that returns no more than its slots
            // has no other claimable row now (KeyOutcome::Drained).
            for (j, (_, k, n)) in wanted.iter().enumerate() {
                params.push(task.into());
                let m = key_match(&k.namespace, &k.key, &mut params);
                params.push(bind_time(now));
                params.push(bind_time(now));
                params.push(n.saturating_add(1).into());
                parts.push(self.head_part(j, m, None));
            }
            let rows: Vec<Row> = tx
                .exec(parts.join(" UNION ALL "), Params::Positional(params))
                .await?;
            let mut got = vec![0u32; wanted.len()];
            let mut kept = Vec::with_capacity(rows.len());
            for r in rows {
                let j = r
                    .len()
                    .checked_sub(1)
                    .and_then(|last| r.get_opt::<usize, _>(last))
                    .and_then(Result::ok);
                let Some((j, w)) = j.and_then(|j| wanted.get(j).map(|w| (j, w))) else {
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
            let rows = kept
                .into_iter()
                .map(|r| (r.as_ref(0).cloned(), decode_execution(r)));
            let (got, deferred) = claim_rows(rows, self.attempt_ids, lease_expires_at, now, |e| {
                tracing::error!(error = %e, defer_s = UNDECODABLE_DEFER_S,
                        "claim skipped an undecodable row and deferred it");
            });
            if !deferred.is_empty() {
                self.defer_undecodable(tx, deferred, now).await?;
            }
            picked = got;
        }
        // 7. Claim, then each key's outcome.
        let claimed = plan.claimed(&picked);
        if !picked.is_empty() {
            self.write_claims(tx, &picked, &req.worker_id, now, lease_expires_at)
                .await?;
            let mut trace_parents = self.trace_parents(tx, &picked).await?;
            for l in &mut picked {
                l.trace_parent = trace_parents.remove(&l.execution.id);
            }
        }
        self.write_outcomes(
            tx,
            task,
            &plan,
            &plan.outcomes_drained(&claimed, &more, now),
        )
        .await?;
        sort_in_claim_order(&mut picked);
        Ok(picked)
    }

    /// The `running`/`cancel_requested` rows of each locked key: one `UNION ALL` of per-key
    /// counts, each a range of `ix_<T>_fair_running` over the key's two running statuses (its
    /// finished rows are never read).
    async fn running_counts(
        &self,
        tx: &mut Transaction<'_>,
        task: &str,
        keys: &[LockedKey],
    ) -> OpResult<HashMap<Key, u64>> {
        let mut params: Vec<DbValue> = Vec::with_capacity(keys.len() * 3);
        let mut parts = Vec::with_capacity(keys.len());
        for (j, k) in keys.iter().enumerate() {
            params.push(task.into());
            let m = key_match(&k.namespace, &k.key, &mut params);
            parts.push(self.running_part(j, m));
        }
        let rows: Vec<(usize, u64)> = tx
            .exec(parts.join(" UNION ALL "), Params::Positional(params))
            .await?;
        Ok(rows
            .into_iter()
            .filter_map(|(j, n)| {
                keys.get(j)
                    .map(|k| ((k.namespace.clone(), k.key.clone()), n))
            })
            .collect())
    }

    /// Writes the outcomes of [`FairPlan::outcomes`]: passes, recheck times, and for keys that
    /// had no claimable row the least `available_at` of their pending rows (or their deletion).
    async fn write_outcomes(
        &self,
        tx: &mut Transaction<'_>,
        task: &str,
        plan: &FairPlan,
        outcomes: &[(usize, KeyOutcome)],
    ) -> OpResult<()> {
        let key_of = |i: usize| (plan.keys[i].namespace.clone(), plan.keys[i].key.clone());
        let mut passes: Vec<(Key, i64)> = Vec::new();
        let mut ready: Vec<(Key, DateTime<Utc>)> = Vec::new();
        let mut empty: Vec<Key> = Vec::new();
        for (i, o) in outcomes {
            match o {
                KeyOutcome::Advance(p) => passes.push((key_of(*i), *p)),
                KeyOutcome::Full(t) => ready.push((key_of(*i), *t)),
                KeyOutcome::Empty => empty.push(key_of(*i)),
                KeyOutcome::Drained(p) => {
                    passes.push((key_of(*i), *p));
                    empty.push(key_of(*i));
                }
            }
        }
        let mut gone: Vec<Key> = Vec::new();
        if !empty.is_empty() {
            let mut params: Vec<DbValue> = Vec::new();
            let mut parts = Vec::with_capacity(empty.len());
            for (j, (ns, k)) in empty.iter().enumerate() {
                params.push(task.into());
                let m = key_match(ns, k, &mut params);
                parts.push(self.empty_part(j, m));
            }
            let rows: Vec<(usize, Option<chrono::NaiveDateTime>)> = tx
                .exec(parts.join(" UNION ALL "), Params::Positional(params))
                .await?;
            for (j, at) in rows {
                let Some(key) = empty.get(j).cloned() else {
                    continue;
                };
                match at {
                    Some(at) => ready.push((key, at.and_utc())),
                    None => gone.push(key),
                }
            }
        }
        if !passes.is_empty() {
            self.set_column(
                tx,
                task,
                "pass",
                passes.into_iter().map(|(k, p)| (k, p.into())),
            )
            .await?;
        }
        if !ready.is_empty() {
            self.set_column(
                tx,
                task,
                "ready_at",
                ready.into_iter().map(|(k, t)| (k, bind_time(t))),
            )
            .await?;
        }
        if !gone.is_empty() {
            gone.sort();
            let mut params: Vec<DbValue> = vec![task.into()];
            let tuples = key_tuples(&gone, &mut params);
            tx.exec_drop(
                format!(
                    "DELETE FROM `{}` WHERE task_name = ? AND (namespace, fairness_key) IN ({tuples})",
                    self.kt()
                ),
                Params::Positional(params),
            )
            .await?;
        }
        Ok(())
    }

    /// One UPDATE setting `column` per key (`CASE`), on locked key rows.
    async fn set_column(
        &self,
        tx: &mut Transaction<'_>,
        task: &str,
        column: &str,
        values: impl Iterator<Item = (Key, DbValue)>,
    ) -> OpResult<()> {
        let mut values: Vec<(Key, DbValue)> = values.collect();
        values.sort_by(|a, b| a.0.cmp(&b.0));
        let mut params: Vec<DbValue> = Vec::with_capacity(values.len() * 5 + 1);
        let mut case = String::new();
        for ((ns, k), v) in &values {
            case.push_str(" WHEN namespace = ? AND fairness_key = ? THEN ?");
            params.push(ns.as_str().into());
            params.push(k.as_str().into());
            params.push(v.clone());
        }
        params.push(task.into());
        let keys: Vec<Key> = values.into_iter().map(|(k, _)| k).collect();
        let tuples = key_tuples(&keys, &mut params);
        tx.exec_drop(
            format!(
                "UPDATE `{k}` SET {column} = CASE{case} ELSE {column} END WHERE task_name = ? \
                 AND (namespace, fairness_key) IN ({tuples})",
                k = self.kt()
            ),
            Params::Positional(params),
        )
        .await?;
        Ok(())
    }
}
