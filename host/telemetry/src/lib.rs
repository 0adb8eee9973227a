//! OpenTelemetry traces (docs/observability.md#traces).
//!
//! Off by default: [`resolve`] returns `None` unless an `OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT`
//! variable or `app.tracing` asks for traces, and then nothing is installed — the spans of
//! [`TARGET`] are disabled at their call sites (no fields are evaluated) and [`enabled`] stays
//! `false`, so the API stores no traceparent and the worker reads none.
//!
//! When on, [`start`] builds an OTLP exporter (HTTP/protobuf over hyper, or gRPC over tonic),
//! a batch span processor on the tokio runtime and the [`tracing_opentelemetry`] layer, which
//! takes only the spans whose target is [`TARGET`] (our own `submit`, `process <task>`,
//! `invoke`, `complete`); log events and other crates' spans never become span data.
//!
//! The W3C `traceparent` text is the only thing that crosses the database: the API stores the
//! `submit` span's context and the worker makes each attempt's span a child of it, with a link.

use std::collections::HashMap;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::SystemTime;

use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::{SpanKind, Status, Tracer as _, TracerProvider as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::{SpanExporter, WithExportConfig};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::span_processor_with_async_runtime::BatchSpanProcessor;
use opentelemetry_sdk::trace::{Sampler, SdkTracer, SdkTracerProvider};
use opentelemetry_sdk::{Resource, runtime};
use serde::Serialize;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::filter_fn;
use tracing_subscriber::registry::LookupSpan;

pub use opentelemetry::trace::{SpanContext, TraceContextExt};

/// The `tracing` target of every span meant for export. The log layer leaves these spans out,
/// and the exporter layer takes nothing else.
pub const TARGET: &str = "onestep::trace";

/// The instrumentation scope name of our spans.
const SCOPE: &str = "onestep";

/// `messaging.system` of every messaging span.
pub const MESSAGING_SYSTEM: &str = "onestep";

static ENABLED: AtomicBool = AtomicBool::new(false);
static TRACER: OnceLock<SdkTracer> = OnceLock::new();

/// True once [`start`] has installed an exporter: the API then stores traceparents and the
/// worker reads them.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Why tracing cannot start: a configuration error, reported with exit code 2.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TelemetryError {
    /// An `OTEL_EXPORTER_OTLP_*PROTOCOL` variable names a transport we do not speak.
    #[error("{variable}: unsupported protocol '{value}'; expected 'http/protobuf' or 'grpc'")]
    UnsupportedProtocol {
        /// The variable's name.
        variable: String,
        /// Its value.
        value: String,
    },
    /// The exporter could not be built (a bad endpoint).
    #[error("cannot build the OTLP trace exporter: {0}")]
    Exporter(String),
}

/// The OTLP transport of `app.tracing.protocol` (the values of `OTEL_EXPORTER_OTLP_PROTOCOL`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub enum OtlpProtocol {
    /// `http/protobuf` (default; port 4318, path `/v1/traces`).
    #[default]
    #[serde(rename = "http/protobuf")]
    HttpProtobuf,
    /// `grpc` (port 4317).
    #[serde(rename = "grpc")]
    Grpc,
}

impl OtlpProtocol {
    /// Parses a protocol name as `OTEL_EXPORTER_OTLP_PROTOCOL` spells it (`http/protobuf`,
    /// `grpc`; case-insensitive).
    pub fn parse(text: &str) -> Option<Self> {
        match text.trim().to_ascii_lowercase().as_str() {
            "http/protobuf" => Some(OtlpProtocol::HttpProtobuf),
            "grpc" => Some(OtlpProtocol::Grpc),
            _ => None,
        }
    }
}

/// `app.tracing` (docs/configuration.md#tracing): where and how spans are exported, as the
/// operator wrote it. The config crate builds it from the file; [`resolve`] merges it with the
/// `OTEL_*` variables. Every field is optional; a variable set in the environment wins over its
/// field.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct TracingSettings {
    /// The OTLP collector's base URL (`http://host:port`; for `http/protobuf` the exporter adds
    /// `/v1/traces`); `None`: the protocol's default on localhost.
    pub endpoint: Option<String>,
    /// The transport.
    pub protocol: OtlpProtocol,
    /// `service.name` of the exported spans (default: `app.name`).
    pub service_name: Option<String>,
    /// Fraction of new traces recorded, 0..=1 (default 1; a span with a sampled parent always
    /// follows its parent).
    pub sample_ratio: Option<f64>,
}

/// Where and how to export, after the environment and `app.tracing` are merged.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// The transport.
    pub protocol: OtlpProtocol,
    /// The exporter's URL from `app.tracing.endpoint` (for HTTP with `/v1/traces` added);
    /// `None`: the exporter reads the `OTEL_EXPORTER_OTLP_*` variables or uses its default.
    pub endpoint: Option<String>,
    /// `service.name`; `None`: the SDK reads `OTEL_SERVICE_NAME`.
    pub service_name: Option<String>,
    /// A parent-based trace-id ratio sampler; `None`: the SDK's own (`OTEL_TRACES_SAMPLER`,
    /// else always on).
    pub sample_ratio: Option<f64>,
}

fn non_empty(env: &dyn Fn(&str) -> Option<String>, name: &str) -> Option<String> {
    env(name)
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
}

/// Merges the environment (`env` looks a variable up) with `app.tracing`. Tracing is on when
/// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, `OTEL_EXPORTER_OTLP_ENDPOINT` or `app.tracing` is set,
/// and `OTEL_SDK_DISABLED` is not `true`. A variable wins over the matching YAML field
/// (endpoint, protocol, service name, sampler). Errors name the bad protocol value.
pub fn resolve(
    config: Option<&TracingSettings>,
    app_name: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<Settings>, TelemetryError> {
    if non_empty(env, "OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
        return Ok(None);
    }
    let env_endpoint = non_empty(env, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .or_else(|| non_empty(env, "OTEL_EXPORTER_OTLP_ENDPOINT"));
    if env_endpoint.is_none() && config.is_none() {
        return Ok(None);
    }
    let protocol = match [
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    ]
    .iter()
    .find_map(|name| non_empty(env, name).map(|v| (*name, v)))
    {
        Some((name, value)) => {
            OtlpProtocol::parse(&value).ok_or_else(|| TelemetryError::UnsupportedProtocol {
                variable: name.to_owned(),
                value,
            })?
        }
        None => config.map(|c| c.protocol).unwrap_or_default(),
    };
    let endpoint = match (&env_endpoint, config.and_then(|c| c.endpoint.as_deref())) {
        (None, Some(base)) => Some(match protocol {
            OtlpProtocol::HttpProtobuf => format!("{}/v1/traces", base.trim_end_matches('/')),
            OtlpProtocol::Grpc => base.to_owned(),
        }),
        _ => None,
    };
    let service_name = match non_empty(env, "OTEL_SERVICE_NAME") {
        Some(_) => None,
        None => Some(
            config
                .and_then(|c| c.service_name.clone())
                .unwrap_or_else(|| app_name.to_owned()),
        ),
    };
    let sample_ratio = match non_empty(env, "OTEL_TRACES_SAMPLER") {
        Some(_) => None,
        None => config.and_then(|c| c.sample_ratio),
    };
    Ok(Some(Settings {
        protocol,
        endpoint,
        service_name,
        sample_ratio,
    }))
}

/// The running exporter. [`Tracing::shutdown`] exports what is buffered; call it before the
/// process exits.
#[derive(Debug)]
pub struct Tracing {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
}

/// Builds the exporter and the tracer provider (inside the tokio runtime) and marks tracing
/// [`enabled`]. Batch sizes and delays follow the `OTEL_BSP_*` variables.
pub fn start(settings: &Settings) -> Result<Tracing, TelemetryError> {
    let exporter = match settings.protocol {
        OtlpProtocol::HttpProtobuf => {
            let mut b = SpanExporter::builder()
                .with_http()
                .with_protocol(opentelemetry_otlp::Protocol::HttpBinary);
            if let Some(e) = &settings.endpoint {
                b = b.with_endpoint(e.clone());
            }
            b.build()
        }
        OtlpProtocol::Grpc => {
            let mut b = SpanExporter::builder()
                .with_tonic()
                .with_protocol(opentelemetry_otlp::Protocol::Grpc);
            if let Some(e) = &settings.endpoint {
                b = b.with_endpoint(e.clone());
            }
            b.build()
        }
    }
    .map_err(|e| TelemetryError::Exporter(e.to_string()))?;
    let processor = BatchSpanProcessor::builder(exporter, runtime::Tokio).build();
    let mut resource = Resource::builder();
    if let Some(name) = &settings.service_name {
        resource = resource.with_service_name(name.clone());
    }
    let mut builder = SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_resource(resource.build());
    if let Some(ratio) = settings.sample_ratio {
        builder = builder.with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
            ratio,
        ))));
    }
    let provider = builder.build();
    let tracer = provider.tracer(SCOPE);
    let _ = TRACER.set(tracer.clone());
    ENABLED.store(true, Ordering::Relaxed);
    Ok(Tracing { provider, tracer })
}

impl Tracing {
    /// The layer that turns spans of [`TARGET`] into OpenTelemetry spans (and nothing else).
    pub fn layer<S>(&self) -> impl Layer<S> + use<S>
    where
        S: tracing::Subscriber + for<'a> LookupSpan<'a>,
    {
        tracing_opentelemetry::layer()
            .with_tracer(self.tracer.clone())
            .with_tracked_inactivity(false)
            .with_threads(false)
            .with_location(false)
            .with_level(false)
            .with_target(false)
            .with_filter(filter_fn(|meta| meta.target() == TARGET))
    }

    /// Exports the buffered spans and stops the exporter (on a blocking thread: the SDK waits
    /// for its batch task, which runs on the runtime).
    pub async fn shutdown(self) {
        ENABLED.store(false, Ordering::Relaxed);
        let provider = self.provider;
        let done = tokio::task::spawn_blocking(move || provider.shutdown()).await;
        match done {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "the trace exporter did not shut down cleanly")
            }
            Err(e) => tracing::warn!(error = %e, "the trace exporter's shutdown failed"),
        }
    }
}

struct HeaderExtractor<'a>(&'a http::HeaderMap);

impl Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|k| k.as_str()).collect()
    }
}

/// The remote context of an incoming request's `traceparent`/`tracestate` headers; `None`
/// when absent or malformed.
pub fn context_from_headers(headers: &http::HeaderMap) -> Option<Context> {
    let cx = TraceContextPropagator::new().extract(&HeaderExtractor(headers));
    cx.span().span_context().is_valid().then_some(cx)
}

/// The context of a stored `traceparent` text; `None` when malformed.
pub fn context_from_traceparent(traceparent: &str) -> Option<Context> {
    let carrier = HashMap::from([("traceparent".to_owned(), traceparent.to_owned())]);
    let cx = TraceContextPropagator::new().extract(&carrier);
    cx.span().span_context().is_valid().then_some(cx)
}

/// The W3C `traceparent` of `span` (its own context); `None` when tracing is off or the span
/// is disabled.
pub fn traceparent_of(span: &tracing::Span) -> Option<String> {
    if !enabled() || span.is_disabled() {
        return None;
    }
    let cx = span.context();
    if !cx.span().span_context().is_valid() {
        return None;
    }
    let mut carrier: HashMap<String, String> = HashMap::new();
    TraceContextPropagator::new().inject_context(&cx, &mut carrier);
    carrier.remove("traceparent")
}

/// Makes `parent` the parent of `span` (call before the span is first entered).
pub fn set_parent(span: &tracing::Span, parent: Context) {
    if span.is_disabled() {
        return;
    }
    if let Err(e) = span.set_parent(parent) {
        tracing::debug!(error = ?e, "could not set a span's parent");
    }
}

/// Adds a link from `span` to `target`.
pub fn add_link(span: &tracing::Span, target: SpanContext) {
    if !span.is_disabled() {
        span.add_link(target);
    }
}

/// Marks `span` failed with `message` (OpenTelemetry status `ERROR`).
pub fn set_error(span: &tracing::Span, message: impl Into<String>) {
    if !span.is_disabled() {
        span.set_status(Status::error(message.into()));
    }
}

/// A finished claim (one `claim` call of the worker's fetch loop).
#[derive(Debug, Clone, Copy)]
pub struct ClaimRecord<'a> {
    /// When the claim call started.
    pub started: SystemTime,
    /// When it returned.
    pub ended: SystemTime,
    /// The task claimed from.
    pub task: &'a str,
    /// The namespace.
    pub namespace: &'a str,
    /// How many leases it returned.
    pub leases: usize,
    /// The error, when it failed.
    pub error: Option<&'a str>,
}

/// Exports a `claim` span for a claim that returned leases or failed (an empty poll exports
/// nothing: an idle worker would otherwise send a span every `poll_interval`), and returns its
/// context for the attempts to link to. `None` when tracing is off or nothing was recorded.
pub fn record_claim(claim: &ClaimRecord<'_>) -> Option<SpanContext> {
    if !enabled() || (claim.leases == 0 && claim.error.is_none()) {
        return None;
    }
    let tracer = TRACER.get()?;
    let attributes = vec![
        KeyValue::new("messaging.system", MESSAGING_SYSTEM),
        KeyValue::new("messaging.operation.type", "receive"),
        KeyValue::new("messaging.operation.name", "claim"),
        KeyValue::new("messaging.destination.name", claim.task.to_owned()),
        KeyValue::new("onestep.namespace", claim.namespace.to_owned()),
        KeyValue::new(
            "messaging.batch.message_count",
            i64::try_from(claim.leases).unwrap_or(i64::MAX),
        ),
    ];
    let mut span = tracer
        .span_builder("claim")
        .with_kind(SpanKind::Consumer)
        .with_start_time(claim.started)
        .with_attributes(attributes)
        .start_with_context(tracer, &Context::new());
    if let Some(e) = claim.error {
        opentelemetry::trace::Span::set_status(&mut span, Status::error(e.to_owned()));
    }
    let context = opentelemetry::trace::Span::span_context(&span).clone();
    opentelemetry::trace::Span::end_with_timestamp(&mut span, claim.ended);
    Some(context)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |name: &str| map.get(name).cloned()
    }

    #[test]
    fn off_without_an_endpoint_or_app_tracing() {
        assert_eq!(resolve(None, "app", &env_of(&[])), Ok(None));
        assert_eq!(
            resolve(
                None,
                "app",
                &env_of(&[
                    ("OTEL_SERVICE_NAME", "x"),
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", " ")
                ])
            ),
            Ok(None)
        );
        let config = TracingSettings::default();
        assert_eq!(
            resolve(
                Some(&config),
                "app",
                &env_of(&[("OTEL_SDK_DISABLED", "TRUE")])
            ),
            Ok(None)
        );
    }

    #[test]
    fn yaml_fields_apply_when_no_variable_is_set() {
        let config = TracingSettings {
            endpoint: Some("http://collector:4318/".into()),
            protocol: OtlpProtocol::HttpProtobuf,
            service_name: None,
            sample_ratio: Some(0.25),
        };
        assert_eq!(
            resolve(Some(&config), "shop", &env_of(&[])),
            Ok(Some(Settings {
                protocol: OtlpProtocol::HttpProtobuf,
                endpoint: Some("http://collector:4318/v1/traces".into()),
                service_name: Some("shop".into()),
                sample_ratio: Some(0.25),
            }))
        );
        let grpc = TracingSettings {
            endpoint: Some("http://collector:4317".into()),
            protocol: OtlpProtocol::Grpc,
            service_name: Some("svc".into()),
            sample_ratio: None,
        };
        let got = resolve(Some(&grpc), "shop", &env_of(&[]));
        assert_eq!(
            got.map(|s| s.map(|s| (s.endpoint, s.service_name))),
            Ok(Some((
                Some("http://collector:4317".into()),
                Some("svc".into())
            )))
        );
    }

    #[test]
    fn variables_win_over_the_yaml_fields() {
        let config = TracingSettings {
            endpoint: Some("http://collector:4318".into()),
            protocol: OtlpProtocol::HttpProtobuf,
            service_name: Some("svc".into()),
            sample_ratio: Some(0.5),
        };
        let env = env_of(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://other:4317"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_SERVICE_NAME", "from-env"),
            ("OTEL_TRACES_SAMPLER", "always_off"),
        ]);
        assert_eq!(
            resolve(Some(&config), "shop", &env),
            Ok(Some(Settings {
                protocol: OtlpProtocol::Grpc,
                endpoint: None,
                service_name: None,
                sample_ratio: None,
            }))
        );
        // The variable alone turns tracing on, with the app's name as the service.
        let env = env_of(&[(
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "http://c:4318/v1/traces",
        )]);
        assert_eq!(
            resolve(None, "shop", &env).map(|s| s.map(|s| (s.protocol, s.service_name))),
            Ok(Some((OtlpProtocol::HttpProtobuf, Some("shop".into()))))
        );
        let env = env_of(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json"),
        ]);
        assert_eq!(
            resolve(None, "shop", &env),
            Err(TelemetryError::UnsupportedProtocol {
                variable: "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL".into(),
                value: "http/json".into()
            })
        );
        assert_eq!(
            resolve(None, "shop", &env).map_err(|e| e.to_string()),
            Err("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: unsupported protocol 'http/json'; expected 'http/protobuf' or 'grpc'".into())
        );
    }

    #[test]
    fn traceparent_round_trip() {
        let text = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let cx = context_from_traceparent(text).expect("valid");
        let sc = cx.span().span_context().clone();
        assert_eq!(
            sc.trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(sc.span_id().to_string(), "00f067aa0ba902b7");
        assert!(sc.is_sampled());
        assert!(context_from_traceparent("00-zz-00f067aa0ba902b7-01").is_none());
        let mut headers = http::HeaderMap::new();
        assert!(context_from_headers(&headers).is_none());
        headers.insert("traceparent", http::HeaderValue::from_static(text));
        assert!(context_from_headers(&headers).is_some());
    }

    #[test]
    fn nothing_is_recorded_while_off() {
        let claim = ClaimRecord {
            started: SystemTime::now(),
            ended: SystemTime::now(),
            task: "t",
            namespace: "n",
            leases: 3,
            error: None,
        };
        assert!(record_claim(&claim).is_none());
        assert!(traceparent_of(&tracing::Span::none()).is_none());
    }
}
