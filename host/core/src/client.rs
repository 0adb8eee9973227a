//! The namespace-scoped client API (docs/semantics.md#client-operations): submit, get, list, cancel, result.

use std::sync::Arc;

use serde_json::Value;
use uuid::Uuid;

use crate::cursor::{Cursor, invalid_cursor};
use crate::error::ExecutionError;
use crate::execution::{Execution, ExecutionPage};
use crate::limits::Limits;
use crate::ports::ExecutionStore;
use crate::quota::SubmitQuota;
use crate::request::{
    ListQuery, ListSearch, PreparedSubmission, SubmitRequest, prepare_submission,
    validate_namespace,
};
use crate::rerun::{
    BulkCancelOutcome, BulkRequest, BulkRetryOutcome, bulk_item_key, prepare_retry,
};
use crate::status::ExecutionStatus;
use crate::text::cancel_reason;

/// A client bound to one namespace (docs/semantics.md#client-operations). Cheap to clone.
#[derive(Clone)]
pub struct ExecutionClient {
    store: Arc<dyn ExecutionStore>,
    namespace: String,
    limits: Limits,
    /// The quota of this namespace's new submissions (docs/semantics.md#quotas).
    quota: Option<SubmitQuota>,
}

impl std::fmt::Debug for ExecutionClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecutionClient")
            .field("namespace", &self.namespace)
            .field("limits", &self.limits)
            .field("quota", &self.quota)
            .finish_non_exhaustive()
    }
}

impl ExecutionClient {
    /// Binds a client to `namespace` (trimmed, 1–255 characters) over `store`.
    pub fn new(
        store: Arc<dyn ExecutionStore>,
        namespace: &str,
        limits: Limits,
    ) -> Result<Self, ExecutionError> {
        limits.validate()?;
        Ok(ExecutionClient {
            store,
            namespace: validate_namespace(namespace)?,
            limits,
            quota: None,
        })
    }

    /// This client with `quota` (docs/semantics.md#quotas): the store refuses its new
    /// submissions over it with [`ExecutionError::QuotaExceeded`]; `None` (or a quota without
    /// any limit) lifts it. The API sets it from `api.quotas`.
    pub fn with_quota(mut self, quota: Option<SubmitQuota>) -> Self {
        self.quota = quota.filter(SubmitQuota::is_limited);
        self
    }

    /// The quota of this client's new submissions.
    pub fn quota(&self) -> Option<SubmitQuota> {
        self.quota
    }

    /// The client's (trimmed) namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The client's limits.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Submits one execution (docs/semantics.md#submit-and-idempotency); validation happens before any I/O.
    pub async fn submit(&self, request: &SubmitRequest) -> Result<Execution, ExecutionError> {
        Ok(self.submit_outcome(request).await?.execution)
    }

    /// [`Self::submit`], also telling a new execution from a replay of an earlier submission
    /// with the same key (the store returns the earlier execution, whose id is not the one this
    /// call prepared).
    pub async fn submit_outcome(
        &self,
        request: &SubmitRequest,
    ) -> Result<Submitted, ExecutionError> {
        self.submit_traced(request, None).await
    }

    /// [`Self::submit_outcome`] carrying the submit's W3C `traceparent`
    /// (docs/observability.md#traces): stored with a newly created execution, outside its
    /// metadata and its idempotency digest.
    pub async fn submit_traced(
        &self,
        request: &SubmitRequest,
        trace_parent: Option<String>,
    ) -> Result<Submitted, ExecutionError> {
        self.submit_with(request, trace_parent, None).await
    }

    /// [`Self::submit_traced`] with a completion webhook (docs/semantics.md#completion-webhooks),
    /// written with a newly created execution in the submit's transaction (a replay keeps the
    /// first submission's callback). The caller has checked the callback against the API's
    /// `callbacks` settings.
    pub async fn submit_with(
        &self,
        request: &SubmitRequest,
        trace_parent: Option<String>,
        callback: Option<crate::callback::CallbackSpec>,
    ) -> Result<Submitted, ExecutionError> {
        let mut prepared = prepare_submission(&self.namespace, request, &self.limits)?;
        prepared.trace_parent = trace_parent;
        prepared.callback = callback;
        prepared.quota = self.quota;
        let new_id = prepared.id;
        let execution = self.store.submit(prepared).await?;
        Ok(Submitted {
            created: execution.id == new_id,
            execution,
        })
    }

    /// Submits many executions in one transaction. Validation of every request happens first:
    /// one invalid request fails the call and nothing is written. Each item's result is the
    /// execution or that item's idempotency conflict.
    pub async fn submit_many(
        &self,
        requests: &[SubmitRequest],
    ) -> Result<Vec<Result<Execution, ExecutionError>>, ExecutionError> {
        let prepared = requests
            .iter()
            .map(|r| self.prepare(r))
            .collect::<Result<Vec<_>, _>>()?;
        if prepared.is_empty() {
            return Ok(Vec::new());
        }
        self.store.submit_many(prepared).await
    }

    /// Submits a batch whose items are judged one by one (`POST /v1/executions:batch`,
    /// docs/http-api.md#batch-submit): an item that fails validation is that item's error and
    /// is not written; the valid items go to the store in one transaction (one multi-row
    /// insert), each answering created, replayed (its key was used before with the same
    /// submission) or its own conflict. The outer error is for the whole batch (nothing
    /// written).
    pub async fn submit_batch(
        &self,
        requests: &[SubmitRequest],
    ) -> Result<Vec<Result<Submitted, ExecutionError>>, ExecutionError> {
        let mut out: Vec<Option<Result<Submitted, ExecutionError>>> = Vec::new();
        let mut prepared = Vec::new();
        let mut slots = Vec::new();
        for (i, request) in requests.iter().enumerate() {
            match self.prepare(request) {
                Ok(p) => {
                    slots.push((i, p.id));
                    prepared.push(p);
                    out.push(None);
                }
                Err(e) => out.push(Some(Err(e))),
            }
        }
        if !prepared.is_empty() {
            let written = self.store.submit_many(prepared).await?;
            for ((i, new_id), item) in slots.into_iter().zip(written) {
                out[i] = Some(item.map(|execution| Submitted {
                    created: execution.id == new_id,
                    execution,
                }));
            }
        }
        Ok(out
            .into_iter()
            .map(|o| {
                o.unwrap_or_else(|| {
                    Err(ExecutionError::invalid(
                        "the store answered fewer items than it was given",
                    ))
                })
            })
            .collect())
    }

    /// Validates and encodes `request` for this namespace, with this client's quota.
    fn prepare(&self, request: &SubmitRequest) -> Result<PreparedSubmission, ExecutionError> {
        let mut prepared = prepare_submission(&self.namespace, request, &self.limits)?;
        prepared.quota = self.quota;
        Ok(prepared)
    }

    /// Reads one execution; `None` when absent or in another namespace (docs/semantics.md#client-operations).
    pub async fn get(&self, id: Uuid) -> Result<Option<Execution>, ExecutionError> {
        self.store.get(&self.namespace, id).await
    }

    /// Checks a list cursor before a list of this namespace continues from it
    /// (docs/semantics.md#listing-and-cursors): it must be well-formed, and when it names one of
    /// this namespace's executions it must carry that execution's `created_at` (a forged one is
    /// `invalid execution cursor`, like a malformed one). A cursor naming an id this namespace
    /// does not hold — never used, purged since its page was read, or another namespace's — is
    /// a position in this namespace's list, all three alike, so the answer never tells whether
    /// another tenant holds an id. [`list`](Self::list) itself takes any well-formed cursor; the
    /// HTTP API checks first.
    pub async fn check_cursor_owner(&self, text: &str) -> Result<(), ExecutionError> {
        let cursor = Cursor::decode(text)?;
        match self.get(cursor.id).await? {
            Some(execution) if execution.created_at != cursor.created_at => Err(invalid_cursor()),
            _ => Ok(()),
        }
    }

    /// The reason given when the execution was cancelled: outer `None` when the execution is
    /// absent, inner `None` without a stored reason.
    pub async fn cancel_reason(&self, id: Uuid) -> Result<Option<Option<String>>, ExecutionError> {
        self.store.cancel_reason(&self.namespace, id).await
    }

    /// The attempts of an execution of this namespace with their diagnostics (no log lines);
    /// `None` when the execution is absent (docs/observability.md#attempt-diagnostics).
    pub async fn attempts(
        &self,
        id: Uuid,
    ) -> Result<Option<Vec<crate::diagnostics::AttemptRecord>>, ExecutionError> {
        self.store.attempts(&self.namespace, id).await
    }

    /// The stored log tail of attempt `attempt_no` (1-based): outer `None` when the execution
    /// or attempt is absent, inner `None` when it has no stored lines.
    pub async fn attempt_log(
        &self,
        id: Uuid,
        attempt_no: u32,
    ) -> Result<Option<Option<crate::diagnostics::LogTail>>, ExecutionError> {
        if attempt_no == 0 {
            return Err(ExecutionError::InvalidArgument(
                "attempt must be a positive integer (attempts are numbered from 1)".into(),
            ));
        }
        self.store
            .attempt_log(&self.namespace, id, attempt_no)
            .await
    }

    /// One page, newest first (docs/semantics.md#listing-and-cursors).
    pub async fn list(&self, query: &ListQuery) -> Result<ExecutionPage, ExecutionError> {
        let filter = query.validate()?;
        self.store.list(&self.namespace, &filter).await
    }

    /// One page with the extra filters of `search` (docs/semantics.md#listing-and-cursors).
    pub async fn search(
        &self,
        query: &ListQuery,
        search: &ListSearch,
    ) -> Result<ExecutionPage, ExecutionError> {
        let mut filter = query.validate()?;
        filter.search = search.validate()?;
        self.store.list(&self.namespace, &filter).await
    }

    /// Cancels (docs/semantics.md#cancellation); `None` when absent. `reason` is trimmed, at most 500 characters.
    pub async fn cancel(
        &self,
        id: Uuid,
        reason: Option<&str>,
    ) -> Result<Option<Execution>, ExecutionError> {
        let reason = cancel_reason(reason)?;
        self.store.cancel(&self.namespace, id, reason).await
    }

    /// Retries a `failed`, `cancelled` or `expired` execution (docs/semantics.md#retrying-an-execution):
    /// a new execution with the same task, payload and metadata plus `onestep.retry_of`, submitted
    /// under `idempotency_key` (the same key on the same original returns the same new
    /// execution; on another original it is a `Conflict`). `None` when the original is absent.
    pub async fn retry(
        &self,
        id: Uuid,
        idempotency_key: &str,
    ) -> Result<Option<Execution>, ExecutionError> {
        let Some(original) = self.get(id).await? else {
            return Ok(None);
        };
        let prepared = prepare_retry(&original, idempotency_key, &self.limits)?;
        self.store.submit(prepared).await.map(Some)
    }

    /// Cancels every execution matching `request`'s filter, newest first, in pages of
    /// [`BULK_PAGE`](crate::rerun::BULK_PAGE), at most `max_items` of them
    /// (docs/semantics.md#bulk-operations). Each row is its own cancel, so a failure part-way
    /// leaves the rows before it cancelled and the error says so through the counts not returned.
    pub async fn cancel_matching(
        &self,
        request: &BulkRequest,
        reason: Option<&str>,
    ) -> Result<BulkCancelOutcome, ExecutionError> {
        request.validate()?;
        let reason = cancel_reason(reason)?;
        let mut out = BulkCancelOutcome::default();
        let mut cursor = request.query.cursor.clone();
        let mut handled = 0u32;
        let (mut pages, page_budget) = (0u32, request.page_budget());
        loop {
            let page = self
                .search(&request.page_query(cursor, handled), &request.search)
                .await?;
            for e in &page.items {
                let after = self
                    .store
                    .cancel(&self.namespace, e.id, reason.clone())
                    .await?;
                out.matched += 1;
                match after {
                    Some(a) if a.status != e.status && a.status == ExecutionStatus::Cancelled => {
                        out.cancelled += 1;
                    }
                    Some(a)
                        if a.status != e.status && a.status == ExecutionStatus::CancelRequested =>
                    {
                        out.cancel_requested += 1;
                    }
                    _ => out.unchanged += 1,
                }
            }
            handled += page.items.len() as u32;
            pages += 1;
            cursor = page.next_cursor;
            if cursor.is_none() || handled >= request.max_items || pages >= page_budget {
                break;
            }
        }
        out.next_cursor = cursor;
        Ok(out)
    }

    /// Retries every `failed`, `cancelled` or `expired` execution matching `request`'s filter
    /// (others are counted as skipped), newest first, in bounded pages, at most `max_items` rows
    /// (docs/semantics.md#bulk-operations). Each new execution's key derives from `idempotency_key`
    /// and the original's id, so repeating the call creates nothing twice.
    pub async fn retry_matching(
        &self,
        request: &BulkRequest,
        idempotency_key: &str,
    ) -> Result<BulkRetryOutcome, ExecutionError> {
        request.validate()?;
        crate::text::required_text(
            "idempotency_key",
            idempotency_key,
            crate::text::MAX_NAME_CHARS,
        )?;
        let mut out = BulkRetryOutcome::default();
        let mut cursor = request.query.cursor.clone();
        let mut handled = 0u32;
        let (mut pages, page_budget) = (0u32, request.page_budget());
        loop {
            let page = self
                .search(&request.page_query(cursor, handled), &request.search)
                .await?;
            for e in &page.items {
                out.matched += 1;
                if !crate::rerun::is_retryable(e.status) {
                    out.skipped += 1;
                    continue;
                }
                let prepared =
                    prepare_retry(e, &bulk_item_key(idempotency_key, e.id), &self.limits)?;
                match self.store.submit(prepared).await {
                    Ok(new) => {
                        out.retried += 1;
                        out.new_ids.push(new.id);
                    }
                    Err(ExecutionError::Conflict { .. }) => out.conflicts += 1,
                    Err(other) => return Err(other),
                }
            }
            handled += page.items.len() as u32;
            pages += 1;
            cursor = page.next_cursor;
            if cursor.is_none() || handled >= request.max_items || pages >= page_budget {
                break;
            }
        }
        out.next_cursor = cursor;
        Ok(out)
    }

    /// The result of a succeeded execution; never waits (docs/semantics.md#reading-a-result). Errors: `NotFound`,
    /// `NotReady`, `Failed` (with the error object), `Cancelled`, `Expired`.
    pub async fn result(&self, id: Uuid) -> Result<Value, ExecutionError> {
        let Some(execution) = self.get(id).await? else {
            return Err(ExecutionError::NotFound { id });
        };
        result_of(execution)
    }
}

/// Maps an execution snapshot to `result()`'s outcome (docs/semantics.md#reading-a-result).
pub fn result_of(execution: Execution) -> Result<Value, ExecutionError> {
    let id = execution.id;
    match execution.status {
        ExecutionStatus::Succeeded => Ok(execution.result.unwrap_or(Value::Null)),
        ExecutionStatus::Failed => Err(ExecutionError::Failed {
            id,
            error: execution.error.map(Box::new),
        }),
        ExecutionStatus::Cancelled => Err(ExecutionError::Cancelled { id }),
        ExecutionStatus::Expired => Err(ExecutionError::Expired { id }),
        status => Err(ExecutionError::NotReady { id, status }),
    }
}

/// What [`ExecutionClient::submit_outcome`] did.
#[derive(Debug, Clone, PartialEq)]
pub struct Submitted {
    /// The execution (new, or the earlier one with the same key).
    pub execution: Execution,
    /// True when this call created it; false for a replay.
    pub created: bool,
}
