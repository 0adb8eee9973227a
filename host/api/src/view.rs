//! What the API returns: the execution view (docs/http-api.md#the-execution-view), pages and results.
//!
//! The view deliberately leaves out `payload` and `result` (a result has its own endpoint) and
//! every column that stays internal (docs/semantics.md#execution-and-lease-objects). Instants are UTC in Python's `isoformat()` form
//! (`2026-08-10T12:00:00.123456+00:00`), exactly as the reference API prints them.

use onestep_core::Execution;
use onestep_core::timefmt::utc_isoformat;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::ToSchema;
use uuid::Uuid;

/// The structured error object as the API shows it (docs/semantics.md#error-object; the API shows six of its keys).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ErrorObjectView {
    /// `error`, `timeout` or `cancelled`.
    pub kind: String,
    /// The failure's type name, e.g. `HandlerError`, `TimeoutError`, `Trap`.
    pub exception_type: String,
    /// Where it failed, e.g. `handler`.
    pub stage: Option<String>,
    /// Backend label for connector errors, e.g. `mysql`.
    pub backend: Option<String>,
    /// Connector operation, e.g. `ack`.
    pub operation: Option<String>,
    /// Connector error class, e.g. `disconnected`.
    pub connector_kind: Option<String>,
}

/// The execution statuses (docs/semantics.md#statuses); the last four are terminal. Documentation only: the
/// views carry the wire string.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum StatusName {
    /// Waiting to be claimed.
    Queued,
    /// A worker holds the lease.
    Running,
    /// Waiting to be claimed again after a failed or lost attempt.
    Retrying,
    /// Running, and a cancel was requested.
    CancelRequested,
    /// Terminal: the handler returned a result.
    Succeeded,
    /// Terminal: the handler failed and the retry policy gave up.
    Failed,
    /// Terminal: cancelled.
    Cancelled,
    /// Terminal: `expires_at` passed before a claim.
    Expired,
}

/// One execution as every endpoint returns it (docs/http-api.md#the-execution-view, with `terminal`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ExecutionView {
    /// Execution id.
    pub id: Uuid,
    /// The caller's namespace.
    pub namespace: String,
    /// Task name.
    pub task_name: String,
    /// Current status.
    #[schema(value_type = StatusName)]
    pub status: String,
    /// True for `succeeded`, `failed`, `cancelled` and `expired`.
    pub terminal: bool,
    /// Number of claims so far.
    pub attempts: u32,
    /// The submitted metadata object.
    #[schema(value_type = Object)]
    pub metadata: Map<String, Value>,
    /// Optimistic-concurrency counter.
    pub version: i64,
    /// Submission instant (UTC, ISO 8601).
    pub created_at: String,
    /// Earliest claim instant.
    pub available_at: String,
    /// First claim instant.
    pub started_at: Option<String>,
    /// Terminal instant.
    pub finished_at: Option<String>,
    /// When a cancel was accepted.
    pub cancel_requested_at: Option<String>,
    /// Latest claim instant.
    pub expires_at: Option<String>,
    /// The last failure's error object.
    pub error: Option<ErrorObjectView>,
    /// Claim priority, 0 (most urgent) to 9; 5 unless the submit set it
    /// (docs/semantics.md#priority-and-fairness-key).
    #[serde(default = "default_priority")]
    #[schema(minimum = 0, maximum = 9)]
    pub priority: u8,
    /// The fairness key in effect: the one the submit set, else the namespace.
    #[serde(default)]
    pub fairness_key: String,
    /// The running attempt's last progress report (only while `running` or
    /// `cancel_requested`, and only when the worker persists diagnostics).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<crate::attempts::ProgressView>,
    /// The newest attempt: its status, the handler's own message, progress and end (only in
    /// the view of one execution, `GET /v1/executions/{id}`, once it has an attempt).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_attempt: Option<crate::attempts::LastAttemptView>,
    /// The reason the canceller gave (only in the view of one execution, when one was given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancel_reason: Option<String>,
}

impl From<&Execution> for ExecutionView {
    fn from(e: &Execution) -> Self {
        ExecutionView {
            id: e.id,
            namespace: e.namespace.clone(),
            task_name: e.task_name.clone(),
            status: e.status.as_str().to_owned(),
            terminal: e.terminal(),
            attempts: e.attempts,
            metadata: e.metadata.clone(),
            version: e.version,
            created_at: utc_isoformat(&e.created_at),
            available_at: utc_isoformat(&e.available_at),
            started_at: e.started_at.as_ref().map(utc_isoformat),
            finished_at: e.finished_at.as_ref().map(utc_isoformat),
            cancel_requested_at: e.cancel_requested_at.as_ref().map(utc_isoformat),
            expires_at: e.expires_at.as_ref().map(utc_isoformat),
            error: e.error.as_ref().map(ErrorObjectView::from),
            priority: e.priority,
            fairness_key: e.effective_fairness_key().to_owned(),
            progress: None,
            last_attempt: None,
            cancel_reason: None,
        }
    }
}

/// The view of one execution as `GET /v1/executions/{id}` answers it (and `onestep get` prints
/// it): `progress` while it runs, `last_attempt` once it has one, `cancel_reason` when a cancel
/// gave one (docs/http-api.md#the-execution-view).
pub async fn one_execution_view(
    client: &onestep_core::ExecutionClient,
    execution: &Execution,
) -> Result<ExecutionView, onestep_core::ExecutionError> {
    let mut view = ExecutionView::from(execution);
    let last = last_attempt(client, execution).await?;
    if matches!(
        execution.status,
        onestep_core::ExecutionStatus::Running | onestep_core::ExecutionStatus::CancelRequested
    ) {
        view.progress = last.as_ref().and_then(|a| a.progress.clone());
    }
    view.last_attempt = last;
    view.cancel_reason = cancel_reason(client, execution).await?;
    Ok(view)
}

/// The newest attempt of an execution that has one.
pub(crate) async fn last_attempt(
    client: &onestep_core::ExecutionClient,
    execution: &Execution,
) -> Result<Option<crate::attempts::LastAttemptView>, onestep_core::ExecutionError> {
    if execution.attempts == 0 {
        return Ok(None);
    }
    let attempts = client.attempts(execution.id).await?.unwrap_or_default();
    Ok(attempts.last().map(crate::attempts::LastAttemptView::from))
}

/// The canceller's reason of an execution a cancel reached.
pub(crate) async fn cancel_reason(
    client: &onestep_core::ExecutionClient,
    execution: &Execution,
) -> Result<Option<String>, onestep_core::ExecutionError> {
    if execution.cancel_requested_at.is_none() {
        return Ok(None);
    }
    Ok(client.cancel_reason(execution.id).await?.flatten())
}

fn default_priority() -> u8 {
    onestep_core::schedule::DEFAULT_PRIORITY
}

/// One page of executions, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct PageView {
    /// The items.
    pub items: Vec<ExecutionView>,
    /// Pass as `cursor` to get the next page; `null` on the last page.
    pub next_cursor: Option<String>,
    /// `true` when a metadata or exception-type search stopped at its window of rows examined
    /// (docs/semantics.md#search-window) with at most `limit` matches (maybe none), and
    /// `next_cursor` searches older rows.
    #[serde(default)]
    pub partial: bool,
}

/// The result of a succeeded execution.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ResultView {
    /// The handler's result (any JSON value).
    pub result: Value,
}

/// `GET /healthz` and `GET /readyz` bodies.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct HealthView {
    /// `ok`.
    pub status: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{TimeZone, Utc};
    use onestep_core::{ErrorObject, ExecutionStatus};

    #[test]
    fn view_has_the_documented_keys_and_isoformat_instants() {
        let t = Utc.with_ymd_and_hms(2026, 8, 10, 12, 0, 0).unwrap();
        let e = Execution {
            id: Uuid::nil(),
            namespace: "ns".into(),
            task_name: "run_agent".into(),
            status: ExecutionStatus::Failed,
            payload: Value::Null,
            metadata: Map::new(),
            result: None,
            error: Some(ErrorObject::new("error", "HandlerError", Some("handler"))),
            attempts: 1,
            created_at: t,
            available_at: t + chrono::Duration::microseconds(1500),
            started_at: None,
            finished_at: Some(t),
            cancel_requested_at: None,
            expires_at: None,
            version: 3,
            priority: 5,
            fairness_key: None,
        };
        let v = serde_json::to_value(ExecutionView::from(&e)).unwrap();
        assert_eq!(
            (v["priority"].clone(), v["fairness_key"].clone()),
            (5.into(), "ns".into())
        );
        let keyed = Execution {
            priority: 0,
            fairness_key: Some("tenant-1".into()),
            ..e.clone()
        };
        let k = serde_json::to_value(ExecutionView::from(&keyed)).unwrap();
        assert_eq!(
            (k["priority"].clone(), k["fairness_key"].clone()),
            (0.into(), "tenant-1".into())
        );
        assert_eq!(v["created_at"], "2026-08-10T12:00:00+00:00");
        assert_eq!(v["available_at"], "2026-08-10T12:00:00.001500+00:00");
        assert_eq!(v["status"], "failed");
        assert_eq!(v["terminal"], true);
        assert_eq!(v["error"]["exception_type"], "HandlerError");
        assert!(v["error"].get("sinks_succeeded").is_none());
        assert!(v.get("payload").is_none() && v.get("result").is_none());
    }
}
