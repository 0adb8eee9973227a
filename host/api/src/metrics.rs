//! The API's own metrics (docs/observability.md#api-metrics): every request counted and timed by
//! method, matched route (the path template, never the concrete id) and status, served as
//! OpenMetrics text at `GET /metrics` next to the API.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Buckets of `onestep_api_request_duration_seconds`: 0.5 ms … 10 s.
const BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 2.5, 10.0,
];

fn duration_histogram() -> Histogram {
    Histogram::new(BUCKETS)
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    method: String,
    route: String,
    status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    method: String,
    route: String,
}

/// How a `POST /v1/executions` ended (label `outcome` of `onestep_api_submits_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubmitOutcome {
    /// A new execution.
    Created,
    /// The same key and content as an earlier submission: that execution.
    Replayed,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SubmitLabels {
    outcome: &'static str,
}

/// The request counters and latency histograms of one API process.
#[derive(Debug)]
pub struct ApiMetrics {
    registry: Registry,
    submits: Family<SubmitLabels, Counter>,
    requests: Family<RequestLabels, Counter>,
    duration: Family<RouteLabels, Histogram, fn() -> Histogram>,
}

impl Default for ApiMetrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let requests = Family::<RequestLabels, Counter>::default();
        let duration: Family<RouteLabels, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(duration_histogram);
        registry.register(
            "onestep_api_requests",
            "HTTP requests by method, route template and status",
            requests.clone(),
        );
        registry.register(
            "onestep_api_request_duration_seconds",
            "HTTP request latency by method and route template",
            duration.clone(),
        );
        let submits = Family::<SubmitLabels, Counter>::default();
        registry.register(
            "onestep_api_submits",
            "POST /v1/executions by outcome: created, replayed (same key and content), conflict (same key, other content)",
            submits.clone(),
        );
        ApiMetrics {
            registry,
            submits,
            requests,
            duration,
        }
    }
}

impl ApiMetrics {
    /// Records one request.
    fn record(&self, method: &str, route: &str, status: u16, seconds: f64) {
        self.requests
            .get_or_create(&RequestLabels {
                method: method.to_owned(),
                route: route.to_owned(),
                status: status.to_string(),
            })
            .inc();
        self.duration
            .get_or_create(&RouteLabels {
                method: method.to_owned(),
                route: route.to_owned(),
            })
            .observe(seconds);
    }

    /// The OpenMetrics text.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// Middleware: counts and times every request under its route template (`unmatched` for
/// requests no route took).
pub(crate) async fn track(
    State(metrics): State<Arc<ApiMetrics>>,
    request: Request,
    next: Next,
) -> Response {
    let started = Instant::now();
    let method = request.method().as_str().to_owned();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |p| p.as_str().to_owned());
    let submit = method == "POST" && route == "/v1/executions";
    let response = next.run(request).await;
    if submit {
        let outcome = match response.extensions().get::<SubmitOutcome>() {
            Some(SubmitOutcome::Created) => Some("created"),
            Some(SubmitOutcome::Replayed) => Some("replayed"),
            None if response.status() == axum::http::StatusCode::CONFLICT => Some("conflict"),
            None => None,
        };
        if let Some(outcome) = outcome {
            metrics
                .submits
                .get_or_create(&SubmitLabels { outcome })
                .inc();
        }
    }
    metrics.record(
        &method,
        &route,
        response.status().as_u16(),
        started.elapsed().as_secs_f64(),
    );
    response
}

/// `GET /metrics`.
pub(crate) async fn serve_metrics(State(metrics): State<Arc<ApiMetrics>>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        metrics.render(),
    )
        .into_response()
}
