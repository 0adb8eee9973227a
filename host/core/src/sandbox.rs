//! The sandbox settings of one task, defined once: [`SandboxSettings`] (what one handler
//! instance may use) and its outbound-HTTP part [`NetworkSettings`]. The configuration crate
//! builds them directly from a task's `sandbox:` block (docs/configuration.md#sandbox), the
//! handler runtime (`onestep-wasm`) enforces them; nothing converts between two copies.
//!
//! Field names are the file's keys (`output_limit_bytes`, `env`, `env_values`,
//! `cancel_grace_ms`, …), and every default is a constant of [`crate::settings`] or
//! [`crate::network`], so a sandbox built in code, a partial value and a file that sets nothing
//! all get the same limits. Adding a key: see CONTRIBUTING.md ("Adding a sandbox key").
//!
//! Plain data only: no I/O, no YAML, no wasmtime.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::network::{
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_MAX_CONCURRENT_REQUESTS, DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_REQUEST_BYTES, DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_REQUEST_TIMEOUT, OriginPattern,
};
use crate::settings::{
    DEFAULT_CANCEL_GRACE, DEFAULT_HTTP_FIELDS_LIMIT_BYTES, DEFAULT_LOG_LIMIT_BYTES,
    DEFAULT_LOG_RATE_BYTES_PER_MINUTE, DEFAULT_MAX_HTTP_HANDLES, DEFAULT_MAX_INSTANCES,
    DEFAULT_MAX_LOG_LINES, DEFAULT_MAX_LOG_MESSAGE_BYTES, DEFAULT_MAX_MEMORIES,
    DEFAULT_MAX_OPEN_HANDLES, DEFAULT_MAX_TABLE_ELEMENTS, DEFAULT_MAX_TABLES,
    DEFAULT_MEMORY_LIMIT_BYTES, DEFAULT_OUTPUT_LIMIT_BYTES, Preopen, Secret,
};

/// Per-task sandbox (`sandbox:`). Everything not granted here is denied: no filesystem but the
/// preopens, no environment but the listed variables, no arguments, no sockets, no name lookup,
/// no outbound HTTP but [`network`](Self::network). Clocks and randomness are available.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SandboxSettings {
    /// `memory_limit_bytes`: ceiling on the guest's total linear memory (all memories of the
    /// component together; default [`DEFAULT_MEMORY_LIMIT_BYTES`], at least
    /// [`MIN_MEMORY_LIMIT_BYTES`](crate::settings::MIN_MEMORY_LIMIT_BYTES) in a file). Growth
    /// beyond it fails inside the guest and the attempt ends as a memory-limit trap.
    pub memory_limit_bytes: u64,
    /// `fuel`: instruction budget per call; `None` = unlimited. Not a timer: the call's time
    /// limit is the task's `timeout_s`.
    pub fuel: Option<u64>,
    /// `preopens`: directories visible to the guest; nothing else of the filesystem is.
    pub preopens: Vec<Preopen>,
    /// `env`: names of environment variables passed through with the host's values (skipped
    /// when unset). Nothing else is inherited. See [`guest_env`](Self::guest_env).
    pub env: Vec<String>,
    /// `env_values`: variables with explicit values (they win over `env`).
    pub env_values: BTreeMap<String, String>,
    /// `output_limit_bytes`: bytes of guest stdout, and separately of stderr, kept per attempt;
    /// the rest is dropped (the guest's writes still succeed).
    pub output_limit_bytes: u64,
    /// `max_instances`: core instances one attempt may create
    /// (docs/configuration.md#sandbox-instance-limits).
    pub max_instances: u32,
    /// `max_tables`: tables one attempt may create, over all its core instances.
    pub max_tables: u32,
    /// `max_memories`: linear memories one attempt may create.
    pub max_memories: u32,
    /// `max_table_elements`: elements of any one table (also charged against
    /// `memory_limit_bytes`).
    pub max_table_elements: u64,
    /// `max_open_handles`: files, directories, listings and streams the guest may hold open at
    /// once (preopens and stdio not counted); one more returns the WASI error code `quota`.
    pub max_open_handles: u32,
    /// `log_limit_bytes`: guest log bytes per attempt (log and progress calls, stdout/stderr
    /// lines, the error message), each line charged its escaped text plus
    /// [`LOG_LINE_OVERHEAD_BYTES`](crate::settings::LOG_LINE_OVERHEAD_BYTES); further lines
    /// are dropped and counted (docs/security.md#logs).
    pub log_limit_bytes: u64,
    /// `max_log_lines`: guest log lines per attempt.
    pub max_log_lines: u64,
    /// `max_log_message_bytes`: longest message, note, output line or error message logged;
    /// longer ones are cut.
    pub max_log_message_bytes: u64,
    /// `log_rate_bytes_per_minute`: guest log bytes all attempts of the task together may
    /// produce per minute in one worker (a token bucket with a minute's worth of burst).
    pub log_rate_bytes_per_minute: u64,
    /// `cancel_grace_ms`: after a cancel, how long the guest may run on to notice
    /// `cancel-requested()` and return by itself before it is stopped (default
    /// [`DEFAULT_CANCEL_GRACE`]). The deadline still applies.
    #[serde(rename = "cancel_grace_ms", with = "millis")]
    pub cancel_grace: Duration,
    /// `max_http_handles`: `wasi:http` resources (fields, requests, bodies, response futures,
    /// responses) the guest may hold at once; one more creation ends the attempt
    /// (docs/security.md#http-resources). Not settable from the file.
    pub max_http_handles: u32,
    /// `http_fields_limit_bytes`: header bytes of the `wasi:http` fields, requests and
    /// responses the guest may hold at once (host memory outside `memory_limit_bytes`); one
    /// more byte ends the attempt (docs/configuration.md#sandbox-http-resources).
    pub http_fields_limit_bytes: u64,
    /// Longest output text accepted from the handler, in bytes; a longer one is refused before
    /// it is parsed. Not a file key: the worker sets it from its source's `max_result_bytes`.
    /// `None` (default): no limit.
    #[serde(skip)]
    pub result_limit_bytes: Option<u64>,
    /// `network`: outbound HTTP; the default allows no request.
    pub network: NetworkSettings,
}

impl Default for SandboxSettings {
    fn default() -> Self {
        SandboxSettings {
            memory_limit_bytes: DEFAULT_MEMORY_LIMIT_BYTES,
            fuel: None,
            preopens: Vec::new(),
            env: Vec::new(),
            env_values: BTreeMap::new(),
            output_limit_bytes: DEFAULT_OUTPUT_LIMIT_BYTES,
            max_instances: DEFAULT_MAX_INSTANCES,
            max_tables: DEFAULT_MAX_TABLES,
            max_memories: DEFAULT_MAX_MEMORIES,
            max_table_elements: DEFAULT_MAX_TABLE_ELEMENTS,
            max_open_handles: DEFAULT_MAX_OPEN_HANDLES,
            log_limit_bytes: DEFAULT_LOG_LIMIT_BYTES,
            max_log_lines: DEFAULT_MAX_LOG_LINES,
            max_log_message_bytes: DEFAULT_MAX_LOG_MESSAGE_BYTES,
            log_rate_bytes_per_minute: DEFAULT_LOG_RATE_BYTES_PER_MINUTE,
            cancel_grace: DEFAULT_CANCEL_GRACE,
            max_http_handles: DEFAULT_MAX_HTTP_HANDLES,
            http_fields_limit_bytes: DEFAULT_HTTP_FIELDS_LIMIT_BYTES,
            result_limit_bytes: None,
            network: NetworkSettings::default(),
        }
    }
}

impl SandboxSettings {
    /// The guest environment: each `env` name that `lookup` knows, then `env_values` (which
    /// win).
    pub fn guest_env(&self, lookup: impl Fn(&str) -> Option<String>) -> BTreeMap<String, String> {
        let mut out: BTreeMap<String, String> = self
            .env
            .iter()
            .filter_map(|n| lookup(n).map(|v| (n.clone(), v)))
            .collect();
        out.extend(self.env_values.clone());
        out
    }

    /// The same sandbox with its `env` names resolved through `lookup` (the environment the
    /// file was loaded with, dotenv included) into `env_values`, so the runtime passes exactly
    /// those values and reads nothing from its own process environment.
    pub fn with_env_resolved(&self, lookup: impl Fn(&str) -> Option<String>) -> Self {
        SandboxSettings {
            env_values: self.guest_env(lookup),
            env: Vec::new(),
            ..self.clone()
        }
    }
}

/// An origin string that is not a valid `sandbox.network.allow` entry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid origin {origin:?}: {reason}")]
pub struct InvalidOrigin {
    /// The text given.
    pub origin: String,
    /// Why it was refused (the message `onestep check` prints).
    pub reason: String,
}

/// One allowed origin and the headers the host sets on every request to it (replacing a
/// guest-set header of the same name).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AllowedOrigin {
    /// `scheme://host:port`, host possibly `*.suffix` (one label).
    pub origin: OriginPattern,
    /// `(header name, value)` pairs injected by the host (`sandbox.network.headers`), in file
    /// order.
    #[serde(default)]
    pub headers: Vec<(String, Secret)>,
    /// `sandbox.network.rate_limits[origin]`: the fleet-wide token bucket every request to this
    /// entry draws one token from before it is sent (docs/semantics.md#outbound-rate-limits);
    /// bucket [`origin_bucket`](crate::rate::origin_bucket) of the entry as written (a wildcard
    /// entry's hosts share one bucket). `None`: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<crate::rate::RateLimit>,
}

impl AllowedOrigin {
    /// The name of this entry's fleet-wide bucket (`origin:scheme://host:port`).
    pub fn bucket(&self) -> String {
        crate::rate::origin_bucket(&self.origin.to_string())
    }
}

/// `sandbox.network:` — outbound HTTP of one task (docs/configuration.md#sandbox-network). The
/// default allows nothing: no request leaves the host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NetworkSettings {
    /// Origins a request may go to, in file order, unique, each with its injected headers;
    /// empty: no network at all.
    pub allow: Vec<AllowedOrigin>,
    /// `max_response_bytes`: largest response body; a larger one fails the request with
    /// `HTTP-response-body-size`.
    pub max_response_bytes: u64,
    /// `max_request_bytes`: largest request body; a larger one fails the request with
    /// `HTTP-request-body-size`.
    pub max_request_bytes: u64,
    /// `connect_timeout_s`: longest wait for DNS, the TCP connection and the TLS handshake.
    #[serde(with = "seconds")]
    pub connect_timeout: Duration,
    /// `request_timeout_s`: longest a request may take (response headers and whole body),
    /// always capped by what is left of the attempt's deadline.
    #[serde(with = "seconds")]
    pub request_timeout: Duration,
    /// `max_concurrent_requests`: requests one attempt may have in flight at once; one more
    /// fails with `connection-limit-reached`.
    pub max_concurrent_requests: u32,
    /// `max_connections`: connections one attempt may hold open at once, in use or idle (each
    /// a file descriptor of the worker); a request that needs one more, while all are in use,
    /// waits up to the connect timeout, then fails with `connection-limit-reached`.
    pub max_connections: u32,
    /// `max_requests`: requests one attempt may send in all (a cost cap: an agent looping on
    /// an API stops there); one more fails with `HTTP-request-denied`.
    pub max_requests: u64,
}

/// Requests one attempt may send in all (`sandbox.network.max_requests`).
pub const DEFAULT_MAX_REQUESTS: u64 = 10_000;

impl Default for NetworkSettings {
    fn default() -> Self {
        NetworkSettings {
            allow: Vec::new(),
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            max_request_bytes: DEFAULT_MAX_REQUEST_BYTES,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            max_concurrent_requests: DEFAULT_MAX_CONCURRENT_REQUESTS,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_requests: DEFAULT_MAX_REQUESTS,
        }
    }
}

impl NetworkSettings {
    /// Settings allowing `origins` (each parsed as an allow entry) with the default limits and
    /// no injected headers.
    pub fn allowing<'a>(origins: impl IntoIterator<Item = &'a str>) -> Result<Self, InvalidOrigin> {
        let allow = origins
            .into_iter()
            .map(|o| {
                OriginPattern::parse(o)
                    .map(|origin| AllowedOrigin {
                        origin,
                        headers: Vec::new(),
                        rate_limit: None,
                    })
                    .map_err(|reason| InvalidOrigin {
                        origin: o.to_owned(),
                        reason: reason.to_string(),
                    })
            })
            .collect::<Result<_, _>>()?;
        Ok(NetworkSettings {
            allow,
            ..NetworkSettings::default()
        })
    }

    /// Whether any request may leave the host.
    pub fn enabled(&self) -> bool {
        !self.allow.is_empty()
    }
}

/// A [`Duration`] as whole milliseconds (`cancel_grace_ms`).
mod millis {
    use super::*;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_millis)
    }
}

/// A [`Duration`] as (fractional) seconds.
mod seconds {
    use super::*;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let secs = f64::deserialize(d)?;
        Duration::try_from_secs_f64(secs).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_values_never_show() {
        let mut s = NetworkSettings::allowing(["https://api.example.com"]).expect("origin");
        s.allow[0]
            .headers
            .push(("Authorization".into(), Secret::new("Bearer sk-secret")));
        let debug = format!("{s:?}");
        assert!(
            !debug.contains("sk-secret") && debug.contains("<redacted>"),
            "{debug}"
        );
        let json = serde_json::to_string(&s).expect("json");
        assert!(!json.contains("sk-secret"), "{json}");
        assert!(NetworkSettings::allowing(["ftp://x"]).is_err());
    }

    #[test]
    fn partial_settings_deserialize_with_defaults() {
        let s: SandboxSettings = serde_json::from_str(
            r#"{"memory_limit_bytes": 1048576, "preopens": [{"host": "/srv/docs", "guest": "/docs"}],
                "env": ["LANG"], "env_values": {"MODE": "fast"}, "fuel": 15, "cancel_grace_ms": 250}"#,
        )
        .expect("sandbox settings");
        assert_eq!(s.memory_limit_bytes, 1 << 20);
        assert!(!s.preopens[0].writable());
        assert_eq!(s.fuel, Some(15));
        assert_eq!(s.cancel_grace, Duration::from_millis(250));
        assert_eq!(
            s.output_limit_bytes,
            SandboxSettings::default().output_limit_bytes
        );
        assert!(serde_json::from_str::<SandboxSettings>(r#"{"memory": 1}"#).is_err());
    }

    #[test]
    fn one_default_per_setting() {
        let s = SandboxSettings::default();
        assert_eq!(s.cancel_grace, DEFAULT_CANCEL_GRACE);
        assert_eq!(s.http_fields_limit_bytes, DEFAULT_HTTP_FIELDS_LIMIT_BYTES);
        assert!(!s.network.enabled());
    }

    #[test]
    fn env_names_resolve_and_explicit_values_win() {
        let s = SandboxSettings {
            env: vec!["A".into(), "B".into(), "UNSET".into()],
            env_values: BTreeMap::from([("B".to_owned(), "explicit".to_owned())]),
            ..SandboxSettings::default()
        };
        let lookup = |n: &str| (n != "UNSET").then(|| format!("host-{n}"));
        let r = s.with_env_resolved(lookup);
        assert!(r.env.is_empty());
        assert_eq!(r.env_values.get("A").map(String::as_str), Some("host-A"));
        assert_eq!(r.env_values.get("B").map(String::as_str), Some("explicit"));
        assert!(!r.env_values.contains_key("UNSET"));
    }
}
