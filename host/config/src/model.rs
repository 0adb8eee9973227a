//! Typed, validated settings produced by [`load`](crate::load): the final values the worker,
//! the runtime and the API consume. Durations are [`Duration`]s (the file's `_s` seconds,
//! converted once at load; the summaries print them back as seconds), sizes are bytes
//! (`_bytes`). Defaults come from [`onestep_core::settings`] (worker and sandbox settings) or
//! from the constants here (API); every cross-field rule has been checked by the build.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use onestep_core::Limits;
pub use onestep_core::network::{
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_MAX_CONCURRENT_REQUESTS, DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_REQUEST_BYTES, DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_REQUEST_TIMEOUT,
    MAX_CONNECTIONS_LIMIT, OriginPattern,
};
use onestep_core::retry::RetryPolicy;
pub use onestep_core::settings::{
    DEFAULT_CANCEL_GRACE, DEFAULT_MAX_OPEN_HANDLES, DEFAULT_MEMORY_LIMIT_BYTES,
    DEFAULT_OUTPUT_LIMIT_BYTES, MAX_OPEN_HANDLES_LIMIT, MIN_MEMORY_LIMIT_BYTES, Preopen,
    PreopenMode,
};
pub use onestep_core::settings::{
    DEFAULT_LOG_LIMIT_BYTES, DEFAULT_LOG_RATE_BYTES_PER_MINUTE, DEFAULT_MAX_LOG_LINES,
    DEFAULT_MAX_LOG_MESSAGE_BYTES, MIN_LOG_MESSAGE_BYTES,
};
pub use onestep_core::settings::{
    DEFAULT_MAX_INSTANCES, DEFAULT_MAX_MEMORIES, DEFAULT_MAX_TABLE_ELEMENTS, DEFAULT_MAX_TABLES,
};
use serde::Serialize;

use crate::env::EnvLookup;

/// A free-form JSON mapping (`config`, `metadata`, handler `params`).
pub type JsonMap = serde_json::Map<String, serde_json::Value>;

/// A secret string (a DSN, an API token). `Debug`, `Display` and `Serialize` print `<redacted>`;
/// use [`Secret::expose`] to read it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The secret value. Never log it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl Serialize for Secret {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str("<redacted>")
    }
}

/// The whole loaded application (docs/configuration.md#document-shape).
#[derive(Debug, Clone, Serialize)]
pub struct AppConfig {
    /// Absolute path of the YAML file.
    pub source_path: PathBuf,
    /// Directory of the YAML file; relative paths in the file are resolved against it.
    pub base_dir: PathBuf,
    /// `app.name` (or legacy top-level `name`).
    pub name: String,
    /// `app.shutdown_timeout_s` (default
    /// [`DEFAULT_SHUTDOWN_TIMEOUT`](onestep_core::settings::DEFAULT_SHUTDOWN_TIMEOUT); `None`
    /// when set to `null`: wait forever).
    #[serde(
        rename = "shutdown_timeout_s",
        serialize_with = "crate::summary::serialize_opt_secs"
    )]
    pub shutdown_timeout: Option<Duration>,
    /// `app.config`: a free mapping.
    pub config: JsonMap,
    /// `app.logging`.
    pub logging: LoggingConfig,
    /// `app.metrics_addr`: where `onestep run` serves `/metrics`, `/healthz` and `/readyz`
    /// (docs/observability.md); `--metrics-addr` wins.
    pub metrics_addr: Option<SocketAddr>,
    /// `app.tracing`: OpenTelemetry trace export (docs/observability.md#traces); `None` when the
    /// file does not set it (the `OTEL_EXPORTER_OTLP_*` variables can still turn it on).
    pub tracing: Option<TracingConfig>,
    /// `app.sandbox`: the worker-wide default limits every task's `sandbox:` starts from
    /// (docs/configuration.md#worker-wide-sandbox-defaults); never capabilities.
    pub sandbox_defaults: SandboxConfig,
    /// `mysql` connector resources by name.
    pub connectors: BTreeMap<String, MysqlConnectorConfig>,
    /// `mysql_execution_source` resources by name.
    pub sources: BTreeMap<String, ExecutionSourceConfig>,
    /// Tasks in file order.
    pub tasks: Vec<TaskConfig>,
    /// The `api:` section (for `onestep serve`), if present.
    pub api: Option<ApiConfig>,
    /// The dotenv file that was loaded, if any.
    pub env_file: Option<PathBuf>,
    /// Non-fatal problems (skipped dotenv lines).
    pub warnings: Vec<String>,
    /// The environment used for interpolation (explicit > process > dotenv); the worker resolves
    /// sandbox `env` names and the API resolves `tokens_env` through it.
    #[serde(skip)]
    pub env: EnvLookup,
}

impl AppConfig {
    /// The task named `name`.
    pub fn task(&self, name: &str) -> Option<&TaskConfig> {
        self.tasks.iter().find(|t| t.name == name)
    }
}

/// Log level names accepted in `app.logging.level` (case-insensitive; `WARN` = `WARNING`,
/// `FATAL` = `CRITICAL`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum LogLevel {
    /// `DEBUG`.
    Debug,
    /// `INFO` (default).
    Info,
    /// `WARNING`.
    Warning,
    /// `ERROR`.
    Error,
    /// `CRITICAL`.
    Critical,
}

impl LogLevel {
    /// Parses a level name; `None` when unknown.
    pub fn parse(s: &str) -> Option<Self> {
        match s.trim().to_ascii_uppercase().as_str() {
            "DEBUG" => Some(LogLevel::Debug),
            "INFO" => Some(LogLevel::Info),
            "WARNING" | "WARN" => Some(LogLevel::Warning),
            "ERROR" => Some(LogLevel::Error),
            "CRITICAL" | "FATAL" => Some(LogLevel::Critical),
            _ => None,
        }
    }

    /// The upper-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Debug => "DEBUG",
            LogLevel::Info => "INFO",
            LogLevel::Warning => "WARNING",
            LogLevel::Error => "ERROR",
            LogLevel::Critical => "CRITICAL",
        }
    }
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines (default).
    Text,
    /// One JSON object per line.
    Json,
}

/// `app.logging`. `level`/`format` are `None` when the file does not set them (the CLI then
/// uses its flags or `INFO`/`text`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct LoggingConfig {
    /// Configured level.
    pub level: Option<LogLevel>,
    /// Configured format.
    pub format: Option<LogFormat>,
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

/// `app.tracing` (docs/configuration.md#tracing): where and how spans are exported. Every field
/// is optional; an `OTEL_*` variable set in the process environment wins over its field.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct TracingConfig {
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

/// Which database a connector (and the sources and API on it) talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DatabaseKind {
    /// MySQL or MariaDB (`type: mysql`, `mysql_execution_source`).
    #[default]
    Mysql,
    /// PostgreSQL (`type: postgres`, `postgres_execution_source`; docs/postgres.md).
    Postgres,
}

impl DatabaseKind {
    /// The connector display type (`MySQLConnector`, `PostgresConnector`).
    pub fn connector_display(self) -> &'static str {
        match self {
            DatabaseKind::Mysql => "MySQLConnector",
            DatabaseKind::Postgres => "PostgresConnector",
        }
    }
}

/// A `mysql` or `postgres` connector resource (docs/configuration.md#resources).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MysqlConnectorConfig {
    /// Resource name.
    pub name: String,
    /// The connector's type.
    pub kind: DatabaseKind,
    /// Connection URL (`mysql://user:pass@host:port/db`); secret.
    pub dsn: Secret,
    /// Pool options.
    pub engine_options: EngineOptions,
}

/// `engine_options` of a `mysql` connector: pool bounds passed to the connection pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct EngineOptions {
    /// Upper bound of pooled connections (≥ 1); `None` = the pool's default.
    pub max_connections: Option<u32>,
    /// Connections kept open when idle (≥ 0, ≤ `max_connections`); `None` = pool default.
    pub min_connections: Option<u32>,
}

/// A `mysql_execution_source` resource (docs/semantics.md#worker-settings, docs/configuration.md#resources), fully defaulted.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExecutionSourceConfig {
    /// Resource name.
    pub name: String,
    /// `mysql_execution_source` or `postgres_execution_source` (its connector is of the same kind).
    pub kind: DatabaseKind,
    /// Name of the `mysql` connector resource it uses.
    pub connector: String,
    /// Trimmed namespace (1–255 characters).
    pub namespace: String,
    /// The one task name this source serves (`task_names: [..]` with exactly one entry).
    pub task_name: String,
    /// Executions table (default `onestep_executions`).
    pub table: String,
    /// Attempts table (default `onestep_execution_attempts`).
    pub attempts_table: String,
    /// Maximum executions claimed per poll (default 100).
    pub batch_size: u32,
    /// `poll_interval_s`: wait between polls when idle (> 0, default 1 s).
    #[serde(
        rename = "poll_interval_s",
        serialize_with = "crate::summary::serialize_secs"
    )]
    pub poll_interval: Duration,
    /// `lease_duration_s`: lease length (> 0, at most 100 years, default 90 s).
    #[serde(
        rename = "lease_duration_s",
        serialize_with = "crate::summary::serialize_secs"
    )]
    pub lease_duration: Duration,
    /// `heartbeat_interval_s`: period of the heartbeat (default 30 s; within a third of
    /// `lease_duration`, see [`onestep_core::settings::heartbeat_fits_lease`]).
    #[serde(
        rename = "heartbeat_interval_s",
        serialize_with = "crate::summary::serialize_secs"
    )]
    pub heartbeat_interval: Duration,
    /// `cancel_poll_interval_s`: period of the source's poll of the cancel flags of its
    /// in-flight executions (docs/semantics.md#cancel-poll; default 1 s, or the heartbeat
    /// interval when shorter; `0 < poll <= heartbeat_interval`, see
    /// [`onestep_core::settings::cancel_poll_fits_heartbeat`]).
    #[serde(
        rename = "cancel_poll_interval_s",
        serialize_with = "crate::summary::serialize_secs"
    )]
    pub cancel_poll_interval: Duration,
    /// Worker identity recorded on attempts (default `onestep-worker`).
    pub worker_id: String,
    /// Create missing tables when the source opens (default true).
    pub auto_create: bool,
    /// Value size limits in bytes (defaults 1 MiB / 64 KiB / 1 MiB).
    #[serde(serialize_with = "crate::summary::serialize_limits")]
    pub limits: Limits,
    /// Per-claim cap of each maintenance step (default 100).
    pub reclaim_batch_size: u32,
}

impl ExecutionSourceConfig {
    /// The runtime source name used in logs and errors: `mysql.execution:<namespace>` (or
    /// `postgres.execution:<namespace>`).
    pub fn source_name(&self) -> String {
        match self.kind {
            DatabaseKind::Mysql => format!("mysql.execution:{}", self.namespace),
            DatabaseKind::Postgres => format!("postgres.execution:{}", self.namespace),
        }
    }
}

/// One task (docs/configuration.md#document-shape, adapted: handlers are WebAssembly components).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskConfig {
    /// Task name (defaults to the component file's stem).
    pub name: String,
    /// Free text.
    pub description: Option<String>,
    /// Name of the `mysql_execution_source` resource feeding this task.
    pub source: String,
    /// The component and its params.
    pub handler: HandlerConfig,
    /// Sandbox limits and capabilities.
    pub sandbox: SandboxConfig,
    /// Concurrent executions per worker process (≥ 1, default 1).
    pub concurrency: u32,
    /// Retry policy (default `NoRetry`).
    pub retry: RetryPolicy,
    /// `timeout_s`: wall-clock limit of one handler call (> 0), `None` = unlimited.
    #[serde(
        rename = "timeout_s",
        serialize_with = "crate::summary::serialize_opt_secs"
    )]
    pub timeout: Option<Duration>,
    /// Free mapping exposed to the handler.
    pub config: JsonMap,
    /// Task metadata (not execution metadata).
    pub metadata: JsonMap,
}

/// `handler: {component: PATH, params: {...}}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HandlerConfig {
    /// Absolute, lexically normalised path of the `.wasm` component.
    pub component: PathBuf,
    /// Free mapping passed to the handler.
    pub params: JsonMap,
}

/// `sandbox:` — what one handler instance may use. Nothing is inherited implicitly.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SandboxConfig {
    /// Linear-memory limit per instance in bytes (default 64 MiB, ≥ 1 MiB).
    pub memory_limit_bytes: u64,
    /// Fuel (instruction budget) per call; `None` = unlimited.
    pub fuel: Option<u64>,
    /// Host directories visible to the guest.
    pub preopens: Vec<Preopen>,
    /// Names of host environment variables passed through (values read by the worker).
    pub env: Vec<String>,
    /// Explicit environment variables for the guest.
    pub env_values: BTreeMap<String, String>,
    /// Bound on captured stdout and stderr, each, in bytes (default 64 KiB).
    pub output_limit_bytes: u64,
    // Per-attempt counts (docs/configuration.md#sandbox-instance-limits): the worker's instance
    // pool is sized from every task's `concurrency` times these.
    /// `max_instances`: core instances one attempt may create.
    pub max_instances: u32,
    /// `max_tables`: tables one attempt may create.
    pub max_tables: u32,
    /// `max_memories`: linear memories one attempt may create.
    pub max_memories: u32,
    /// `max_table_elements`: elements of any one table (also charged against
    /// `memory_limit_bytes`).
    pub max_table_elements: u64,
    /// Files, directories and streams the guest may hold open at once
    /// (default [`DEFAULT_MAX_OPEN_HANDLES`], 1–[`MAX_OPEN_HANDLES_LIMIT`]).
    pub max_open_handles: u32,
    // What the handler may put in the worker's log (docs/configuration.md#sandbox-log-limits).
    /// `log_limit_bytes`: guest log bytes per attempt.
    pub log_limit_bytes: u64,
    /// `max_log_lines`: guest log lines per attempt.
    pub max_log_lines: u64,
    /// `max_log_message_bytes`: longest message, note, output line or error message logged.
    pub max_log_message_bytes: u64,
    /// `log_rate_bytes_per_minute`: guest log bytes per minute of all the task's attempts in
    /// one worker.
    pub log_rate_bytes_per_minute: u64,
    /// `cancel_grace_ms`: after a cancel, how long the guest may run on to notice it and
    /// return by itself before it is stopped ([`DEFAULT_CANCEL_GRACE`], 0–60,000 ms).
    #[serde(
        rename = "cancel_grace_ms",
        serialize_with = "crate::summary::serialize_millis"
    )]
    pub cancel_grace: Duration,
    /// `network:` — outbound HTTP (docs/configuration.md#sandbox-network); none by default.
    pub network: NetworkConfig,
}

/// `sandbox.network:` — the origins a handler may call over HTTP and the limits of those
/// requests (docs/configuration.md#sandbox-network). The default allows nothing.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NetworkConfig {
    /// Allowed origins, in file order, unique.
    pub allow: Vec<OriginPattern>,
    /// Host-injected headers: per allowed origin, `(name, value)` pairs in file order.
    pub headers: Vec<OriginHeaders>,
    /// Largest response body, in bytes.
    pub max_response_bytes: u64,
    /// Largest request body, in bytes.
    pub max_request_bytes: u64,
    /// DNS + TCP + TLS bound (`connect_timeout_s`).
    #[serde(serialize_with = "seconds")]
    pub connect_timeout: Duration,
    /// Whole-request bound (`request_timeout_s`), capped by the attempt's deadline at run time.
    #[serde(serialize_with = "seconds")]
    pub request_timeout: Duration,
    /// Requests in flight per attempt.
    pub max_concurrent_requests: u32,
    /// Connections open at once per attempt, in use or idle.
    pub max_connections: u32,
}

impl Default for NetworkConfig {
    fn default() -> Self {
        NetworkConfig {
            allow: Vec::new(),
            headers: Vec::new(),
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            max_request_bytes: DEFAULT_MAX_REQUEST_BYTES,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            max_concurrent_requests: DEFAULT_MAX_CONCURRENT_REQUESTS,
            max_connections: DEFAULT_MAX_CONNECTIONS,
        }
    }
}

/// The headers injected into every request to one allowed origin. Values are [`Secret`]s.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OriginHeaders {
    /// The origin (one of `allow`).
    pub origin: OriginPattern,
    /// `(header name, value)` pairs.
    pub headers: Vec<(String, Secret)>,
}

fn seconds<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

impl Default for SandboxConfig {
    fn default() -> Self {
        SandboxConfig {
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
            network: NetworkConfig::default(),
        }
    }
}

impl SandboxConfig {
    /// The guest environment: each `env` name that is set in `env`, then `env_values` (which win).
    pub fn guest_env(&self, env: &EnvLookup) -> BTreeMap<String, String> {
        let mut out: BTreeMap<String, String> = self
            .env
            .iter()
            .filter_map(|n| env.get(n).map(|v| (n.clone(), v)))
            .collect();
        out.extend(self.env_values.clone());
        out
    }
}

/// The `api:` section (for `onestep serve`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ApiConfig {
    /// Listen address (default `127.0.0.1:8080`).
    pub listen: SocketAddr,
    /// Name of the `mysql` connector resource.
    pub connector: String,
    /// Executions table (default `onestep_executions`).
    pub table: String,
    /// Attempts table (default `onestep_execution_attempts`).
    pub attempts_table: String,
    /// Create missing tables at startup (default false).
    pub auto_create: bool,
    /// How requests are authenticated and mapped to a namespace.
    pub auth: ApiAuth,
    /// Task names clients may submit; empty = any.
    pub allowed_tasks: Vec<String>,
    /// Largest accepted request body in bytes (default 2 MiB).
    pub max_body_bytes: u64,
    /// Value size limits in bytes.
    #[serde(serialize_with = "crate::summary::serialize_limits")]
    pub limits: Limits,
    /// `api.metrics.public`: `/metrics` shows every namespace's execution figures without a
    /// token (default false: only to an `operate` token, its own namespace).
    pub metrics_public: bool,
}

/// Default API listen address.
pub const DEFAULT_API_LISTEN: &str = "127.0.0.1:8080";
/// Default API request body limit: 2 MiB.
pub const DEFAULT_MAX_BODY_BYTES: u64 = 2 * 1024 * 1024;

/// API authentication.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ApiAuth {
    /// No tokens: every request uses this namespace.
    Namespace(String),
    /// Bearer tokens from a file of `token namespace` lines (absolute path).
    TokensFile(PathBuf),
    /// Bearer tokens from an environment variable holding `token=namespace,token=namespace`.
    TokensEnv(String),
}

/// One API bearer token and the namespace it grants.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ApiToken {
    /// The bearer token (secret).
    pub token: Secret,
    /// The namespace (trimmed, 1–255 characters).
    pub namespace: String,
    /// The role (`read`, `submit` or `operate`), `None` when not given (docs/http-api.md#roles).
    pub role: Option<String>,
}
