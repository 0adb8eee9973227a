//! The endpoints (docs/http-api.md) with their OpenAPI annotations.

use axum::Json;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use chrono::{DateTime, FixedOffset, NaiveDateTime};
use onestep_core::request::{ListQuery, SubmitRequest};
use onestep_core::{ExecutionError, ExecutionStatus};
use serde::Deserialize;
use serde_json::Value;
use tracing::Instrument;
use utoipa::{IntoParams, ToSchema};

use crate::error::{ApiError, ErrorBody, code};
use crate::extract::{
    Canceller, ExecutionId, IdempotencyKey, JsonBody, OptionalJsonBody, Submitter, Tenant,
};
use crate::openapi::{BodyErrors, ForbiddenErrors, NotFoundErrors, V1Errors};
use crate::state::ApiState;
use crate::view::{ExecutionView, HealthView, PageView, ResultView};

/// Body of `POST /v1/executions`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct SubmitBody {
    /// Task to run; must be in the server's allow-list.
    #[schema(example = "run_agent")]
    pub task_name: String,
    /// Any JSON value handed to the handler.
    pub payload: Value,
    /// Optional JSON object (default `{}`); the key `onestep.execution` is reserved.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<Value>,
    /// Seconds to wait before the first claim (finite, ≥ 0).
    #[serde(default)]
    pub delay_s: Option<f64>,
    /// Latest claim instant, ISO 8601 **with** an offset (`2026-08-10T12:00:00+08:00`).
    #[serde(default)]
    pub expires_at: Option<String>,
    /// Claim priority, an integer from 0 (most urgent) to 9; default 5. Within a task, claims
    /// take lower numbers first, then the oldest.
    #[serde(default)]
    #[schema(value_type = Option<u8>, minimum = 0, maximum = 9)]
    pub priority: Option<Value>,
    /// Fairness key, 1–255 characters of ASCII letters, digits, `_`, `.`, `:` and `-`
    /// (e.g. a tenant id); default: the namespace.
    #[serde(default)]
    #[schema(example = "tenant-42")]
    pub fairness_key: Option<String>,
    /// Completion webhook (docs/http-api.md#callbacks): `{url, events}`, the URL's origin in
    /// the server's `api.callbacks.allow`. Not accepted in batch submits.
    #[serde(default)]
    pub callback: Option<crate::callbacks::CallbackBody>,
}

/// The body's `priority`: JSON `null` or absent is the default; anything but an integer is
/// refused with the range message (the range itself is core's check).
pub(crate) fn body_priority(v: Option<&Value>) -> Result<Option<i64>, ApiError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) if n.as_i64().is_some() => Ok(n.as_i64()),
        Some(_) => Err(ApiError::invalid(format!(
            "priority must be an integer from 0 to {}",
            onestep_core::schedule::MAX_PRIORITY
        ))),
    }
}

/// Body of `POST /v1/executions/{id}/cancel` (may be empty).
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
pub struct CancelBody {
    /// Optional reason, at most 500 characters (trimmed; stored, never shown).
    #[serde(default)]
    pub reason: Option<String>,
}

/// Query of `GET /v1/executions`.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListParams {
    /// Only this task.
    pub task_name: Option<String>,
    /// Only this status (`queued`, `running`, `retrying`, `succeeded`, `failed`,
    /// `cancel_requested`, `cancelled`, `expired`).
    pub status: Option<String>,
    /// Page size, 1..=200 (default 50).
    #[param(value_type = Option<u32>, minimum = 1, maximum = 200)]
    pub limit: Option<String>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
    /// Only executions created at or after this instant (RFC 3339 with an offset).
    pub created_from: Option<String>,
    /// Only executions created before this instant (RFC 3339 with an offset).
    pub created_before: Option<String>,
    /// Only the execution holding this idempotency key.
    pub idempotency_key: Option<String>,
    /// `key=value`: only executions whose top-level metadata `key` is the string `value`.
    pub metadata: Option<String>,
    /// Only executions whose error's `exception_type` contains this text (any case).
    pub exception_type: Option<String>,
}

impl ListParams {
    /// The search filters of the query (docs/http-api.md#search-filters).
    pub fn search(&self) -> Result<onestep_core::request::ListSearch, ApiError> {
        crate::search::SearchText {
            created_from: self.created_from.as_deref(),
            created_before: self.created_before.as_deref(),
            idempotency_key: self.idempotency_key.as_deref(),
            metadata: self.metadata.as_deref(),
            exception_type: self.exception_type.as_deref(),
        }
        .parse()
    }
}

/// Parses `expires_at`: ISO 8601 with an offset; a naive datetime is rejected (docs/semantics.md#time).
pub fn parse_expires_at(text: &str) -> Result<DateTime<FixedOffset>, ApiError> {
    let t = text.trim();
    if let Ok(dt) = DateTime::parse_from_rfc3339(t) {
        return Ok(dt);
    }
    for fmt in ["%Y-%m-%dT%H:%M:%S%.f%z", "%Y-%m-%d %H:%M:%S%.f%z"] {
        if let Ok(dt) = DateTime::parse_from_str(t, fmt) {
            return Ok(dt);
        }
    }
    let naive = [
        "%Y-%m-%dT%H:%M:%S%.f",
        "%Y-%m-%d %H:%M:%S%.f",
        "%Y-%m-%dT%H:%M",
    ]
    .iter()
    .any(|fmt| NaiveDateTime::parse_from_str(t, fmt).is_ok());
    Err(ApiError::invalid(if naive {
        "expires_at must include a timezone"
    } else {
        "expires_at must be an ISO 8601 datetime with a timezone"
    }))
}

/// Submit an execution. Repeating the same key with the same body returns the same execution.
#[utoipa::path(
    post, path = "/v1/executions", tag = "executions",
    params(("Idempotency-Key" = String, Header, description = "1–255 characters; reuse it when retrying")),
    request_body = SubmitBody,
    responses(
        (status = 202, description = "Accepted (new or replayed)", body = ExecutionView),
        (status = 409, description = "Key already used with a different submission", body = ErrorBody),
        (status = 422, description = "Validation, encoding or task not allowed", body = ErrorBody),
        (status = 429, description = "Over the namespace's or fairness key's quota (`quota_exceeded`, with `Retry-After`)", body = ErrorBody),
        BodyErrors,
        ForbiddenErrors,
        V1Errors,
    ),
    security(("bearer" = []))
)]
pub async fn submit_execution(
    Submitter(client): Submitter,
    State(state): State<ApiState>,
    IdempotencyKey(key): IdempotencyKey,
    headers: axum::http::HeaderMap,
    JsonBody(body): JsonBody<SubmitBody>,
) -> Result<
    (
        StatusCode,
        axum::Extension<crate::metrics::SubmitOutcome>,
        Json<ExecutionView>,
    ),
    ApiError,
> {
    let mut body = body;
    let callback = crate::callbacks::check_callback(&state, body.callback.take()).await?;
    let request = submit_request(&state, body, key)?;
    let submitted = submit_traced(&client, &request, &headers, callback)
        .await
        .map_err(|e| ApiError::from(e).with_retry_after(state.quota_retry_after_s()))?;
    let outcome = if submitted.created {
        crate::metrics::SubmitOutcome::Created
    } else {
        crate::metrics::SubmitOutcome::Replayed
    };
    Ok((
        StatusCode::ACCEPTED,
        axum::Extension(outcome),
        Json(ExecutionView::from(&submitted.execution)),
    ))
}

/// The submit request of a body and its idempotency key, or its `422` (task outside
/// `allowed_tasks`, an `expires_at` without an offset, a bad priority); the rest is validated by
/// the client.
pub(crate) fn submit_request(
    state: &ApiState,
    body: SubmitBody,
    key: String,
) -> Result<SubmitRequest, ApiError> {
    if !state.task_allowed(&body.task_name) {
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            code::TASK_NOT_ALLOWED,
            "unsupported task_name",
        ));
    }
    let expires_at = body
        .expires_at
        .as_deref()
        .map(parse_expires_at)
        .transpose()?;
    let priority = body_priority(body.priority.as_ref())?;
    Ok(SubmitRequest {
        task_name: body.task_name,
        payload: body.payload,
        idempotency_key: Some(key),
        metadata: body.metadata,
        delay_s: body.delay_s,
        expires_at,
        priority,
        fairness_key: body.fairness_key,
    })
}

/// Submits under a `submit` span (docs/observability.md#traces): a child of the request's
/// `traceparent` header when there is one, its own context stored with a new execution. While
/// traces are off the span is disabled and nothing of this is done.
async fn submit_traced(
    client: &onestep_core::client::ExecutionClient,
    request: &SubmitRequest,
    headers: &axum::http::HeaderMap,
    callback: Option<onestep_core::callback::CallbackSpec>,
) -> Result<onestep_core::client::Submitted, onestep_core::ExecutionError> {
    let span = tracing::info_span!(
        target: onestep_telemetry::TARGET,
        "submit",
        "otel.kind" = "producer",
        "messaging.system" = onestep_telemetry::MESSAGING_SYSTEM,
        "messaging.operation.type" = "send",
        "messaging.operation.name" = "submit",
        "messaging.destination.name" = %request.task_name,
        "messaging.message.id" = tracing::field::Empty,
        "onestep.namespace" = %client.namespace(),
        "onestep.replayed" = tracing::field::Empty,
    );
    if span.is_disabled() {
        return client.submit_with(request, None, callback).await;
    }
    if let Some(parent) = onestep_telemetry::context_from_headers(headers) {
        onestep_telemetry::set_parent(&span, parent);
    }
    let traceparent = onestep_telemetry::traceparent_of(&span);
    let submitted = client
        .submit_with(request, traceparent, callback)
        .instrument(span.clone())
        .await;
    match &submitted {
        Ok(s) => {
            span.record(
                "messaging.message.id",
                tracing::field::display(s.execution.id),
            );
            span.record("onestep.replayed", !s.created);
        }
        Err(e) => onestep_telemetry::set_error(&span, e.to_string()),
    }
    submitted
}

/// List executions of the caller's namespace, newest first.
#[utoipa::path(
    get, path = "/v1/executions", tag = "executions",
    params(ListParams),
    responses(
        (status = 200, description = "One page", body = PageView),
        (status = 422, description = "Bad filter, limit or cursor", body = ErrorBody),
        V1Errors,
    ),
    security(("bearer" = []))
)]
pub async fn list_executions(
    Tenant(client): Tenant,
    query: Result<Query<ListParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<PageView>, ApiError> {
    let Query(params) =
        query.map_err(|_| ApiError::invalid("the query string could not be parsed"))?;
    let status = params
        .status
        .as_deref()
        .map(str::parse::<ExecutionStatus>)
        .transpose()?;
    let limit = match params.limit.as_deref() {
        None => 50,
        Some(text) => {
            let n: i64 = text
                .trim()
                .parse()
                .map_err(|_| ApiError::invalid("limit must be an integer"))?;
            u32::try_from(n)
                .ok()
                .filter(|n| (1..=200).contains(n))
                .ok_or_else(|| ApiError::invalid("limit must be between 1 and 200"))?
        }
    };
    let search = params.search()?;
    check_own_cursor(&client, params.cursor.as_deref()).await?;
    let page = client
        .search(
            &ListQuery {
                task_name: params.task_name,
                status,
                limit,
                cursor: params.cursor,
            },
            &search,
        )
        .await?;
    Ok(Json(PageView {
        items: page.items.iter().map(ExecutionView::from).collect(),
        next_cursor: page.next_cursor,
        partial: page.partial,
    }))
}

/// Refuses a cursor that does not belong to the caller's namespace (a cursor taken from another
/// tenant, or forged); one whose execution was purged since is still a position
/// ([`ExecutionClient::check_cursor_owner`](onestep_core::ExecutionClient::check_cursor_owner)).
pub async fn check_own_cursor(
    client: &onestep_core::ExecutionClient,
    cursor: Option<&str>,
) -> Result<(), ApiError> {
    if let Some(text) = cursor.filter(|c| !c.is_empty()) {
        client.check_cursor_owner(text).await?;
    }
    Ok(())
}

/// Query of `GET /v1/executions/{id}` and `/result`.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct WaitParams {
    /// Wait up to this many seconds (0 to the server's `api.max_wait_s`, at most 60; fractions
    /// allowed) for the execution to be terminal; answers as soon as it is, else with its state
    /// at the deadline.
    #[param(value_type = Option<f64>, minimum = 0, maximum = 60)]
    pub wait: Option<String>,
}

/// The wait a request asks for, refused with a specific message when malformed.
fn wait_of(
    state: &ApiState,
    query: Result<Query<WaitParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Option<std::time::Duration>, ApiError> {
    let Query(params) =
        query.map_err(|_| ApiError::invalid("the query string could not be parsed"))?;
    crate::wait::parse_wait(params.wait.as_deref(), state.max_wait_s()).map_err(ApiError::invalid)
}

/// Reads execution `id`, waiting up to `wait` for it to be terminal (docs/http-api.md#waiting):
/// the answer is the execution as read when it is terminal, the deadline passes or the process
/// starts shutting down.
async fn read_waiting(
    state: &ApiState,
    client: &onestep_core::ExecutionClient,
    id: uuid::Uuid,
    wait: Option<std::time::Duration>,
) -> Result<onestep_core::Execution, ApiError> {
    let deadline = wait.map(|w| tokio::time::Instant::now() + w);
    loop {
        let execution = client.get(id).await?.ok_or(ApiError::not_found(id))?;
        let Some(deadline) = deadline.filter(|_| !execution.terminal()) else {
            return Ok(execution);
        };
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if !state.waits().changed(id, execution.version, left).await {
            return Ok(execution);
        }
    }
}

/// Read one execution.
#[utoipa::path(
    get, path = "/v1/executions/{id}", tag = "executions",
    params(("id" = String, Path, description = "Execution id (UUID)"), WaitParams),
    responses(
        (status = 200, description = "The execution (with `wait`: once terminal, or its state at the deadline)", body = ExecutionView),
        (status = 422, description = "Malformed id or wait", body = ErrorBody),
        NotFoundErrors,
        V1Errors,
    ),
    security(("bearer" = []))
)]
pub async fn get_execution(
    State(state): State<ApiState>,
    Tenant(client): Tenant,
    ExecutionId(id): ExecutionId,
    query: Result<Query<WaitParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<ExecutionView>, ApiError> {
    let wait = wait_of(&state, query)?;
    let execution = read_waiting(&state, &client, id, wait).await?;
    let view = crate::view::one_execution_view(&client, &execution).await?;
    Ok(Json(view))
}

/// Ask for cancellation. `queued`/`retrying` become `cancelled` at once; `running` becomes
/// `cancel_requested` until the worker stops; other statuses are returned unchanged.
#[utoipa::path(
    post, path = "/v1/executions/{id}/cancel", tag = "executions",
    params(("id" = String, Path, description = "Execution id (UUID)")),
    request_body(content = Option<CancelBody>, description = "Optional reason"),
    responses(
        (status = 200, description = "The execution after the request", body = ExecutionView),
        (status = 422, description = "Malformed id or reason too long", body = ErrorBody),
        NotFoundErrors,
        BodyErrors,
        ForbiddenErrors,
        V1Errors,
    ),
    security(("bearer" = []))
)]
pub async fn cancel_execution(
    Canceller(client): Canceller,
    ExecutionId(id): ExecutionId,
    OptionalJsonBody(body): OptionalJsonBody<CancelBody>,
) -> Result<Json<ExecutionView>, ApiError> {
    let execution = client
        .cancel(id, body.reason.as_deref())
        .await?
        .ok_or(ApiError::not_found(id))?;
    Ok(Json(ExecutionView::from(&execution)))
}

/// The result of a succeeded execution; with `wait`, first waits up to that many seconds for
/// the execution to be terminal.
#[utoipa::path(
    get, path = "/v1/executions/{id}/result", tag = "executions",
    params(("id" = String, Path, description = "Execution id (UUID)"), WaitParams),
    responses(
        (status = 200, description = "Succeeded: the result", body = ResultView),
        (status = 409, description = "Not terminal yet (`not_ready`) or cancelled (`cancelled`)", body = ErrorBody),
        (status = 410, description = "Expired (`expired`)", body = ErrorBody),
        (status = 422, description = "Malformed id or wait, or failed (`failed`, with the error object)", body = ErrorBody),
        NotFoundErrors,
        V1Errors,
    ),
    security(("bearer" = []))
)]
pub async fn get_result(
    State(state): State<ApiState>,
    Tenant(client): Tenant,
    ExecutionId(id): ExecutionId,
    query: Result<Query<WaitParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<ResultView>, ApiError> {
    let wait = wait_of(&state, query)?;
    let execution = read_waiting(&state, &client, id, wait).await?;
    match onestep_core::client::result_of(execution.clone()) {
        Ok(result) => Ok(Json(ResultView { result })),
        Err(e @ ExecutionError::Failed { .. }) => {
            let last = crate::view::last_attempt(&client, &execution).await?;
            Err(ApiError::from(e).with_last_attempt(last))
        }
        Err(e @ ExecutionError::Cancelled { .. }) => {
            let reason = crate::view::cancel_reason(&client, &execution).await?;
            Err(ApiError::from(e).with_cancel_reason(reason))
        }
        Err(e) => Err(e.into()),
    }
}

/// Liveness of the process (no I/O).
#[utoipa::path(
    get, path = "/healthz", tag = "health",
    responses((status = 200, description = "The process is up", body = HealthView))
)]
pub async fn healthz() -> Json<HealthView> {
    Json(HealthView {
        status: "ok".into(),
    })
}

/// Readiness: the database is reachable and the execution tables exist.
#[utoipa::path(
    get, path = "/readyz", tag = "health",
    responses(
        (status = 200, description = "Ready", body = HealthView),
        (status = 503, description = "Database unreachable or tables missing", body = ErrorBody),
    )
)]
pub async fn readyz(State(state): State<ApiState>) -> Result<Json<HealthView>, ApiError> {
    match state.readiness().ready().await {
        Ok(()) => Ok(Json(HealthView {
            status: "ok".into(),
        })),
        Err(e) => {
            let detail = match &e {
                ExecutionError::Backend(b) => format!("{} ({})", b.message, b.kind),
                other => other.to_string(),
            };
            tracing::warn!(reason = %detail, "readiness check failed");
            Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                code::BACKEND_UNAVAILABLE,
                "the execution store is not ready",
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expires_at_needs_an_offset() {
        let t = parse_expires_at("2026-08-10T12:00:00+08:00").unwrap();
        assert_eq!(t.offset().local_minus_utc(), 8 * 3600);
        assert!(parse_expires_at("2026-08-10T12:00:00.5Z").is_ok());
        assert!(parse_expires_at("2026-08-10 12:00:00+0800").is_ok());
        let e = parse_expires_at("2026-08-10T12:00:00").unwrap_err();
        assert_eq!(e.body().message, "expires_at must include a timezone");
        let e = parse_expires_at("tomorrow").unwrap_err();
        assert_eq!(e.body().code, "invalid_argument");
    }
}
