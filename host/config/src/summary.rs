//! The `onestep check` summary (docs/cli.md#onestep-check, adapted): text lines and a JSON document.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use onestep_core::retry::RetryPolicy;
use serde::Serialize;
use serde_json::json;

use crate::model::{ApiAuth, ApiConfig, AppConfig, JsonMap, PreopenMode, SandboxSettings};

/// One resource in the summary.
#[derive(Debug, Clone, Serialize)]
pub struct ResourceSummary {
    /// The resource key in the YAML.
    pub key: String,
    /// The runtime name (`mysql.execution:<ns>` for sources, the key for connectors).
    pub name: String,
    /// The resource type's display name ([`DatabaseKind::connector_display`](crate::DatabaseKind::connector_display),
    /// [`DatabaseKind::source_display`](crate::DatabaseKind::source_display)): `MySQLConnector`,
    /// `MySQLExecutionSource`, `PostgresConnector` or `PostgresExecutionSource`.
    #[serde(rename = "type")]
    pub kind: String,
}

/// A task's source reference, with the source's lease timing.
#[derive(Debug, Clone, Serialize)]
pub struct SourceRef {
    /// Resource key.
    pub name: String,
    /// Resource type.
    #[serde(rename = "type")]
    pub kind: String,
    /// The source's `lease_duration_s`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease_duration_s: Option<f64>,
    /// The source's `heartbeat_interval_s`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub heartbeat_interval_s: Option<f64>,
    /// The source's `cancel_poll_interval_s` (docs/semantics.md#cancel-poll).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cancel_poll_interval_s: Option<f64>,
}

/// One task in the summary.
#[derive(Debug, Clone, Serialize)]
pub struct TaskSummary {
    /// Task name.
    pub name: String,
    /// Description.
    pub description: Option<String>,
    /// Absolute component path.
    pub handler_component: PathBuf,
    /// Handler params.
    pub handler_params: JsonMap,
    /// Source.
    pub source: SourceRef,
    /// Concurrency.
    pub concurrency: u32,
    /// Timeout in seconds.
    pub timeout_s: Option<f64>,
    /// `max_duration_s` (docs/steps.md#max-duration), only when set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_duration_s: Option<f64>,
    /// Retry policy as JSON (`{"type": ..., ...}`).
    pub retry: RetryPolicy,
    /// Sandbox settings, keyed as in the file ([`sandbox_json`]).
    pub sandbox: serde_json::Value,
    /// Task config.
    pub config: JsonMap,
    /// Task metadata.
    pub metadata: JsonMap,
}

/// The JSON summary printed by `onestep check --json`.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// Absolute YAML path.
    pub target: PathBuf,
    /// App name.
    pub name: String,
    /// Shutdown timeout in seconds.
    pub shutdown_timeout_s: Option<f64>,
    /// Resources sorted by key.
    pub resources: Vec<ResourceSummary>,
    /// Tasks in file order.
    pub tasks: Vec<TaskSummary>,
    /// The API section.
    pub api: Option<ApiConfig>,
}

/// A duration as the seconds the file wrote: exact for values with at most nine decimals
/// below about 104 days (the nanoseconds and the division are both exact there).
pub fn secs(d: Duration) -> f64 {
    d.as_nanos() as f64 / 1e9
}

/// `serialize_with` helper for [`Duration`] fields: seconds, as in the file.
pub fn serialize_secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(secs(*d))
}

/// `serialize_with` helper for optional [`Duration`] fields: seconds or `null`.
pub fn serialize_opt_secs<S: serde::Serializer>(
    d: &Option<Duration>,
    s: S,
) -> Result<S::Ok, S::Error> {
    d.map(secs).serialize(s)
}

/// `serialize_with` helper for [`Limits`](onestep_core::Limits) fields.
pub fn serialize_limits<S: serde::Serializer>(
    l: &onestep_core::Limits,
    s: S,
) -> Result<S::Ok, S::Error> {
    json!({
        "max_payload_bytes": l.max_payload_bytes,
        "max_metadata_bytes": l.max_metadata_bytes,
        "max_result_bytes": l.max_result_bytes,
    })
    .serialize(s)
}

impl AppConfig {
    /// Resources sorted by key.
    pub fn resource_summaries(&self) -> Vec<ResourceSummary> {
        let mut out: Vec<ResourceSummary> = self
            .connectors
            .iter()
            .map(|(k, c)| ResourceSummary {
                key: k.clone(),
                name: k.clone(),
                kind: c.kind.connector_display().to_owned(),
            })
            .chain(self.sources.iter().map(|(k, s)| ResourceSummary {
                key: k.clone(),
                name: s.source_name(),
                kind: s.kind.source_display().to_owned(),
            }))
            .collect();
        out.sort_by(|a, b| a.key.cmp(&b.key));
        out
    }

    /// The JSON summary (`onestep check --json`).
    pub fn json_summary(&self) -> Summary {
        Summary {
            target: self.source_path.clone(),
            name: self.name.clone(),
            shutdown_timeout_s: self.shutdown_timeout.map(secs),
            resources: self.resource_summaries(),
            tasks: self
                .tasks
                .iter()
                .map(|t| TaskSummary {
                    name: t.name.clone(),
                    description: t.description.clone(),
                    handler_component: t.handler.component.clone(),
                    handler_params: t.handler.params.clone(),
                    source: {
                        let s = self.sources.get(&t.source);
                        SourceRef {
                            name: t.source.clone(),
                            kind: s
                                .map(|s| s.kind)
                                .unwrap_or_default()
                                .source_display()
                                .to_owned(),
                            lease_duration_s: s.map(|s| secs(s.lease_duration)),
                            heartbeat_interval_s: s.map(|s| secs(s.heartbeat_interval)),
                            cancel_poll_interval_s: s.map(|s| secs(s.cancel_poll_interval)),
                        }
                    },
                    concurrency: t.concurrency,
                    timeout_s: t.timeout.map(secs),
                    max_duration_s: t.max_duration.map(secs),
                    retry: t.retry.clone(),
                    sandbox: sandbox_json(&t.sandbox),
                    config: t.config.clone(),
                    metadata: t.metadata.clone(),
                })
                .collect(),
            api: self.api.clone(),
        }
    }

    /// The text summary (`onestep check`), one line per item, ending with a newline.
    pub fn summary(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "Target: {}", self.source_path.display());
        let _ = writeln!(out, "App: {}", self.name);
        let _ = writeln!(
            out,
            "Shutdown timeout: {}",
            self.shutdown_timeout
                .map(|d| format!("{:.2}s", secs(d)))
                .unwrap_or_else(|| "-".to_owned())
        );
        let resources = self.resource_summaries();
        let list: Vec<String> = resources
            .iter()
            .map(|r| format!("{}<{}>", r.key, r.kind))
            .collect();
        let _ = writeln!(out, "Resources: {} ({})", resources.len(), list.join(", "));
        let _ = writeln!(out, "Tasks: {}", self.tasks.len());
        for t in &self.tasks {
            let timeout = t
                .timeout
                .map(|d| format!("{:.2}s", secs(d)))
                .unwrap_or_else(|| "-".to_owned());
            let source_kind = self
                .sources
                .get(&t.source)
                .map(|s| s.kind)
                .unwrap_or_default();
            let _ = write!(
                out,
                "- {} source={}<{}> concurrency={} timeout={} retry={}",
                t.name,
                t.source,
                source_kind.source_display(),
                t.concurrency,
                timeout,
                t.retry.name()
            );
            if let Some(d) = t.max_duration {
                let _ = write!(out, " max_duration={:.2}s", secs(d));
            }
            if let Some(d) = &t.description {
                let _ = write!(out, " description={d}");
            }
            out.push('\n');
            let _ = writeln!(
                out,
                "  handler={} {}",
                t.handler.component.display(),
                sandbox_text(&t.sandbox)
            );
            let keys = |m: &JsonMap| m.keys().cloned().collect::<Vec<_>>().join(",");
            if !t.handler.params.is_empty() || !t.config.is_empty() || !t.metadata.is_empty() {
                let _ = writeln!(
                    out,
                    "  params=[{}] config=[{}] metadata=[{}]",
                    keys(&t.handler.params),
                    keys(&t.config),
                    keys(&t.metadata)
                );
            }
            if let Some(s) = self.sources.get(&t.source) {
                let _ = writeln!(
                    out,
                    "  lease={:.2}s heartbeat={:.2}s cancel_poll={:.2}s",
                    secs(s.lease_duration),
                    secs(s.heartbeat_interval),
                    secs(s.cancel_poll_interval)
                );
            }
        }
        if let Some(api) = &self.api {
            let auth = match &api.auth {
                ApiAuth::Namespace(ns) => format!("namespace={ns}"),
                ApiAuth::TokensFile(p) => format!("tokens_file={}", p.display()),
                ApiAuth::TokensEnv(v) => format!("tokens_env={v}"),
            };
            let tasks = if api.settings.allowed_tasks.is_empty() {
                "*".to_owned()
            } else {
                api.settings.allowed_tasks.join(",")
            };
            let _ = writeln!(
                out,
                "API: listen={} connector={} tables={}/{} {auth} allowed_tasks={tasks}",
                api.listen, api.connector, api.table, api.attempts_table
            );
        }
        out
    }
}

/// A task's sandbox in the JSON summary: the settings' own serialisation (every key under its
/// file name, so a new key shows without a change here), with `network.allow` written as the
/// file writes it — a list of origins, the injected headers (values redacted) apart under
/// `network.headers`.
pub fn sandbox_json(s: &SandboxSettings) -> serde_json::Value {
    let mut v = serde_json::to_value(s).unwrap_or(serde_json::Value::Null);
    if let Some(network) = v.get_mut("network").and_then(|n| n.as_object_mut()) {
        let allow = &s.network.allow;
        network.insert(
            "allow".to_owned(),
            allow.iter().map(|a| json!(a.origin)).collect(),
        );
        network.insert(
            "headers".to_owned(),
            allow
                .iter()
                .filter(|a| !a.headers.is_empty())
                .map(|a| json!({"origin": a.origin, "headers": a.headers}))
                .collect(),
        );
        network.insert(
            "rate_limits".to_owned(),
            allow
                .iter()
                .filter_map(|a| {
                    a.rate_limit.map(|r| {
                        json!({"origin": a.origin, "per_second": r.per_second, "burst": r.burst})
                    })
                })
                .collect(),
        );
    }
    v
}

fn sandbox_text(s: &SandboxSettings) -> String {
    let fuel = s
        .fuel
        .map(|f| f.to_string())
        .unwrap_or_else(|| "unlimited".to_owned());
    let preopens: Vec<String> = s
        .preopens
        .iter()
        .map(|p| {
            let mode = match p.mode {
                PreopenMode::Ro => "ro",
                PreopenMode::Rw => "rw",
            };
            format!("{}={}({mode})", p.guest, p.host.display())
        })
        .collect();
    let mut env: Vec<&str> = s.env.iter().map(String::as_str).collect();
    env.extend(s.env_values.keys().map(String::as_str));
    let mut text = format!(
        "memory={}B fuel={fuel} preopens=[{}] env=[{}]",
        s.memory_limit_bytes,
        preopens.join(","),
        env.join(",")
    );
    // Per-attempt instance limits (docs/configuration.md#sandbox-instance-limits).
    let _ = write!(
        text,
        " instances={} memories={} tables={}x{} open_handles={}",
        s.max_instances, s.max_memories, s.max_tables, s.max_table_elements, s.max_open_handles
    );
    // Log limits (docs/configuration.md#sandbox-log-limits).
    let _ = write!(
        text,
        " log={}B/{}lines message={}B rate={}B/min cancel_grace={}ms",
        s.log_limit_bytes,
        s.max_log_lines,
        s.max_log_message_bytes,
        s.log_rate_bytes_per_minute,
        s.cancel_grace.as_millis()
    );
    // Outbound HTTP (docs/configuration.md#sandbox-network); header values never shown.
    let n = &s.network;
    if !n.allow.is_empty() {
        let allow: Vec<String> = n.allow.iter().map(|a| a.origin.to_string()).collect();
        let headers: Vec<String> = n
            .allow
            .iter()
            .flat_map(|o| {
                o.headers
                    .iter()
                    .map(move |(name, value)| format!("{}:{name}={value}", o.origin))
            })
            .collect();
        let _ = write!(
            text,
            " network=[{}] headers=[{}] max_response={}B max_request={}B connect_timeout={}s request_timeout={}s max_concurrent_requests={} max_connections={}",
            allow.join(","),
            headers.join(","),
            n.max_response_bytes,
            n.max_request_bytes,
            n.connect_timeout.as_secs_f64(),
            n.request_timeout.as_secs_f64(),
            n.max_concurrent_requests,
            n.max_connections
        );
        let limits: Vec<String> = n
            .allow
            .iter()
            .filter_map(|o| {
                o.rate_limit
                    .map(|r| format!("{}:{}/s,burst={}", o.origin, r.per_second, r.burst))
            })
            .collect();
        if !limits.is_empty() {
            let _ = write!(text, " rate_limits=[{}]", limits.join(" "));
        }
    }
    text
}
