//! The attempts of an execution and their persisted diagnostics (docs/http-api.md#attempts,
//! docs/observability.md#attempt-diagnostics): `GET /v1/executions/{id}/attempts` and
//! `GET /v1/executions/{id}/attempts/{n}/logs`, scoped to the caller's namespace like every
//! other route.

use axum::Json;
use axum::extract::{FromRequestParts, Path, Query};
use axum::http::request::Parts;
use onestep_core::diagnostics::{AttemptProgress, AttemptRecord, LogTail};
use onestep_core::request::parse_execution_id;
use onestep_core::timefmt::utc_isoformat;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use crate::error::{ApiError, ErrorBody};
use crate::extract::{ExecutionId, Tenant};
use crate::openapi::{NotFoundErrors, V1Errors};
use crate::view::ErrorObjectView;

/// The last `progress(done, total, note)` of an attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ProgressView {
    /// Units done.
    pub done: u64,
    /// Units in all (0 = unknown).
    pub total: u64,
    /// The handler's note (at most 1 KiB).
    pub note: String,
    /// When the handler reported it (UTC, ISO 8601).
    pub at: String,
}

impl From<&AttemptProgress> for ProgressView {
    fn from(p: &AttemptProgress) -> Self {
        ProgressView {
            done: p.done,
            total: p.total,
            note: p.note.clone(),
            at: utc_isoformat(&p.at),
        }
    }
}

/// One attempt with its diagnostics.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct AttemptView {
    /// Attempt id.
    pub id: Uuid,
    /// 1-based attempt number.
    pub attempt: u32,
    /// `running`, `succeeded`, `retrying`, `failed`, `cancelled` or `lease_lost`.
    pub status: String,
    /// The worker that held the lease.
    pub worker_id: String,
    /// Start of the attempt.
    pub started_at: String,
    /// Last heartbeat.
    pub heartbeat_at: String,
    /// End of the attempt.
    pub finished_at: Option<String>,
    /// The attempt's error object.
    pub error: Option<ErrorObjectView>,
    /// The handler's error message (at most 8 KiB; the handler author decides what it says).
    pub message: Option<String>,
    /// The last progress report.
    pub progress: Option<ProgressView>,
    /// Log lines the attempt wrote (the logs route returns the last ones).
    pub log_lines: u64,
    /// `timeout`, `cancelled`, `out_of_fuel`, `memory_limit`, `panic` or `trap`.
    pub trap_kind: Option<String>,
    /// SHA-256 of the component that ran, lower-case hex.
    pub component_digest: Option<String>,
    /// Fuel consumed (when the task meters fuel).
    pub fuel_consumed: Option<u64>,
    /// Peak linear memory of the guest in bytes.
    pub peak_memory_bytes: Option<u64>,
    /// Whether diagnostics were stored for this attempt (false: the table is absent, the
    /// lease was lost, or the worker keeps none).
    pub diagnostics: bool,
}

impl From<&AttemptRecord> for AttemptView {
    fn from(a: &AttemptRecord) -> Self {
        let d = a.diagnostics.as_ref();
        AttemptView {
            id: a.id,
            attempt: a.attempt_no,
            status: a.status.clone(),
            worker_id: a.worker_id.clone(),
            started_at: utc_isoformat(&a.started_at),
            heartbeat_at: utc_isoformat(&a.heartbeat_at),
            finished_at: a.finished_at.as_ref().map(utc_isoformat),
            error: a.error.as_ref().map(ErrorObjectView::from),
            message: d.and_then(|d| d.message.clone()),
            progress: d.and_then(|d| d.progress.as_ref()).map(ProgressView::from),
            log_lines: d.and_then(|d| d.log.as_ref()).map_or(0, |t| t.total_lines),
            trap_kind: d.and_then(|d| d.facts.trap_kind.clone()),
            component_digest: d.and_then(|d| d.facts.component_digest.clone()),
            fuel_consumed: d.and_then(|d| d.facts.fuel_consumed),
            peak_memory_bytes: d.and_then(|d| d.facts.peak_memory_bytes),
            diagnostics: d.is_some(),
        }
    }
}

/// The newest attempt as a caller sees it: in `GET /v1/executions/{id}` and in the `422` of
/// `/result` (docs/http-api.md#the-execution-view).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct LastAttemptView {
    /// 1-based attempt number.
    pub attempt: u32,
    /// `running`, `succeeded`, `retrying`, `failed`, `cancelled` or `lease_lost`.
    pub status: String,
    /// The handler's own error message (at most 8 KiB, as stored; only when the worker
    /// persists diagnostics).
    pub message: Option<String>,
    /// The attempt's last progress report.
    pub progress: Option<ProgressView>,
    /// End of the attempt.
    pub finished_at: Option<String>,
}

impl From<&AttemptRecord> for LastAttemptView {
    fn from(a: &AttemptRecord) -> Self {
        let d = a.diagnostics.as_ref();
        LastAttemptView {
            attempt: a.attempt_no,
            status: a.status.clone(),
            message: d.and_then(|d| d.message.clone()),
            progress: d.and_then(|d| d.progress.as_ref()).map(ProgressView::from),
            finished_at: a.finished_at.as_ref().map(utc_isoformat),
        }
    }
}

/// `GET /v1/executions/{id}/attempts`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct AttemptsView {
    /// The execution id.
    pub execution_id: Uuid,
    /// Its attempts, oldest first.
    pub items: Vec<AttemptView>,
}

/// One kept log line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct LogLineView {
    /// Position among all lines of the attempt (1-based).
    pub seq: u64,
    /// When the handler wrote it.
    pub at: String,
    /// `error`, `warn`, `info`, `debug`, `trace`, `stdout` or `stderr`.
    pub level: String,
    /// The text (at most 4 KiB).
    pub message: String,
}

/// `GET /v1/executions/{id}/attempts/{n}/logs`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct LogsView {
    /// The execution id.
    pub execution_id: Uuid,
    /// The attempt number.
    pub attempt: u32,
    /// Lines the attempt wrote in all.
    pub total_lines: u64,
    /// Lines written but no longer kept (the tail keeps the last 64 KiB).
    pub dropped_lines: u64,
    /// The kept lines after `after_seq`, oldest first.
    pub lines: Vec<LogLineView>,
}

impl LogsView {
    fn new(execution_id: Uuid, attempt: u32, tail: Option<LogTail>, after_seq: u64) -> Self {
        let tail = tail.unwrap_or_default();
        LogsView {
            execution_id,
            attempt,
            total_lines: tail.total_lines,
            dropped_lines: tail.dropped_lines(),
            lines: tail
                .lines
                .into_iter()
                .filter(|l| l.seq > after_seq)
                .map(|l| LogLineView {
                    seq: l.seq,
                    at: utc_isoformat(&l.at),
                    level: l.level,
                    message: l.message,
                })
                .collect(),
        }
    }
}

/// The `{id}` and `{n}` of the logs route.
pub struct AttemptPath {
    pub(crate) id: Uuid,
    pub(crate) attempt: u32,
}

impl<S: Send + Sync> FromRequestParts<S> for AttemptPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let Path((id, n)) = Path::<(String, String)>::from_request_parts(parts, state)
            .await
            .map_err(|_| ApiError::invalid("expected /v1/executions/{id}/attempts/{n}/logs"))?;
        let id = parse_execution_id(&id)?;
        let attempt = n
            .parse::<u32>()
            .ok()
            .filter(|n| *n >= 1)
            .ok_or_else(|| {
                ApiError::invalid(format!(
                    "attempt number must be a positive integer (attempts are numbered from 1), got '{n}'"
                ))
            })?;
        Ok(AttemptPath { id, attempt })
    }
}

/// Query of the logs route.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct LogsParams {
    /// Only lines with a larger `seq` (for following a running attempt).
    #[param(value_type = Option<u64>, minimum = 0)]
    pub after_seq: Option<String>,
}

/// The attempts of an execution, oldest first, with their messages, progress, trap kind,
/// component digest, fuel and peak memory.
#[utoipa::path(
    get, path = "/v1/executions/{id}/attempts", tag = "executions",
    params(("id" = String, Path, description = "Execution id (UUID)")),
    responses(
        (status = 200, description = "The attempts", body = AttemptsView),
        (status = 422, description = "Malformed id", body = ErrorBody),
        NotFoundErrors,
        V1Errors,
    ),
    security(("bearer" = []))
)]
pub async fn list_attempts(
    Tenant(client): Tenant,
    ExecutionId(id): ExecutionId,
) -> Result<Json<AttemptsView>, ApiError> {
    let attempts = client.attempts(id).await?.ok_or(ApiError::not_found(id))?;
    Ok(Json(AttemptsView {
        execution_id: id,
        items: attempts.iter().map(AttemptView::from).collect(),
    }))
}

/// The kept log lines of one attempt (the last 64 KiB the handler wrote: `log` calls and
/// stdout/stderr lines).
#[utoipa::path(
    get, path = "/v1/executions/{id}/attempts/{n}/logs", tag = "executions",
    params(
        ("id" = String, Path, description = "Execution id (UUID)"),
        ("n" = u32, Path, description = "Attempt number (1-based)"),
        LogsParams,
    ),
    responses(
        (status = 200, description = "The log tail", body = LogsView),
        (status = 422, description = "Malformed id or attempt number", body = ErrorBody),
        (status = 404, description = "No such execution in the caller's namespace, or no such attempt", body = ErrorBody),
        V1Errors,
    ),
    security(("bearer" = []))
)]
pub async fn get_attempt_logs(
    Tenant(client): Tenant,
    path: AttemptPath,
    Query(params): Query<LogsParams>,
) -> Result<Json<LogsView>, ApiError> {
    let after_seq = match params.after_seq.as_deref() {
        None => 0,
        Some(text) => text.trim().parse::<u64>().map_err(|_| {
            ApiError::invalid(format!(
                "after_seq must be a non-negative integer, got '{text}'"
            ))
        })?,
    };
    let tail = client
        .attempt_log(path.id, path.attempt)
        .await?
        .ok_or_else(|| {
            ApiError::new(
                axum::http::StatusCode::NOT_FOUND,
                crate::error::code::NOT_FOUND,
                format!(
                    "execution {} was not found or has no attempt {}",
                    path.id, path.attempt
                ),
            )
            .with_execution(path.id)
        })?;
    Ok(Json(LogsView::new(path.id, path.attempt, tail, after_seq)))
}
