//! The build step (docs/configuration.md#load-pipeline step 6, docs/configuration.md#checks-in-both-modes): turns the interpolated tree into [`AppConfig`],
//! enforcing the checks that apply with and without `--strict`.

pub mod api;
pub mod callbacks;
pub mod deployments;
pub mod network;
pub mod quota;
pub(crate) mod rate_limit;
pub mod resources;
pub mod retry;
pub mod sandbox;
pub mod source_values;
pub mod table_pairs;
pub mod tasks;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::env::EnvLookup;
use crate::error::ConfigError;
use crate::fields::{BadSeconds, check_allowed, join, json_map, number, positive_seconds};
use crate::model::{AppConfig, LogFormat, LogLevel, LoggingConfig, OtlpProtocol, TracingSettings};
use crate::node::{Node, Value};
use resources::ResourceKind;

/// What the build needs besides the tree.
#[derive(Debug, Clone, Copy)]
pub struct BuildContext<'a> {
    /// The YAML file's directory (relative paths resolve against it).
    pub base_dir: &'a Path,
    /// Check that component files and preopen directories exist.
    pub check_files: bool,
    /// With `check_files`, also check component files (off for `onestep run`, which quarantines
    /// a task whose component is missing).
    pub require_components: bool,
    /// Require every connector's `dsn` (off for `onestep task run`, which opens no database).
    pub require_dsn: bool,
}

/// Legacy top-level app fields (used when there is no `app:` section).
pub const LEGACY_APP_KEYS: [&str; 4] = ["name", "shutdown_timeout_s", "config", "state"];

/// Everything the pipeline hands to the build besides the tree.
#[derive(Debug, Clone)]
pub struct BuildInputs {
    /// Absolute path of the YAML file.
    pub source_path: PathBuf,
    /// The environment used.
    pub env: EnvLookup,
    /// The dotenv file loaded, if any.
    pub env_file: Option<PathBuf>,
    /// Warnings collected so far.
    pub warnings: Vec<String>,
}

/// A metrics listen address [`parse_metrics_addr`] refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("must be HOST:PORT or :PORT (HOST an IP address or localhost), got '{text}'")]
pub struct BadMetricsAddr {
    /// The text given (trimmed).
    pub text: String,
}

/// Parses a metrics listen address (docs/configuration.md#document-shape): `HOST:PORT` with an
/// IP literal or `localhost` as host, or `:PORT` for every interface (as the reference's
/// `--metrics-addr`). The error says what is allowed.
pub fn parse_metrics_addr(text: &str) -> Result<std::net::SocketAddr, BadMetricsAddr> {
    let text = text.trim();
    let bad = || BadMetricsAddr {
        text: text.to_owned(),
    };
    let (host, port) = text.rsplit_once(':').ok_or_else(bad)?;
    let port: u16 = port.parse().map_err(|_| bad())?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let ip: std::net::IpAddr = match host {
        "" => std::net::Ipv4Addr::UNSPECIFIED.into(),
        "localhost" => std::net::Ipv4Addr::LOCALHOST.into(),
        h => h.parse().map_err(|_| bad())?,
    };
    Ok(std::net::SocketAddr::new(ip, port))
}

/// Builds the typed configuration.
pub fn build(
    root: &Node,
    ctx: &BuildContext<'_>,
    inputs: BuildInputs,
) -> Result<AppConfig, ConfigError> {
    let app = match root.get_set("app") {
        None => None,
        Some(a) if a.is_map() => Some(a),
        Some(a) => return Err(ConfigError::bare(a, "app must be a mapping")),
    };
    // `app.<key>` wins over a legacy top-level key.
    let app_field = |key: &str| -> (Option<&Node>, String) {
        match (app, app.and_then(|a| a.get(key)), root.get(key)) {
            (_, Some(n), _) => (Some(n), join("app", key)),
            (_, None, Some(n)) => (Some(n), key.to_owned()),
            (Some(_), None, None) => (None, join("app", key)),
            (None, None, None) => (None, key.to_owned()),
        }
    };

    let (name_node, name_path) = app_field("name");
    let name = match name_node.and_then(|n| n.as_str()).map(str::trim) {
        Some(s) if !s.is_empty() => s.to_owned(),
        _ => {
            return Err(ConfigError::bare(
                name_node.or(app).unwrap_or(root),
                format!("{name_path} must be a non-empty string"),
            ));
        }
    };
    let (st_node, st_path) = app_field("shutdown_timeout_s");
    let shutdown_timeout = match st_node {
        None => Some(onestep_core::settings::DEFAULT_SHUTDOWN_TIMEOUT),
        Some(n) if n.is_null() => None,
        Some(n) => match number(n).filter(|v| v.is_finite()).map(positive_seconds) {
            Some(Ok(d)) => Some(d),
            Some(Err(BadSeconds::OutOfRange)) => {
                return Err(ConfigError::bare(n, format!("{st_path} is out of range")));
            }
            _ => {
                return Err(ConfigError::bare(
                    n,
                    format!("{st_path} must be > 0 or null"),
                ));
            }
        },
    };
    let config = match app.filter(|a| a.get("config").is_some()) {
        Some(a) => json_map(a, "config", "app")?,
        None => json_map(root, "config", "")?,
    };
    let (state_node, state_path) = app_field("state");
    if let Some(n) = state_node.filter(|n| !n.is_null()) {
        return Err(ConfigError::at(
            n,
            &state_path,
            "state stores are not supported by this build",
        ));
    }
    let metrics_addr = match app.and_then(|a| a.get_set("metrics_addr")) {
        None => None,
        Some(n) => Some(
            n.as_str()
                .ok_or_else(|| "must be a string".to_owned())
                .and_then(|t| parse_metrics_addr(t).map_err(|e| e.to_string()))
                .map_err(|e| ConfigError::at(n, "app", format!("metrics_addr {e}")))?,
        ),
    };
    let logging = match app.and_then(|a| a.get_set("logging")) {
        None => LoggingConfig::default(),
        Some(l) => parse_logging(l)?,
    };
    let tracing = match app.and_then(|a| a.get_set("tracing")) {
        None => None,
        Some(t) => Some(parse_tracing(t)?),
    };
    for key in ["reporter", "hooks"] {
        if let Some(n) = root.get_set(key)
            && !matches!(&n.value, Value::Map(m) if m.is_empty())
        {
            return Err(ConfigError::at(
                n,
                key,
                format!("'{key}' is not supported by this build"),
            ));
        }
    }

    let entries = resources::collect(root)?;
    let mut connectors = BTreeMap::new();
    let mut sources = BTreeMap::new();
    for (name, e) in &entries {
        match e.kind {
            ResourceKind::Mysql | ResourceKind::Postgres | ResourceKind::Sqlite => {
                connectors.insert(
                    name.clone(),
                    resources::build_connector(e, ctx.require_dsn, ctx.base_dir)?,
                );
            }
            ResourceKind::MysqlSource
            | ResourceKind::PostgresSource
            | ResourceKind::SqliteSource => {
                sources.insert(name.clone(), resources::build_source(e, &entries)?);
            }
        }
    }
    let sandbox_defaults = sandbox::build_sandbox_defaults(root, ctx)?;
    let tasks = tasks::build_tasks(root, ctx, &entries, &sources, &sandbox_defaults)?;
    table_pairs::check_shared_tables(&tasks, &sources, &entries)?;
    let deployments = deployments::build_deployments(root, ctx)?;
    let api = match root.get_set("api") {
        None => None,
        Some(a) => Some(api::build_api(a, ctx, &entries)?),
    };

    Ok(AppConfig {
        source_path: inputs.source_path,
        base_dir: ctx.base_dir.to_path_buf(),
        name,
        shutdown_timeout,
        config,
        logging,
        metrics_addr,
        tracing,
        sandbox_defaults,
        connectors,
        sources,
        tasks,
        api,
        deployments,
        env_file: inputs.env_file,
        warnings: inputs.warnings,
        env: inputs.env,
    })
}

/// Parses `app.logging` (unknown keys are errors in both modes, docs/configuration.md#checks-in-both-modes): `level` required
/// and a known name (`unsupported logging level '<x>'`), `format` `text` or `json`.
pub fn parse_logging(node: &Node) -> Result<LoggingConfig, ConfigError> {
    if !node.is_map() {
        return Err(ConfigError::bare(node, "app.logging must be a mapping"));
    }
    check_allowed(node, "app.logging", &["level", "format"])?;
    let Some(level_node) = node.get_set("level") else {
        return Err(ConfigError::bare(node, "app.logging.level is required"));
    };
    let level_text = crate::fields::scalar_text(level_node);
    let level = LogLevel::parse(&level_text).ok_or_else(|| {
        ConfigError::bare(
            level_node,
            format!("unsupported logging level '{level_text}'"),
        )
    })?;
    let format = match node.get_set("format") {
        None => None,
        Some(f) => match f.as_str().map(|s| s.trim().to_ascii_lowercase()).as_deref() {
            Some("text") => Some(LogFormat::Text),
            Some("json") => Some(LogFormat::Json),
            _ => {
                return Err(ConfigError::bare(
                    f,
                    format!(
                        "unsupported logging format '{}'; expected 'text' or 'json'",
                        crate::fields::scalar_text(f)
                    ),
                ));
            }
        },
    };
    Ok(LoggingConfig {
        level: Some(level),
        format,
    })
}

/// Parses `app.tracing` (unknown keys are errors in both modes): `endpoint` an `http://` or
/// `https://` URL with a host, `protocol` `http/protobuf` or `grpc`, `service_name` a non-empty
/// string, `sample_ratio` a number in 0..=1.
pub fn parse_tracing(node: &Node) -> Result<TracingSettings, ConfigError> {
    if !node.is_map() {
        return Err(ConfigError::bare(node, "app.tracing must be a mapping"));
    }
    check_allowed(
        node,
        "app.tracing",
        &["endpoint", "protocol", "service_name", "sample_ratio"],
    )?;
    let endpoint = match node.get_set("endpoint") {
        None => None,
        Some(n) => {
            let text = n.as_str().map(str::trim).unwrap_or_default();
            let host = text
                .strip_prefix("http://")
                .or_else(|| text.strip_prefix("https://"))
                .map(|rest| rest.split(['/', '?', '#']).next().unwrap_or_default());
            match host {
                Some(h) if !h.is_empty() && !h.contains(char::is_whitespace) => {
                    Some(text.trim_end_matches('/').to_owned())
                }
                _ => {
                    return Err(ConfigError::bare(
                        n,
                        format!(
                            "app.tracing.endpoint must be an http:// or https:// URL with a host, got '{}'",
                            crate::fields::scalar_text(n)
                        ),
                    ));
                }
            }
        }
    };
    let protocol = match node.get_set("protocol") {
        None => OtlpProtocol::default(),
        Some(n) => n.as_str().and_then(OtlpProtocol::parse).ok_or_else(|| {
            ConfigError::bare(
                n,
                format!(
                    "unsupported tracing protocol '{}'; expected 'http/protobuf' or 'grpc'",
                    crate::fields::scalar_text(n)
                ),
            )
        })?,
    };
    let service_name = match node.get_set("service_name") {
        None => None,
        Some(n) => match n.as_str().map(str::trim) {
            Some(s) if !s.is_empty() => Some(s.to_owned()),
            _ => {
                return Err(ConfigError::bare(
                    n,
                    "app.tracing.service_name must be a non-empty string",
                ));
            }
        },
    };
    let sample_ratio = match node.get_set("sample_ratio") {
        None => None,
        Some(n) => match number(n) {
            Some(r) if (0.0..=1.0).contains(&r) => Some(r),
            _ => {
                return Err(ConfigError::bare(
                    n,
                    "app.tracing.sample_ratio must be a number from 0 to 1",
                ));
            }
        },
    };
    Ok(TracingSettings {
        endpoint,
        protocol,
        service_name,
        sample_ratio,
    })
}
