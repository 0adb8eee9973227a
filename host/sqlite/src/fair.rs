//! The fair claim on SQLite (docs/semantics.md#fair-claim, docs/sqlite.md#fair-claim): the
//! keys table `<T>_keys` holds one row per `(task_name, namespace, fairness_key)` with pending
//! work, its stride `pass` and `ready_at`; a claim of one task name reads the least-pass keys
//! ready now, splits its slots with `onestep_core::store::fair::FairPlan`, reads each key's head
//! rows on the fair index and writes each key's outcome. `BEGIN IMMEDIATE` serialises every
//! claim on the file (processes included), so no row locks are taken: the transaction holding
//! the write lock is the only writer of the keys and of the executions.
//!
//! Every statement is one index probe or a walk of one key's rows (the plans are recorded in
//! docs/sqlite.md#fair-claim and checked by `tests/backend.rs`); none reads the backlog as a
//! whole.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use onestep_core::request::ClaimRequest;
use onestep_core::store::fair::{
    CAP_RECHECK_MS, FairPlan, KeyOutcome, LockedKey, sort_in_claim_order,
};
use onestep_core::store::lease::LeaseWindow;
use onestep_core::{Execution, ExecutionError, ExecutionLease};
use rusqlite::{Connection, OptionalExtension, params};

use crate::backend::SqliteBackend;
use crate::errors::OpResult;
use crate::rows::{decode_execution, ts};

/// The effective fairness key of an executions row.
const KEY: &str = "COALESCE(fairness_key, namespace)";

/// The pending statuses, exactly as the fair index's `WHERE` (SQLite uses a partial index only
/// when the query repeats its condition).
const PENDING: &str = "status IN ('queued', 'retrying')";

/// Every priority a row may have (the column's CHECK): an `IN` list on the fair index's
/// `priority` column lets a range on `available_at` follow it, one probe per priority, instead
/// of a walk of the key's rows.
const PRIORITIES: &str = "(0, 1, 2, 3, 4, 5, 6, 7, 8, 9)";

/// The fair claim's statements on one pair of tables (`t` executions, `a` attempts, `k` keys;
/// all quoted).
pub(crate) struct FairSql {
    /// The least `(key, namespace)` of the task's pending rows.
    pub(crate) first_key: String,
    /// The next namespace of key `?2` after `?3` among the task's pending rows.
    pub(crate) next_namespace: String,
    /// The least `(key, namespace)` with a key after `?2`.
    pub(crate) next_key: String,
    /// The virtual time: the least pass of the task's keys (0 without keys).
    pub(crate) virtual_time: String,
    /// Adds a key at the virtual time, ready now (kept when present).
    pub(crate) insert_key: String,
    /// Waiting keys (`ready_at` later than `?3`, now + [`CAP_RECHECK_MS`]: a key at its cap
    /// waits that long and keeps its wait) with a row available now become ready now. (The unary
    /// `+` takes the TEXT affinity off the keys table's column: compared with it as is, the
    /// index expression `COALESCE(…)`, which has none, cannot be searched.)
    pub(crate) wake_keys: String,
    /// Up to `?3` keys ready at `?2`, least pass first (every namespace).
    pub(crate) candidates_all: String,
    /// The same within the namespaces of the JSON array `?4`.
    pub(crate) candidates_listed: String,
    /// The running/cancel_requested rows of one key.
    pub(crate) running: String,
    /// One key's head rows claimable at `?4`, at most `?5`, in claim order.
    pub(crate) heads: String,
    /// A key's new pass.
    pub(crate) advance: String,
    /// A key's new `ready_at`.
    pub(crate) ready_at: String,
    /// The least `available_at` of a key's pending rows.
    pub(crate) next_available: String,
    /// Removes a key without pending rows.
    pub(crate) delete_key: String,
}

impl FairSql {
    /// `fair` and `running` are the quoted fair and running indexes of the executions table:
    /// every read of the executions names its index (`INDEXED BY`), so that the plan does not
    /// depend on the planner's guesses or on `ANALYZE` statistics (without them SQLite prefers
    /// the status index for the wake-up probe, a walk of the namespace's backlog).
    pub(crate) fn new(t: &str, a: &str, k: &str, cols: &str, fair: &str, running: &str) -> FairSql {
        let key_e = "COALESCE(e.fairness_key, e.namespace)";
        let tf = format!("{t} INDEXED BY {fair}");
        let one_key =
            format!("e.task_name = ?1 AND {key_e} = ?2 AND e.namespace = ?3 AND e.{PENDING}");
        let candidates = |scope: &str| {
            format!(
                "SELECT namespace, fairness_key, pass FROM {k} WHERE task_name = ?1 \
                 AND ready_at <= ?2{scope} ORDER BY pass, namespace, fairness_key LIMIT ?3"
            )
        };
        let key_row = "task_name = ?1 AND namespace = ?2 AND fairness_key = ?3";
        FairSql {
            first_key: format!(
                "SELECT {KEY}, namespace FROM {tf} WHERE task_name = ?1 AND {PENDING} \
                 ORDER BY {KEY}, namespace LIMIT 1"
            ),
            next_namespace: format!(
                "SELECT namespace FROM {tf} WHERE task_name = ?1 AND {PENDING} AND {KEY} = ?2 \
                 AND namespace > ?3 ORDER BY namespace LIMIT 1"
            ),
            next_key: format!(
                "SELECT {KEY}, namespace FROM {tf} WHERE task_name = ?1 AND {PENDING} \
                 AND {KEY} > ?2 ORDER BY {KEY}, namespace LIMIT 1"
            ),
            virtual_time: format!("SELECT COALESCE(min(pass), 0) FROM {k} WHERE task_name = ?1"),
            insert_key: format!(
                "INSERT INTO {k} (task_name, namespace, fairness_key, pass, ready_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT DO NOTHING"
            ),
            wake_keys: format!(
                "UPDATE {k} SET ready_at = ?2 WHERE task_name = ?1 AND ready_at > ?3 \
                 AND EXISTS (SELECT 1 FROM {t} AS e INDEXED BY {fair} WHERE e.task_name = ?1 \
                 AND {key_e} = +{k}.fairness_key AND e.namespace = {k}.namespace \
                 AND e.{PENDING} AND e.priority IN {PRIORITIES} AND e.available_at <= ?2)"
            ),
            candidates_all: candidates(""),
            candidates_listed: candidates(" AND namespace IN (SELECT value FROM json_each(?4))"),
            running: format!(
                "SELECT count(*) FROM {t} INDEXED BY {running} WHERE task_name = ?1 AND {KEY} = ?2 \
                 AND namespace = ?3 AND status IN ('running', 'cancel_requested')"
            ),
            heads: format!(
                "SELECT {cols} FROM {t} AS e INDEXED BY {fair} WHERE {one_key} AND e.available_at <= ?4 \
                 AND (e.expires_at IS NULL OR e.expires_at > ?4 OR {lost_e}) \
                 ORDER BY e.priority, e.available_at, e.created_at, e.id LIMIT ?5",
                lost_e = crate::worker_ops::lost(a, "e"),
            ),
            advance: format!("UPDATE {k} SET pass = ?4 WHERE {key_row}"),
            ready_at: format!("UPDATE {k} SET ready_at = ?4 WHERE {key_row}"),
            next_available: format!(
                "SELECT min((SELECT min(e.available_at) FROM {t} AS e INDEXED BY {fair} \
                 WHERE {one_key} \
                 AND e.priority = p.value)) FROM json_each('[0,1,2,3,4,5,6,7,8,9]') p"
            ),
            delete_key: format!("DELETE FROM {k} WHERE {key_row}"),
        }
    }

    /// Each statement with its name, for the plans in docs/sqlite.md#fair-claim.
    #[cfg(feature = "test-support")]
    pub(crate) fn named(&self) -> Vec<(&'static str, &str)> {
        vec![
            ("first_key", &self.first_key),
            ("next_namespace", &self.next_namespace),
            ("next_key", &self.next_key),
            ("virtual_time", &self.virtual_time),
            ("insert_key", &self.insert_key),
            ("wake_keys", &self.wake_keys),
            ("candidates_all", &self.candidates_all),
            ("candidates_listed", &self.candidates_listed),
            ("running", &self.running),
            ("heads", &self.heads),
            ("advance", &self.advance),
            ("ready_at", &self.ready_at),
            ("next_available", &self.next_available),
            ("delete_key", &self.delete_key),
        ]
    }
}

/// One read row of a claim: its stored id and its decoding.
pub(crate) type ReadRow = (Option<String>, Result<Execution, ExecutionError>);

impl SqliteBackend {
    fn fair_sql(&self) -> FairSql {
        let names = self.tables();
        FairSql::new(
            self.t(),
            self.a(),
            self.k(),
            self.cols(),
            &crate::schema::q(&crate::schema::fair_index(names)),
            &crate::schema::q(&crate::schema::fair_running_index(names)),
        )
    }

    /// The fair claim of `req` (exactly one task name) after the maintenance: a sweep when
    /// due, one round; when it claimed nothing and did not sweep, a forced sweep and one more
    /// round (docs/semantics.md#fair-claim, steps 1–8).
    pub(crate) fn fair_claim_in(
        &self,
        c: &Connection,
        req: &ClaimRequest,
        window: LeaseWindow,
    ) -> OpResult<Vec<ExecutionLease>> {
        let Some(task) = req.task_names.first() else {
            return Ok(Vec::new());
        };
        let sql = self.fair_sql();
        let swept = self.inner.sweeps.due(task, window.now, false);
        if swept {
            let started = std::time::Instant::now();
            self.sweep(c, &sql, task, window.now)?;
            self.inner.sweeps.swept(task, started.elapsed());
        }
        let leases = self.fair_round(c, &sql, req, task, window)?;
        if !leases.is_empty() || swept || !self.inner.sweeps.due(task, window.now, true) {
            return Ok(leases);
        }
        let started = std::time::Instant::now();
        self.sweep(c, &sql, task, window.now)?;
        self.inner.sweeps.swept(task, started.elapsed());
        self.fair_round(c, &sql, req, task, window)
    }

    /// Step 1: adds the keys of the task's pending rows the keys table lacks (a skip scan of
    /// the fair index: one probe per key and namespace) at the virtual time, and makes waiting
    /// keys with a row available now ready now (not those at their cap, which wait at most
    /// [`CAP_RECHECK_MS`]: a sweep would otherwise undo their wait, and a claim of few slots
    /// would keep finding the capped key first).
    fn sweep(&self, c: &Connection, sql: &FairSql, task: &str, now: DateTime<Utc>) -> OpResult<()> {
        let now_s = ts(now);
        let vt: i64 = c
            .prepare_cached(&sql.virtual_time)?
            .query_row(params![task], |r| r.get(0))?;
        let mut insert = c.prepare_cached(&sql.insert_key)?;
        let mut first = c.prepare_cached(&sql.first_key)?;
        let mut next_ns = c.prepare_cached(&sql.next_namespace)?;
        let mut next_key = c.prepare_cached(&sql.next_key)?;
        let mut at: Option<(String, String)> = first
            .query_row(params![task], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?;
        while let Some((key, ns)) = at {
            insert.execute(params![task, ns, key, vt, now_s])?;
            at = match next_ns
                .query_row(params![task, key, ns], |r| r.get::<_, String>(0))
                .optional()?
            {
                Some(n) => Some((key, n)),
                None => next_key
                    .query_row(params![task, key], |r| Ok((r.get(0)?, r.get(1)?)))
                    .optional()?,
            };
        }
        let soon = ts(now + chrono::Duration::milliseconds(CAP_RECHECK_MS));
        c.prepare_cached(&sql.wake_keys)?
            .execute(params![task, now_s, soon])?;
        Ok(())
    }

    /// Steps 2–7: the candidates, the cap's counts, the plan, each key's head rows, the claim
    /// writes and each key's outcome; the leases in claim order.
    fn fair_round(
        &self,
        c: &Connection,
        sql: &FairSql,
        req: &ClaimRequest,
        task: &str,
        window: LeaseWindow,
    ) -> OpResult<Vec<ExecutionLease>> {
        let now_s = ts(window.now);
        let limit = i64::from(req.limit);
        let mut keys: Vec<LockedKey> = {
            let map = |r: &rusqlite::Row<'_>| {
                Ok(LockedKey {
                    namespace: r.get(0)?,
                    key: r.get(1)?,
                    pass: r.get(2)?,
                })
            };
            match req.namespaces.listed() {
                None => {
                    let mut st = c.prepare_cached(&sql.candidates_all)?;
                    let rows = st.query_map(params![task, now_s, limit], map)?;
                    rows.collect::<Result<_, _>>()?
                }
                Some(list) => {
                    let listed = serde_json::to_string(&list)
                        .map_err(|e| ExecutionError::Encoding(format!("namespaces: {e}")))?;
                    let mut st = c.prepare_cached(&sql.candidates_listed)?;
                    let rows = st.query_map(params![task, now_s, limit, listed], map)?;
                    rows.collect::<Result<_, _>>()?
                }
            }
        };
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        // The lock order of the other backends (primary key): the plan's tie order.
        keys.sort_by(|x, y| (&x.namespace, &x.key).cmp(&(&y.namespace, &y.key)));
        let mut running: HashMap<(String, String), u64> = HashMap::new();
        if req.fair.max_running_per_key.is_some() {
            let mut st = c.prepare_cached(&sql.running)?;
            for k in &keys {
                let n: i64 = st.query_row(params![task, k.key, k.namespace], |r| r.get(0))?;
                running.insert(
                    (k.namespace.clone(), k.key.clone()),
                    u64::try_from(n).unwrap_or(0),
                );
            }
        }
        let plan = FairPlan::new(keys, &running, &req.fair, req.limit);
        let mut rows: Vec<ReadRow> = Vec::new();
        let mut more = vec![true; plan.keys.len()];
        {
            let mut st = c.prepare_cached(&sql.heads)?;
            for (i, k, n) in plan.wanted() {
                // One row more than the slots: none means the key has no other claimable row
                // now (KeyOutcome::Drained).
                let got = st.query_map(
                    params![task, k.key, k.namespace, now_s, i64::from(n) + 1],
                    |r| Ok((r.get::<_, String>(0).ok(), decode_execution(r))),
                )?;
                let mut seen = 0u32;
                for row in got {
                    let row = row?;
                    seen += 1;
                    if seen <= n {
                        rows.push(row);
                    }
                }
                more[i] = seen > n;
            }
        }
        let mut leases = self.claim_read_rows(c, req, window, rows)?;
        let claimed = plan.claimed(&leases);
        for (i, outcome) in plan.outcomes_drained(&claimed, &more, window.now) {
            let k = &plan.keys[i];
            match outcome {
                KeyOutcome::Advance(pass) => {
                    c.prepare_cached(&sql.advance)?.execute(params![
                        task,
                        k.namespace,
                        k.key,
                        pass
                    ])?;
                }
                KeyOutcome::Full(at) => {
                    c.prepare_cached(&sql.ready_at)?.execute(params![
                        task,
                        k.namespace,
                        k.key,
                        ts(at)
                    ])?;
                }
                KeyOutcome::Empty | KeyOutcome::Drained(_) => {
                    if let KeyOutcome::Drained(pass) = outcome {
                        c.prepare_cached(&sql.advance)?.execute(params![
                            task,
                            k.namespace,
                            k.key,
                            pass
                        ])?;
                    }
                    let next: Option<String> = c
                        .prepare_cached(&sql.next_available)?
                        .query_row(params![task, k.key, k.namespace], |r| r.get(0))?;
                    match next {
                        Some(at) => c.prepare_cached(&sql.ready_at)?.execute(params![
                            task,
                            k.namespace,
                            k.key,
                            at
                        ])?,
                        None => c.prepare_cached(&sql.delete_key)?.execute(params![
                            task,
                            k.namespace,
                            k.key
                        ])?,
                    };
                }
            }
        }
        sort_in_claim_order(&mut leases);
        Ok(leases)
    }

    /// The fair claim's statements on the opened tables with the query plan of each
    /// (`EXPLAIN QUERY PLAN`, one line per plan row), for this crate's tests and
    /// docs/sqlite.md#fair-claim.
    #[cfg(feature = "test-support")]
    #[doc(hidden)]
    pub fn fair_query_plans(
        &self,
        c: &Connection,
    ) -> rusqlite::Result<Vec<(String, String, Vec<String>)>> {
        let sql = self.fair_sql();
        let mut out = Vec::new();
        for (name, text) in sql.named() {
            let mut st = c.prepare(&format!("EXPLAIN QUERY PLAN {text}"))?;
            let n = st.parameter_count();
            let values: Vec<rusqlite::types::Value> = (1..=n)
                .map(|i| match i {
                    4 if name == "candidates_listed" => {
                        rusqlite::types::Value::Text("[\"ns\"]".to_owned())
                    }
                    _ => rusqlite::types::Value::Text("x".to_owned()),
                })
                .collect();
            let rows = st.query_map(rusqlite::params_from_iter(values), |r| {
                r.get::<_, String>(3)
            })?;
            out.push((
                name.to_owned(),
                text.to_owned(),
                rows.collect::<Result<Vec<_>, _>>()?,
            ));
        }
        Ok(out)
    }
}
