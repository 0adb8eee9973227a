//! Router-wide defences against hostile clients and pages (docs/security.md#the-api-and-the-dashboard):
//! limits on the request head, `Content-Type: application/json` on every state-changing request
//! (so a cross-origin `no-cors` form or `fetch` can never reach a handler), one `Authorization`
//! header at most, the JSON error body on every error response (axum's own rejections
//! included), and the security headers on every response. [`apply`] wraps a router in all of
//! them.

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue, Method, Response, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::IntoResponse;
use tower_http::set_header::SetResponseHeaderLayer;

use crate::error::{ApiError, code};

/// Longest request target (path and query) in bytes; longer ones get 414 `uri_too_long`.
pub const MAX_URI_BYTES: usize = 8 * 1024;
/// Most bytes of request header names and values together; more gets 431
/// `headers_too_large`. Heads beyond the server's read buffer (64 KiB,
/// [`crate::server::DEFAULT_MAX_BUF_SIZE`]) are refused by hyper before they reach the router.
pub const MAX_HEADER_BYTES: usize = 16 * 1024;

/// The `Content-Security-Policy` of every response: the dashboard loads only its own script and
/// stylesheet (no inline code), talks only to its own origin, and may not be framed.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; \
     frame-ancestors 'none'; base-uri 'none'";

/// Wraps `router` in the defences of this module (outermost: the security headers).
pub fn apply(router: Router) -> Router {
    let header = |name: HeaderName, value: &'static str| {
        SetResponseHeaderLayer::if_not_present(name, HeaderValue::from_static(value))
    };
    router
        .layer(middleware::from_fn(require_json_content_type))
        .layer(middleware::from_fn(check_head))
        .layer(middleware::map_response(json_errors))
        .layer(header(
            header::CONTENT_SECURITY_POLICY,
            CONTENT_SECURITY_POLICY,
        ))
        .layer(header(header::X_FRAME_OPTIONS, "DENY"))
        .layer(header(header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .layer(header(header::REFERRER_POLICY, "no-referrer"))
}

/// 414 / 431 / 400 for an oversized target or head, or a repeated `Authorization` header.
async fn check_head(req: Request, next: Next) -> Response<Body> {
    let uri_len = req.uri().path_and_query().map_or(0, |p| p.as_str().len());
    if uri_len > MAX_URI_BYTES {
        return ApiError::new(
            StatusCode::URI_TOO_LONG,
            code::URI_TOO_LONG,
            format!("the request target is {uri_len} bytes; at most {MAX_URI_BYTES} are allowed"),
        )
        .into_response();
    }
    let header_bytes: usize = req
        .headers()
        .iter()
        .map(|(n, v)| n.as_str().len() + v.len())
        .sum();
    if header_bytes > MAX_HEADER_BYTES {
        return ApiError::new(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            code::HEADERS_TOO_LARGE,
            format!(
                "the request headers are {header_bytes} bytes; at most {MAX_HEADER_BYTES} are allowed"
            ),
        )
        .into_response();
    }
    if req.headers().get_all(header::AUTHORIZATION).iter().count() > 1 {
        return ApiError::new(
            StatusCode::BAD_REQUEST,
            code::BAD_REQUEST,
            "the Authorization header must appear at most once",
        )
        .into_response();
    }
    next.run(req).await
}

/// Whether a request may change state: anything but `GET`, `HEAD` and `OPTIONS`.
fn changes_state(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// 415 for a state-changing request without `Content-Type: application/json` (or `+json`),
/// body or not. Browsers send a cross-origin request with that type only after a CORS preflight,
/// which this server never grants, so no other origin's page can submit, cancel or retry
/// (docs/security.md#cross-site-requests).
async fn require_json_content_type(req: Request, next: Next) -> Response<Body> {
    if changes_state(req.method()) {
        let ct = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok());
        // A component upload is raw bytes: `application/wasm` is not a CORS-safelisted type
        // either, so a cross-origin page still cannot send it without a preflight.
        let upload = req.uri().path() == "/v1/components"
            && ct.is_some_and(crate::deploy::is_wasm_content_type);
        if !upload && !ct.is_some_and(is_json_content_type) {
            return unsupported_media_type().into_response();
        }
    }
    next.run(req).await
}

/// 415 `unsupported_media_type`.
pub fn unsupported_media_type() -> ApiError {
    ApiError::new(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        code::UNSUPPORTED_MEDIA_TYPE,
        "state-changing requests must have the header Content-Type: application/json",
    )
}

/// `application/json` or any `…+json` media type, parameters allowed.
pub fn is_json_content_type(ct: &str) -> bool {
    let essence = ct.split(';').next().unwrap_or_default().trim();
    essence.eq_ignore_ascii_case("application/json")
        || (essence.len() > 5 && essence[essence.len() - 5..].eq_ignore_ascii_case("+json"))
}

/// Gives every error response without a JSON body (axum's plain-text rejections, an empty
/// 4xx from a layer) the documented JSON error body, keeping its status and headers.
async fn json_errors(resp: Response<Body>) -> Response<Body> {
    let status = resp.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return resp;
    }
    let is_json = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(is_json_content_type);
    if is_json {
        return resp;
    }
    let (mut parts, _body) = resp.into_parts();
    let fresh = ApiError::new(status, code_for(status), message_for(status)).into_response();
    let (fresh_parts, body) = fresh.into_parts();
    parts.headers.remove(header::CONTENT_LENGTH);
    for (name, value) in &fresh_parts.headers {
        parts.headers.insert(name.clone(), value.clone());
    }
    Response::from_parts(parts, body)
}

fn code_for(status: StatusCode) -> &'static str {
    match status {
        StatusCode::BAD_REQUEST => code::BAD_REQUEST,
        StatusCode::UNAUTHORIZED => code::UNAUTHORIZED,
        StatusCode::FORBIDDEN => code::FORBIDDEN,
        StatusCode::NOT_FOUND => code::NOT_FOUND,
        StatusCode::METHOD_NOT_ALLOWED => code::METHOD_NOT_ALLOWED,
        StatusCode::REQUEST_TIMEOUT => code::REQUEST_TIMEOUT,
        StatusCode::PAYLOAD_TOO_LARGE => code::PAYLOAD_TOO_LARGE,
        StatusCode::URI_TOO_LONG => code::URI_TOO_LONG,
        StatusCode::UNSUPPORTED_MEDIA_TYPE => code::UNSUPPORTED_MEDIA_TYPE,
        StatusCode::UNPROCESSABLE_ENTITY => code::INVALID_ARGUMENT,
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE => code::HEADERS_TOO_LARGE,
        StatusCode::SERVICE_UNAVAILABLE => code::BACKEND_UNAVAILABLE,
        s if s.is_server_error() => code::INTERNAL_ERROR,
        _ => code::BAD_REQUEST,
    }
}

fn message_for(status: StatusCode) -> String {
    if status.is_server_error() {
        return "internal server error".into();
    }
    let reason = status.canonical_reason().unwrap_or("client error");
    format!("the request was refused: {} {reason}", status.as_u16())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_types() {
        assert!(is_json_content_type("application/json"));
        assert!(is_json_content_type("Application/JSON; charset=utf-8"));
        assert!(is_json_content_type("application/problem+json"));
        assert!(!is_json_content_type("text/plain"));
        assert!(!is_json_content_type("json"));
        assert!(!is_json_content_type(""));
    }

    #[test]
    fn only_safe_methods_skip_the_content_type_rule() {
        assert!(!changes_state(&Method::GET));
        assert!(!changes_state(&Method::HEAD));
        assert!(changes_state(&Method::POST));
        assert!(changes_state(&Method::DELETE));
        assert!(changes_state(&Method::PUT));
    }
}
