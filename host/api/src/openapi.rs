//! The OpenAPI document, generated from the handlers' annotations (utoipa).

use utoipa::OpenApi;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};

use crate::error::ErrorBody;
use crate::view::{ErrorObjectView, ExecutionView, HealthView, PageView, ResultView, StatusName};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "onestep tracked executions",
        description = "Submit long-running tasks, then poll their status, read results or cancel them. \
Every error body is `{\"code\", \"message\"}`.",
    ),
    components(schemas(ErrorBody, ErrorObjectView, ExecutionView, PageView, ResultView, HealthView, StatusName)),
    tags(
        (name = "executions", description = "Tracked executions of the caller's namespace"),
        (name = "health", description = "Liveness and readiness"),
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
