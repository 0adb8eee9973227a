//! Typed, validated settings produced by [`load`](crate::load): the final values the worker,
//! the runtime and the API consume. A task's sandbox is not mirrored here: it is the runtime's
//! [`SandboxSettings`] (with [`NetworkSettings`] and the one [`Secret`] type), defined in
//! `onestep_core` and built directly by [`build`](crate::build). Durations are [`Duration`]s (the file's `_s` seconds,
//! converted once at load; the summaries print them back as seconds), sizes are bytes
//! (`_bytes`). Defaults come from [`onestep_core::settings`] (worker and sandbox settings) or
//! from the constants here (API); every cross-field rule has been checked by the build.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

pub use onestep_core::network::{
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_MAX_CONCURRENT_REQUESTS, DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_REQUEST_BYTES, DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_REQUEST_TIMEOUT,
    MAX_CONNECTIONS_LIMIT, OriginPattern,
};
use onestep_core::retry::RetryPolicy;
pub use onestep_core::sandbox::{AllowedOrigin, NetworkSettings, SandboxSettings};
pub use onestep_core::settings::Secret;
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
use onestep_core::{ApiSettings, Limits};
pub use onestep_telemetry::{OtlpProtocol, TracingSettings};
use serde::Serialize;

use crate::env::EnvLookup;

/// A free-form JSON mapping (`config`, `metadata`, handler `params`).
pub type JsonMap = serde_json::Map<String, serde_json::Value>;

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
    pub tracing: Option<TracingSettings>,
    /// `app.sandbox`: the worker-wide default limits every task's `sandbox:` starts from
    /// (docs/configuration.md#worker-wide-sandbox-defaults); never capabilities.
    pub sandbox_defaults: SandboxSettings,
    /// `mysql` connector resources by name.
    pub connectors: BTreeMap<String, MysqlConnectorConfig>,
    /// `mysql_execution_source` resources by name.
    pub sources: BTreeMap<String, ExecutionSourceConfig>,
    /// Tasks in file order.
    pub tasks: Vec<TaskConfig>,
    /// The `api:` section (for `onestep serve`), if present.
    pub api: Option<ApiConfig>,
    /// The `deployments:` section (docs/configuration.md#deployments): the operator-held
    /// secrets and the policy ceilings of tenant deployments; `None` when absent (every deploy
    /// is refused).
    pub deployments: Option<crate::build::deployments::DeploymentsConfig>,
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
    /// The sources that serve deployed tasks (`deployed:`), by name.
    pub fn deployed_sources(&self) -> impl Iterator<Item = &ExecutionSourceConfig> {
        self.sources.values().filter(|s| s.deployed.is_some())
    }

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

/// Which database a connector (and the sources and API on it) talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DatabaseKind {
    /// MySQL or MariaDB (`type: mysql`, `mysql_execution_source`).
    #[default]
    Mysql,
    /// PostgreSQL (`type: postgres`, `postgres_execution_source`; docs/postgres.md).
    Postgres,
    /// Embedded SQLite (`type: sqlite`, `sqlite_execution_source`; docs/sqlite.md).
    Sqlite,
}

impl DatabaseKind {
    /// The connector display type (`MySQLConnector`, `PostgresConnector`, `SQLiteConnector`).
    pub fn connector_display(self) -> &'static str {
        match self {
            DatabaseKind::Mysql => "MySQLConnector",
            DatabaseKind::Postgres => "PostgresConnector",
            DatabaseKind::Sqlite => "SQLiteConnector",
        }
    }

    /// The execution source display type (`MySQLExecutionSource`, `PostgresExecutionSource`).
    pub fn source_display(self) -> &'static str {
        match self {
            DatabaseKind::Mysql => "MySQLExecutionSource",
            DatabaseKind::Postgres => "PostgresExecutionSource",
            DatabaseKind::Sqlite => "SQLiteExecutionSource",
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
    /// Trimmed namespace (1–255 characters); for a source with `namespaces:`, its label (`a,b`
    /// or `*`), used in logs and metrics.
    pub namespace: String,
    /// The namespaces it claims from (docs/semantics.md#fair-claim).
    #[serde(skip)]
    pub scope: onestep_core::request::NamespaceScope,
    /// `weights:` and `max_running_per_key:` of its fair claim (docs/semantics.md#fair-claim).
    #[serde(skip)]
    pub fair: onestep_core::schedule::FairShare,
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
    /// `deployed:` (docs/configuration.md#deployed-tasks): the source serves the tasks deployed
    /// in its namespaces (through the deployments API) instead of one task it names; its
    /// `task_name` is then empty and no task of the file may name it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deployed: Option<DeployedConfig>,
}

/// A source's `deployed:` (docs/configuration.md#deployed-tasks).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct DeployedConfig {
    /// `poll_s`: how often the worker reads the deployments' revision (default 2 s).
    #[serde(rename = "poll_s", serialize_with = "crate::summary::serialize_secs")]
    pub poll: Duration,
    /// `slots`: attempts of deployed tasks the worker's instance pool holds at once, at the
    /// largest sandbox the policy ceilings allow (default 64).
    pub slots: u32,
}

impl ExecutionSourceConfig {
    /// The runtime source name used in logs and errors: `mysql.execution:<namespace>` (or
    /// `postgres.execution:<namespace>`).
    pub fn source_name(&self) -> String {
        match self.kind {
            DatabaseKind::Mysql => format!("mysql.execution:{}", self.namespace),
            DatabaseKind::Postgres => format!("postgres.execution:{}", self.namespace),
            DatabaseKind::Sqlite => format!("sqlite.execution:{}", self.namespace),
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
    /// Sandbox limits and capabilities: the runtime's own settings struct
    /// ([`SandboxSettings`], defined once in `onestep_core::sandbox`), built directly from the
    /// file.
    pub sandbox: SandboxSettings,
    /// Concurrent executions per worker process (≥ 1, default 1).
    pub concurrency: u32,
    /// `rate_limit: {per_second, burst}`: the fleet-wide limit on the task's execution starts
    /// (docs/semantics.md#rate-limits); `None` = unlimited.
    pub rate_limit: Option<onestep_core::rate::RateLimit>,
    /// `max_running`: most executions of the task running at once across the whole fleet
    /// (docs/semantics.md#max-running; ≥ 1); `None` = no cap.
    pub max_running: Option<u32>,
    /// Retry policy (default `NoRetry`).
    pub retry: RetryPolicy,
    /// `timeout_s`: wall-clock limit of one handler call (> 0), `None` = unlimited.
    #[serde(
        rename = "timeout_s",
        serialize_with = "crate::summary::serialize_opt_secs"
    )]
    pub timeout: Option<Duration>,
    /// `max_duration_s`: wall-clock limit of the whole execution from its first start, sleeps
    /// and retries included (> 0, at least `timeout_s`; docs/steps.md#max-duration), `None` =
    /// unlimited.
    #[serde(
        rename = "max_duration_s",
        serialize_with = "crate::summary::serialize_opt_secs"
    )]
    pub max_duration: Option<Duration>,
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

/// The `api:` section (for `onestep serve`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ApiConfig {
    /// Listen address (default `127.0.0.1:8080`).
    pub listen: SocketAddr,
    /// Name of the connector resource (`mysql` or `postgres`).
    pub connector: String,
    /// Executions table (default `onestep_executions`).
    pub table: String,
    /// Attempts table (default `onestep_execution_attempts`).
    pub attempts_table: String,
    /// Create missing tables at startup (default false).
    pub auto_create: bool,
    /// How requests are authenticated and mapped to a namespace.
    pub auth: ApiAuth,
    /// What requests may do: the task allow-list, the body and value limits, `/metrics`
    /// exposure (one struct, defined in core and enforced by the API crate).
    #[serde(flatten)]
    pub settings: ApiSettings,
}

/// Default API listen address.
pub const DEFAULT_API_LISTEN: &str = "127.0.0.1:8080";

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
