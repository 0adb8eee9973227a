//! [`ExecutionStore`] for [`MemoryStore`]: submit with idempotency (replay or conflict by
//! digest), submit_many as one atomic step, get, list newest first with the core cursor, cancel.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use onestep_core::ports::ExecutionStore;
use onestep_core::quota::{QuotaKind, QuotaRefusal, SubmitQuota};
use onestep_core::request::{ListFilter, ListSearch, PreparedSubmission};
use onestep_core::{Execution, ExecutionError, ExecutionPage, ExecutionStatus};
use serde_json::Value;
use uuid::Uuid;

use super::{MemoryStore, Op, Row, State, decoded};

/// Inserts `sub` (T1) or resolves it through its idempotency key: the holder with the same digest
/// is a replay, any other digest a conflict.
fn submit_in(
    state: &mut State,
    sub: &PreparedSubmission,
    now: DateTime<Utc>,
) -> Result<Execution, ExecutionError> {
    if let Some(row) = state.rows.get(&sub.id)
        && row.execution.namespace == sub.namespace
    {
        return Ok(row.execution.clone());
    }
    let key = sub
        .idempotency_key
        .as_ref()
        .map(|k| (sub.namespace.clone(), sub.task_name.clone(), k.clone()));
    if let Some(row) = key
        .as_ref()
        .and_then(|k| state.keys.get(k))
        .and_then(|id| state.rows.get(id))
    {
        return if row.digest.as_deref() == Some(sub.digest.as_str()) {
            Ok(row.execution.clone())
        } else {
            Err(ExecutionError::Conflict {
                existing_id: row.execution.id,
            })
        };
    }
    if let Some(quota) = sub.quota.filter(SubmitQuota::is_limited)
        && let Some(refusal) = over_quota(state, sub, &quota)
    {
        return Err(ExecutionError::QuotaExceeded(Box::new(refusal)));
    }
    let metadata = match decoded(sub.id, &sub.metadata)? {
        Value::Object(m) => m,
        _ => {
            return Err(ExecutionError::Encoding(format!(
                "cannot decode execution {}: metadata is not an object",
                sub.id
            )));
        }
    };
    let execution = Execution {
        id: sub.id,
        namespace: sub.namespace.clone(),
        task_name: sub.task_name.clone(),
        status: ExecutionStatus::Queued,
        payload: decoded(sub.id, &sub.payload)?,
        metadata,
        result: None,
        error: None,
        attempts: 0,
        created_at: now,
        available_at: now + sub.delay,
        started_at: None,
        finished_at: None,
        cancel_requested_at: None,
        expires_at: sub.expires_at,
        version: 0,
        priority: sub.priority,
        fairness_key: sub.fairness_key.clone(),
    };
    state.rows.insert(
        sub.id,
        Row {
            execution: execution.clone(),
            digest: sub.idempotency_key.as_ref().map(|_| sub.digest.clone()),
            lease_token: None,
            lease_expires_at: None,
            worker_id: None,
            cancel_reason: None,
            updated_at: now,
            attempts: Vec::new(),
        },
    );
    if let Some(key) = key {
        state.keys.insert(key, sub.id);
    }
    if let Some(cb) = &sub.callback {
        state
            .callbacks
            .insert(sub.id, super::callbacks::MemCallback::new(sub, cb, now));
    }
    Ok(execution)
}

/// The quota `sub` would break (docs/semantics.md#quotas): its namespace's, or its fairness
/// key's, waiting executions (queued or retrying) already at the limit. The whole store is one
/// lock, so concurrent submitters are serialized as the backends' quota locks serialize them.
fn over_quota(
    state: &State,
    sub: &PreparedSubmission,
    quota: &SubmitQuota,
) -> Option<QuotaRefusal> {
    let waiting = state.rows.values().map(|r| &r.execution).filter(|e| {
        e.namespace == sub.namespace
            && matches!(
                e.status,
                ExecutionStatus::Queued | ExecutionStatus::Retrying
            )
    });
    let key = sub.fairness_key.as_deref().unwrap_or(&sub.namespace);
    if let Some(limit) = quota.max_queued
        && waiting.clone().count() >= limit as usize
    {
        return Some(QuotaRefusal {
            quota: QuotaKind::MaxQueued,
            namespace: sub.namespace.clone(),
            key: None,
            limit,
        });
    }
    if let Some(limit) = quota.max_queued_per_key
        && waiting
            .filter(|e| e.effective_fairness_key() == key)
            .count()
            >= limit as usize
    {
        return Some(QuotaRefusal {
            quota: QuotaKind::MaxQueuedPerKey,
            namespace: sub.namespace.clone(),
            key: Some(key.to_owned()),
            limit,
        });
    }
    None
}

#[async_trait]
impl ExecutionStore for MemoryStore {
    async fn submit(&self, submission: PreparedSubmission) -> Result<Execution, ExecutionError> {
        self.enter(Op::Submit).await?;
        let now = self.now();
        let out = submit_in(&mut self.state(), &submission, now);
        self.record(Op::Submit, 1, out.is_ok());
        out
    }

    async fn submit_many(
        &self,
        submissions: Vec<PreparedSubmission>,
    ) -> Result<Vec<Result<Execution, ExecutionError>>, ExecutionError> {
        if submissions.is_empty() {
            return Ok(Vec::new());
        }
        self.enter(Op::SubmitMany).await?;
        let now = self.now();
        let out: Vec<_> = {
            let mut state = self.state();
            submissions
                .iter()
                .map(|s| submit_in(&mut state, s, now))
                .collect()
        };
        self.record_batch(Op::SubmitMany, &out);
        Ok(out)
    }

    async fn get(&self, namespace: &str, id: Uuid) -> Result<Option<Execution>, ExecutionError> {
        self.enter(Op::Get).await?;
        let out = self
            .state()
            .rows
            .get(&id)
            .filter(|r| r.execution.namespace == namespace)
            .map(|r| r.execution.clone());
        self.record(Op::Get, 1, true);
        Ok(out)
    }

    async fn cancel_reason(
        &self,
        namespace: &str,
        id: Uuid,
    ) -> Result<Option<Option<String>>, ExecutionError> {
        self.enter(Op::Get).await?;
        let out = self
            .state()
            .rows
            .get(&id)
            .filter(|r| r.execution.namespace == namespace)
            .map(|r| r.cancel_reason.clone());
        self.record(Op::Get, 1, true);
        Ok(out)
    }

    async fn versions(&self, ids: &[Uuid]) -> Result<Vec<(Uuid, i64)>, ExecutionError> {
        self.enter(Op::Get).await?;
        let state = self.state();
        let out: Vec<(Uuid, i64)> = ids
            .iter()
            .filter_map(|id| state.rows.get(id).map(|r| (*id, r.execution.version)))
            .collect();
        drop(state);
        self.record(Op::Get, 1, true);
        Ok(out)
    }

    async fn list(
        &self,
        namespace: &str,
        filter: &ListFilter,
    ) -> Result<ExecutionPage, ExecutionError> {
        self.enter(Op::List).await?;
        let state = self.state();
        // Each row's idempotency key, for the search filter.
        let keys: std::collections::HashMap<Uuid, &str> = state
            .keys
            .iter()
            .map(|((_, _, key), id)| (*id, key.as_str()))
            .collect();
        // What the backends' indexes serve (namespace, task, status, created-at range, key,
        // cursor) selects the candidates in list order; a windowed search then examines at
        // most `window` of them for the rest (docs/semantics.md#search-window).
        let index_part = ListSearch {
            metadata: None,
            exception_type: None,
            ..filter.search.clone()
        };
        let mut candidates: Vec<(&Execution, Option<&str>)> = state
            .rows
            .values()
            .map(|r| &r.execution)
            .filter(|e| e.namespace == namespace)
            .map(|e| (e, keys.get(&e.id).copied()))
            .filter(|(e, key)| index_part.matches(e, *key))
            .filter(|(e, _)| filter.task_name.as_ref().is_none_or(|t| *t == e.task_name))
            .filter(|(e, _)| filter.status.is_none_or(|s| s == e.status))
            .filter(|(e, _)| {
                filter.after.is_none_or(|c| {
                    e.created_at < c.created_at || (e.created_at == c.created_at && e.id < c.id)
                })
            })
            .collect();
        candidates.sort_by_key(|(e, _)| std::cmp::Reverse((e.created_at, e.id)));
        let limit = filter.limit as usize;
        let page = match filter.window_rows() {
            None => ExecutionPage::from_overfetched(
                candidates
                    .iter()
                    .filter(|(e, key)| filter.search.matches(e, *key))
                    .map(|(e, _)| (*e).clone())
                    .collect(),
                limit,
            ),
            Some(window) => {
                let window = window as usize;
                let examined = &candidates[..candidates.len().min(window)];
                let matches: Vec<Execution> = examined
                    .iter()
                    .filter(|(e, key)| filter.search.matches(e, *key))
                    .take(limit + 1)
                    .map(|(e, _)| (*e).clone())
                    .collect();
                let boundary = (examined.len() == window)
                    .then(|| examined.last())
                    .flatten()
                    .map(|(e, _)| onestep_core::cursor::Cursor {
                        created_at: e.created_at,
                        id: e.id,
                    });
                ExecutionPage::from_window(matches, limit, boundary)
            }
        };
        drop(candidates);
        drop(keys);
        drop(state);
        self.record(Op::List, 1, true);
        Ok(page)
    }

    async fn cancel(
        &self,
        namespace: &str,
        id: Uuid,
        reason: Option<String>,
    ) -> Result<Option<Execution>, ExecutionError> {
        self.enter(Op::Cancel).await?;
        let now = self.now();
        let out = {
            let mut state = self.state();
            state
                .rows
                .get_mut(&id)
                .filter(|r| r.execution.namespace == namespace)
                .map(|row| {
                    let to = match row.execution.status {
                        // T3: nothing runs, so the cancel is final at once.
                        ExecutionStatus::Queued | ExecutionStatus::Retrying => {
                            Some(ExecutionStatus::Cancelled)
                        }
                        // T4: the worker sees it at its next heartbeat.
                        ExecutionStatus::Running => Some(ExecutionStatus::CancelRequested),
                        _ => None,
                    };
                    if let Some(to) = to {
                        let e = &mut row.execution;
                        e.status = to;
                        e.cancel_requested_at = Some(now);
                        if to == ExecutionStatus::Cancelled {
                            e.finished_at = Some(now);
                        }
                        e.version += 1;
                        row.cancel_reason = reason;
                        row.updated_at = now;
                    }
                    row.execution.clone()
                })
        };
        self.record(Op::Cancel, 1, true);
        Ok(out)
    }
}
