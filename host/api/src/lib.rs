//! onestep-api: the HTTP API of tracked execution (docs/http-api.md), as an axum 0.8 [`Router`].
//!
//! Build an [`ApiState`] with [`ApiState::new`] from any [`ExecutionStore`] and [`Readiness`]
//! (a backend's ports in production, wired by the CLI; this crate knows no backend), a
//! [`Tenancy`] and the [`ApiSettings`] (defined in core, built by the configuration), then call
//! [`router`]. Endpoints:
//!
//! | Method & path | Success | Errors |
//! |---|---|---|
//! | `POST /v1/executions` (header `Idempotency-Key`) | 202 execution | 409 conflict, 413, 415, 422 |
//! | `GET /v1/executions?task_name&status&limit&cursor` | 200 page | 422 |
//! | `GET /v1/executions/{id}` | 200 execution | 404, 422 |
//! | `GET /v1/executions/{id}/events` | 200 `text/event-stream` ([`stream`]) | 404, 422, 429 |
//! | `GET /v1/executions/events?ids=A,B,…` | 200 `text/event-stream` of several executions ([`stream_many`]) | 422, 429 |
//! | `GET /v1/executions/{id}/steps?values&key` | 200 the durable steps ([`steps`]) | 404, 422 |
//! | `POST /v1/executions/{id}/cancel` | 200 execution | 404, 422 |
//! | `GET /v1/executions/{id}/result` | 200 `{result}` | 404, 409 not ready / cancelled, 410 expired, 422 failed |
//! | `POST /v1/executions/{id}/retry` (header `Idempotency-Key`) | 202 new execution | 403, 404, 409 not retryable / conflict, 422 |
//! | `POST /v1/executions:cancel`, `POST /v1/executions:retry` | 200 counts ([`operate`]) | 403, 422 |
//! | `GET /v1/whoami` | 200 namespace and role | |
//! | `POST /v1/components` (`application/wasm` or `application/octet-stream`) | 201/200 `{digest, bytes, created}` ([`deploy`]) | 403, 409, 413, 415, 422 |
//! | `POST /v1/deployments`, `GET /v1/deployments`, `GET /v1/deployments/events`, `GET /v1/deployments/{task}`, `POST /v1/deployments/{task}/versions/{version}/activate`, `POST /v1/deployments/{task}/deactivate` | the deployments API ([`deploy`], docs/http-api.md#deployments) | 403, 404, 409, 422 |
//! | `GET /healthz`, `GET /readyz` | 200 | 503 (readyz) |
//! | `GET /openapi.json` | 200 OpenAPI 3.1 document | |
//! | `GET /metrics` | 200 request counts and latency; execution figures for an `operate` token or with `api.metrics.public` ([`metrics`]) | |
//! | `GET /ui`, `GET /ui/executions/{id}` | the operator dashboard ([`ui`], docs/ui.md) | |
//!
//! Every error is JSON `{"code", "message"}` ([`ErrorBody`]), including axum's own rejections;
//! every response carries the security headers, and every state-changing request needs
//! `Content-Type: application/json` ([`guard`]). [`serve`] runs the router with connection
//! limits ([`server`]).
//! With tokens configured ([`Tenancy::Tokens`]) every `/v1` request needs
//! `Authorization: Bearer <token>` (401 otherwise) and sees only its token's namespace; another
//! tenant's execution is indistinguishable from a missing one (404). A token's [`Role`] limits
//! what it may change (403 `forbidden`).
//!
//! The crate also holds what the CLI prints ([`text`]) and the polling schedule of `wait`
//! ([`poll`]), so that both are tested without building the CLI.

pub mod attempts;
pub mod auth;
pub mod batch;
pub mod callbacks;
pub mod deploy;
pub mod error;
pub mod extract;
pub mod guard;
pub mod keys;
pub mod metrics;
pub mod openapi;
pub mod operate;
pub mod poll;
pub mod routes;
pub mod search;
pub mod server;
pub mod state;
pub mod steps;
pub mod stream;
pub mod stream_many;
pub mod text;
pub mod throttles;
pub mod transfers;
pub mod ui;
pub mod view;
pub mod wait;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use axum::routing::get;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub use auth::{Role, Tenancy, TokenTable};
pub use error::{ApiError, ErrorBody};
pub use onestep_core::ApiSettings;
pub use onestep_core::ports::{ExecutionStore, Readiness};
pub use server::{ServerLimits, serve};
pub use state::ApiState;
pub use view::{ExecutionView, PageView, ResultView};

/// The API's router with its state applied, ready for `axum::serve`.
pub fn router(state: ApiState) -> Router {
    let (router, doc) = api_router().split_for_parts();
    let doc = openapi::finish(doc);
    let max_body = state.max_body_bytes();
    let metrics = std::sync::Arc::new(match state.insights_handle() {
        Some(insights) => metrics::ApiMetrics::with_executions_gauge(insights, state.namespaces()),
        None => metrics::ApiMetrics::default(),
    });
    let metrics_route = Router::new()
        .route("/metrics", get(metrics::serve_metrics))
        .with_state(metrics::MetricsRoute {
            metrics: std::sync::Arc::clone(&metrics),
            api: state.clone(),
        });
    let router = router
        .merge(ui::routes())
        .route("/openapi.json", get(move || async move { axum::Json(doc) }))
        .fallback(fallback_not_found)
        .method_not_allowed_fallback(fallback_method)
        .layer(DefaultBodyLimit::max(max_body))
        .with_state(state)
        .merge(metrics_route)
        .layer(axum::middleware::from_fn_with_state(
            metrics,
            metrics::track,
        ));
    guard::apply(router)
}

/// The OpenAPI document the router serves at `/openapi.json`.
pub fn openapi_document() -> utoipa::openapi::OpenApi {
    openapi::finish(api_router().split_for_parts().1)
}

fn api_router() -> OpenApiRouter<ApiState> {
    OpenApiRouter::with_openapi(openapi::base())
        .routes(routes!(routes::submit_execution, routes::list_executions))
        .routes(routes!(batch::submit_batch))
        .routes(routes!(routes::get_execution))
        .routes(routes!(routes::cancel_execution))
        .routes(routes!(routes::get_result))
        .routes(routes!(attempts::list_attempts))
        .routes(routes!(attempts::get_attempt_logs))
        .routes(routes!(steps::list_steps))
        .routes(routes!(callbacks::list_deliveries))
        .routes(routes!(callbacks::redeliver))
        .routes(routes!(stream::stream_events))
        .routes(routes!(stream_many::stream_many_events))
        .routes(routes!(operate::retry_execution))
        .routes(routes!(operate::bulk_cancel))
        .routes(routes!(operate::bulk_retry))
        .routes(routes!(operate::whoami))
        .routes(routes!(keys::list_keys))
        .routes(routes!(throttles::list_rate_limits))
        .routes(routes!(deploy::upload_component))
        .routes(routes!(deploy::deploy, deploy::list_deployments))
        .routes(routes!(deploy::list_deployment_events))
        .routes(routes!(deploy::get_task_deployments))
        .routes(routes!(deploy::activate_version))
        .routes(routes!(deploy::deactivate_task))
        .routes(routes!(routes::healthz))
        .routes(routes!(routes::readyz))
}

async fn fallback_not_found() -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        error::code::NOT_FOUND,
        "no such route",
    )
}

async fn fallback_method() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        error::code::METHOD_NOT_ALLOWED,
        "method not allowed on this route",
    )
}
