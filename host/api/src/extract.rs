//! Extractors whose rejections are [`ApiError`]s, so that bad JSON, wrong types, oversized bodies
//! and malformed ids come back as our JSON error body instead of axum's plain text.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use onestep_core::ExecutionClient;
use onestep_core::request::parse_execution_id;
use serde::de::DeserializeOwned;
use uuid::Uuid;

use crate::auth::Role;
use crate::error::{ApiError, code};
use crate::state::ApiState;

/// The caller's namespace-bound client, resolved from the bearer token (401 otherwise).
#[derive(Debug, Clone)]
pub struct Tenant(pub ExecutionClient);

impl FromRequestParts<ApiState> for Tenant {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &ApiState) -> Result<Self, ApiError> {
        let auth = parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        state.client_for(auth).cloned().map(Tenant)
    }
}

/// What a route needs the caller's role to allow (docs/http-api.md#roles).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Permission {
    /// `POST /v1/executions`.
    Submit,
    /// `POST /v1/executions/{id}/cancel`.
    Cancel,
    /// Retry and the bulk operations.
    Operate,
}

impl Permission {
    fn allowed(self, role: Role) -> bool {
        match self {
            Permission::Submit => role.can_submit(),
            Permission::Cancel => role.can_cancel(),
            Permission::Operate => role.can_operate(),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Permission::Submit => "submit",
            Permission::Cancel => "cancel",
            Permission::Operate => "retry or run bulk operations",
        }
    }
}

fn authorize(
    parts: &Parts,
    state: &ApiState,
    needed: Permission,
) -> Result<ExecutionClient, ApiError> {
    let auth = parts
        .headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let (client, role) = state.caller_for(auth)?;
    if !needed.allowed(role) {
        return Err(ApiError::forbidden(format!(
            "a token with role '{}' may not {}",
            role.as_str(),
            needed.name()
        )));
    }
    Ok(client.clone())
}

/// The caller's client when its role may submit (401 / 403 otherwise).
#[derive(Debug, Clone)]
pub struct Submitter(pub ExecutionClient);

impl FromRequestParts<ApiState> for Submitter {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &ApiState) -> Result<Self, ApiError> {
        authorize(parts, state, Permission::Submit).map(Submitter)
    }
}

/// The caller's client when its role may cancel (401 / 403 otherwise).
#[derive(Debug, Clone)]
pub struct Canceller(pub ExecutionClient);

impl FromRequestParts<ApiState> for Canceller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &ApiState) -> Result<Self, ApiError> {
        authorize(parts, state, Permission::Cancel).map(Canceller)
    }
}

/// The caller's client when its role is `operate` (401 / 403 otherwise).
#[derive(Debug, Clone)]
pub struct Operator(pub ExecutionClient);

impl FromRequestParts<ApiState> for Operator {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &ApiState) -> Result<Self, ApiError> {
        authorize(parts, state, Permission::Operate).map(Operator)
    }
}

/// The caller's client and role, for routes that report what the caller may do.
#[derive(Debug, Clone)]
pub struct Caller(pub ExecutionClient, pub Role);

impl FromRequestParts<ApiState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &ApiState) -> Result<Self, ApiError> {
        let auth = parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        let (client, role) = state.caller_for(auth)?;
        Ok(Caller(client.clone(), role))
    }
}

/// An execution id from the path (422 `invalid_argument` when it is not a UUID).
#[derive(Debug, Clone, Copy)]
pub struct ExecutionId(pub Uuid);

impl<S: Send + Sync> FromRequestParts<S> for ExecutionId {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let Path(text) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|_| ApiError::invalid("execution id must be a UUID"))?;
        Ok(ExecutionId(parse_execution_id(&text)?))
    }
}

/// Maximum characters of an `Idempotency-Key` header.
pub const MAX_IDEMPOTENCY_KEY_CHARS: usize = 255;

/// The `Idempotency-Key` header: required, 1–255 characters (422 otherwise).
#[derive(Debug, Clone)]
pub struct IdempotencyKey(pub String);

impl<S: Send + Sync> FromRequestParts<S> for IdempotencyKey {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        idempotency_key(&parts.headers).map(IdempotencyKey)
    }
}

fn idempotency_key(headers: &HeaderMap) -> Result<String, ApiError> {
    let mut values = headers.get_all("idempotency-key").iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        return Err(ApiError::invalid(
            "the Idempotency-Key header is required (exactly once)",
        ));
    };
    let text = std::str::from_utf8(value.as_bytes())
        .map_err(|_| ApiError::invalid("the Idempotency-Key header must be UTF-8 text"))?;
    let n = text.trim().chars().count();
    if n == 0 || text.chars().count() > MAX_IDEMPOTENCY_KEY_CHARS {
        return Err(ApiError::invalid(format!(
            "the Idempotency-Key header must be 1 to {MAX_IDEMPOTENCY_KEY_CHARS} characters"
        )));
    }
    Ok(text.to_owned())
}

/// A JSON body, read up to the router's body limit and parsed with our errors: 413
/// `payload_too_large`, 415 `unsupported_media_type` (a `Content-Type` that is not JSON; none is
/// accepted), 422 `invalid_json` (syntax) or `invalid_body` (shape). An empty body reads as `{}`.
#[derive(Debug, Clone)]
pub struct JsonBody<T>(pub T);

impl<T, S> FromRequest<S> for JsonBody<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        if let Some(ct) = req.headers().get(header::CONTENT_TYPE)
            && !is_json_content_type(ct.to_str().unwrap_or_default())
        {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                code::UNSUPPORTED_MEDIA_TYPE,
                "the request body must be JSON (Content-Type: application/json)",
            ));
        }
        let bytes = Bytes::from_request(req, state)
            .await
            .map_err(|rejection| body_error(rejection.into_response().status()))?;
        parse_json(&bytes).map(JsonBody)
    }
}

fn is_json_content_type(ct: &str) -> bool {
    let essence = ct.split(';').next().unwrap_or_default().trim();
    essence.eq_ignore_ascii_case("application/json")
        || (essence.len() > 5 && essence[essence.len() - 5..].eq_ignore_ascii_case("+json"))
}

/// The error for a body that could not be read (the status axum would have used).
pub fn body_error(status: StatusCode) -> ApiError {
    if status == StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            code::PAYLOAD_TOO_LARGE,
            "the request body exceeds the configured limit",
        )
    } else {
        ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            code::INVALID_BODY,
            "the request body could not be read",
        )
    }
}

/// Parses a JSON body (empty → `{}`) into `T` with our error codes.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let bytes: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) {
        b"{}"
    } else {
        bytes
    };
    serde_json::from_slice(bytes).map_err(|e| {
        use serde_json::error::Category;
        match e.classify() {
            Category::Data => ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                code::INVALID_BODY,
                format!("invalid request body: {e}"),
            ),
            Category::Syntax | Category::Eof | Category::Io => ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                code::INVALID_JSON,
                format!("the request body is not valid JSON: {e}"),
            ),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn content_types() {
        assert!(is_json_content_type("application/json"));
        assert!(is_json_content_type("Application/JSON; charset=utf-8"));
        assert!(is_json_content_type("application/problem+json"));
        assert!(!is_json_content_type("text/plain"));
        assert!(!is_json_content_type("json"));
    }

    #[test]
    fn idempotency_key_rules() {
        let mut h = HeaderMap::new();
        assert!(idempotency_key(&h).is_err());
        h.insert("idempotency-key", HeaderValue::from_static("  "));
        assert!(idempotency_key(&h).is_err());
        h.insert(
            "idempotency-key",
            HeaderValue::from_str(&"k".repeat(256)).unwrap(),
        );
        assert!(idempotency_key(&h).is_err());
        h.insert(
            "idempotency-key",
            HeaderValue::from_str(&"k".repeat(255)).unwrap(),
        );
        assert_eq!(idempotency_key(&h).unwrap().len(), 255);
    }

    #[test]
    fn json_errors_are_classified() {
        #[derive(serde::Deserialize, Debug)]
        struct B {
            #[allow(dead_code)]
            n: u32,
        }
        let e = parse_json::<B>(b"{\"n\":").unwrap_err();
        assert_eq!(e.body().code, "invalid_json");
        let e = parse_json::<B>(b"{\"n\":\"x\"}").unwrap_err();
        assert_eq!(e.body().code, "invalid_body");
        let e = parse_json::<B>(b"").unwrap_err();
        assert_eq!(e.body().code, "invalid_body");
    }
}
