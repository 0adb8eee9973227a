//! The one error type of the API ([`ApiError`]) and its JSON body ([`ErrorBody`]).
//!
//! Every failure — a domain error, an axum rejection, an unknown route — leaves the server as
//! `{"code": "...", "message": "..."}` with a stable machine `code`. Bodies and log lines never
//! carry a DSN, SQL, a stack or other internals: backend failures are reported as
//! `backend_unavailable`/`internal_error` with a fixed message.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use onestep_core::{ErrorObject, ExecutionError, ExecutionStatus};
use serde::Serialize;
use utoipa::ToSchema;
use uuid::Uuid;

use crate::view::ErrorObjectView;

/// Stable machine codes of error bodies.
pub mod code {
    /// 401: no or unknown bearer token.
    pub const UNAUTHORIZED: &str = "unauthorized";
    /// 403: the token's role does not allow the operation.
    pub const FORBIDDEN: &str = "forbidden";
    /// 409: `retry` of an execution that is not failed, cancelled or expired.
    pub const NOT_RETRYABLE: &str = "not_retryable";
    /// 404: unknown route, or an execution absent from the caller's namespace.
    pub const NOT_FOUND: &str = "not_found";
    /// 405: the route exists with another method.
    pub const METHOD_NOT_ALLOWED: &str = "method_not_allowed";
    /// 409: idempotency key reused with a different submission.
    pub const CONFLICT: &str = "conflict";
    /// 409: `result` of a non-terminal execution.
    pub const NOT_READY: &str = "not_ready";
    /// 409: `result` of a cancelled execution.
    pub const CANCELLED: &str = "cancelled";
    /// 410: `result` of an expired execution.
    pub const EXPIRED: &str = "expired";
    /// 413: request body over `max_body_bytes`.
    pub const PAYLOAD_TOO_LARGE: &str = "payload_too_large";
    /// 415: a body with a non-JSON `Content-Type`.
    pub const UNSUPPORTED_MEDIA_TYPE: &str = "unsupported_media_type";
    /// 422: argument rule broken (field, header, path id, query parameter).
    pub const INVALID_ARGUMENT: &str = "invalid_argument";
    /// 422: body is not valid JSON.
    pub const INVALID_JSON: &str = "invalid_json";
    /// 422: body is JSON of the wrong shape (missing field, wrong type).
    pub const INVALID_BODY: &str = "invalid_body";
    /// 422: `task_name` not in the server's allow-list.
    pub const TASK_NOT_ALLOWED: &str = "task_not_allowed";
    /// 422: value not encodable or over a size limit.
    pub const ENCODING_ERROR: &str = "encoding_error";
    /// 422: `result` of a failed execution (the body carries the error object).
    pub const FAILED: &str = "failed";
    /// 503: the database is unreachable or not ready (retry later).
    pub const BACKEND_UNAVAILABLE: &str = "backend_unavailable";
    /// 500: anything else that is the server's fault.
    pub const INTERNAL_ERROR: &str = "internal_error";
    /// 500: a stored row the backend cannot decode (docs/semantics.md#undecodable-rows).
    pub const UNDECODABLE_ROW: &str = "undecodable_row";
    /// 400: a malformed request (e.g. a repeated `Authorization` header).
    pub const BAD_REQUEST: &str = "bad_request";
    /// 408: the request body did not arrive in time.
    pub const REQUEST_TIMEOUT: &str = "request_timeout";
    /// 414: the request target is too long.
    pub const URI_TOO_LONG: &str = "uri_too_long";
    /// 422: a submit's `callback` is refused (callbacks off, origin not allowed, private
    /// address, unknown event).
    pub const CALLBACK_NOT_ALLOWED: &str = "callback_not_allowed";
    /// 429: a new submit over its namespace's or fairness key's quota (`api.quotas`).
    pub const QUOTA_EXCEEDED: &str = "quota_exceeded";
    /// 429: the API process already serves `api.max_streams` event streams.
    pub const TOO_MANY_STREAMS: &str = "too_many_streams";
    /// 431: the request headers are too large.
    pub const HEADERS_TOO_LARGE: &str = "headers_too_large";
    /// 422: a deployment over its namespace's policy ceilings (the body lists `violations`).
    pub const POLICY_VIOLATION: &str = "policy_violation";
    /// 422: a deployment naming a component the component store does not hold.
    pub const UNKNOWN_COMPONENT: &str = "unknown_component";
    /// 422: a deployment whose component a worker could not load (the load check's reason).
    pub const COMPONENT_UNLOADABLE: &str = "component_unloadable";
    /// 404: no such deployment version (or no deployment of the task).
    pub const DEPLOYMENT_NOT_FOUND: &str = "deployment_not_found";
    /// 409: deactivating a task without an active deployment.
    pub const NO_ACTIVE_DEPLOYMENT: &str = "no_active_deployment";
    /// 409: the server's configuration has no `deployments:` section (or no deployments API).
    pub const DEPLOYMENTS_DISABLED: &str = "deployments_disabled";
    /// 429: the namespace already has as many component uploads and deploys in progress as
    /// it may, or the server holds as many component bytes as it may (`Retry-After`).
    pub const DEPLOY_BUSY: &str = "deploy_busy";
}

/// The JSON body of every error response.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct ErrorBody {
    /// Stable machine code, e.g. `not_found`, `conflict`, `invalid_argument`.
    pub code: String,
    /// Human-readable message (no internals).
    pub message: String,
    /// The execution concerned, for `result` errors and conflicts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub execution_id: Option<Uuid>,
    /// The execution's current status, for `not_ready` and `not_retryable`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<crate::view::StatusName>)]
    pub status: Option<ExecutionStatus>,
    /// The stored error object, for `failed`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorObjectView>,
    /// The newest attempt with the handler's own message, for `failed` from `/result`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_attempt: Option<crate::attempts::LastAttemptView>,
    /// The reason the canceller gave, for `cancelled` from `/result`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancel_reason: Option<String>,
    /// The quota that refused a submit, for `quota_exceeded` (docs/http-api.md#quotas).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quota: Option<QuotaView>,
    /// Every broken policy rule of a refused deployment, for `policy_violation` and a
    /// namespace refusal (docs/deployment-policy.md#the-checks).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub violations: Option<Vec<ViolationView>>,
}

/// One broken rule of the deployment policy (docs/deployment-policy.md#the-checks).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct ViolationView {
    /// The setting's path in the manifest (`sandbox.memory_limit_bytes`, `component`, …).
    pub limit: String,
    /// `above_ceiling`, `origin_outside`, `secret_not_allowed`, `secret_origin`,
    /// `not_settable`, `no_policy` or `namespace_mismatch`.
    pub kind: String,
    /// What the deployment asked, as text.
    pub asked: String,
    /// The rule and the ceiling.
    pub rule: String,
    /// The whole line: `<limit>: asked <asked>, <rule>`.
    pub message: String,
}

/// Which quota refused a submit (docs/http-api.md#quotas).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct QuotaView {
    /// `max_queued` (the namespace's waiting executions) or `max_queued_per_key` (one fairness
    /// key's).
    pub name: &'static str,
    /// The limit that was reached.
    pub limit: u32,
    /// The namespace.
    pub namespace: String,
    /// The fairness key, for `max_queued_per_key`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fairness_key: Option<String>,
    /// Seconds to wait before submitting again (also the `Retry-After` header).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after_s: Option<u32>,
}

/// A response extension naming the quota refusals of a request, `(namespace, quota)` each,
/// for `onestep_api_quota_refusals_total`.
#[derive(Debug, Clone, Default)]
pub struct QuotaRefusals(pub(crate) Vec<(String, &'static str)>);

/// An error response: status code plus [`ErrorBody`].
#[derive(Debug, Clone)]
pub struct ApiError {
    status: StatusCode,
    body: Box<ErrorBody>,
    /// A `Retry-After` header (seconds) of a refusal that is not a quota's.
    retry_after: Option<u64>,
}

impl ApiError {
    /// An error with `status`, `code` and `message`.
    pub fn new(status: StatusCode, code: &str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            body: Box::new(ErrorBody {
                code: code.to_owned(),
                message: message.into(),
                execution_id: None,
                status: None,
                error: None,
                last_attempt: None,
                cancel_reason: None,
                quota: None,
                violations: None,
            }),
            retry_after: None,
        }
    }

    /// 422 `invalid_argument`.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            code::INVALID_ARGUMENT,
            message,
        )
    }

    /// 404 `not_found` for an execution id.
    pub fn not_found(id: Uuid) -> Self {
        let mut e = Self::new(
            StatusCode::NOT_FOUND,
            code::NOT_FOUND,
            format!("execution {id} was not found"),
        );
        e.body.execution_id = Some(id);
        e
    }

    /// 401 `unauthorized`.
    pub fn unauthorized() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            code::UNAUTHORIZED,
            "a valid bearer token is required",
        )
    }

    /// 403 `forbidden`.
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, code::FORBIDDEN, message)
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The body.
    pub fn body(&self) -> &ErrorBody {
        &self.body
    }

    /// The newest attempt of a failed execution (the `422` of `/result`).
    pub(crate) fn with_last_attempt(
        mut self,
        attempt: Option<crate::attempts::LastAttemptView>,
    ) -> Self {
        self.body.last_attempt = attempt;
        self
    }

    /// The canceller's reason (the `409` of `/result`).
    pub(crate) fn with_cancel_reason(mut self, reason: Option<String>) -> Self {
        self.body.cancel_reason = reason;
        self
    }

    /// A `quota_exceeded` error told to retry after `seconds` (its `Retry-After` header and
    /// `quota.retry_after_s`); other errors are returned unchanged.
    pub fn with_retry_after(mut self, seconds: u32) -> Self {
        if let Some(q) = self.body.quota.as_mut() {
            q.retry_after_s = Some(seconds);
        }
        self
    }

    /// A `Retry-After: seconds` header on a refusal that will pass later (a busy server).
    pub(crate) fn with_retry_after_header(mut self, seconds: u64) -> Self {
        self.retry_after = Some(seconds);
        self
    }

    /// The broken policy rules of a refused deployment.
    pub(crate) fn with_violations(mut self, violations: Vec<ViolationView>) -> Self {
        self.body.violations = Some(violations);
        self
    }

    pub(crate) fn with_execution(mut self, id: Uuid) -> Self {
        self.body.execution_id = Some(id);
        self
    }
}

impl From<ExecutionError> for ApiError {
    fn from(err: ExecutionError) -> Self {
        use StatusCode as S;
        let msg = err.to_string();
        match err {
            ExecutionError::InvalidArgument(_) => ApiError::invalid(msg),
            ExecutionError::Encoding(_) => {
                ApiError::new(S::UNPROCESSABLE_ENTITY, code::ENCODING_ERROR, msg)
            }
            // The store's fault, not the request's (docs/semantics.md#undecodable-rows): the
            // message names the row and the column, never a secret.
            ExecutionError::Undecodable(_) => {
                tracing::error!(message = %msg, "a stored row cannot be decoded");
                ApiError::new(S::INTERNAL_SERVER_ERROR, code::UNDECODABLE_ROW, msg)
            }
            ExecutionError::NotFound { id } => ApiError::not_found(id),
            ExecutionError::NotReady { id, status } => {
                let mut e = ApiError::new(S::CONFLICT, code::NOT_READY, msg).with_execution(id);
                e.body.status = Some(status);
                e
            }
            ExecutionError::Failed { id, error } => {
                let mut e =
                    ApiError::new(S::UNPROCESSABLE_ENTITY, code::FAILED, msg).with_execution(id);
                e.body.status = Some(ExecutionStatus::Failed);
                e.body.error = error.as_deref().map(ErrorObjectView::from);
                e
            }
            ExecutionError::Cancelled { id } => {
                ApiError::new(S::CONFLICT, code::CANCELLED, msg).with_execution(id)
            }
            ExecutionError::Expired { id } => {
                ApiError::new(S::GONE, code::EXPIRED, msg).with_execution(id)
            }
            ExecutionError::NotRetryable { id, status } => {
                let mut e = ApiError::new(S::CONFLICT, code::NOT_RETRYABLE, msg).with_execution(id);
                e.body.status = Some(status);
                e
            }
            ExecutionError::Conflict { existing_id } => {
                ApiError::new(S::CONFLICT, code::CONFLICT, msg).with_execution(existing_id)
            }
            ExecutionError::QuotaExceeded(r) => {
                let mut e = ApiError::new(S::TOO_MANY_REQUESTS, code::QUOTA_EXCEEDED, msg);
                e.body.quota = Some(QuotaView {
                    name: r.quota.as_str(),
                    limit: r.limit,
                    namespace: r.namespace,
                    fairness_key: r.key,
                    retry_after_s: None,
                });
                e
            }
            ExecutionError::Backend(b) => {
                // The backend's message is already redacted; it goes to the log, never the body.
                tracing::warn!(
                    backend = b.backend,
                    operation = b.operation,
                    kind = b.kind.as_str(),
                    message = %b.message,
                    "storage operation failed"
                );
                if b.kind.is_retryable() {
                    ApiError::new(
                        S::SERVICE_UNAVAILABLE,
                        code::BACKEND_UNAVAILABLE,
                        "the execution store is temporarily unavailable; retry later",
                    )
                } else {
                    internal()
                }
            }
            ExecutionError::StaleLease(_) => internal(),
        }
    }
}

fn internal() -> ApiError {
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        code::INTERNAL_ERROR,
        "internal server error",
    )
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let unauthorized = self.status == StatusCode::UNAUTHORIZED;
        let quota = self.body.quota.clone();
        let retry_after = self.retry_after;
        let mut resp = (self.status, Json(*self.body)).into_response();
        if let Some(s) = retry_after {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        if unauthorized {
            resp.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        if let Some(q) = quota {
            if let Some(s) = q.retry_after_s {
                resp.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(s));
            }
            resp.extensions_mut()
                .insert(QuotaRefusals(vec![(q.namespace, q.name)]));
        }
        resp
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {}: {}",
            self.status.as_u16(),
            self.body.code,
            self.body.message
        )
    }
}

impl std::error::Error for ApiError {}

/// Maps an error object for bodies (re-exported for the `failed` result error).
impl From<&ErrorObject> for ErrorObjectView {
    fn from(e: &ErrorObject) -> Self {
        ErrorObjectView {
            kind: e.kind.clone(),
            exception_type: e.exception_type.clone(),
            stage: e.stage.clone(),
            backend: e.backend.clone(),
            operation: e.operation.clone(),
            connector_kind: e.connector_kind.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use onestep_core::{BackendError, ConnectorKind};

    #[test]
    fn maps_domain_errors_to_the_documented_statuses() {
        let id = Uuid::new_v4();
        let cases: Vec<(ExecutionError, u16, &str)> = vec![
            (ExecutionError::invalid("x"), 422, "invalid_argument"),
            (ExecutionError::Encoding("x".into()), 422, "encoding_error"),
            (
                ExecutionError::Undecodable("cannot decode execution x: payload".into()),
                500,
                "undecodable_row",
            ),
            (ExecutionError::NotFound { id }, 404, "not_found"),
            (
                ExecutionError::NotReady {
                    id,
                    status: ExecutionStatus::Queued,
                },
                409,
                "not_ready",
            ),
            (ExecutionError::Failed { id, error: None }, 422, "failed"),
            (ExecutionError::Cancelled { id }, 409, "cancelled"),
            (ExecutionError::Expired { id }, 410, "expired"),
            (
                ExecutionError::NotRetryable {
                    id,
                    status: ExecutionStatus::Running,
                },
                409,
                "not_retryable",
            ),
            (
                ExecutionError::Conflict { existing_id: id },
                409,
                "conflict",
            ),
            (
                ExecutionError::QuotaExceeded(Box::new(onestep_core::quota::QuotaRefusal {
                    quota: onestep_core::quota::QuotaKind::MaxQueued,
                    namespace: "acme".into(),
                    key: None,
                    limit: 3,
                })),
                429,
                "quota_exceeded",
            ),
        ];
        for (err, status, c) in cases {
            let api = ApiError::from(err);
            assert_eq!(api.status().as_u16(), status, "{c}");
            assert_eq!(api.body().code, c);
        }
    }

    #[test]
    fn a_quota_refusal_names_the_quota_and_carries_retry_after() {
        let api = ApiError::from(ExecutionError::QuotaExceeded(Box::new(
            onestep_core::quota::QuotaRefusal {
                quota: onestep_core::quota::QuotaKind::MaxQueuedPerKey,
                namespace: "acme".into(),
                key: Some("t1".into()),
                limit: 7,
            },
        )))
        .with_retry_after(9);
        let body = serde_json::to_value(api.body()).unwrap();
        assert_eq!(body["code"], "quota_exceeded");
        assert_eq!(
            body["quota"],
            serde_json::json!({"name": "max_queued_per_key", "limit": 7, "namespace": "acme",
                "fairness_key": "t1", "retry_after_s": 9})
        );
        let resp = api.into_response();
        assert_eq!(resp.status().as_u16(), 429);
        assert_eq!(resp.headers()[header::RETRY_AFTER], "9");
    }

    #[test]
    fn backend_errors_hide_their_message() {
        let secret = "mysql://root:hunter2@db/x";
        for (kind, status) in [
            (ConnectorKind::Disconnected, 503),
            (ConnectorKind::Permanent, 500),
        ] {
            let api = ApiError::from(ExecutionError::Backend(BackendError {
                backend: "mysql",
                operation: "submit",
                kind,
                message: secret.into(),
            }));
            assert_eq!(api.status().as_u16(), status);
            let text = serde_json::to_string(api.body()).unwrap();
            assert!(!text.contains("hunter2"), "{text}");
        }
    }
}
