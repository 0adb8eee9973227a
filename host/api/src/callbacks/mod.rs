//! Completion webhooks (docs/http-api.md#callbacks, docs/semantics.md#completion-webhooks): a
//! submit's `callback` checked against `api.callbacks` ([`check_callback`]), the deliveries of
//! an execution (`GET /v1/executions/{id}/deliveries`), a new round of attempts for an
//! `operate` caller (`POST /v1/executions/{id}/deliveries:redeliver`), and the sender loop
//! ([`sender::CallbackSender`]).

pub mod metrics;
pub mod sender;
pub mod target;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use onestep_core::callback::{CallbackRecord, CallbackSpec, check_events};
use onestep_core::timefmt::utc_isoformat;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::error::{ApiError, ErrorBody, code};
use crate::extract::{ExecutionId, Operator, Tenant};
use crate::openapi::{ContentTypeErrors, ForbiddenErrors, NotFoundErrors, V1Errors};
use crate::state::ApiState;

pub use sender::CallbackSender;

/// A submit's `callback` (docs/http-api.md#callbacks).
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CallbackBody {
    /// Where the deliveries are posted; its origin must be in `api.callbacks.allow`.
    #[schema(example = "https://hooks.example.com/onestep")]
    pub url: String,
    /// The events delivered: `["terminal"]` (the default); `"started"` and `"progress"` may be
    /// added, `"terminal"` must stay.
    #[serde(default)]
    pub events: Option<Vec<String>>,
}

/// `422 callback_not_allowed` with `message`.
fn refused(message: impl Into<String>) -> ApiError {
    ApiError::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        code::CALLBACK_NOT_ALLOWED,
        message,
    )
}

/// Checks a submit's `callback`: callbacks configured and kept by the store, the URL's origin
/// allowed, its host resolving to addresses a delivery may reach, the events known.
pub async fn check_callback(
    state: &ApiState,
    body: Option<CallbackBody>,
) -> Result<Option<CallbackSpec>, ApiError> {
    let Some(body) = body else {
        return Ok(None);
    };
    let Some(settings) = state.callback_settings() else {
        return Err(refused(
            "callbacks are not enabled on this server (api.callbacks is not configured)",
        ));
    };
    if state.callback_store().is_none() {
        return Err(refused(
            "callbacks are not available on this server's database backend",
        ));
    }
    let url = body.url.trim().to_owned();
    let target = target::check_url(&url, &settings.allow).map_err(refused)?;
    target::resolve(&target).await.map_err(refused)?;
    let events = check_events(body.events.as_deref()).map_err(refused)?;
    Ok(Some(CallbackSpec { url, events }))
}

/// One delivery attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct DeliveryView {
    /// 1-based, over every round.
    pub attempt: u32,
    /// `execution.started`, `execution.progress`, or the terminal `execution.succeeded`,
    /// `execution.failed`, `execution.cancelled` or `execution.expired`.
    pub event: String,
    /// The `webhook-id` header sent (the same on every retry of an event).
    pub webhook_id: String,
    /// When it was made (UTC, ISO 8601).
    pub at: String,
    /// The receiver's HTTP status, when it answered.
    pub status: Option<u16>,
    /// Why it failed (no answer, or a status other than 2xx).
    pub error: Option<String>,
}

/// `GET /v1/executions/{id}/deliveries`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct DeliveriesView {
    /// The execution id.
    pub execution_id: Uuid,
    /// The callback URL.
    pub url: String,
    /// The events asked for.
    pub events: Vec<String>,
    /// `pending` (waiting for the execution to end or for the next attempt), `delivered` or
    /// `dead` (every attempt failed).
    pub state: String,
    /// Attempts made.
    pub attempts: u32,
    /// When the next attempt is due (pending only; after the execution ends).
    pub next_at: Option<String>,
    /// The attempts, oldest first.
    pub items: Vec<DeliveryView>,
}

impl DeliveriesView {
    fn new(execution_id: Uuid, r: CallbackRecord) -> Self {
        DeliveriesView {
            execution_id,
            url: r.url,
            events: r.events,
            state: r.state.as_str().to_owned(),
            attempts: r.attempts,
            next_at: r.next_at.as_ref().map(utc_isoformat),
            items: r
                .deliveries
                .into_iter()
                .map(|d| DeliveryView {
                    attempt: d.attempt_no,
                    event: d.event,
                    webhook_id: d.webhook_id,
                    at: utc_isoformat(&d.at),
                    status: d.status,
                    error: d.error,
                })
                .collect(),
        }
    }
}

/// The completion webhook of an execution and its delivery attempts.
#[utoipa::path(
    get, path = "/v1/executions/{id}/deliveries", tag = "executions",
    params(("id" = String, Path, description = "Execution id (UUID)")),
    responses(
        (status = 200, description = "The callback and its attempts", body = DeliveriesView),
        (status = 404, description = "No such execution in the caller's namespace, or it has no callback", body = ErrorBody),
        (status = 422, description = "Malformed id", body = ErrorBody),
        V1Errors,
    ),
    security(("bearer" = []))
)]
pub async fn list_deliveries(
    Tenant(client): Tenant,
    State(state): State<ApiState>,
    ExecutionId(id): ExecutionId,
) -> Result<Json<DeliveriesView>, ApiError> {
    let record = match state.callback_store() {
        Some(store) => store.deliveries(client.namespace(), id).await?,
        None => None,
    };
    let record = record.ok_or_else(|| no_callback(id))?;
    Ok(Json(DeliveriesView::new(id, record)))
}

fn no_callback(id: Uuid) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        code::NOT_FOUND,
        format!("execution {id} has no callback in this namespace"),
    )
    .with_execution(id)
}

/// Starts a new round of delivery attempts for the execution's callback (`operate` role): due
/// at once when the execution has ended, with the full `max_attempts`.
#[utoipa::path(
    post, path = "/v1/executions/{id}/deliveries:redeliver", tag = "executions",
    params(("id" = String, Path, description = "Execution id (UUID)")),
    responses(
        (status = 202, description = "Redelivery scheduled; the callback as it is now", body = DeliveriesView),
        (status = 422, description = "Malformed id", body = ErrorBody),
        NotFoundErrors,
        ForbiddenErrors,
        ContentTypeErrors,
        V1Errors,
    ),
    security(("bearer" = []))
)]
pub async fn redeliver(
    Operator(client): Operator,
    State(state): State<ApiState>,
    ExecutionId(id): ExecutionId,
) -> Result<(StatusCode, Json<DeliveriesView>), ApiError> {
    let Some(store) = state.callback_store() else {
        return Err(no_callback(id));
    };
    if !store.redeliver(client.namespace(), id).await? {
        return Err(no_callback(id));
    }
    let record = store
        .deliveries(client.namespace(), id)
        .await?
        .ok_or_else(|| no_callback(id))?;
    Ok((StatusCode::ACCEPTED, Json(DeliveriesView::new(id, record))))
}
