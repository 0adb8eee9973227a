//! Logging set-up with `tracing-subscriber`: text or JSON lines on stderr.
//!
//! Text a handler provides (its `log` messages, output lines, error messages) arrives here
//! already escaped by `onestep-wasm` and as field values, so in either format it stays inside
//! its own line; see `docs/security.md#logs`.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// Installs the global subscriber. `level` is a tracing level name (`info`, `debug`, …; the
/// Python names `WARNING`/`CRITICAL` are accepted); `RUST_LOG` overrides it when set.
pub fn init(level: &str, json: bool) {
    let level = match level.to_ascii_lowercase().as_str() {
        "warning" => "warn".to_owned(),
        "critical" => "error".to_owned(),
        other => other.to_owned(),
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(level));
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
