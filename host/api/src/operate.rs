//! The operator endpoints (docs/http-api.md#retry, docs/http-api.md#bulk-operations,
//! docs/http-api.md#roles): retry one execution, cancel or retry everything a list filter
//! matches, and `GET /v1/whoami` (the caller's namespace and what its role allows).

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use onestep_core::ExecutionStatus;
use onestep_core::request::ListQuery;
use onestep_core::rerun::{BulkRequest, DEFAULT_BULK_ITEMS};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::error::{ApiError, ErrorBody, code};
use crate::extract::{Caller, ExecutionId, IdempotencyKey, JsonBody, Operator};
use crate::openapi::{BodyErrors, ContentTypeErrors, ForbiddenErrors, NotFoundErrors, V1Errors};
use crate::routes::check_own_cursor;
use crate::state::ApiState;
use crate::view::ExecutionView;

/// The filter of a bulk operation (the list filter) and how far to go in one call.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BulkBody {
    /// Only this task.
    #[serde(default)]
    pub task_name: Option<String>,
    /// Only this status.
    #[serde(default)]
    #[schema(value_type = Option<crate::view::StatusName>)]
    pub status: Option<String>,
    /// `next_cursor` of the previous call, to go on where it stopped.
    #[serde(default)]
    pub cursor: Option<String>,
    /// At most this many rows in this call, 1..=10000 (default 1000).
    #[serde(default)]
    pub max_items: Option<u32>,
    /// Only executions created at or after this instant (RFC 3339 with an offset).
    #[serde(default)]
    pub created_from: Option<String>,
    /// Only executions created before this instant (RFC 3339 with an offset).
    #[serde(default)]
    pub created_before: Option<String>,
    /// Only the execution holding this idempotency key.
    #[serde(default)]
    pub idempotency_key: Option<String>,
    /// `key=value`: only executions whose top-level metadata `key` is the string `value`.
    #[serde(default)]
    pub metadata: Option<String>,
    /// Only executions whose error's `exception_type` contains this text (any case).
    #[serde(default)]
    pub exception_type: Option<String>,
    /// Cancel only: the reason stored on each row, at most 500 characters.
    #[serde(default)]
    pub reason: Option<String>,
}

/// What `POST /v1/executions:cancel` did.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct BulkCancelView {
    /// Rows that matched the filter and were handled by this call.
    pub matched: u64,
    /// Rows that became `cancelled`.
    pub cancelled: u64,
    /// Rows that became `cancel_requested` (running; their worker stops them).
    pub cancel_requested: u64,
    /// Rows left unchanged (already terminal or `cancel_requested`).
    pub unchanged: u64,
    /// Pass back as `cursor` to go on; `null` when every matching row was handled.
    pub next_cursor: Option<String>,
}

/// What `POST /v1/executions:retry` did.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct BulkRetryView {
    /// Rows that matched the filter and were handled by this call.
    pub matched: u64,
    /// New executions created (or the same ones again when the call is repeated with its key).
    pub retried: u64,
    /// Rows that cannot be retried (not failed, cancelled or expired).
    pub skipped: u64,
    /// Rows whose derived idempotency key already belongs to another submission.
    pub conflicts: u64,
    /// The new executions' ids.
    pub new_ids: Vec<Uuid>,
    /// Pass back as `cursor` to go on; `null` when every matching row was handled.
    pub next_cursor: Option<String>,
}

/// What the caller is and may do.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct WhoamiView {
    /// The caller's namespace.
    pub namespace: String,
    /// `read`, `submit`, `default` (no role given: submit and cancel), `operate` or `deploy`.
    pub role: String,
    /// May submit.
    pub can_submit: bool,
    /// May cancel one execution.
    pub can_cancel: bool,
    /// May retry and run bulk operations.
    pub can_operate: bool,
    /// May upload components and deploy, activate and deactivate deployments (role `deploy`,
    /// or a server without tokens).
    pub can_deploy: bool,
}

fn bulk_request(body: &BulkBody) -> Result<BulkRequest, ApiError> {
    let status = body
        .status
        .as_deref()
        .map(str::parse::<ExecutionStatus>)
        .transpose()?;
    let request = BulkRequest {
        query: ListQuery {
            task_name: body.task_name.clone(),
            status,
            limit: 1,
            cursor: body.cursor.clone(),
        },
        max_items: body.max_items.unwrap_or(DEFAULT_BULK_ITEMS),
        search: crate::search::SearchText {
            created_from: body.created_from.as_deref(),
            created_before: body.created_before.as_deref(),
            idempotency_key: body.idempotency_key.as_deref(),
            metadata: body.metadata.as_deref(),
            exception_type: body.exception_type.as_deref(),
        }
        .parse()?,
    };
    request.validate()?;
    request.query.validate()?;
    Ok(request)
}

/// Retry a failed, cancelled or expired execution: a new execution with the same task, payload
/// and metadata, linked by `metadata["onestep.retry_of"]`. The same key on the same original
/// returns the same new execution.
#[utoipa::path(
    post, path = "/v1/executions/{id}/retry", tag = "executions",
    params(
        ("id" = String, Path, description = "Execution id (UUID)"),
        ("Idempotency-Key" = String, Header, description = "1–255 characters; reuse it when retrying the request"),
    ),
    responses(
        (status = 202, description = "The new execution (new or replayed)", body = ExecutionView),
        (status = 409, description = "Not failed, cancelled or expired (`not_retryable`, with `status`), or the key belongs to another submission (`conflict`)", body = ErrorBody),
        (status = 422, description = "Malformed id or key, task no longer allowed, metadata over the limit with the link", body = ErrorBody),
        NotFoundErrors,
        ForbiddenErrors,
        ContentTypeErrors,
        V1Errors,
    ),
    security(("bearer" = []))
)]
pub async fn retry_execution(
    Operator(client): Operator,
    State(state): State<ApiState>,
    ExecutionId(id): ExecutionId,
    IdempotencyKey(key): IdempotencyKey,
) -> Result<(StatusCode, Json<ExecutionView>), ApiError> {
    let original = client.get(id).await?.ok_or(ApiError::not_found(id))?;
    if !state.task_allowed(&original.task_name) {
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            code::TASK_NOT_ALLOWED,
            "the execution's task_name is not allowed on this server",
        ));
    }
    let new = client
        .retry(id, &key)
        .await?
        .ok_or(ApiError::not_found(id))?;
    Ok((StatusCode::ACCEPTED, Json(ExecutionView::from(&new))))
}

/// Cancel every execution matching the filter, newest first, in bounded batches on the server;
/// at most `max_items` rows per call (go on with `next_cursor`).
#[utoipa::path(
    post, path = "/v1/executions:cancel", tag = "executions",
    request_body(content = Option<BulkBody>, description = "The list filter (empty: every execution of the namespace)"),
    responses(
        (status = 200, description = "Counts of this call", body = BulkCancelView),
        (status = 422, description = "Bad filter, cursor, max_items or reason; unknown field", body = ErrorBody),
        BodyErrors,
        ForbiddenErrors,
        V1Errors,
    ),
    security(("bearer" = []))
)]
pub async fn bulk_cancel(
    Operator(client): Operator,
    JsonBody(body): JsonBody<BulkBody>,
) -> Result<Json<BulkCancelView>, ApiError> {
    let request = bulk_request(&body)?;
    check_own_cursor(&client, body.cursor.as_deref()).await?;
    let out = client
        .cancel_matching(&request, body.reason.as_deref())
        .await?;
    Ok(Json(BulkCancelView {
        matched: out.matched,
        cancelled: out.cancelled,
        cancel_requested: out.cancel_requested,
        unchanged: out.unchanged,
        next_cursor: out.next_cursor,
    }))
}

/// Retry every failed, cancelled or expired execution matching the filter (others are counted
/// as skipped), in bounded batches on the server; at most `max_items` rows per call. Each new
/// execution's key derives from the `Idempotency-Key` and the original's id, so repeating the
/// call creates nothing twice.
#[utoipa::path(
    post, path = "/v1/executions:retry", tag = "executions",
    params(("Idempotency-Key" = String, Header, description = "1–255 characters; the same key makes a repeated call create nothing new")),
    request_body(content = Option<BulkBody>, description = "The list filter (empty: every execution of the namespace)"),
    responses(
        (status = 200, description = "Counts of this call", body = BulkRetryView),
        (status = 422, description = "Bad filter, cursor, max_items or key; unknown field", body = ErrorBody),
        BodyErrors,
        ForbiddenErrors,
        V1Errors,
    ),
    security(("bearer" = []))
)]
pub async fn bulk_retry(
    Operator(client): Operator,
    State(state): State<ApiState>,
    IdempotencyKey(key): IdempotencyKey,
    JsonBody(body): JsonBody<BulkBody>,
) -> Result<Json<BulkRetryView>, ApiError> {
    if body.reason.is_some() {
        return Err(ApiError::invalid(
            "reason is only accepted by executions:cancel",
        ));
    }
    let request = bulk_request(&body)?;
    if let Some(task) = &request.query.task_name
        && !state.task_allowed(task)
    {
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            code::TASK_NOT_ALLOWED,
            "unsupported task_name",
        ));
    }
    check_own_cursor(&client, body.cursor.as_deref()).await?;
    let out = client.retry_matching(&request, &key).await?;
    Ok(Json(BulkRetryView {
        matched: out.matched,
        retried: out.retried,
        skipped: out.skipped,
        conflicts: out.conflicts,
        new_ids: out.new_ids,
        next_cursor: out.next_cursor,
    }))
}

/// The caller's namespace and what its token's role allows (the dashboard hides the rest).
#[utoipa::path(
    get, path = "/v1/whoami", tag = "executions",
    responses(
        (status = 200, description = "The caller", body = WhoamiView),
        V1Errors,
    ),
    security(("bearer" = []))
)]
pub async fn whoami(
    State(state): State<ApiState>,
    Caller(client, role): Caller,
) -> Json<WhoamiView> {
    Json(WhoamiView {
        can_deploy: role.can_deploy() || state.unauthenticated(),
        namespace: client.namespace().to_owned(),
        role: role.as_str().to_owned(),
        can_submit: role.can_submit(),
        can_cancel: role.can_cancel(),
        can_operate: role.can_operate(),
    })
}
