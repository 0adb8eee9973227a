//! Client operations (docs/semantics.md#client-operations): submit (race-safe idempotency
//! through `ON CONFLICT DO NOTHING`, ambiguous-commit resolution), submit_many (one
//! transaction, one array-bound INSERT), get, list (keyset paging) and cancel.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use onestep_core::request::{ListFilter, PreparedSubmission};
use onestep_core::store::quota::{self, QuotaReads};
use onestep_core::store::submit::{
    self, BatchOutcomes, CancelStep, CancelTarget, MAX_LISTED_TASKS, Resolved, SubmissionReads,
};
use onestep_core::store::{Lookup, window_page};
use onestep_core::{ConnectorKind, Execution, ExecutionError, ExecutionPage};
use tokio_postgres::types::ToSql;
use uuid::Uuid;

use crate::backend::{PgBackend, commit};
use crate::errors::{OpError, OpResult, backend_error};
use crate::json_text::to_text;
use crate::rows::{EXECUTION_COLUMN_COUNT, decode_execution, window_columns};
use crate::schema::KEY_EXPR;

/// The execution just inserted, with the payload and metadata exactly as submitted (the
/// stored `jsonb` holds the same values; its number texts may differ, see
/// docs/postgres.md#json-numbers).
fn as_submitted(mut x: Execution, sub: &PreparedSubmission) -> Result<Execution, ExecutionError> {
    x.payload = onestep_core::codec::decode_value(&sub.payload)
        .map_err(|e| ExecutionError::Encoding(e.to_string()))?;
    if let serde_json::Value::Object(m) = onestep_core::codec::decode_value(&sub.metadata)
        .map_err(|e| ExecutionError::Encoding(e.to_string()))?
    {
        x.metadata = m;
    }
    Ok(x)
}

/// Rows per INSERT statement of `submit_many`.
const INSERT_CHUNK: usize = 1000;

/// [`SubmissionReads`] on one connection or transaction.
struct Reads<'a, C> {
    backend: &'a PgBackend,
    c: &'a C,
}

#[async_trait]
impl<'a, C: GenericClient + Sync + 'a> SubmissionReads for Reads<'a, C> {
    type Error = OpError;

    async fn by_id(&mut self, id: Uuid, namespace: &str) -> OpResult<Option<Execution>> {
        self.backend.select_by_id(self.c, id, Some(namespace)).await
    }

    async fn key_holder(
        &mut self,
        sub: &PreparedSubmission,
        key: &str,
    ) -> OpResult<Option<(Execution, Option<String>)>> {
        let st = self.c.prepare_cached(&self.backend.sql().by_key).await?;
        let Some(row) = self
            .c
            .query_opt(&st, &[&sub.namespace, &sub.task_name, &key])
            .await?
        else {
            return Ok(None);
        };
        let digest: Option<String> = row
            .try_get(EXECUTION_COLUMN_COUNT)
            .map_err(|e| ExecutionError::Undecodable(format!("submission_digest: {e}")))?;
        Ok(Some((decode_execution(&row)?, digest)))
    }

    async fn by_ids(&mut self, ids: &[Uuid]) -> OpResult<Vec<Execution>> {
        let st = self.c.prepare_cached(&self.backend.sql().by_ids).await?;
        let rows = self.c.query(&st, &[&ids]).await?;
        Ok(rows
            .iter()
            .map(decode_execution)
            .collect::<Result<_, _>>()?)
    }
}

#[async_trait]
impl<'a, C: GenericClient + Sync + 'a> QuotaReads for Reads<'a, C> {
    /// At most `limit` waiting rows of the namespace (or of one key in it), read through
    /// `ix_<T>_quota` (docs/semantics.md#quotas).
    async fn waiting(&mut self, namespace: &str, key: Option<&str>, limit: u32) -> OpResult<u32> {
        let sql = self.backend.sql();
        let limit = i64::from(limit);
        let namespace = namespace.to_owned();
        let (text, key) = match key {
            Some(key) if sql.priority_columns => (
                quota_count_sql(&sql.t, &format!(" AND {KEY_EXPR} = $3")),
                Some(key.to_owned()),
            ),
            // Without the fairness-key column every row's key is its namespace.
            Some(key) if key != namespace => return Ok(0),
            _ => (quota_count_sql(&sql.t, ""), None),
        };
        let st = self.c.prepare_cached(&text).await?;
        let row = match &key {
            Some(key) => self.c.query_one(&st, &[&namespace, &limit, key]).await?,
            None => self.c.query_one(&st, &[&namespace, &limit]).await?,
        };
        let n: i64 = row.try_get(0)?;
        Ok(u32::try_from(n).unwrap_or(u32::MAX))
    }
}

/// At most `$2` waiting rows of namespace `$1`, with `cond` (docs/semantics.md#quotas).
fn quota_count_sql(t: &str, cond: &str) -> String {
    format!(
        "SELECT count(*) FROM (SELECT 1 FROM {t} WHERE namespace = $1 \
         AND status IN ('queued', 'retrying'){cond} LIMIT $2) AS w"
    )
}

impl PgBackend {
    /// Serializes the new submits of `namespace` under a quota until the transaction ends
    /// (docs/semantics.md#quotas): an advisory transaction lock on the table and namespace.
    async fn lock_quota<C: GenericClient + Sync>(&self, c: &C, namespace: &str) -> OpResult<()> {
        let key = format!("onestep quota {} {namespace}", self.sql().t);
        let st = c
            .prepare_cached("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))")
            .await?;
        c.execute(&st, &[&key]).await?;
        Ok(())
    }

    pub(crate) async fn select_by_id<C: GenericClient>(
        &self,
        c: &C,
        id: Uuid,
        namespace: Option<&str>,
    ) -> OpResult<Option<Execution>> {
        let row = match namespace {
            Some(ns) => {
                let st = c.prepare_cached(&self.sql().by_id_ns).await?;
                c.query_opt(&st, &[&id, &ns]).await?
            }
            None => {
                let st = c.prepare_cached(&self.sql().by_id).await?;
                c.query_opt(&st, &[&id]).await?
            }
        };
        Ok(row.as_ref().map(decode_execution).transpose()?)
    }

    /// Reads the row holding `sub`'s id or idempotency key and classifies it against `sub`.
    async fn lookup<C: GenericClient + Sync>(
        &self,
        c: &C,
        sub: &PreparedSubmission,
    ) -> OpResult<Lookup> {
        Reads { backend: self, c }.lookup(sub).await
    }

    async fn submit_once(&self, sub: &PreparedSubmission) -> OpResult<Execution> {
        let now = self.now();
        let mut conn = self.conn().await?;
        let tx = conn.transaction().await?;
        let available_at = now + sub.delay;
        let digest = sub.idempotency_key.as_ref().map(|_| sub.digest.clone());
        let columns = self.sql().priority_columns;
        onestep_core::schedule::check_storable(sub.priority, sub.fairness_key.as_deref(), columns)?;
        if let Some(q) = quota::quota_of(std::slice::from_ref(sub)) {
            self.lock_quota(&tx, &sub.namespace).await?;
            let mut reads = Reads {
                backend: self,
                c: &tx,
            };
            if let Some(answer) = reads.gate_one(&q, sub).await? {
                let out = answer?;
                commit(tx).await?;
                return Ok(out);
            }
        }
        let st = tx.prepare_cached(&self.sql().insert_one).await?;
        let (payload, metadata) = (to_text(&sub.payload), to_text(&sub.metadata));
        let priority = i16::from(sub.priority);
        let mut params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = vec![
            &sub.id,
            &sub.namespace,
            &sub.task_name,
            &payload,
            &metadata,
            &sub.idempotency_key,
            &digest,
            &available_at,
            &now,
            &sub.expires_at,
        ];
        if columns {
            params.push(&priority);
            params.push(&sub.fairness_key);
        }
        let row = tx.query_opt(&st, &params).await?;
        let out = match row {
            Some(row) => {
                // Only a newly created execution gets the submit's trace context
                // (docs/observability.md#traces); a replay keeps the first one.
                self.store_trace_parent(&tx, sub.id, sub.trace_parent.as_deref(), now)
                    .await?;
                // docs/semantics.md#completion-webhooks: the outbox row in this transaction.
                self.store_callback(&tx, sub, now).await?;
                as_submitted(decode_execution(&row)?, sub)?
            }
            // The id or the key is taken (the holder has committed: ON CONFLICT waits for it).
            None => match self.lookup(&tx, sub).await? {
                Lookup::Inserted(x) | Lookup::Replay(x) => x,
                Lookup::Conflict(existing_id) => {
                    return Err(ExecutionError::Conflict { existing_id }.into());
                }
                Lookup::Absent => {
                    return Err(OpError::Domain(backend_error(
                        "submit",
                        ConnectorKind::Transient,
                        "the row holding this submission's id or key vanished; retry",
                        &[],
                    )));
                }
            },
        };
        commit(tx).await?;
        Ok(out)
    }

    async fn submit_many_once(&self, subs: &[PreparedSubmission]) -> OpResult<BatchOutcomes> {
        let now = self.now();
        let mut conn = self.conn().await?;
        let tx = conn.transaction().await?;
        let columns = self.sql().priority_columns;
        for sub in subs {
            onestep_core::schedule::check_storable(
                sub.priority,
                sub.fairness_key.as_deref(),
                columns,
            )?;
        }
        // Under a quota: the namespace locked, replays and refusals answered first, only the
        // admitted rest inserted (docs/semantics.md#quotas).
        let gated = match quota::quota_of(subs) {
            Some(q) => {
                self.lock_quota(&tx, &subs[0].namespace).await?;
                let mut reads = Reads {
                    backend: self,
                    c: &tx,
                };
                Some(reads.gate_batch(&q, subs, INSERT_CHUNK).await?)
            }
            None => None,
        };
        let admitted = gated.as_ref().map(|g| quota::to_insert(subs, g));
        let written = admitted.as_deref().unwrap_or(subs);
        let st = tx.prepare_cached(&self.sql().insert_many).await?;
        for chunk in submit::insert_order(written).chunks(INSERT_CHUNK) {
            let ids: Vec<Uuid> = chunk.iter().map(|s| s.id).collect();
            let ns: Vec<&str> = chunk.iter().map(|s| s.namespace.as_str()).collect();
            let tasks: Vec<&str> = chunk.iter().map(|s| s.task_name.as_str()).collect();
            let payloads: Vec<String> = chunk.iter().map(|s| to_text(&s.payload)).collect();
            let metas: Vec<String> = chunk.iter().map(|s| to_text(&s.metadata)).collect();
            let keys: Vec<Option<&str>> =
                chunk.iter().map(|s| s.idempotency_key.as_deref()).collect();
            let digests: Vec<Option<&str>> = chunk
                .iter()
                .map(|s| s.idempotency_key.as_ref().map(|_| s.digest.as_str()))
                .collect();
            let avail: Vec<DateTime<Utc>> = chunk.iter().map(|s| now + s.delay).collect();
            let exp: Vec<Option<DateTime<Utc>>> = chunk.iter().map(|s| s.expires_at).collect();
            let priorities: Vec<i16> = chunk.iter().map(|s| i16::from(s.priority)).collect();
            let keys_fair: Vec<Option<&str>> =
                chunk.iter().map(|s| s.fairness_key.as_deref()).collect();
            let mut params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = vec![
                &ids, &ns, &tasks, &payloads, &metas, &keys, &digests, &avail, &exp, &now,
            ];
            if columns {
                params.push(&priorities);
                params.push(&keys_fair);
            }
            tx.execute(&st, &params).await?;
        }
        let results = self.resolve_batch(&tx, written).await?;
        let created: Vec<&PreparedSubmission> = written
            .iter()
            .zip(&results)
            .filter(|(s, r)| s.callback.is_some() && matches!(r, Some(Ok(x)) if x.id == s.id))
            .map(|(s, _)| s)
            .collect();
        self.store_callbacks(&tx, &created, now).await?;
        let results = match gated {
            Some(g) => quota::merge(g, results),
            None => results,
        };
        let out = submit::batch_outcomes(results, subs);
        commit(tx).await?;
        Ok(out)
    }

    /// Per submission: the row by id, else the key holder (replay or conflict), else `None`.
    async fn resolve_batch<C: GenericClient + Sync>(
        &self,
        c: &C,
        subs: &[PreparedSubmission],
    ) -> OpResult<Resolved> {
        Reads { backend: self, c }
            .resolve_batch(subs, INSERT_CHUNK)
            .await
    }

    /// The distinct task names of the namespace's rows that hold an idempotency key, read as a
    /// loose index scan of `uq_<T>_idempotency` (one `min()` probe per task, a recursive CTE:
    /// PostgreSQL has no skip scan); `None` when there are more than [`MAX_LISTED_TASKS`].
    async fn keyed_task_names(
        &self,
        namespace: &str,
    ) -> Result<Option<Vec<String>>, ExecutionError> {
        let t = &self.sql().t;
        let sql = format!(
            "WITH RECURSIVE tasks(name) AS (\
               SELECT min(task_name) FROM {t} \
                 WHERE namespace = $1 AND idempotency_key IS NOT NULL \
               UNION ALL \
               SELECT (SELECT min(task_name) FROM {t} WHERE namespace = $1 \
                         AND idempotency_key IS NOT NULL AND task_name > tasks.name) \
                 FROM tasks WHERE tasks.name IS NOT NULL) \
             SELECT name FROM tasks WHERE name IS NOT NULL LIMIT {}",
            MAX_LISTED_TASKS + 1
        );
        let rows = self
            .run("list", || async {
                let conn = self.conn().await?;
                let st = conn.prepare_cached(&sql).await?;
                Ok(conn.query(&st, &[&namespace]).await?)
            })
            .await?;
        let tasks = rows
            .iter()
            .map(|r| r.try_get::<_, String>(0))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| ExecutionError::Encoding(format!("task name: {e}")))?;
        Ok((tasks.len() <= MAX_LISTED_TASKS).then_some(tasks))
    }

    async fn cancel_once(&self, target: CancelTarget<'_>) -> OpResult<Option<Execution>> {
        let now = self.now();
        let mut conn = self.conn().await?;
        let tx = conn.transaction().await?;
        let st = tx.prepare_cached(&self.sql().by_id_ns_lock).await?;
        let Some(row) = tx.query_opt(&st, &[&target.id, &target.namespace]).await? else {
            let _ = tx.rollback().await;
            return Ok(None);
        };
        let current = decode_execution(&row)?;
        let sql = match CancelStep::of(current.status) {
            CancelStep::Cancel => &self.sql().cancel_queued,
            CancelStep::Request => &self.sql().cancel_running,
            CancelStep::Unchanged => {
                commit(tx).await?;
                return Ok(Some(current));
            }
        };
        let st = tx.prepare_cached(sql).await?;
        let row = tx
            .query_opt(&st, &[&target.reason, &now, &target.id])
            .await?;
        let updated = row.as_ref().map(decode_execution).transpose()?;
        commit(tx).await?;
        Ok(updated)
    }

    /// The row holding `sub`'s id or key, on a connection of its own.
    async fn lookup_fresh(&self, sub: &PreparedSubmission) -> OpResult<Lookup> {
        self.lookup(&self.conn().await?, sub).await
    }

    /// What landed of `subs`, on a connection of its own.
    async fn resolve_fresh(&self, subs: &[PreparedSubmission]) -> OpResult<Resolved> {
        self.resolve_batch(&self.conn().await?, subs).await
    }

    async fn cancel_reason_once(
        &self,
        namespace: &str,
        id: Uuid,
    ) -> OpResult<Option<Option<String>>> {
        let c = self.conn().await?;
        let st = c.prepare_cached(&self.sql().cancel_reason).await?;
        let row = c.query_opt(&st, &[&id, &namespace]).await?;
        Ok(row.map(|r| r.try_get::<_, Option<String>>(0)).transpose()?)
    }

    async fn get_once(&self, namespace: &str, id: Uuid) -> OpResult<Option<Execution>> {
        self.select_by_id(&self.conn().await?, id, Some(namespace))
            .await
    }

    /// One page of `list` (docs/semantics.md#listing-and-cursors).
    async fn list_page(
        &self,
        namespace: &str,
        filter: &ListFilter,
    ) -> Result<ExecutionPage, ExecutionError> {
        let limit = filter.limit as usize;
        let status = filter.status.map(|s| s.as_str().to_owned());
        let cursor = filter.after.as_ref().map(|c| (c.created_at, c.id));
        let search = &filter.search;
        // LIKE pattern of the exception-type search (backslash is PostgreSQL's default LIKE
        // escape).
        let exception_like = submit::exception_type_pattern(search);
        // The key is unique per (namespace, task name): without a task, name the namespace's
        // task names so the read is one `uq_<T>_idempotency` lookup per task, not a walk of the
        // namespace's history (docs/postgres.md#evidence).
        let tasks = match (&filter.task_name, &search.idempotency_key) {
            (None, Some(_)) => match self.keyed_task_names(namespace).await? {
                Some(t) if t.is_empty() => {
                    return Ok(ExecutionPage::from_overfetched(vec![], limit));
                }
                other => other,
            },
            _ => None,
        };
        let window = filter.window_rows();
        let rows = self
            .run("list", || async {
                // Everything an index range serves, in list order.
                let mut range = String::from("namespace = $1");
                let mut params: Vec<&(dyn ToSql + Sync)> = vec![&namespace];
                if let Some(t) = &filter.task_name {
                    params.push(t);
                    range.push_str(&format!(" AND task_name = ${}", params.len()));
                } else if let Some(t) = &tasks {
                    params.push(t);
                    range.push_str(&format!(" AND task_name = ANY(${})", params.len()));
                }
                if let Some(s) = &status {
                    params.push(s);
                    range.push_str(&format!(" AND status = ${}", params.len()));
                }
                // The extra list filters (docs/semantics.md#listing-and-cursors): the created-at
                // range on the list index, the key on its unique index, the rest (`residual`)
                // on the rows those yield.
                if let Some(t) = &search.created_from {
                    params.push(t);
                    range.push_str(&format!(" AND created_at >= ${}", params.len()));
                }
                if let Some(t) = &search.created_before {
                    params.push(t);
                    range.push_str(&format!(" AND created_at < ${}", params.len()));
                }
                if let Some(k) = &search.idempotency_key {
                    params.push(k);
                    range.push_str(&format!(" AND idempotency_key = ${}", params.len()));
                }
                if let Some((created_at, id)) = &cursor {
                    params.push(created_at);
                    let n = params.len();
                    params.push(id);
                    range.push_str(&format!(
                        " AND (created_at < ${n} OR (created_at = ${n} AND id < ${}))",
                        n + 1
                    ));
                }
                let mut residual: Vec<String> = Vec::new();
                if let Some((key, value)) = &search.metadata {
                    params.push(key);
                    let k = params.len();
                    params.push(value);
                    residual.push(format!(
                        "jsonb_typeof(metadata -> ${k}) = 'string' AND metadata ->> ${k} = ${}",
                        k + 1
                    ));
                }
                if let Some(pattern) = &exception_like {
                    params.push(pattern);
                    residual.push(format!(
                        "lower(error ->> 'exception_type') LIKE ${}",
                        params.len()
                    ));
                }
                let t = &self.sql().t;
                let (cols, cols_e) = crate::rows::columns(self.sql().priority_columns);
                // Page sizes are inlined: with a parameter the planner would guess a tenth of
                // the table for a generic plan's LIMIT.
                let sql = match window {
                    // A windowed search page (docs/semantics.md#search-window): the newest
                    // `window` rows of the range (positions only, the residual condition
                    // evaluated on each), numbered; then the full rows of the first `limit + 1`
                    // matches and of the window's last row, to go on from when it was full.
                    Some(window) => format!(
                        "SELECT {cols_e}, x.w_match, x.w_rows, x.w_created, x.w_id \
                         FROM (SELECT w_id, w_created, w_match, \
                         row_number() OVER (ORDER BY w_created DESC, w_id DESC) AS w_no, \
                         count(*) OVER () AS w_rows FROM (\
                         SELECT id AS w_id, created_at AS w_created, \
                         coalesce({}, false) AS w_match FROM {t} WHERE {range} \
                         ORDER BY created_at DESC, id DESC LIMIT {window}) w) x \
                         JOIN {t} e ON e.id = x.w_id WHERE x.w_match OR x.w_no = x.w_rows \
                         ORDER BY x.w_created DESC, x.w_id DESC LIMIT {}",
                        residual.join(" AND "),
                        limit + 1
                    ),
                    None => {
                        let mut sql = format!("SELECT {cols} FROM {t} WHERE {range}");
                        for cond in &residual {
                            sql.push_str(&format!(" AND {cond}"));
                        }
                        sql.push_str(&format!(
                            " ORDER BY created_at DESC, id DESC LIMIT {}",
                            limit + 1
                        ));
                        sql
                    }
                };
                // A statement of its own each time (not the connection's statement cache), so
                // every page is planned for its own values: after five runs of a cached
                // statement PostgreSQL may switch to its generic plan, which for a status list
                // walks the list index past the whole history (the generic-plan mode of
                // tests/scale.rs, docs/postgres.md#evidence). A page costs a parse more.
                let conn = self.conn().await?;
                Ok(conn.query(sql.as_str(), &params).await?)
            })
            .await?;
        let Some(window) = window else {
            let items = rows
                .iter()
                .map(decode_execution)
                .collect::<Result<Vec<_>, _>>()?;
            return Ok(ExecutionPage::from_overfetched(items, limit));
        };
        window_page(
            &rows,
            window,
            limit,
            |r| window_columns(r),
            decode_execution,
        )
    }
}

onestep_core::impl_execution_store!(PgBackend);
