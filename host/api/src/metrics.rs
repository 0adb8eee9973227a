//! The API's own metrics (docs/observability.md#api-metrics): every request counted and timed by
//! method, matched route (the path template, never the concrete id) and status, and — where the
//! backend has [`ExecutionInsights`] — the sampled `onestep_executions` gauge, served as
//! OpenMetrics text at `GET /metrics` next to the API.
//!
//! Every label value goes through [`LabelText`], which escapes it as the exposition format
//! requires (`prometheus-client` writes label values verbatim). The per-namespace figures are
//! tenant data: they are shown only to an `operate` caller (its own namespace) or to anyone when
//! `api.metrics.public` is set ([`FiguresScope`], docs/observability.md#api-metrics).

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::extract::{MatchedPath, Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use onestep_core::ports::ExecutionInsights;
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
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

/// A label value written escaped as the text exposition format requires: backslash, double
/// quote and line feed become `\\`, `\"` and `\n` (prometheus/client_rust#151: the encoder of
/// `prometheus-client` 0.24 writes `String` label values verbatim, so a task name holding
/// `"` or a newline could close the label and forge samples). Use it for every label whose
/// value is not a fixed word of this crate: task names, namespaces, anything a tenant chose.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct LabelText(pub String);

impl LabelText {
    /// The unescaped text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<&str> for LabelText {
    fn from(s: &str) -> Self {
        LabelText(s.to_owned())
    }
}

impl From<String> for LabelText {
    fn from(s: String) -> Self {
        LabelText(s)
    }
}

impl EncodeLabelValue for LabelText {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        use std::fmt::Write as _;
        let mut rest = self.0.as_str();
        while let Some(i) = rest.find(['\\', '"', '\n']) {
            encoder.write_str(&rest[..i])?;
            encoder.write_str(match rest.as_bytes()[i] {
                b'\\' => "\\\\",
                b'"' => "\\\"",
                _ => "\\n",
            })?;
            rest = &rest[i + 1..];
        }
        encoder.write_str(rest)
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    method: LabelText,
    route: LabelText,
    status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    method: LabelText,
    route: LabelText,
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
    namespace: LabelText,
    task: LabelText,
    status: &'static str,
}

/// Which per-namespace figures (`onestep_executions`) a `/metrics` answer holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FiguresScope {
    /// None: only the request counts (a caller without an `operate` token).
    None,
    /// The figures of this namespace (an `operate` caller).
    Namespace(String),
    /// Every namespace (`api.metrics.public: true`).
    All,
}

/// The last good sample of the `onestep_executions` gauge.
#[derive(Debug, Default)]
struct Sample {
    rows: Vec<(String, onestep_core::ports::StatusCount)>,
    /// The busiest fairness keys of the API's namespaces.
    keys: onestep_core::ports::KeyLoads,
    /// The fleet-wide rate-limit buckets (at most [`METRIC_BUCKETS`]).
    buckets: onestep_core::rate::BucketStates,
    /// Unix time of the sample; `None` before the first success.
    at: Option<f64>,
}

/// The `onestep_executions` gauge is re-read from the database at most this often, however
/// often `/metrics` is scraped.
pub const EXECUTIONS_SAMPLE_INTERVAL: Duration = Duration::from_secs(15);

/// `onestep_fairness_key_executions` shows this many keys: the busiest of every namespace the
/// API serves (a bounded label set however many keys have work).
pub const METRIC_KEYS: u32 = 20;

/// `onestep_rate_limit_tokens` shows this many buckets: paused first, then fewest tokens (a
/// bounded label set however many origins and tasks are limited).
pub const METRIC_BUCKETS: u32 = 20;

/// Where the `onestep_executions` gauge comes from: one grouped statement over the API's
/// namespaces.
struct ExecutionsSampler {
    insights: Arc<dyn ExecutionInsights>,
    namespaces: Vec<String>,
    /// When the last sample was taken (successful or not); held while sampling, so concurrent
    /// scrapes wait for one statement instead of running several.
    last: tokio::sync::Mutex<Option<Instant>>,
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
    /// The last sample of the gauge; `None` without a sampler (no figures at all).
    figures: Option<std::sync::Mutex<Sample>>,
    /// Submits refused by a quota, by (namespace, quota): per-namespace figures, shown like
    /// the gauge ([`FiguresScope`]).
    quota_refusals: std::sync::Mutex<std::collections::BTreeMap<(String, &'static str), u64>>,
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
            "POST /v1/executions by outcome: created, replayed (same key and content), conflict (same key, other content), quota_exceeded (over api.quotas)",
            submits.clone(),
        );
        ApiMetrics {
            registry,
            submits,
            requests,
            duration,
            sampler: None,
            figures: None,
            quota_refusals: std::sync::Mutex::default(),
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
        ApiMetrics {
            sampler: Some(ExecutionsSampler {
                insights,
                namespaces,
                last: tokio::sync::Mutex::new(None),
            }),
            figures: Some(std::sync::Mutex::default()),
            ..ApiMetrics::default()
        }
    }

    /// Re-reads the `onestep_executions` gauge when the last sample is older than
    /// [`EXECUTIONS_SAMPLE_INTERVAL`]. A failed read keeps the previous values (and their
    /// timestamp) and is retried after the interval, so a struggling database gets one
    /// statement per interval at most.
    pub async fn sample_executions(&self) {
        let (Some(s), Some(figures)) = (&self.sampler, &self.figures) else {
            return;
        };
        let mut last = s.last.lock().await;
        if last.is_some_and(|t| t.elapsed() < EXECUTIONS_SAMPLE_INTERVAL) {
            return;
        }
        *last = Some(Instant::now());
        let read = tokio::try_join!(
            s.insights.counts_by_namespace(&s.namespaces),
            s.insights.key_loads(&s.namespaces, METRIC_KEYS),
            s.insights.rate_limits(METRIC_BUCKETS),
        );
        match read {
            Ok((rows, keys, buckets)) => {
                let now = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0.0, |d| d.as_secs_f64());
                let mut sample = figures.lock().unwrap_or_else(|e| e.into_inner());
                *sample = Sample {
                    rows,
                    keys,
                    buckets,
                    at: Some(now),
                };
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
                method: method.into(),
                route: route.into(),
                status: status.to_string(),
            })
            .inc();
        self.duration
            .get_or_create(&RouteLabels {
                method: method.into(),
                route: route.into(),
            })
            .observe(seconds);
    }

    /// The OpenMetrics text: the request metrics, plus the `onestep_executions` figures of
    /// `scope` (none, one namespace or all) from the last sample.
    pub fn render(&self, scope: &FiguresScope) -> String {
        self.render_with(scope, &[])
    }

    /// [`Self::render`] with the metrics of `extra` (the webhook sender's, the waits') after
    /// the request metrics.
    pub fn render_with(&self, scope: &FiguresScope, extra: &[&Registry]) -> String {
        use prometheus_client::encoding::text::{encode_eof, encode_registry};
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = encode_registry(&mut out, &self.registry);
        for extra in extra {
            let _ = encode_registry(&mut out, extra);
        }
        if let (Some(sample), false) = (&self.figures, *scope == FiguresScope::None) {
            let figures =
                figures_registry(&sample.lock().unwrap_or_else(|e| e.into_inner()), scope);
            let _ = encode_registry(&mut out, &figures);
        }
        if *scope != FiguresScope::None {
            let _ = encode_registry(&mut out, &self.quota_registry(scope));
        }
        let _ = encode_eof(&mut out);
        out
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QuotaLabels {
    namespace: LabelText,
    quota: &'static str,
}

impl ApiMetrics {
    /// Counts the quota refusals of one response (docs/http-api.md#quotas).
    fn record_refusals(&self, refusals: &crate::error::QuotaRefusals) {
        if refusals.0.is_empty() {
            return;
        }
        let mut counts = self
            .quota_refusals
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        for (namespace, quota) in &refusals.0 {
            *counts.entry((namespace.clone(), *quota)).or_default() += 1;
        }
    }

    /// `onestep_api_quota_refusals_total{namespace, quota}` of the namespaces `scope` may see.
    fn quota_registry(&self, scope: &FiguresScope) -> Registry {
        let mut registry = Registry::default();
        let family = Family::<QuotaLabels, Counter>::default();
        registry.register(
            "onestep_api_quota_refusals",
            "Submits refused by a quota (api.quotas), by namespace and quota: max_queued or max_queued_per_key",
            family.clone(),
        );
        let counts = self
            .quota_refusals
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        for ((namespace, quota), n) in counts.iter() {
            let visible = match scope {
                FiguresScope::None => false,
                FiguresScope::Namespace(ns) => ns == namespace,
                FiguresScope::All => true,
            };
            if visible {
                family
                    .get_or_create(&QuotaLabels {
                        namespace: namespace.as_str().into(),
                        quota,
                    })
                    .inc_by(*n);
            }
        }
        registry
    }
}

/// A registry holding the `onestep_executions` rows of `sample` that `scope` may see.
fn figures_registry(sample: &Sample, scope: &FiguresScope) -> Registry {
    let mut registry = Registry::default();
    let executions = Family::<ExecutionLabels, Gauge>::default();
    registry.register(
        "onestep_executions",
        "Executions by namespace, task and status, sampled from the database at most every 15 s",
        executions.clone(),
    );
    let sampled_at = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
    registry.register(
        "onestep_executions_sampled_timestamp_seconds",
        "Unix time of the last successful sample of onestep_executions",
        sampled_at.clone(),
    );
    for (namespace, c) in &sample.rows {
        let visible = match scope {
            FiguresScope::None => false,
            FiguresScope::Namespace(ns) => ns == namespace,
            FiguresScope::All => true,
        };
        if visible {
            executions
                .get_or_create(&ExecutionLabels {
                    namespace: namespace.as_str().into(),
                    task: c.task_name.as_str().into(),
                    status: c.status.as_str(),
                })
                .set(i64::try_from(c.count).unwrap_or(i64::MAX));
        }
    }
    let keys = Family::<KeyLabels, Gauge>::default();
    registry.register(
        "onestep_fairness_key_executions",
        "Executions waiting (queued, retrying) and running (running, cancel_requested) of the 20 busiest fairness keys, by namespace, task and key, sampled with onestep_executions",
        keys.clone(),
    );
    for k in &sample.keys.keys {
        let visible = match scope {
            FiguresScope::None => false,
            FiguresScope::Namespace(ns) => *ns == k.namespace,
            FiguresScope::All => true,
        };
        if !visible {
            continue;
        }
        for (state, n) in [("waiting", k.waiting), ("running", k.running)] {
            keys.get_or_create(&KeyLabels {
                namespace: k.namespace.as_str().into(),
                task: k.task_name.as_str().into(),
                fairness_key: k.fairness_key.as_str().into(),
                state,
            })
            .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }
    // The buckets are fleet-wide (shared by every namespace): any scope that shows figures
    // shows them (docs/observability.md#api-metrics).
    let tokens = Family::<BucketLabels, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
    registry.register(
        "onestep_rate_limit_tokens",
        "Tokens of the 20 most throttled fleet-wide rate-limit buckets at their last take, by kind (task, origin) and target, sampled with onestep_executions",
        tokens.clone(),
    );
    let paused = Family::<BucketLabels, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
    registry.register(
        "onestep_rate_limit_paused_until_timestamp_seconds",
        "Unix time until which an upstream's 429 Retry-After pauses the bucket for the whole fleet (buckets with a pause only), sampled with onestep_executions",
        paused.clone(),
    );
    for b in &sample.buckets.items {
        let labels = BucketLabels {
            kind: b.kind().into(),
            target: b.target().into(),
        };
        tokens.get_or_create(&labels).set(b.state.tokens);
        if let Some(until) = b.state.paused_until {
            paused
                .get_or_create(&labels)
                .set(until.timestamp_micros() as f64 / 1e6);
        }
    }
    if let Some(at) = sample.at {
        sampled_at.set(at);
    }
    registry
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BucketLabels {
    kind: LabelText,
    target: LabelText,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KeyLabels {
    namespace: LabelText,
    task: LabelText,
    fairness_key: LabelText,
    state: &'static str,
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
    if let Some(refusals) = response.extensions().get::<crate::error::QuotaRefusals>() {
        metrics.record_refusals(refusals);
    }
    if submit {
        let outcome = match response.extensions().get::<SubmitOutcome>() {
            Some(SubmitOutcome::Created) => Some("created"),
            Some(SubmitOutcome::Replayed) => Some("replayed"),
            None if response.status() == axum::http::StatusCode::CONFLICT => Some("conflict"),
            None if response.status() == axum::http::StatusCode::TOO_MANY_REQUESTS => {
                Some("quota_exceeded")
            }
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

/// The state of `GET /metrics`: the metrics and the API state that says who the caller is.
#[derive(Clone, Debug)]
pub(crate) struct MetricsRoute {
    pub(crate) metrics: Arc<ApiMetrics>,
    pub(crate) api: crate::state::ApiState,
}

/// The figures `GET /metrics` shows this caller: all with `api.metrics.public`; those of its own
/// namespace to an `operate` caller (in no-auth mode every caller is one); none otherwise — an
/// unknown or missing token is not an error here, it just sees the request counts.
fn figures_scope(
    api: &crate::state::ApiState,
    parts: &mut axum::http::request::Parts,
) -> FiguresScope {
    if api.metrics_public() {
        return FiguresScope::All;
    }
    let auth = parts
        .headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    match api.caller_for(auth) {
        Ok((client, role)) if role.can_operate() => {
            FiguresScope::Namespace(client.namespace().to_owned())
        }
        _ => FiguresScope::None,
    }
}

/// `GET /metrics`.
pub(crate) async fn serve_metrics(State(route): State<MetricsRoute>, request: Request) -> Response {
    let (mut parts, _) = request.into_parts();
    let scope = figures_scope(&route.api, &mut parts);
    let metrics = &route.metrics;
    if scope != FiguresScope::None {
        metrics.sample_executions().await;
    }
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        metrics.render_with(
            &scope,
            &[
                route.api.webhook_metrics().registry(),
                route.api.waits().registry(),
            ],
        ),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use onestep_core::ExecutionStatus;
    use onestep_core::ports::StatusCount;
    use openmetrics_parser::openmetrics::parse_openmetrics;

    /// Task names a tenant could choose to break out of the label (docs/security.md#metrics).
    pub(crate) const HOSTILE: [&str; 5] = [
        "x\",namespace=\"team-b\",task=\"y\",status=\"queued\"} 999999\nonestep_executions{namespace=\"team-b",
        "back\\slash\\",
        "brace}{",
        "new\nline",
        "quote\"",
    ];

    fn with_rows(rows: Vec<(String, StatusCount)>) -> ApiMetrics {
        ApiMetrics {
            figures: Some(std::sync::Mutex::new(Sample {
                rows,
                keys: onestep_core::ports::KeyLoads::default(),
                buckets: onestep_core::rate::BucketStates::default(),
                at: Some(1.0),
            })),
            ..ApiMetrics::default()
        }
    }

    #[test]
    fn rate_limit_buckets_are_gauged_with_their_pause_and_only_with_figures() {
        use chrono::TimeZone;
        use onestep_core::rate::{BucketSnapshot, BucketState, BucketStates};
        let at = chrono::Utc
            .timestamp_opt(1_800_000_000, 0)
            .single()
            .unwrap_or_else(chrono::Utc::now);
        let bucket = |name: &str, tokens: f64, paused: bool| BucketState {
            bucket: name.into(),
            state: BucketSnapshot {
                tokens,
                refilled_at: at,
                paused_until: paused.then_some(at),
            },
        };
        let m = ApiMetrics {
            figures: Some(std::sync::Mutex::new(Sample {
                rows: Vec::new(),
                keys: onestep_core::ports::KeyLoads::default(),
                buckets: BucketStates {
                    kept: true,
                    items: vec![
                        bucket("origin:https://api.example:443", 0.5, true),
                        bucket(&format!("task:{}", HOSTILE[0]), 2.0, false),
                    ],
                    truncated: false,
                },
                at: Some(1.0),
            })),
            ..ApiMetrics::default()
        };
        let text = m.render(&FiguresScope::Namespace("a".into()));
        let parsed = parse_openmetrics(&text).unwrap_or_else(|e| panic!("{e:?} in:\n{text}"));
        let gauge = |family: &str| -> Vec<(String, String, f64)> {
            let mut v: Vec<_> = parsed.families[family]
                .iter_samples()
                .map(|s| {
                    let l = s.get_labelset().expect("labels");
                    let v = match &s.value {
                        openmetrics_parser::OpenMetricsValue::Gauge(v) => v.as_f64(),
                        _ => f64::NAN,
                    };
                    (
                        l.get_label_value("kind").unwrap_or_default().to_owned(),
                        l.get_label_value("target").unwrap_or_default().to_owned(),
                        v,
                    )
                })
                .collect();
            v.sort_by(|x, y| x.0.cmp(&y.0));
            v
        };
        assert_eq!(
            gauge("onestep_rate_limit_tokens"),
            [
                ("origin".into(), "https://api.example:443".into(), 0.5),
                ("task".into(), HOSTILE[0].into(), 2.0),
            ],
            "{text}"
        );
        assert_eq!(
            gauge("onestep_rate_limit_paused_until_timestamp_seconds"),
            [("origin".into(), "https://api.example:443".into(), 1.8e9)],
            "{text}"
        );
        let none = m.render(&FiguresScope::None);
        assert!(!none.contains("onestep_rate_limit_tokens"), "{none}");
    }

    #[test]
    fn busiest_keys_are_gauged_per_state_escaped_and_in_scope_only() {
        let key = |ns: &str, k: &str, waiting, running| onestep_core::ports::KeyLoad {
            namespace: ns.into(),
            task_name: "llm".into(),
            fairness_key: k.into(),
            waiting,
            running,
        };
        let m = ApiMetrics {
            figures: Some(std::sync::Mutex::new(Sample {
                rows: Vec::new(),
                keys: onestep_core::ports::KeyLoads {
                    keys: vec![key("a", HOSTILE[0], 7, 2), key("b", "tenant-b", 1, 0)],
                    truncated: false,
                },
                buckets: onestep_core::rate::BucketStates::default(),
                at: Some(1.0),
            })),
            ..ApiMetrics::default()
        };
        let text = m.render(&FiguresScope::Namespace("a".into()));
        let parsed = parse_openmetrics(&text).unwrap_or_else(|e| panic!("{e:?} in:\n{text}"));
        let mut seen: Vec<(String, String, String, f64)> =
            parsed.families["onestep_fairness_key_executions"]
                .iter_samples()
                .map(|s| {
                    let l = s.get_labelset().expect("labels");
                    let v = match &s.value {
                        openmetrics_parser::OpenMetricsValue::Gauge(v) => v.as_f64(),
                        _ => f64::NAN,
                    };
                    (
                        l.get_label_value("namespace")
                            .unwrap_or_default()
                            .to_owned(),
                        l.get_label_value("fairness_key")
                            .unwrap_or_default()
                            .to_owned(),
                        l.get_label_value("state").unwrap_or_default().to_owned(),
                        v,
                    )
                })
                .collect();
        seen.sort_by(|x, y| x.2.cmp(&y.2));
        assert_eq!(
            seen,
            [
                ("a".into(), HOSTILE[0].into(), "running".into(), 2.0),
                ("a".into(), HOSTILE[0].into(), "waiting".into(), 7.0),
            ],
            "namespace a's key only, its name back exactly:\n{text}"
        );
        let none = m.render(&FiguresScope::None);
        assert!(
            !none.contains("tenant-b") && !none.contains("fairness_key="),
            "{none}"
        );
        assert!(m.render(&FiguresScope::All).contains("tenant-b"));
    }

    #[test]
    fn hostile_label_values_are_escaped_and_parse_back_exactly() {
        let rows: Vec<(String, StatusCount)> = HOSTILE
            .iter()
            .map(|t| {
                (
                    "team-a".to_owned(),
                    StatusCount {
                        task_name: (*t).to_owned(),
                        status: ExecutionStatus::Queued,
                        count: 1,
                    },
                )
            })
            .collect();
        let m = with_rows(rows);
        m.record("GET", "/x\"y\\z\n", 200, 0.01);
        let text = m.render(&FiguresScope::All);
        let parsed = parse_openmetrics(&text).unwrap_or_else(|e| panic!("{e:?} in:\n{text}"));
        let family = &parsed.families["onestep_executions"];
        let mut seen: Vec<(String, String)> = family
            .iter_samples()
            .map(|s| {
                let l = s.get_labelset().expect("labels");
                (
                    l.get_label_value("namespace")
                        .unwrap_or_default()
                        .to_owned(),
                    l.get_label_value("task").unwrap_or_default().to_owned(),
                )
            })
            .collect();
        seen.sort();
        let mut want: Vec<(String, String)> = HOSTILE
            .iter()
            .map(|t| ("team-a".to_owned(), (*t).to_owned()))
            .collect();
        want.sort();
        assert_eq!(
            seen, want,
            "no forged sample, every name back exactly:\n{text}"
        );
        let requests = &parsed.families["onestep_api_requests"];
        let route = requests
            .iter_samples()
            .map(|s| {
                s.get_labelset()
                    .expect("labels")
                    .get_label_value("route")
                    .map(str::to_owned)
            })
            .next()
            .flatten();
        assert_eq!(route.as_deref(), Some("/x\"y\\z\n"));
    }

    #[test]
    fn figures_only_in_scope() {
        let row = |ns: &str| {
            (
                ns.to_owned(),
                StatusCount {
                    task_name: "t".to_owned(),
                    status: ExecutionStatus::Queued,
                    count: 3,
                },
            )
        };
        let m = with_rows(vec![row("a"), row("b")]);
        m.record("GET", "/v1/whoami", 200, 0.01);
        let none = m.render(&FiguresScope::None);
        assert!(
            !none.contains("onestep_executions") && !none.contains("namespace="),
            "{none}"
        );
        assert!(none.ends_with("# EOF\n"), "{none}");
        let own = m.render(&FiguresScope::Namespace("a".into()));
        assert!(
            own.contains(r#"namespace="a""#) && !own.contains(r#"namespace="b""#),
            "{own}"
        );
        let all = m.render(&FiguresScope::All);
        assert!(
            all.contains(r#"namespace="a""#) && all.contains(r#"namespace="b""#),
            "{all}"
        );
        for text in [none, own, all] {
            parse_openmetrics(&text).unwrap_or_else(|e| panic!("{e:?} in:\n{text}"));
        }
    }
}
