//! The OpenAPI document, generated from the handlers' annotations (utoipa), and the error
//! responses several routes share ([`V1Errors`], [`NotFoundErrors`], [`BodyErrors`]), listed once
//! here and named in each route's `responses(...)`.

use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{IntoResponses, OpenApi};

use crate::error::ErrorBody;
use crate::view::{ErrorObjectView, ExecutionView, HealthView, PageView, ResultView, StatusName};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "onestep tracked executions",
        description = "Submit long-running tasks, then poll their status, read results or cancel them. \
Every error body is `{\"code\", \"message\"}`.",
    ),
    components(schemas(ErrorBody, crate::error::QuotaView, crate::error::ViolationView, ErrorObjectView, ExecutionView, PageView, ResultView, HealthView, StatusName)),
    tags(
        (name = "executions", description = "Tracked executions of the caller's namespace"),
        (name = "health", description = "Liveness and readiness"),
        (name = "operate", description = "Fleet-wide state for operators (`operate` tokens)"),
        (name = "deployments", description = "Components and task deployments of the caller's namespace (changes: `deploy` tokens)"),
    )
)]
struct ApiDoc;

/// The document before the routes are added.
pub fn base() -> utoipa::openapi::OpenApi {
    ApiDoc::openapi()
}

/// Adds what the route annotations cannot: the bearer security scheme and the crate version.
pub fn finish(mut doc: utoipa::openapi::OpenApi) -> utoipa::openapi::OpenApi {
    doc.info.version = env!("CARGO_PKG_VERSION").to_owned();
    let components = doc.components.get_or_insert_with(Default::default);
    components.add_security_scheme(
        "bearer",
        SecurityScheme::Http(
            HttpBuilder::new()
                .scheme(HttpAuthScheme::Bearer)
                .description(Some(
                    "Token mapped to a namespace (only when the server is configured with tokens)",
                ))
                .build(),
        ),
    );
    doc
}

/// Error responses of every `/v1` route.
#[derive(IntoResponses)]
pub enum V1Errors {
    /// A repeated `Authorization` header (`bad_request`) or a malformed query (docs/http-api.md#errors)
    #[response(status = 400)]
    BadRequest(ErrorBody),
    /// Missing or unknown token
    #[response(status = 401)]
    Unauthorized(ErrorBody),
    /// Request target over 8 KiB
    #[response(status = 414)]
    UriTooLong(ErrorBody),
    /// Request headers over 16 KiB
    #[response(status = 431)]
    HeadersTooLarge(ErrorBody),
    /// Store unavailable
    #[response(status = 503)]
    Unavailable(ErrorBody),
}

/// The error response of the routes a token's role may not allow (docs/http-api.md#roles).
#[derive(IntoResponses)]
pub enum ForbiddenErrors {
    /// The token's role does not allow this operation
    #[response(status = 403)]
    Forbidden(ErrorBody),
}

/// The error response of the routes that name one execution.
#[derive(IntoResponses)]
pub enum NotFoundErrors {
    /// No such execution in the caller's namespace
    #[response(status = 404)]
    NotFound(ErrorBody),
}

/// Error responses of the routes that read a JSON body.
#[derive(IntoResponses)]
pub enum BodyErrors {
    /// Body not received within 30 s
    #[response(status = 408)]
    Timeout(ErrorBody),
    /// Body over the limit
    #[response(status = 413)]
    TooLarge(ErrorBody),
    /// No `Content-Type: application/json`
    #[response(status = 415)]
    NotJson(ErrorBody),
}

/// The error response of a state-changing route that reads no body: it still needs
/// `Content-Type: application/json` (docs/http-api.md#request-bodies).
#[derive(IntoResponses)]
pub enum ContentTypeErrors {
    /// No `Content-Type: application/json`
    #[response(status = 415)]
    NotJson(ErrorBody),
}
