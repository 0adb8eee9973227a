//! Logging set-up with `tracing-subscriber`: text or JSON lines on stderr, and the OpenTelemetry
//! trace layer when traces are on (docs/observability.md#traces).
//!
//! Text a handler provides (its `log` messages, output lines, error messages) arrives here
//! already escaped by `onestep-wasm` and as field values, so in either format it stays inside
//! its own line; see `docs/security.md#logs`.

use std::io::IsTerminal;

use onestep_config::AppConfig;
use onestep_telemetry::Tracing;
use tracing_subscriber::filter::{FilterExt, filter_fn};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, Registry};

/// Targets of dependencies whose DEBUG output is their own internals (wasmtime compiles with
/// cranelift at start and logs tens of thousands of lines), kept at WARN whatever `level` says;
/// `RUST_LOG` can still ask for them (docs/cli.md#logging). `tokio_postgres` logs every
/// statement with its parameters at DEBUG (payloads, results, error texts, values the sandbox
/// injects), so it is quiet for the same reason the guests' text is escaped
/// (docs/security.md#logs).
const QUIET_TARGETS: [&str; 8] = [
    "wasmtime",
    "cranelift",
    "regalloc2",
    "wasmparser",
    "hyper",
    "h2",
    "rustls",
    "tokio_postgres",
];

/// The filter for `level` (a tracing level name; the Python names `WARNING`/`CRITICAL` are
/// accepted): onestep's own events and the guests' at `level`, the [`QUIET_TARGETS`] at WARN at
/// most.
fn filter(level: &str) -> EnvFilter {
    let level = match level.to_ascii_lowercase().as_str() {
        "warning" => "warn".to_owned(),
        "critical" => "error".to_owned(),
        other => other.to_owned(),
    };
    let quiet = match level.as_str() {
        "trace" | "debug" | "info" => "warn",
        other => other,
    };
    let mut directives = level.clone();
    for target in QUIET_TARGETS {
        directives.push_str(&format!(",{target}={quiet}"));
    }
    EnvFilter::new(directives)
}

/// Installs the global subscriber at `level` (see [`filter`]); `RUST_LOG` overrides it when set.
/// No traces.
pub(crate) fn init(level: &str, json: bool) {
    install(level, json, None);
}

/// [`init`], plus the OTLP trace exporter when the environment or `app.tracing` turns traces on
/// (docs/observability.md#traces). The returned exporter must be shut down before exit (it
/// exports what is buffered). Errors are configuration errors (a bad `OTEL_*` value or
/// endpoint), to be reported with exit code 2.
pub(crate) fn init_with_traces(
    level: &str,
    json: bool,
    cfg: &AppConfig,
) -> Result<Option<Tracing>, String> {
    let settings = onestep_telemetry::resolve(cfg.tracing.as_ref(), &cfg.name, &|name| {
        std::env::var(name).ok()
    });
    let tracing = match settings {
        Ok(Some(s)) => match onestep_telemetry::start(&s) {
            Ok(t) => Some(t),
            Err(e) => {
                init(level, json);
                return Err(e.to_string());
            }
        },
        Ok(None) => None,
        Err(e) => {
            init(level, json);
            return Err(e.to_string());
        }
    };
    install(level, json, tracing.as_ref());
    if tracing.is_some() {
        tracing::info!("OpenTelemetry traces are exported over OTLP");
    }
    Ok(tracing)
}

/// The log layer (its filter leaves out the spans meant only for the trace exporter) and, with
/// `tracing`, the exporter's layer.
fn install(level: &str, json: bool, tracing: Option<&Tracing>) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| filter(level));
    let logs = filter.and(filter_fn(|meta| meta.target() != onestep_telemetry::TARGET));
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    let fmt: Box<dyn Layer<Registry> + Send + Sync> = if json {
        fmt.json().with_filter(logs).boxed()
    } else {
        fmt.with_filter(logs).boxed()
    };
    let traces = tracing.map(|t| t.layer());
    let _ = tracing_subscriber::registry()
        .with(fmt)
        .with(traces)
        .try_init();
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing::Level;

    fn enabled_under(level: &str) -> [bool; 6] {
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(filter(level))
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            [
                tracing::enabled!(target: "onestep_worker::delivery", Level::DEBUG),
                tracing::enabled!(target: "onestep_wasm::guest", Level::DEBUG),
                tracing::enabled!(target: "wasmtime_internal_cranelift::compiler", Level::DEBUG),
                tracing::enabled!(target: "cranelift_codegen::context", Level::INFO),
                tracing::enabled!(target: "wasmtime::runtime", Level::WARN),
                tracing::enabled!(target: "tokio_postgres::query", Level::DEBUG),
            ]
        })
    }

    #[test]
    fn debug_shows_onestep_and_guests_but_not_the_compilers_internals() {
        // The last: PostgreSQL statements with their parameters never reach a DEBUG log.
        assert_eq!(
            enabled_under("DEBUG"),
            [true, true, false, false, true, false]
        );
        assert_eq!(
            enabled_under("INFO"),
            [false, false, false, false, true, false]
        );
        assert_eq!(
            enabled_under("ERROR"),
            [false, false, false, false, false, false]
        );
        assert_eq!(
            enabled_under("WARNING"),
            [false, false, false, false, true, false]
        );
    }
}
