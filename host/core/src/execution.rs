//! Domain objects returned by client and worker operations (docs/semantics.md#execution-and-lease-objects).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use crate::error::ExecutionError;
use crate::error_object::ErrorObject;
use crate::status::{CompletionStatus, ExecutionStatus};

/// A snapshot of one execution as every client operation returns it (docs/semantics.md#execution-and-lease-objects). Values are
/// decoded (docs/semantics.md#value-encoding). Lease columns, idempotency key, digest, worker id and cancel reason are not
/// exposed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Execution {
    /// Execution id (UUID v4).
    pub id: Uuid,
    /// Trimmed namespace.
    pub namespace: String,
    /// Trimmed task name.
    pub task_name: String,
    /// Current status.
    pub status: ExecutionStatus,
    /// Decoded payload.
    pub payload: Value,
    /// Decoded metadata object (never contains `onestep.execution`).
    pub metadata: serde_json::Map<String, Value>,
    /// Decoded result; meaningful only when `succeeded`.
    pub result: Option<Value>,
    /// The last failure's error object, or `None`.
    pub error: Option<ErrorObject>,
    /// Number of claims so far.
    pub attempts: u32,
    /// Submission instant (UTC).
    pub created_at: DateTime<Utc>,
    /// Earliest claim instant (UTC).
    pub available_at: DateTime<Utc>,
    /// First claim instant.
    pub started_at: Option<DateTime<Utc>>,
    /// Terminal instant.
    pub finished_at: Option<DateTime<Utc>>,
    /// When a cancel was accepted.
    pub cancel_requested_at: Option<DateTime<Utc>>,
    /// Latest claim instant (UTC).
    pub expires_at: Option<DateTime<Utc>>,
    /// Optimistic-concurrency counter, +1 on every state change except heartbeats.
    pub version: i64,
    /// Claim priority, 0 (most urgent) ..= 9 (docs/semantics.md#priority-and-fairness-key).
    #[serde(default = "default_priority")]
    pub priority: u8,
    /// The fairness key given at submit; `None` means the execution's namespace
    /// (docs/semantics.md#priority-and-fairness-key).
    #[serde(default)]
    pub fairness_key: Option<String>,
}

fn default_priority() -> u8 {
    crate::schedule::DEFAULT_PRIORITY
}

impl Execution {
    /// Whether the status is terminal (derived, docs/semantics.md#execution-and-lease-objects `terminal`).
    pub fn terminal(&self) -> bool {
        self.status.is_terminal()
    }

    /// The fairness key in effect: the one given at submit, else the namespace.
    pub fn effective_fairness_key(&self) -> &str {
        self.fairness_key.as_deref().unwrap_or(&self.namespace)
    }
}

/// One page of [`Execution`]s, newest first (docs/semantics.md#listing-and-cursors).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecutionPage {
    /// The items of this page.
    pub items: Vec<Execution>,
    /// Cursor of the next page, or `None` on the last page.
    pub next_cursor: Option<String>,
    /// The page ended at its search window, not at `limit` matches
    /// (docs/semantics.md#search-window): it may hold fewer than `limit` items, even none, and
    /// `next_cursor` goes on from the last row examined. Always `false` without a metadata or
    /// exception-type filter.
    #[serde(default)]
    pub partial: bool,
}

impl ExecutionPage {
    /// A page from up to `limit + 1` rows newest first (a backend fetches one row more than the
    /// page holds to learn whether another page follows): keeps the first `limit`, and when
    /// there were more, the cursor of the last one kept (docs/semantics.md#cursor-format).
    pub fn from_overfetched(mut items: Vec<Execution>, limit: usize) -> ExecutionPage {
        let next_cursor = if items.len() > limit {
            items.truncate(limit);
            items.last().map(|last| {
                crate::cursor::Cursor {
                    created_at: last.created_at,
                    id: last.id,
                }
                .encode()
            })
        } else {
            None
        };
        ExecutionPage {
            items,
            next_cursor,
            partial: false,
        }
    }

    /// A page of a windowed search (docs/semantics.md#search-window): `matches` are the
    /// window's matching rows newest first (up to `limit + 1`), and `boundary` is the window's
    /// last (oldest) row when the window was full, so older rows may follow. With more than
    /// `limit` matches it is an ordinary page; otherwise a full window continues from
    /// `boundary` (`partial`) and a short one was the end of the history.
    pub fn from_window(
        matches: Vec<Execution>,
        limit: usize,
        boundary: Option<crate::cursor::Cursor>,
    ) -> ExecutionPage {
        if matches.len() > limit {
            return ExecutionPage::from_overfetched(matches, limit);
        }
        match boundary {
            Some(b) => ExecutionPage {
                items: matches,
                next_cursor: Some(b.encode()),
                partial: true,
            },
            None => ExecutionPage::from_overfetched(matches, limit),
        }
    }
}

/// What a worker needs to address its lease in heartbeat, complete and release (docs/semantics.md#worker-operations).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LeaseRef {
    /// The execution id.
    pub execution_id: Uuid,
    /// The attempt id issued by the claim.
    pub attempt_id: Uuid,
    /// The lease token issued by the claim.
    pub lease_token: Uuid,
}

/// One claimed execution (docs/semantics.md#execution-and-lease-objects `ExecutionLease`).
#[derive(Debug, Clone, PartialEq)]
pub struct ExecutionLease {
    /// The execution as updated by the claim (status `running`).
    pub execution: Execution,
    /// The new attempt's id.
    pub attempt_id: Uuid,
    /// The new attempt's number (1-based; equals `execution.attempts`).
    pub attempt_no: u32,
    /// The lease token that fences every later write.
    pub lease_token: Uuid,
    /// When the lease runs out unless a heartbeat extends it.
    pub lease_expires_at: DateTime<Utc>,
    /// The W3C `traceparent` stored with the submit, read only when traces are on
    /// (docs/observability.md#traces); the attempt's span continues that trace.
    pub trace_parent: Option<String>,
}

impl ExecutionLease {
    /// The reference used by heartbeat, complete and release.
    pub fn lease_ref(&self) -> LeaseRef {
        LeaseRef {
            execution_id: self.execution.id,
            attempt_id: self.attempt_id,
            lease_token: self.lease_token,
        }
    }
}

/// What a successful heartbeat returns (docs/semantics.md#execution-and-lease-objects).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeartbeatResult {
    /// The new lease expiry.
    pub lease_expires_at: DateTime<Utc>,
    /// True when a client asked to cancel (status `cancel_requested`).
    pub cancel_requested: bool,
}

/// A worker's report of how an attempt ended (docs/semantics.md#execution-and-lease-objects `ExecutionCompletion`).
#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    /// The requested status.
    pub status: CompletionStatus,
    /// The handler's result; used only for `succeeded`.
    pub result: Option<Value>,
    /// The error object; `None` for successes.
    pub error: Option<ErrorObject>,
    /// Delay in seconds before the retry may be claimed; used only for `retrying`.
    pub delay_s: Option<f64>,
    /// The attempt's diagnostics, written in the completion's transaction by backends that
    /// keep them (docs/observability.md#attempt-diagnostics); never part of the execution row,
    /// and ignored when an identical replay of a terminal completion is compared.
    pub diagnostics: Option<Box<crate::diagnostics::AttemptDiagnostics>>,
}

impl Completion {
    /// A success with `result` (JSON `null` when the handler returned nothing).
    pub fn succeeded(result: Value) -> Self {
        Completion {
            status: CompletionStatus::Succeeded,
            result: Some(result),
            error: None,
            delay_s: None,
            diagnostics: None,
        }
    }

    /// A retry after `delay_s` seconds with the failure's error object.
    pub fn retrying(error: ErrorObject, delay_s: f64) -> Self {
        Completion {
            status: CompletionStatus::Retrying,
            result: None,
            error: Some(error),
            delay_s: Some(delay_s),
            diagnostics: None,
        }
    }

    /// A final failure.
    pub fn failed(error: ErrorObject) -> Self {
        Completion {
            status: CompletionStatus::Failed,
            result: None,
            error: Some(error),
            delay_s: None,
            diagnostics: None,
        }
    }

    /// A cancellation, with the cancel error object (kind `cancelled`).
    pub fn cancelled(error: Option<ErrorObject>) -> Self {
        Completion {
            status: CompletionStatus::Cancelled,
            result: None,
            error,
            delay_s: None,
            diagnostics: None,
        }
    }

    /// The same completion carrying `diagnostics`.
    pub fn with_diagnostics(mut self, diagnostics: crate::diagnostics::AttemptDiagnostics) -> Self {
        self.diagnostics = Some(Box::new(diagnostics));
        self
    }

    /// Checks the completion's own fields (error object rules, finite non-negative delay).
    pub fn validate(&self) -> Result<(), ExecutionError> {
        if let Some(e) = &self.error {
            e.validate()?;
        }
        if let Some(d) = self.delay_s {
            crate::time::seconds_to_duration("delay_s", d)?;
        }
        Ok(())
    }
}
