//! `POST /v1/executions:batch` (docs/http-api.md#batch-submit): up to 1,000 submissions in one
//! request, each with its own idempotency key and its own answer. Every item is validated on
//! its own first (an invalid item is that item's `422` and writes nothing); the valid items are
//! written in one transaction with one multi-row insert.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use onestep_core::request::SubmitRequest;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use crate::error::{ApiError, ErrorBody, code};
use crate::extract::{JsonBody, MAX_IDEMPOTENCY_KEY_CHARS, Submitter};
use crate::openapi::{BodyErrors, ForbiddenErrors, V1Errors};
use crate::routes::{SubmitBody, submit_request};
use crate::state::ApiState;
use crate::view::ExecutionView;

/// The most items one batch may hold.
pub const MAX_BATCH_ITEMS: usize = 1_000;

/// Body of `POST /v1/executions:batch`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct BatchBody {
    /// 1 to 1,000 submissions, each shaped like [`BatchItemBody`]; an item of another shape is
    /// that item's `422`.
    #[schema(value_type = Vec<BatchItemBody>)]
    pub items: Vec<Value>,
}

/// One submission of a batch: the body of `POST /v1/executions` plus its idempotency key.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct BatchItemBody {
    /// 1–255 characters, as the `Idempotency-Key` header of a single submit.
    pub idempotency_key: String,
    /// The submission.
    #[serde(flatten)]
    pub submission: SubmitBody,
}

/// The answer of a batch: one item per submitted item, in order.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct BatchView {
    /// The answers, `items[i]` for the submitted `items[i]`.
    pub items: Vec<BatchItemView>,
}

/// The answer for one item.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct BatchItemView {
    /// 202 created; 200 replayed (the key was used before with the same submission); 409
    /// `conflict` (the key was used with another submission); 422 invalid (validation,
    /// encoding, task not allowed); 429 `quota_exceeded` (over a quota, docs/http-api.md#quotas).
    pub status: u16,
    /// The execution, for 202 and 200.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub execution: Option<ExecutionView>,
    /// The error, for 409 and 422; its message starts with `items[i]: `.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorBody>,
}

impl BatchItemView {
    fn failed(index: usize, e: ApiError) -> Self {
        let mut body = e.body().clone();
        body.message = format!("items[{index}]: {}", body.message);
        BatchItemView {
            status: e.status().as_u16(),
            execution: None,
            error: Some(body),
        }
    }
}

/// Submit up to 1,000 executions at once; each item answers for itself.
#[utoipa::path(
    post, path = "/v1/executions:batch", tag = "executions",
    request_body = BatchBody,
    responses(
        (status = 200, description = "One answer per item, in order (202 created, 200 replayed, 409 conflict, 422 invalid)", body = BatchView),
        (status = 422, description = "No items, more than 1,000, or a body that is not `{\"items\": [...]}`", body = ErrorBody),
        BodyErrors,
        ForbiddenErrors,
        V1Errors,
    ),
    security(("bearer" = []))
)]
pub async fn submit_batch(
    Submitter(client): Submitter,
    State(state): State<ApiState>,
    JsonBody(body): JsonBody<BatchBody>,
) -> Result<
    (
        axum::Extension<crate::error::QuotaRefusals>,
        Json<BatchView>,
    ),
    ApiError,
> {
    let n = body.items.len();
    if n == 0 || n > MAX_BATCH_ITEMS {
        return Err(ApiError::invalid(format!(
            "items must hold 1 to {MAX_BATCH_ITEMS} submissions, got {n}"
        )));
    }
    let mut answers: Vec<Option<BatchItemView>> = Vec::with_capacity(n);
    let mut valid = Vec::new();
    let mut slots = Vec::new();
    for (i, item) in body.items.into_iter().enumerate() {
        match item_request(&state, item) {
            Ok(request) => {
                slots.push(i);
                valid.push(request);
                answers.push(None);
            }
            Err(e) => answers.push(Some(BatchItemView::failed(i, e))),
        }
    }
    let mut refusals = crate::error::QuotaRefusals::default();
    if !valid.is_empty() {
        let written = client.submit_batch(&valid).await?;
        for (i, item) in slots.into_iter().zip(written) {
            answers[i] = Some(match item {
                Ok(s) => BatchItemView {
                    status: if s.created {
                        StatusCode::ACCEPTED.as_u16()
                    } else {
                        StatusCode::OK.as_u16()
                    },
                    execution: Some(ExecutionView::from(&s.execution)),
                    error: None,
                },
                Err(e) => {
                    let e = ApiError::from(e).with_retry_after(state.quota_retry_after_s());
                    if let Some(q) = &e.body().quota {
                        refusals.0.push((q.namespace.clone(), q.name));
                    }
                    BatchItemView::failed(i, e)
                }
            });
        }
    }
    let items = answers
        .into_iter()
        .enumerate()
        .map(|(i, a)| {
            a.unwrap_or_else(|| {
                BatchItemView::failed(i, ApiError::invalid("the item was not answered"))
            })
        })
        .collect();
    Ok((axum::Extension(refusals), Json(BatchView { items })))
}

/// The submit request of one item, or its `422`.
fn item_request(state: &ApiState, item: Value) -> Result<SubmitRequest, ApiError> {
    if !item.is_object() {
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            code::INVALID_BODY,
            "an item must be a JSON object",
        ));
    }
    let item: BatchItemBody = serde_json::from_value(item).map_err(|e| {
        ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            code::INVALID_BODY,
            format!("invalid item: {e}"),
        )
    })?;
    let key = item.idempotency_key;
    if key.trim().is_empty() || key.chars().count() > MAX_IDEMPOTENCY_KEY_CHARS {
        return Err(ApiError::invalid(format!(
            "idempotency_key must be 1 to {MAX_IDEMPOTENCY_KEY_CHARS} characters"
        )));
    }
    if item.submission.callback.is_some() {
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            code::CALLBACK_NOT_ALLOWED,
            "callback is not accepted in a batch submit; submit the execution alone with \
             POST /v1/executions",
        ));
    }
    submit_request(state, item.submission, key)
}
