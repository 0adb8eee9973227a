//! Client operations (docs/semantics.md#client-operations): submit (race-safe idempotency, ambiguous-commit resolution),
//! submit_many (one transaction, multi-row INSERT), get, list (keyset paging) and cancel.

use async_trait::async_trait;
use mysql_async::prelude::Queryable;
use mysql_async::{Params, Row, Value as DbValue};
use onestep_core::request::{ListFilter, ListSearch, PreparedSubmission};
use onestep_core::store::quota::{self, QuotaReads};
use onestep_core::store::submit::{
    self, BatchOutcomes, CancelStep, CancelTarget, MAX_LISTED_TASKS, Resolved, SubmissionReads,
};
use onestep_core::store::{Lookup, window_page};
use onestep_core::{Execution, ExecutionError, ExecutionPage, ExecutionStatus};
use uuid::Uuid;

use crate::backend::{MySqlBackend, begin, commit};
use crate::errors::{OpError, OpResult, codes, server_code};
use crate::rows::{
    EXECUTION_COLUMN_COUNT, bind_opt_time, bind_time, bind_uuid, decode_execution,
    decode_executions, placeholders, window_columns,
};

/// Columns written by a submission (T1), in bind order.
const INSERT_COLUMNS: &str = "id, namespace, task_name, status, payload, metadata, \
    idempotency_key, submission_digest, attempts, available_at, created_at, updated_at, \
    expires_at, version";
const INSERT_WIDTH: usize = 14;
/// The columns a submission adds on tables with them (docs/semantics.md#priority-and-fairness-key).
const INSERT_SCHEDULE_COLUMNS: &str = ", priority, fairness_key";
/// Rows per INSERT statement of `submit_many` (keeps placeholders far below 65535).
const INSERT_CHUNK: usize = 500;

/// The bound values of one submission; `priority` and `fairness_key` when `scheduled`.
fn submission_params(
    sub: &PreparedSubmission,
    now: chrono::DateTime<chrono::Utc>,
    scheduled: bool,
) -> Vec<DbValue> {
    let available_at = now + sub.delay;
    let mut v = vec![
        bind_uuid(sub.id),
        sub.namespace.clone().into(),
        sub.task_name.clone().into(),
        ExecutionStatus::Queued.as_str().into(),
        sub.payload_json().into(),
        sub.metadata_json().into(),
        sub.idempotency_key.clone().into(),
        sub.idempotency_key
            .as_ref()
            .map(|_| sub.digest.clone())
            .into(),
        0i32.into(),
        bind_time(available_at),
        bind_time(now),
        bind_time(now),
        bind_opt_time(sub.expires_at),
        0i64.into(),
    ];
    if scheduled {
        v.push(i64::from(sub.priority).into());
        v.push(sub.fairness_key.clone().into());
    }
    v
}

/// The extra list filters an index serves (docs/semantics.md#listing-and-cursors): the
/// created-at range (on the list index) and the idempotency key.
fn push_indexed_search(sql: &mut String, params: &mut Vec<DbValue>, search: &ListSearch) {
    if let Some(t) = search.created_from {
        sql.push_str(" AND created_at >= ?");
        params.push(bind_time(t));
    }
    if let Some(t) = search.created_before {
        sql.push_str(" AND created_at < ?");
        params.push(bind_time(t));
    }
    if let Some(k) = &search.idempotency_key {
        sql.push_str(" AND idempotency_key = ?");
        params.push(k.as_str().into());
    }
}

/// The extra list filters no index holds (metadata value, exception type), as one condition
/// (`None` without them) and its parameters, evaluated on each row an index range yields.
fn residual_search(search: &ListSearch) -> Option<(String, Vec<DbValue>)> {
    let mut terms: Vec<&str> = Vec::new();
    let mut params: Vec<DbValue> = Vec::new();
    if let Some((key, value)) = &search.metadata {
        // A JSON path with the key quoted: any key text is a literal member name.
        let path = format!("$.{}", serde_json::Value::String(key.clone()));
        terms.push("JSON_UNQUOTE(JSON_EXTRACT(metadata, ?)) = ?");
        params.push(path.as_str().into());
        params.push(value.as_str().into());
        terms.push("JSON_TYPE(JSON_EXTRACT(metadata, ?)) = 'STRING'");
        params.push(path.into());
    }
    if let Some(pattern) = submit::exception_type_pattern(search) {
        terms.push("LOWER(JSON_UNQUOTE(JSON_EXTRACT(error, '$.exception_type'))) LIKE ?");
        params.push(pattern.into());
    }
    (!terms.is_empty()).then(|| (terms.join(" AND "), params))
}

/// [`SubmissionReads`] on one connection or transaction.
struct Reads<'a, Q> {
    backend: &'a MySqlBackend,
    q: &'a mut Q,
}

#[async_trait]
impl<'a, Q: Queryable + 'a> SubmissionReads for Reads<'a, Q> {
    type Error = OpError;

    async fn by_id(&mut self, id: Uuid, namespace: &str) -> OpResult<Option<Execution>> {
        self.backend
            .select_by_id(self.q, id, Some(namespace), false)
            .await
    }

    async fn key_holder(
        &mut self,
        sub: &PreparedSubmission,
        key: &str,
    ) -> OpResult<Option<(Execution, Option<String>)>> {
        let sql = format!(
            "SELECT {}, submission_digest FROM `{}` \
             WHERE namespace = ? AND task_name = ? AND idempotency_key = ?",
            self.backend.cols(),
            self.backend.t()
        );
        let row: Option<Row> = self
            .q
            .exec_first(sql, (sub.namespace.as_str(), sub.task_name.as_str(), key))
            .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let digest: Option<String> = row
            .get::<Option<String>, _>(EXECUTION_COLUMN_COUNT)
            .flatten();
        Ok(Some((decode_execution(row)?, digest)))
    }

    async fn by_ids(&mut self, ids: &[Uuid]) -> OpResult<Vec<Execution>> {
        let sql = format!(
            "SELECT {} FROM `{}` WHERE id IN ({})",
            self.backend.cols(),
            self.backend.t(),
            placeholders(ids.len())
        );
        let params: Vec<DbValue> = ids.iter().map(|id| bind_uuid(*id)).collect();
        let rows: Vec<Row> = self.q.exec(sql, Params::Positional(params)).await?;
        Ok(decode_executions(rows)?)
    }
}

#[async_trait]
impl<'a, Q: Queryable + 'a> QuotaReads for Reads<'a, Q> {
    /// At most `limit` waiting rows of the namespace (or of one key in it), read through
    /// `ix_<T>_quota` (namespace, status, fair_key): two ranges, `queued` and `retrying`.
    async fn waiting(&mut self, namespace: &str, key: Option<&str>, limit: u32) -> OpResult<u32> {
        let (cond, mut params): (&str, Vec<DbValue>) = match key {
            // `fair_key` is NULL when the key is the namespace.
            Some(key) if self.backend.priority_columns() => {
                if key == namespace {
                    (" AND fair_key IS NULL", vec![namespace.into()])
                } else {
                    (
                        " AND fair_key = ?",
                        vec![namespace.into(), key.as_bytes().into()],
                    )
                }
            }
            // Without the fairness-key column every row's key is its namespace.
            Some(key) if key != namespace => return Ok(0),
            _ => ("", vec![namespace.into()]),
        };
        params.push(limit.into());
        let sql = format!(
            "SELECT COUNT(*) FROM (SELECT 1 FROM `{}` WHERE namespace = ? \
             AND status IN ('queued', 'retrying'){cond} LIMIT ?) AS w",
            self.backend.t()
        );
        let n: Option<i64> = self.q.exec_first(sql, Params::Positional(params)).await?;
        Ok(u32::try_from(n.unwrap_or(0)).unwrap_or(u32::MAX))
    }
}

impl MySqlBackend {
    /// Serializes the new submits of `namespace` under a quota until the transaction ends
    /// (docs/semantics.md#quotas): the namespace's row of `<T>_quotas`, inserted on first use,
    /// locked exclusively by `INSERT … ON DUPLICATE KEY UPDATE` (a row lock, transaction
    /// scoped, unlike `GET_LOCK`).
    async fn lock_quota<Q: Queryable>(&self, q: &mut Q, namespace: &str) -> OpResult<()> {
        let table = crate::schema::quotas_table(&self.inner.names);
        let sql = format!(
            "INSERT INTO `{table}` (namespace) VALUES (?) \
             ON DUPLICATE KEY UPDATE namespace = namespace"
        );
        match q.exec_drop(sql, (namespace,)).await {
            Ok(()) => Ok(()),
            Err(e) if server_code(&e) == Some(codes::NO_SUCH_TABLE) => {
                Err(OpError::Domain(crate::errors::backend_error(
                    "submit",
                    onestep_core::ConnectorKind::Misconfigured,
                    &format!(
                        "the quotas table `{table}` is missing: submits under a quota need it; \
                         create it with `onestep migrate --upgrade`"
                    ),
                    &[],
                )))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The schedule columns a submission writes and its bind width: both on tables with them;
    /// none before `onestep migrate --upgrade`, where a submission that sets either is refused.
    fn insert_schedule(&self, subs: &[PreparedSubmission]) -> OpResult<(&'static str, usize)> {
        if self.priority_columns() {
            return Ok((INSERT_SCHEDULE_COLUMNS, INSERT_WIDTH + 2));
        }
        for sub in subs {
            onestep_core::schedule::check_storable(
                sub.priority,
                sub.fairness_key.as_deref(),
                false,
            )?;
        }
        Ok(("", INSERT_WIDTH))
    }

    pub(crate) async fn select_by_id<Q: Queryable>(
        &self,
        q: &mut Q,
        id: Uuid,
        namespace: Option<&str>,
        lock: bool,
    ) -> OpResult<Option<Execution>> {
        let mut sql = format!("SELECT {} FROM `{}` WHERE id = ?", self.cols(), self.t());
        let mut params: Vec<DbValue> = vec![bind_uuid(id)];
        if let Some(ns) = namespace {
            sql.push_str(" AND namespace = ?");
            params.push(ns.into());
        }
        if lock {
            sql.push_str(" FOR UPDATE");
        }
        let row: Option<Row> = q.exec_first(sql, Params::Positional(params)).await?;
        Ok(row.map(decode_execution).transpose()?)
    }

    /// Reads the row holding `sub`'s id or idempotency key and classifies it against `sub`.
    async fn lookup<Q: Queryable>(&self, q: &mut Q, sub: &PreparedSubmission) -> OpResult<Lookup> {
        Reads { backend: self, q }.lookup(sub).await
    }

    async fn submit_once(&self, sub: &PreparedSubmission) -> OpResult<Execution> {
        let now = self.now();
        let mut conn = self.conn().await?;
        let mut tx = begin(&mut conn).await?;
        let (extra, width) = self.insert_schedule(std::slice::from_ref(sub))?;
        if let Some(q) = quota::quota_of(std::slice::from_ref(sub)) {
            self.lock_quota(&mut tx, &sub.namespace).await?;
            let mut reads = Reads {
                backend: self,
                q: &mut tx,
            };
            if let Some(answer) = reads.gate_one(&q, sub).await? {
                let out = answer?;
                commit(self, tx).await?;
                return Ok(out);
            }
        }
        let sql = format!(
            "INSERT INTO `{}` ({INSERT_COLUMNS}{extra}) VALUES ({})",
            self.t(),
            placeholders(width)
        );
        let params = submission_params(sub, now, !extra.is_empty());
        if let Err(e) = tx.exec_drop(sql, Params::Positional(params)).await {
            drop(tx);
            if server_code(&e) == Some(codes::DUP_ENTRY) && sub.idempotency_key.is_some() {
                return match self.lookup(&mut conn, sub).await? {
                    Lookup::Inserted(x) | Lookup::Replay(x) => Ok(x),
                    Lookup::Conflict(existing_id) => {
                        Err(ExecutionError::Conflict { existing_id }.into())
                    }
                    // The holder vanished (rolled back or deleted): propagate the original error.
                    Lookup::Absent => Err(e.into()),
                };
            }
            return Err(e.into());
        }
        let inserted = self
            .select_by_id(&mut tx, sub.id, Some(&sub.namespace), false)
            .await?
            .ok_or_else(|| ExecutionError::Encoding("inserted execution not found".into()))?;
        // Only a newly created execution gets the submit's trace context
        // (docs/observability.md#traces); a replay keeps the first one.
        if let (Some(table), Some(traceparent)) = (self.tr(), sub.trace_parent.as_deref()) {
            tx.exec_drop(
                format!(
                    "INSERT INTO `{table}` (execution_id, traceparent, created_at) VALUES (?, ?, ?)"
                ),
                (bind_uuid(sub.id), traceparent, bind_time(now)),
            )
            .await?;
        }
        // docs/semantics.md#completion-webhooks: the outbox row in this transaction.
        self.store_callback(&mut tx, sub, now).await?;
        commit(self, tx).await?;
        Ok(inserted)
    }

    async fn submit_many_once(&self, subs: &[PreparedSubmission]) -> OpResult<BatchOutcomes> {
        let now = self.now();
        let mut conn = self.conn().await?;
        let mut tx = begin(&mut conn).await?;
        let (extra, width) = self.insert_schedule(subs)?;
        // Under a quota: the namespace locked, replays and refusals answered first, only the
        // admitted rest inserted (docs/semantics.md#quotas).
        let gated = match quota::quota_of(subs) {
            Some(q) => {
                self.lock_quota(&mut tx, &subs[0].namespace).await?;
                let mut reads = Reads {
                    backend: self,
                    q: &mut tx,
                };
                Some(reads.gate_batch(&q, subs, INSERT_CHUNK).await?)
            }
            None => None,
        };
        let admitted = gated.as_ref().map(|g| quota::to_insert(subs, g));
        let written = admitted.as_deref().unwrap_or(subs);
        for chunk in submit::insert_order(written).chunks(INSERT_CHUNK) {
            let row = format!("({})", placeholders(width));
            let sql = format!(
                "INSERT INTO `{}` ({INSERT_COLUMNS}{extra}) VALUES {} \
                 ON DUPLICATE KEY UPDATE id = id",
                self.t(),
                vec![row; chunk.len()].join(", ")
            );
            let params: Vec<DbValue> = chunk
                .iter()
                .flat_map(|s| submission_params(s, now, !extra.is_empty()))
                .collect();
            tx.exec_drop(sql, Params::Positional(params)).await?;
        }
        let results = self.resolve_batch(&mut tx, written).await?;
        for (sub, r) in written.iter().zip(&results) {
            if sub.callback.is_some() && matches!(r, Some(Ok(x)) if x.id == sub.id) {
                self.store_callback(&mut tx, sub, now).await?;
            }
        }
        let results = match gated {
            Some(g) => quota::merge(g, results),
            None => results,
        };
        let out = submit::batch_outcomes(results, subs);
        commit(self, tx).await?;
        Ok(out)
    }

    /// Per submission: the row by id, else the key holder (replay or conflict), else `None`.
    async fn resolve_batch<Q: Queryable>(
        &self,
        q: &mut Q,
        subs: &[PreparedSubmission],
    ) -> OpResult<Resolved> {
        Reads { backend: self, q }
            .resolve_batch(subs, INSERT_CHUNK)
            .await
    }

    /// A windowed search page (docs/semantics.md#search-window), one statement: the newest
    /// `window` rows of the index range (ids and positions only, with the residual condition
    /// evaluated on each), numbered; then the full rows of the first `limit + 1` matches and of
    /// the window's last row, the position to go on from when the window was full.
    #[allow(clippy::too_many_arguments)]
    async fn list_window(
        &self,
        hint: &str,
        range: &str,
        mut params: Vec<DbValue>,
        cond: &str,
        cond_params: &[DbValue],
        window: u32,
        limit: usize,
    ) -> Result<ExecutionPage, ExecutionError> {
        let (t, cols_e) = (self.t(), self.cols_e());
        let sql = format!(
            "SELECT {cols_e}, x.w_match, x.w_rows, x.w_created, x.w_id FROM (\
             SELECT w_id, w_created, w_match, \
             ROW_NUMBER() OVER (ORDER BY w_created DESC, w_id DESC) AS w_no, \
             COUNT(*) OVER () AS w_rows FROM (\
             SELECT id AS w_id, created_at AS w_created, COALESCE({cond}, 0) AS w_match \
             FROM `{t}`{hint} WHERE {range} ORDER BY created_at DESC, id DESC LIMIT {window}\
             ) AS w) AS x JOIN `{t}` e ON e.id = x.w_id \
             WHERE x.w_match = 1 OR x.w_no = x.w_rows \
             ORDER BY x.w_created DESC, x.w_id DESC LIMIT {}",
            limit + 1
        );
        // The residual condition's placeholders come first: it is in the innermost select list.
        let mut all: Vec<DbValue> = cond_params.to_vec();
        all.append(&mut params);
        let rows: Vec<Row> = self
            .run("list", || async {
                let mut conn = self.conn().await?;
                Ok(conn
                    .exec(sql.as_str(), Params::Positional(all.clone()))
                    .await?)
            })
            .await?;
        window_page(rows, window, limit, window_columns, decode_execution)
    }

    /// One page of `list` (docs/semantics.md#listing-and-cursors).
    async fn list_page(
        &self,
        namespace: &str,
        filter: &ListFilter,
    ) -> Result<ExecutionPage, ExecutionError> {
        // A filter on task, status or both reads the index that holds it in list order
        // (docs/schema.md#what-we-create): forced, because both servers otherwise prefer the
        // list index for its order and walk it past every row the filter rejects — the whole
        // history when the matches are few and old. A key search looks its key up instead.
        let hint = if !self.inner.features.list_indexes || filter.search.idempotency_key.is_some() {
            None
        } else {
            match (&filter.task_name, filter.status) {
                (Some(_), Some(_)) => Some(crate::schema::ix_status(&self.inner.names)),
                (None, Some(_)) => Some(crate::schema::ix_status_list(&self.inner.names)),
                (Some(_), None) => Some(crate::schema::ix_task_list(&self.inner.names)),
                (None, None) => None,
            }
        };
        let hint = hint.map_or(String::new(), |ix| format!(" FORCE INDEX (`{ix}`)"));
        // Everything an index range serves, in list order.
        let mut range = String::from("namespace = ?");
        let mut params: Vec<DbValue> = vec![namespace.into()];
        if let Some(t) = &filter.task_name {
            range.push_str(" AND task_name = ?");
            params.push(t.as_str().into());
        } else if filter.search.idempotency_key.is_some() {
            // The key is unique per (namespace, task name): name the namespace's task names so
            // the read is one `uq_<T>_idempotency` lookup per task, not a walk of the
            // namespace's history (docs/schema.md#evidence).
            match self.task_names(namespace).await? {
                Some(tasks) if tasks.is_empty() => {
                    return Ok(ExecutionPage::from_overfetched(vec![], 0));
                }
                Some(tasks) => {
                    range.push_str(&format!(
                        " AND task_name IN ({})",
                        placeholders(tasks.len())
                    ));
                    params.extend(tasks.into_iter().map(DbValue::from));
                }
                None => {}
            }
        }
        if let Some(s) = filter.status {
            range.push_str(" AND status = ?");
            params.push(s.as_str().into());
        }
        push_indexed_search(&mut range, &mut params, &filter.search);
        if let Some(c) = &filter.after {
            range.push_str(" AND (created_at < ? OR (created_at = ? AND id < ?))");
            params.push(bind_time(c.created_at));
            params.push(bind_time(c.created_at));
            params.push(bind_uuid(c.id));
        }
        let limit = filter.limit as usize;
        let residual = residual_search(&filter.search);
        if let (Some(window), Some((cond, cond_params))) = (filter.window_rows(), &residual) {
            return self
                .list_window(&hint, &range, params, cond, cond_params, window, limit)
                .await;
        }
        let mut sql = format!(
            "SELECT {} FROM `{}`{hint} WHERE {range}",
            self.cols(),
            self.t()
        );
        if let Some((cond, cond_params)) = residual {
            sql.push_str(&format!(" AND {cond}"));
            params.extend(cond_params);
        }
        sql.push_str(&format!(
            " ORDER BY created_at DESC, id DESC LIMIT {}",
            limit + 1
        ));
        let rows: Vec<Row> = self
            .run("list", || async {
                let mut conn = self.conn().await?;
                Ok(conn
                    .exec(sql.as_str(), Params::Positional(params.clone()))
                    .await?)
            })
            .await?;
        let items = decode_executions(rows)?;
        Ok(ExecutionPage::from_overfetched(items, limit))
    }

    /// The namespace's distinct task names: one `ORDER BY task_name LIMIT 1` probe per task,
    /// each a seek into an index led by `(namespace, task_name)` past the name found last (a
    /// few index entries per task, not per execution). Separate statements, because neither
    /// server seeks on an outer reference: `SELECT DISTINCT`, a correlated `MIN()` and a
    /// recursive CTE all read the namespace's entries. `None` when there are more than
    /// [`MAX_LISTED_TASKS`], where naming them would cost more than it saves.
    async fn task_names(&self, namespace: &str) -> Result<Option<Vec<String>>, ExecutionError> {
        let t = self.t();
        let first =
            format!("SELECT task_name FROM `{t}` WHERE namespace = ? ORDER BY task_name LIMIT 1");
        let next = format!(
            "SELECT task_name FROM `{t}` WHERE namespace = ? AND task_name > ? \
             ORDER BY task_name LIMIT 1"
        );
        self.run("list", || async {
            let mut conn = self.conn().await?;
            let mut tasks: Vec<String> = Vec::new();
            let mut found: Option<String> = conn.exec_first(first.as_str(), (namespace,)).await?;
            while let Some(name) = found {
                if tasks.len() == MAX_LISTED_TASKS {
                    return Ok(None);
                }
                found = conn
                    .exec_first(next.as_str(), (namespace, name.as_str()))
                    .await?;
                tasks.push(name);
            }
            Ok(Some(tasks))
        })
        .await
    }

    async fn cancel_once(&self, target: CancelTarget<'_>) -> OpResult<Option<Execution>> {
        let now = self.now();
        let mut conn = self.conn().await?;
        let mut tx = begin(&mut conn).await?;
        let Some(current) = self
            .select_by_id(&mut tx, target.id, Some(target.namespace), true)
            .await?
        else {
            return Ok(None);
        };
        let step = CancelStep::of(current.status);
        let update = match step {
            CancelStep::Cancel => Some(format!(
                "UPDATE `{}` SET status = 'cancelled', cancel_reason = ?, cancel_requested_at = ?, \
                 finished_at = ?, updated_at = ?, version = version + 1 WHERE id = ?",
                self.t()
            )),
            CancelStep::Request => Some(format!(
                "UPDATE `{}` SET status = 'cancel_requested', cancel_reason = ?, \
                 cancel_requested_at = ?, updated_at = ?, version = version + 1 WHERE id = ?",
                self.t()
            )),
            CancelStep::Unchanged => None,
        };
        let Some(sql) = update else {
            commit(self, tx).await?;
            return Ok(Some(current));
        };
        let mut params: Vec<DbValue> = vec![target.reason.into(), bind_time(now)];
        if step == CancelStep::Cancel {
            params.push(bind_time(now));
        }
        params.push(bind_time(now));
        params.push(bind_uuid(target.id));
        tx.exec_drop(sql, Params::Positional(params)).await?;
        let updated = self.select_by_id(&mut tx, target.id, None, false).await?;
        commit(self, tx).await?;
        Ok(updated)
    }

    /// The row holding `sub`'s id or key, on a connection of its own.
    async fn lookup_fresh(&self, sub: &PreparedSubmission) -> OpResult<Lookup> {
        let mut conn = self.conn().await?;
        self.lookup(&mut conn, sub).await
    }

    /// What landed of `subs`, on a connection of its own.
    async fn resolve_fresh(&self, subs: &[PreparedSubmission]) -> OpResult<Resolved> {
        let mut conn = self.conn().await?;
        self.resolve_batch(&mut conn, subs).await
    }

    async fn cancel_reason_once(
        &self,
        namespace: &str,
        id: Uuid,
    ) -> OpResult<Option<Option<String>>> {
        let mut conn = self.conn().await?;
        let sql = format!(
            "SELECT cancel_reason FROM `{}` WHERE id = ? AND namespace = ?",
            self.t()
        );
        let params = vec![bind_uuid(id), DbValue::from(namespace)];
        let row: Option<Row> = conn.exec_first(sql, Params::Positional(params)).await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let value = row.as_ref(0).cloned().unwrap_or(DbValue::NULL);
        let reason = crate::rows::opt_text(value, "cancel_reason")
            .map_err(|e| onestep_core::store::undecodable_execution(&id.to_string(), e))?;
        Ok(Some(reason))
    }

    async fn get_once(&self, namespace: &str, id: Uuid) -> OpResult<Option<Execution>> {
        let mut conn = self.conn().await?;
        self.select_by_id(&mut conn, id, Some(namespace), false)
            .await
    }
}

onestep_core::impl_execution_store!(MySqlBackend);
