//! The API's own metrics (docs/observability.md#api-metrics): every request counted and timed by
//! method, matched route (the path template, never the concrete id) and status, and — where the
//! backend has [`ExecutionInsights`] — the sampled `onestep_executions` gauge, served as
//! OpenMetrics text at `GET /metrics` next to the API.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::extract::{MatchedPath, Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use onestep_core::ports::ExecutionInsights;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
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

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ExecutionLabels {
    namespace: String,
    task: String,
    status: &'static str,
}

/// The `onestep_executions` gauge is re-read from the database at most this often, however
/// often `/metrics` is scraped.
pub const EXECUTIONS_SAMPLE_INTERVAL: Duration = Duration::from_secs(15);

/// Where the `onestep_executions` gauge comes from: one grouped statement over the API's
/// namespaces.
struct ExecutionsSampler {
    insights: Arc<dyn ExecutionInsights>,
    namespaces: Vec<String>,
    /// When the last sample was taken (successful or not); held while sampling, so concurrent
    /// scrapes wait for one statement instead of running several.
    last: tokio::sync::Mutex<Option<Instant>>,
    executions: Family<ExecutionLabels, Gauge>,
    sampled_at: Gauge<f64, std::sync::atomic::AtomicU64>,
}

impl std::fmt::Debug for ExecutionsSampler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecutionsSampler")
            .field("namespaces", &self.namespaces)
            .finish_non_exhaustive()
    }
}

/// The request counters and latency histograms of one API process.
#[derive(Debug)]
pub struct ApiMetrics {
    registry: Registry,
    submits: Family<SubmitLabels, Counter>,
    requests: Family<RequestLabels, Counter>,
    duration: Family<RouteLabels, Histogram, fn() -> Histogram>,
    sampler: Option<ExecutionsSampler>,
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
            sampler: None,
        }
    }
}

impl ApiMetrics {
    /// The request metrics plus the `onestep_executions{namespace,task,status}` gauge of
    /// `namespaces`, sampled from `insights` at most every [`EXECUTIONS_SAMPLE_INTERVAL`].
    pub fn with_executions_gauge(
        insights: Arc<dyn ExecutionInsights>,
        namespaces: Vec<String>,
    ) -> Self {
        let mut m = ApiMetrics::default();
        let executions = Family::<ExecutionLabels, Gauge>::default();
        m.registry.register(
            "onestep_executions",
            "Executions by namespace, task and status, sampled from the database at most every 15 s",
            executions.clone(),
        );
        let sampled_at = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
        m.registry.register(
            "onestep_executions_sampled_timestamp_seconds",
            "Unix time of the last successful sample of onestep_executions",
            sampled_at.clone(),
        );
        m.sampler = Some(ExecutionsSampler {
            insights,
            namespaces,
            last: tokio::sync::Mutex::new(None),
            executions,
            sampled_at,
        });
        m
    }

    /// Re-reads the `onestep_executions` gauge when the last sample is older than
    /// [`EXECUTIONS_SAMPLE_INTERVAL`]. A failed read keeps the previous values (and their
    /// timestamp) and is retried after the interval, so a struggling database gets one
    /// statement per interval at most.
    pub async fn sample_executions(&self) {
        let Some(s) = &self.sampler else { return };
        let mut last = s.last.lock().await;
        if last.is_some_and(|t| t.elapsed() < EXECUTIONS_SAMPLE_INTERVAL) {
            return;
        }
        *last = Some(Instant::now());
        match s.insights.counts_by_namespace(&s.namespaces).await {
            Ok(rows) => {
                s.executions.clear();
                for (namespace, c) in rows {
                    s.executions
                        .get_or_create(&ExecutionLabels {
                            namespace,
                            task: c.task_name,
                            status: c.status.as_str(),
                        })
                        .set(i64::try_from(c.count).unwrap_or(i64::MAX));
                }
                let now = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0.0, |d| d.as_secs_f64());
                s.sampled_at.set(now);
            }
            Err(e) => {
                tracing::warn!(error = %e, "sampling onestep_executions failed; keeping the last values");
            }
        }
    }

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
    metrics.sample_executions().await;
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        metrics.render(),
    )
        .into_response()
}
