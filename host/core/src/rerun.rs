//! Retrying an execution and the bulk operations over a list filter
//! (docs/semantics.md#retrying-an-execution, docs/semantics.md#bulk-operations).
//!
//! A retry is a NEW execution with the original's task, payload and metadata, linked to the
//! original through the reserved metadata key `onestep.retry_of`; it goes through the ordinary
//! submit path, so it is idempotent by its key. Bulk operations walk the list filter newest
//! first in bounded pages and stop after at most `max_items` rows, handing back the cursor to go
//! on with; no backend needs anything beyond the [`ExecutionStore`](crate::ports::ExecutionStore)
//! port for them.

use serde_json::Value;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::error::ExecutionError;
use crate::execution::Execution;
use crate::limits::Limits;
use crate::request::{
    ListQuery, ListSearch, PreparedSubmission, RETRY_OF_METADATA_KEY, SubmitRequest,
    prepare_with_link,
};
use crate::status::ExecutionStatus;
use crate::text::{MAX_NAME_CHARS, required_text};

/// Rows read and handled per page of a bulk operation.
pub const BULK_PAGE: u32 = 100;
/// Most pages one bulk call reads when its filter is a windowed search
/// (docs/semantics.md#search-window), so one call examines at most this many windows of rows
/// however rare the matches are; the call's `next_cursor` goes on.
pub const BULK_SEARCH_PAGES: u32 = 20;
/// Default of `max_items` for one bulk call.
pub const DEFAULT_BULK_ITEMS: u32 = 1000;
/// Largest `max_items` of one bulk call.
pub const MAX_BULK_ITEMS: u32 = 10_000;

/// Whether an execution in `status` may be retried: `failed`, `cancelled` and `expired`.
pub fn is_retryable(status: ExecutionStatus) -> bool {
    matches!(
        status,
        ExecutionStatus::Failed | ExecutionStatus::Cancelled | ExecutionStatus::Expired
    )
}

/// The id an execution retries, read from its `onestep.retry_of` metadata key.
pub fn retry_of(execution: &Execution) -> Option<Uuid> {
    execution
        .metadata
        .get(RETRY_OF_METADATA_KEY)
        .and_then(Value::as_str)
        .and_then(|s| Uuid::parse_str(s).ok())
}

/// The submission that retries `original` under `idempotency_key` (docs/semantics.md#retrying-an-execution).
///
/// Errors: [`ExecutionError::NotRetryable`] unless the original is `failed`, `cancelled` or
/// `expired`; the key's text rules; the size limits (the link counts toward the metadata).
pub fn prepare_retry(
    original: &Execution,
    idempotency_key: &str,
    limits: &Limits,
) -> Result<PreparedSubmission, ExecutionError> {
    if !is_retryable(original.status) {
        return Err(ExecutionError::NotRetryable {
            id: original.id,
            status: original.status,
        });
    }
    let key = required_text("idempotency_key", idempotency_key, MAX_NAME_CHARS)?;
    let mut metadata = original.metadata.clone();
    // A retry of a retry links to its immediate original.
    metadata.remove(RETRY_OF_METADATA_KEY);
    let request = SubmitRequest {
        task_name: original.task_name.clone(),
        payload: original.payload.clone(),
        idempotency_key: Some(key),
        metadata: Some(Value::Object(metadata)),
        delay_s: None,
        expires_at: None,
        // A retry keeps the original's place in the schedule
        // (docs/semantics.md#priority-and-fairness-key).
        priority: Some(i64::from(original.priority)),
        fairness_key: original.fairness_key.clone(),
    };
    prepare_with_link(&original.namespace, &request, limits, Some(original.id))
}

/// The idempotency key of one item of a bulk retry: derived from the call's key and the
/// original's id, so repeating the bulk call with the same key retries nothing twice.
pub fn bulk_item_key(bulk_key: &str, original: Uuid) -> String {
    let digest = Sha256::digest(bulk_key.trim().as_bytes());
    let short: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    format!("bulk-retry:{short}:{original}")
}

/// Which rows a bulk operation touches and how many at most in this call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BulkRequest {
    /// The list filter (its `limit` is ignored; `cursor` continues a previous call).
    pub query: ListQuery,
    /// At most this many rows are handled by this call, 1..=[`MAX_BULK_ITEMS`].
    pub max_items: u32,
    /// The extra list filters.
    pub search: ListSearch,
}

impl BulkRequest {
    /// Checks `max_items` (the query is checked when it is listed).
    pub fn validate(&self) -> Result<(), ExecutionError> {
        if !(1..=MAX_BULK_ITEMS).contains(&self.max_items) {
            return Err(ExecutionError::invalid(format!(
                "max_items must be between 1 and {MAX_BULK_ITEMS}"
            )));
        }
        Ok(())
    }

    /// Most pages this call reads: [`BULK_SEARCH_PAGES`] for a windowed search
    /// (docs/semantics.md#search-window), otherwise as many as `max_items` needs.
    pub(crate) fn page_budget(&self) -> u32 {
        if self.search.windowed() {
            BULK_SEARCH_PAGES
        } else {
            u32::MAX
        }
    }

    /// The query of the next page, given how many rows were handled so far.
    pub(crate) fn page_query(&self, cursor: Option<String>, handled: u32) -> ListQuery {
        ListQuery {
            limit: BULK_PAGE.min(self.max_items - handled),
            cursor,
            ..self.query.clone()
        }
    }
}

/// What a bulk cancel did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BulkCancelOutcome {
    /// Rows that matched the filter and were handled.
    pub matched: u64,
    /// Rows that became `cancelled`.
    pub cancelled: u64,
    /// Rows that became `cancel_requested` (running; the worker stops them).
    pub cancel_requested: u64,
    /// Rows left as they were (terminal or already `cancel_requested`, or gone meanwhile).
    pub unchanged: u64,
    /// Where to go on (`None`: every matching row was handled).
    pub next_cursor: Option<String>,
}

/// What a bulk retry did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BulkRetryOutcome {
    /// Rows that matched the filter and were handled.
    pub matched: u64,
    /// New executions created (or replayed: the same call repeated returns the same ones).
    pub retried: u64,
    /// Rows that cannot be retried (not `failed`, `cancelled` or `expired`).
    pub skipped: u64,
    /// Rows whose derived key already belongs to another submission.
    pub conflicts: u64,
    /// Ids of the new executions, in the order handled.
    pub new_ids: Vec<Uuid>,
    /// Where to go on (`None`: every matching row was handled).
    pub next_cursor: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;
    use serde_json::json;

    fn execution(status: ExecutionStatus) -> Execution {
        let now = Utc::now();
        let mut metadata = serde_json::Map::new();
        metadata.insert("team".into(), json!("a"));
        metadata.insert(RETRY_OF_METADATA_KEY.into(), json!(Uuid::nil().to_string()));
        Execution {
            id: Uuid::now_v7(),
            namespace: "ns".into(),
            task_name: "t".into(),
            status,
            payload: json!({"x": 1}),
            metadata,
            result: None,
            error: None,
            attempts: 1,
            created_at: now,
            available_at: now,
            started_at: None,
            finished_at: None,
            cancel_requested_at: None,
            expires_at: Some(now),
            version: 3,
            priority: 0,
            fairness_key: Some("tenant-7".into()),
        }
    }

    #[test]
    fn only_failed_cancelled_and_expired_are_retried() {
        for status in ExecutionStatus::ALL {
            let original = execution(status);
            let out = prepare_retry(&original, "k", &Limits::default());
            if is_retryable(status) {
                let p = out.unwrap();
                assert_eq!(p.task_name, "t");
                assert_eq!(p.payload, json!({"x": 1}));
                assert_eq!(p.metadata["team"], "a");
                // The link names the immediate original, not the one it retried.
                assert_eq!(p.metadata[RETRY_OF_METADATA_KEY], original.id.to_string());
                assert_eq!(p.expires_at, None);
                assert_ne!(p.id, original.id);
                // The schedule fields carry over.
                assert_eq!(p.priority, 0);
                assert_eq!(p.fairness_key.as_deref(), Some("tenant-7"));
            } else {
                let e = out.unwrap_err();
                assert_eq!(e.code(), "not_retryable", "{status}");
            }
        }
    }

    #[test]
    fn the_link_is_part_of_the_digest_and_keys_are_checked() {
        let a = execution(ExecutionStatus::Failed);
        let b = execution(ExecutionStatus::Failed);
        let pa = prepare_retry(&a, "k", &Limits::default()).unwrap();
        let pa2 = prepare_retry(&a, "k", &Limits::default()).unwrap();
        let pb = prepare_retry(&b, "k", &Limits::default()).unwrap();
        assert_eq!(pa.digest, pa2.digest);
        assert_ne!(pa.digest, pb.digest);
        assert!(prepare_retry(&a, "  ", &Limits::default()).is_err());
        let tiny = Limits {
            max_metadata_bytes: 20,
            ..Limits::default()
        };
        assert_eq!(
            prepare_retry(&a, "k", &tiny).unwrap_err().code(),
            "encoding_error"
        );
    }

    #[test]
    fn bulk_keys_are_stable_and_distinct() {
        let id = Uuid::now_v7();
        assert_eq!(bulk_item_key("k", id), bulk_item_key(" k ", id));
        assert_ne!(bulk_item_key("k", id), bulk_item_key("j", id));
        assert!(bulk_item_key(&"x".repeat(255), id).len() <= MAX_NAME_CHARS);
        let bad = BulkRequest {
            query: ListQuery::default(),
            max_items: 0,
            search: ListSearch::default(),
        };
        assert!(bad.validate().is_err());
    }
}
