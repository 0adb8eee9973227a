//! Logging set-up with `tracing-subscriber`: text or JSON lines on stderr.
//!
//! Text a handler provides (its `log` messages, output lines, error messages) arrives here
//! already escaped by `onestep-wasm` and as field values, so in either format it stays inside
//! its own line; see `docs/security.md#logs`.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// Targets of dependencies whose DEBUG output is their own internals (wasmtime compiles with
/// cranelift at start and logs tens of thousands of lines), kept at WARN whatever `level` says;
/// `RUST_LOG` can still ask for them (docs/cli.md#logging).
const QUIET_TARGETS: [&str; 7] = [
    "wasmtime",
    "cranelift",
    "regalloc2",
    "wasmparser",
    "hyper",
    "h2",
    "rustls",
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
pub fn init(level: &str, json: bool) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| filter(level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    let _ = if json {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing::Level;

    fn enabled_under(level: &str) -> [bool; 5] {
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
            ]
        })
    }

    #[test]
    fn debug_shows_onestep_and_guests_but_not_the_compilers_internals() {
        assert_eq!(enabled_under("DEBUG"), [true, true, false, false, true]);
        assert_eq!(enabled_under("INFO"), [false, false, false, false, true]);
        assert_eq!(enabled_under("ERROR"), [false, false, false, false, false]);
        assert_eq!(enabled_under("WARNING"), [false, false, false, false, true]);
    }
}
