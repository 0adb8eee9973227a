//! Client operations (docs/semantics.md#client-operations): submit (idempotency through the
//! unique key index and `ON CONFLICT DO NOTHING`, in one `BEGIN IMMEDIATE` transaction),
//! submit_many (one transaction), get, list (keyset paging, the search window) and cancel.
//! The port itself is written by `onestep_core::impl_execution_store!`.

use async_trait::async_trait;
use onestep_core::cursor::Cursor;
use onestep_core::request::{ListFilter, ListSearch, PreparedSubmission};
use onestep_core::store::quota::{self, QuotaReads};
use onestep_core::store::submit::{
    self, BatchOutcomes, CancelStep, CancelTarget, MAX_LISTED_TASKS, Resolved, SubmissionReads,
};
use onestep_core::store::{Lookup, WindowMark, window_page};
use onestep_core::{ConnectorKind, Execution, ExecutionError, ExecutionPage};
use rusqlite::types::Value as Sql;
use rusqlite::{Connection, OptionalExtension, params};
use serde_json::Value;
use uuid::Uuid;

use crate::backend::SqliteBackend;
use crate::errors::{OpError, OpResult, backend_error};
use crate::rows::{
    EXECUTION_COLUMN_COUNT, decode_execution, json, opt_json, ots, time, ts, uid, uuid,
};

/// Ids per `IN (SELECT value FROM json_each(?))` read.
pub(crate) const ID_CHUNK: usize = 1000;

/// The ids as one JSON array of stored UUID texts (bound to `json_each`).
pub(crate) fn id_array(ids: impl IntoIterator<Item = Uuid>) -> String {
    Value::Array(ids.into_iter().map(|u| Value::String(uid(u))).collect()).to_string()
}

/// The execution with `id` (in `namespace`, when given).
pub(crate) fn select_by_id(
    b: &SqliteBackend,
    c: &Connection,
    id: Uuid,
    namespace: Option<&str>,
) -> OpResult<Option<Execution>> {
    let (t, cols) = (b.t(), b.cols());
    let row = match namespace {
        Some(ns) => c
            .prepare_cached(&format!(
                "SELECT {cols} FROM {t} WHERE id = ?1 AND namespace = ?2"
            ))?
            .query_row(params![uid(id), ns], |r| Ok(decode_execution(r)))
            .optional()?,
        None => c
            .prepare_cached(&format!("SELECT {cols} FROM {t} WHERE id = ?1"))?
            .query_row(params![uid(id)], |r| Ok(decode_execution(r)))
            .optional()?,
    };
    Ok(row.transpose()?)
}

/// [`SubmissionReads`] on the writer's open transaction.
struct Reads<'a> {
    b: &'a SqliteBackend,
    c: &'a mut Connection,
}

#[async_trait]
impl SubmissionReads for Reads<'_> {
    type Error = OpError;

    async fn by_id(&mut self, id: Uuid, namespace: &str) -> OpResult<Option<Execution>> {
        select_by_id(self.b, self.c, id, Some(namespace))
    }

    async fn key_holder(
        &mut self,
        sub: &PreparedSubmission,
        key: &str,
    ) -> OpResult<Option<(Execution, Option<String>)>> {
        let cols = self.b.cols();
        let sql = format!(
            "SELECT {cols}, submission_digest FROM {} \
             WHERE namespace = ?1 AND task_name = ?2 AND idempotency_key = ?3",
            self.b.t()
        );
        let found = self
            .c
            .prepare_cached(&sql)?
            .query_row(params![sub.namespace, sub.task_name, key], |r| {
                Ok((
                    decode_execution(r),
                    r.get::<_, Option<String>>(EXECUTION_COLUMN_COUNT),
                ))
            })
            .optional()?;
        match found {
            None => Ok(None),
            Some((x, digest)) => Ok(Some((x?, digest?))),
        }
    }

    async fn by_ids(&mut self, ids: &[Uuid]) -> OpResult<Vec<Execution>> {
        let cols = self.b.cols();
        let sql = format!(
            "SELECT {cols} FROM {} WHERE id IN (SELECT value FROM json_each(?1))",
            self.b.t()
        );
        let mut st = self.c.prepare_cached(&sql)?;
        let rows = st.query_map(params![id_array(ids.iter().copied())], |r| {
            Ok(decode_execution(r))
        })?;
        let mut out = Vec::new();
        for r in rows {
            out.push(r??);
        }
        Ok(out)
    }
}

#[async_trait]
impl QuotaReads for Reads<'_> {
    /// At most `limit` waiting rows of the namespace (or of one key in it), read through
    /// `ix_<T>_quota` (docs/sqlite.md).
    async fn waiting(&mut self, namespace: &str, key: Option<&str>, limit: u32) -> OpResult<u32> {
        let rows = |cond: &str| {
            format!(
                "SELECT count(*) FROM (SELECT 1 FROM {} WHERE namespace = ?1 \
                 AND status IN ('queued', 'retrying'){cond} LIMIT ?2)",
                self.b.t()
            )
        };
        let n: i64 = match key {
            Some(key) if self.b.schema_report().features.priority_columns => self
                .c
                .prepare_cached(&rows(" AND COALESCE(fairness_key, namespace) = ?3"))?
                .query_row(params![namespace, limit, key], |r| r.get(0))?,
            // Without the fairness-key column every row's key is its namespace.
            Some(key) if key != namespace => return Ok(0),
            _ => self
                .c
                .prepare_cached(&rows(""))?
                .query_row(params![namespace, limit], |r| r.get(0))?,
        };
        Ok(u32::try_from(n).unwrap_or(u32::MAX))
    }
}

fn vanished() -> OpError {
    OpError::Domain(backend_error(
        "submit",
        ConnectorKind::Transient,
        "the row holding this submission's id or key vanished; retry",
        &[],
    ))
}

/// Rows per multi-row `INSERT` statement of `submit_many`, largest first: a batch is written
/// with as many statements of the largest size as fit, then of the smaller ones, so that only
/// these few statement shapes are ever prepared (and kept in the connection's statement cache),
/// whatever the batch size. 250 rows of at most [`INSERT_WIDTH_SCHEDULED`] values bind 3,000
/// parameters, far below the bundled SQLite's limit of 32,766.
const INSERT_ROWS: [usize; 4] = [250, 50, 10, 1];

/// Values bound per inserted row: on tables without `priority` and `fairness_key`, and with.
const INSERT_WIDTH: usize = 10;
const INSERT_WIDTH_SCHEDULED: usize = 12;

/// `INSERT … VALUES (…), … ON CONFLICT DO NOTHING RETURNING` the new rows, for `rows`
/// submissions: one row per submission, bound by [`bind_row`] (`?1`–`?10`, or `?12`, per row;
/// `updated_at` is `created_at`'s value). A row whose id or idempotency key is taken, by a
/// stored row or by an earlier row of the same statement, is skipped, as a single-row insert
/// of each in turn would skip it.
fn insert_sql(b: &SqliteBackend, rows: usize, scheduled: bool) -> String {
    let width = if scheduled {
        INSERT_WIDTH_SCHEDULED
    } else {
        INSERT_WIDTH
    };
    let mut values = String::with_capacity(rows * 96);
    for r in 0..rows {
        let p = |i: usize| r * width + i;
        if r > 0 {
            values.push_str(", ");
        }
        values.push_str(&format!(
            "(?{}, ?{}, ?{}, 'queued', ?{}, ?{}, ?{}, ?{}, 0, ?{}, ?{}, ?{}, ?{}, 0",
            p(1),
            p(2),
            p(3),
            p(4),
            p(5),
            p(6),
            p(7),
            p(8),
            p(9),
            p(9),
            p(10)
        ));
        if scheduled {
            values.push_str(&format!(", ?{}, ?{}", p(11), p(12)));
        }
        values.push(')');
    }
    // docs/semantics.md#priority-and-fairness-key: tables without the columns take the defaults.
    let extra = if scheduled {
        ", priority, fairness_key"
    } else {
        ""
    };
    format!(
        "INSERT INTO {} (id, namespace, task_name, status, payload, metadata, idempotency_key, \
         submission_digest, attempts, available_at, created_at, updated_at, expires_at, \
         version{extra}) VALUES {values} ON CONFLICT DO NOTHING RETURNING {cols}",
        b.t(),
        cols = b.cols(),
    )
}

/// Binds row `r` of an [`insert_sql`] statement to `sub`.
fn bind_row(
    st: &mut rusqlite::Statement<'_>,
    r: usize,
    sub: &PreparedSubmission,
    now: chrono::DateTime<chrono::Utc>,
    scheduled: bool,
) -> rusqlite::Result<()> {
    let width = if scheduled {
        INSERT_WIDTH_SCHEDULED
    } else {
        INSERT_WIDTH
    };
    let p = |i: usize| r * width + i;
    st.raw_bind_parameter(p(1), uid(sub.id))?;
    st.raw_bind_parameter(p(2), &sub.namespace)?;
    st.raw_bind_parameter(p(3), &sub.task_name)?;
    st.raw_bind_parameter(p(4), json(&sub.payload))?;
    st.raw_bind_parameter(p(5), json(&sub.metadata))?;
    st.raw_bind_parameter(p(6), &sub.idempotency_key)?;
    st.raw_bind_parameter(p(7), digest_of(sub))?;
    st.raw_bind_parameter(p(8), ts(now + sub.delay))?;
    st.raw_bind_parameter(p(9), ts(now))?;
    st.raw_bind_parameter(p(10), ots(sub.expires_at))?;
    if scheduled {
        st.raw_bind_parameter(p(11), i64::from(sub.priority))?;
        st.raw_bind_parameter(p(12), &sub.fairness_key)?;
    }
    Ok(())
}

/// Inserts `subs` (in this order) unless their id or key is taken, with as few multi-row
/// statements as [`INSERT_ROWS`] allows; the new rows (those of skipped submissions are absent).
/// Every submission is checked storable first, so a refused one writes nothing of the batch.
fn insert_many(
    b: &SqliteBackend,
    c: &Connection,
    subs: &[&PreparedSubmission],
    now: chrono::DateTime<chrono::Utc>,
) -> OpResult<Vec<Execution>> {
    let scheduled = b.schema_report().features.priority_columns;
    for sub in subs {
        onestep_core::schedule::check_storable(
            sub.priority,
            sub.fairness_key.as_deref(),
            scheduled,
        )?;
    }
    let mut out = Vec::with_capacity(subs.len());
    let mut rest = subs;
    while !rest.is_empty() {
        let rows = INSERT_ROWS
            .iter()
            .copied()
            .find(|n| *n <= rest.len())
            .unwrap_or(1);
        let (part, tail) = rest.split_at(rows);
        rest = tail;
        let mut st = c.prepare_cached(&insert_sql(b, rows, scheduled))?;
        for (r, sub) in part.iter().enumerate() {
            bind_row(&mut st, r, sub, now, scheduled)?;
        }
        let mut returned = st.raw_query();
        while let Some(row) = returned.next()? {
            out.push(decode_execution(row)?);
        }
    }
    Ok(out)
}

/// Inserts `sub` unless its id or key is taken; the new row, or `None`.
fn insert(
    b: &SqliteBackend,
    c: &Connection,
    sub: &PreparedSubmission,
    now: chrono::DateTime<chrono::Utc>,
) -> OpResult<Option<Execution>> {
    Ok(insert_many(b, c, &[sub], now)?.pop())
}

/// The digest a submission stores: only with an idempotency key.
fn digest_of(sub: &PreparedSubmission) -> Option<String> {
    sub.idempotency_key.as_ref().map(|_| sub.digest.clone())
}

impl SqliteBackend {
    pub(crate) async fn submit_once(&self, sub: &PreparedSubmission) -> OpResult<Execution> {
        let sub = sub.clone();
        self.write(move |b, c| {
            let now = b.now();
            // Under a quota (docs/semantics.md#quotas): `BEGIN IMMEDIATE` already serializes
            // every write, so the gate needs no lock of its own.
            if let Some(q) = quota::quota_of(std::slice::from_ref(&sub)) {
                let mut reads = Reads { b, c };
                let gate = reads.gate_one(&q, &sub);
                if let Some(answer) = futures::executor::block_on(gate)? {
                    return Ok(answer?);
                }
            }
            if let Some(x) = insert(b, c, &sub, now)? {
                // Only a newly created execution gets the submit's trace context.
                b.store_trace_parent(c, sub.id, sub.trace_parent.as_deref(), now)?;
                // docs/semantics.md#completion-webhooks: the outbox row in this transaction.
                b.store_callback(c, &sub, now)?;
                return Ok(x);
            }
            match futures::executor::block_on(Reads { b, c }.lookup(&sub))? {
                Lookup::Inserted(x) | Lookup::Replay(x) => Ok(x),
                Lookup::Conflict(existing_id) => {
                    Err(ExecutionError::Conflict { existing_id }.into())
                }
                Lookup::Absent => Err(vanished()),
            }
        })
        .await
    }

    pub(crate) async fn submit_many_once(
        &self,
        subs: &[PreparedSubmission],
    ) -> OpResult<BatchOutcomes> {
        let subs = subs.to_vec();
        self.write(move |b, c| {
            let now = b.now();
            // Under a quota: replays and refusals answered first, only the admitted rest
            // inserted (docs/semantics.md#quotas).
            let gated = match quota::quota_of(&subs) {
                Some(q) => {
                    let mut reads = Reads { b, c };
                    let gate = reads.gate_batch(&q, &subs, ID_CHUNK);
                    Some(futures::executor::block_on(gate)?)
                }
                None => None,
            };
            let admitted = gated.as_ref().map(|g| quota::to_insert(&subs, g));
            let written = admitted.as_deref().unwrap_or(&subs);
            // The rows the inserts returned answer their items; only an item whose insert
            // found its key taken (a replay or a conflict) is looked up.
            let mut inserted: std::collections::HashMap<Uuid, Execution> =
                insert_many(b, c, &submit::insert_order(written), now)?
                    .into_iter()
                    .map(|x| (x.id, x))
                    .collect();
            // docs/semantics.md#completion-webhooks: the new executions' outbox rows.
            for sub in written.iter().filter(|s| inserted.contains_key(&s.id)) {
                b.store_callback(c, sub, now)?;
            }
            let mut reads = Reads { b, c };
            let mut resolved = Vec::with_capacity(written.len());
            for sub in written {
                resolved.push(match inserted.remove(&sub.id) {
                    Some(x) => Some(Ok(x)),
                    None => futures::executor::block_on(reads.lookup(sub))?.outcome(),
                });
            }
            let resolved = match gated {
                Some(g) => quota::merge(g, resolved),
                None => resolved,
            };
            Ok(submit::batch_outcomes(resolved, &subs))
        })
        .await
    }

    /// The row holding `sub`'s id or key (after an ambiguous commit; SQLite never reports
    /// one, see `errors.rs`).
    pub(crate) async fn lookup_fresh(&self, sub: &PreparedSubmission) -> OpResult<Lookup> {
        let sub = sub.clone();
        self.write(move |b, c| futures::executor::block_on(Reads { b, c }.lookup(&sub)))
            .await
    }

    /// What landed of `subs`.
    pub(crate) async fn resolve_fresh(&self, subs: &[PreparedSubmission]) -> OpResult<Resolved> {
        let subs = subs.to_vec();
        self.write(move |b, c| {
            futures::executor::block_on(Reads { b, c }.resolve_batch(&subs, ID_CHUNK))
        })
        .await
    }

    pub(crate) async fn cancel_reason_once(
        &self,
        namespace: &str,
        id: Uuid,
    ) -> OpResult<Option<Option<String>>> {
        let ns = namespace.to_owned();
        self.read(move |b, c| {
            Ok(c.prepare_cached(&format!(
                "SELECT cancel_reason FROM {} WHERE id = ?1 AND namespace = ?2",
                b.t()
            ))?
            .query_row(params![uid(id), ns], |r| r.get::<_, Option<String>>(0))
            .optional()?)
        })
        .await
    }

    pub(crate) async fn get_once(&self, namespace: &str, id: Uuid) -> OpResult<Option<Execution>> {
        let ns = namespace.to_owned();
        self.read(move |b, c| select_by_id(b, c, id, Some(&ns)))
            .await
    }

    pub(crate) async fn cancel_once(
        &self,
        target: CancelTarget<'_>,
    ) -> OpResult<Option<Execution>> {
        let (ns, id) = (target.namespace.to_owned(), target.id);
        let reason = target.reason.map(str::to_owned);
        self.write(move |b, c| {
            let now = b.now();
            let Some(current) = select_by_id(b, c, id, Some(&ns))? else {
                return Ok(None);
            };
            let set = match CancelStep::of(current.status) {
                CancelStep::Cancel => "status = 'cancelled', finished_at = ?2,",
                CancelStep::Request => "status = 'cancel_requested',",
                CancelStep::Unchanged => return Ok(Some(current)),
            };
            let sql = format!(
                "UPDATE {} SET {set} cancel_reason = ?1, cancel_requested_at = ?2, \
                 updated_at = ?2, version = version + 1 WHERE id = ?3 \
                 RETURNING {cols}",
                b.t(),
                cols = b.cols(),
            );
            let row = c
                .prepare_cached(&sql)?
                .query_row(params![reason, ts(now), uid(id)], |r| {
                    Ok(decode_execution(r))
                })
                .optional()?;
            Ok(row.transpose()?)
        })
        .await
    }

    /// The distinct task names of the namespace's keyed rows; `None` when more than
    /// [`MAX_LISTED_TASKS`].
    async fn keyed_task_names(
        &self,
        namespace: &str,
    ) -> Result<Option<Vec<String>>, ExecutionError> {
        let ns = namespace.to_owned();
        let tasks = self
            .run("list", || {
                let ns = ns.clone();
                self.read(move |b, c| {
                    let sql = format!(
                        "SELECT DISTINCT task_name FROM {} WHERE namespace = ?1 \
                         AND idempotency_key IS NOT NULL LIMIT {}",
                        b.t(),
                        MAX_LISTED_TASKS + 1
                    );
                    let mut st = c.prepare_cached(&sql)?;
                    let rows = st.query_map(params![ns], |r| r.get::<_, String>(0))?;
                    Ok(rows.collect::<Result<Vec<_>, _>>()?)
                })
            })
            .await?;
        Ok((tasks.len() <= MAX_LISTED_TASKS).then_some(tasks))
    }

    /// One page of `list` (docs/semantics.md#listing-and-cursors). The metadata and
    /// exception-type filters, which no index holds, are evaluated on the rows of the range
    /// (through the search window when no key is given).
    pub(crate) async fn list_page(
        &self,
        namespace: &str,
        filter: &ListFilter,
    ) -> Result<ExecutionPage, ExecutionError> {
        let limit = filter.limit as usize;
        let search = &filter.search;
        let tasks = match (&filter.task_name, &search.idempotency_key) {
            (None, Some(_)) => match self.keyed_task_names(namespace).await? {
                Some(t) if t.is_empty() => {
                    return Ok(ExecutionPage::from_overfetched(vec![], limit));
                }
                other => other,
            },
            _ => None,
        };
        let mut range = String::from("namespace = ?");
        let mut params: Vec<Sql> = vec![Sql::Text(namespace.to_owned())];
        if let Some(t) = &filter.task_name {
            range.push_str(" AND task_name = ?");
            params.push(Sql::Text(t.clone()));
        } else if let Some(t) = &tasks {
            range.push_str(" AND task_name IN (SELECT value FROM json_each(?))");
            params.push(Sql::Text(serde_json::to_string(t).unwrap_or_default()));
        }
        if let Some(s) = filter.status {
            range.push_str(" AND status = ?");
            params.push(Sql::Text(s.as_str().to_owned()));
        }
        if let Some(t) = search.created_from {
            range.push_str(" AND created_at >= ?");
            params.push(Sql::Text(ts(t)));
        }
        if let Some(t) = search.created_before {
            range.push_str(" AND created_at < ?");
            params.push(Sql::Text(ts(t)));
        }
        if let Some(k) = &search.idempotency_key {
            range.push_str(" AND idempotency_key = ?");
            params.push(Sql::Text(k.clone()));
        }
        if let Some(cur) = &filter.after {
            range.push_str(" AND (created_at < ? OR (created_at = ? AND id < ?))");
            params.push(Sql::Text(ts(cur.created_at)));
            params.push(Sql::Text(ts(cur.created_at)));
            params.push(Sql::Text(uid(cur.id)));
        }
        let residual = search.metadata.is_some() || search.exception_type.is_some();
        let window = filter.window_rows();
        let cap = match (window, residual) {
            (Some(w), _) => format!(" LIMIT {w}"),
            (None, false) => format!(" LIMIT {}", limit + 1),
            (None, true) => String::new(),
        };
        let sql = format!(
            "SELECT {cols} FROM {} WHERE {range} \
             ORDER BY created_at DESC, id DESC{cap}",
            self.t(),
            cols = self.cols(),
        );
        let search = search.clone();
        let rows: Vec<(bool, Cursor, Result<Execution, ExecutionError>)> = self
            .run("list", || {
                let (sql, params, search) = (sql.clone(), params.clone(), search.clone());
                self.read(move |_, c| {
                    let mut st = c.prepare(&sql)?;
                    let rows = st.query_map(rusqlite::params_from_iter(params), |r| {
                        Ok(list_row(r, &search))
                    })?;
                    let mut out = Vec::new();
                    for r in rows {
                        out.push(r??);
                    }
                    Ok(out)
                })
            })
            .await?;
        match window {
            Some(window) => {
                let examined = rows.len() as i64;
                window_page(
                    rows,
                    window,
                    limit,
                    |(matched, position, _)| {
                        Ok(WindowMark {
                            matched: *matched,
                            examined,
                            position: *position,
                        })
                    },
                    |(_, _, x)| x,
                )
            }
            None => {
                let items = rows
                    .into_iter()
                    .filter(|(matched, _, _)| *matched)
                    .take(limit + 1)
                    .map(|(_, _, x)| x)
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(ExecutionPage::from_overfetched(items, limit))
            }
        }
    }
}

/// One row of a list read: whether it matches the residual filters, its list position and its
/// decoding.
fn list_row(
    r: &rusqlite::Row<'_>,
    search: &ListSearch,
) -> OpResult<(bool, Cursor, Result<Execution, ExecutionError>)> {
    let position = Cursor {
        created_at: time(r, 14, "created_at")?,
        id: uuid(r, 0, "id")?,
    };
    let mut matched = true;
    if let Some((key, value)) = &search.metadata {
        let meta = opt_json(r, 5, "metadata").ok().flatten();
        matched &= meta
            .as_ref()
            .and_then(|m| m.get(key))
            .and_then(Value::as_str)
            == Some(value.as_str());
    }
    if let Some(t) = &search.exception_type {
        let error = opt_json(r, 7, "error").ok().flatten();
        let needle = t.to_lowercase();
        matched &= error
            .as_ref()
            .and_then(|e| e.get("exception_type"))
            .and_then(Value::as_str)
            .is_some_and(|s| s.to_lowercase().contains(&needle));
    }
    Ok((matched, position, decode_execution(r)))
}

onestep_core::impl_execution_store!(SqliteBackend);

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use onestep_core::request::SubmitRequest;
    use onestep_core::{Backend, ExecutionClient, Limits, StoreOptions};
    use serde_json::json;

    use super::*;

    fn request(key: Option<String>, payload: Value) -> SubmitRequest {
        SubmitRequest {
            task_name: "t".to_owned(),
            payload,
            idempotency_key: key,
            ..SubmitRequest::default()
        }
    }

    /// A batch that takes every statement size (613 = 2×250 + 2×50 + 10 + 3×1), with a replay
    /// and a conflict of a stored key and of a key earlier in the same batch: each item is
    /// answered as one single-row insert after the other would answer it.
    #[tokio::test]
    async fn multi_row_inserts_answer_each_item_as_single_inserts_would() {
        let dir = tempfile::tempdir().unwrap();
        let mut opts = StoreOptions::new(format!("sqlite://{}", dir.path().join("t.db").display()));
        opts.auto_create = true;
        let backend = SqliteBackend::open(opts).await.unwrap();
        let client = ExecutionClient::new(backend.executions(), "ns", Limits::default()).unwrap();
        let pre = client
            .submit(&request(Some("pre".into()), json!(0)))
            .await
            .unwrap();
        let mut batch: Vec<SubmitRequest> = (0..613)
            .map(|i| request((i < 600).then(|| format!("k{i}")), json!(i)))
            .collect();
        batch[300] = request(Some("pre".into()), json!(0));
        batch[301] = request(Some("pre".into()), json!(99));
        batch[450] = request(Some("k5".into()), json!(5));
        batch[451] = request(Some("k6".into()), json!(7));
        let out = client.submit_many(&batch).await.unwrap();
        assert_eq!(out.len(), 613);
        let id = |i: usize| out[i].as_ref().map(|x| x.id).ok();
        assert_eq!(id(300), Some(pre.id));
        assert!(
            matches!(out[301], Err(ExecutionError::Conflict { existing_id }) if existing_id == pre.id)
        );
        assert_eq!(id(450), id(5));
        assert!(
            matches!(out[451], Err(ExecutionError::Conflict { existing_id }) if Some(existing_id) == id(6))
        );
        let mut new_ids = HashSet::new();
        for (i, x) in out.iter().enumerate() {
            if [300, 301, 450, 451].contains(&i) {
                continue;
            }
            let x = x.as_ref().unwrap();
            assert_eq!(x.payload, json!(i), "item {i}");
            assert!(
                new_ids.insert(x.id),
                "item {i} has a new execution of its own"
            );
        }
        assert_eq!(new_ids.len(), 609);
        let stored: i64 = backend
            .read(|b, c| {
                Ok(c.query_row(&format!("SELECT COUNT(*) FROM {}", b.t()), [], |r| r.get(0))?)
            })
            .await
            .unwrap();
        assert_eq!(stored, 610);
    }
}
