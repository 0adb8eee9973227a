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
use crate::guard::is_json_content_type;
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
    /// Retry, the bulk operations and the fleet-wide figures (`GET /v1/rate-limits`).
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
            Permission::Operate => {
                "retry, run bulk operations or read fleet-wide figures (role 'operate' only)"
            }
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

/// Longest time to receive a request body; slower bodies get 408 `request_timeout`
/// (docs/security.md#api-connections).
pub const BODY_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// A JSON object body, read up to the router's body limit within [`BODY_READ_TIMEOUT`] and
/// parsed with our errors: 415 `unsupported_media_type` (no `Content-Type: application/json`),
/// 413 `payload_too_large`, 408 `request_timeout`, 422 `invalid_json` (syntax) or
/// `invalid_body` (shape; an empty body or any JSON value but an object, e.g. `[]`, included:
/// docs/http-api.md#request-bodies).
#[derive(Debug, Clone)]
pub struct JsonBody<T>(pub T);

impl<T, S> FromRequest<S> for JsonBody<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = read_json_bytes(req, state).await?;
        parse_json(&bytes).map(JsonBody)
    }
}

/// The body of a request with a JSON content type (415 otherwise), read up to the router's body
/// limit (413) within [`BODY_READ_TIMEOUT`] (408).
async fn read_json_bytes<S: Send + Sync>(req: Request, state: &S) -> Result<Bytes, ApiError> {
    let ct = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    if !ct.is_some_and(is_json_content_type) {
        return Err(crate::guard::unsupported_media_type());
    }
    tokio::time::timeout(BODY_READ_TIMEOUT, Bytes::from_request(req, state))
        .await
        .map_err(|_| {
            ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                code::REQUEST_TIMEOUT,
                format!(
                    "the request body did not arrive within {} s",
                    BODY_READ_TIMEOUT.as_secs()
                ),
            )
        })?
        .map_err(|rejection| body_error(rejection.into_response().status()))
}

/// Like [`JsonBody`], for an endpoint whose body fields are all optional and harmless by
/// default (`POST /v1/executions/{id}/cancel`): an empty body reads as `T::default()`; any
/// other body must still be a JSON object, and the content type is still required.
#[derive(Debug, Clone)]
pub struct OptionalJsonBody<T>(pub T);

impl<T, S> FromRequest<S> for OptionalJsonBody<T>
where
    T: DeserializeOwned + Default,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = read_json_bytes(req, state).await?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(OptionalJsonBody(T::default()));
        }
        parse_json(&bytes).map(OptionalJsonBody)
    }
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

fn not_an_object(what: &str) -> ApiError {
    ApiError::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        code::INVALID_BODY,
        format!("{what}; it must be a JSON object (send {{}} for no fields)"),
    )
}

/// Parses a JSON object body into `T` with our error codes. An empty body, or a JSON value that
/// is not an object (`[]` would otherwise fill a struct positionally), is 422 `invalid_body`.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    match bytes.iter().find(|b| !b.is_ascii_whitespace()) {
        None => return Err(not_an_object("the request body is empty")),
        Some(b'{') => {}
        // Valid JSON of another kind (array, string, number…); anything else is a syntax
        // error, reported as such below.
        Some(_) if serde_json::from_slice::<serde::de::IgnoredAny>(bytes).is_ok() => {
            return Err(not_an_object("the request body is not a JSON object"));
        }
        Some(_) => {}
    }
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
        assert!(e.body().message.contains("empty"), "{}", e.body().message);
        #[derive(serde::Deserialize, Debug, Default)]
        struct Opt {
            #[allow(dead_code)]
            #[serde(default)]
            n: Option<u32>,
        }
        // An array would fill a struct positionally (`[]` = all defaults): refused.
        for body in [&b"[]"[..], b" [1]", b"\"x\"", b"1", b"null"] {
            let e = parse_json::<Opt>(body).unwrap_err();
            assert_eq!(e.body().code, "invalid_body", "{body:?}");
            assert!(
                e.body().message.contains("JSON object"),
                "{}",
                e.body().message
            );
        }
        assert!(parse_json::<Opt>(b" {} ").is_ok());
        let e = parse_json::<Opt>(b"[").unwrap_err();
        assert_eq!(e.body().code, "invalid_json");
    }
}
