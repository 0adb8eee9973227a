//! The `api:` section (for `onestep serve`) and API token files/variables.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;

use onestep_core::ApiSettings;
use onestep_core::text::MAX_NAME_CHARS;

use super::BuildContext;
use super::resources::{
    DEFAULT_ATTEMPTS_TABLE, DEFAULT_TABLE, ResourceEntry, auto_create, connector_ref, limits,
    positive, table_name,
};
use crate::env::{EnvLookup, is_env_name};
use crate::error::ConfigError;
use crate::fields::{join, non_empty_str, resolve_path, scalar_text};
use crate::model::{ApiAuth, ApiConfig, ApiToken, DEFAULT_API_LISTEN, Secret};
use crate::node::Node;

/// Keys accepted in `api:` by strict validation.
pub const API_KEYS: [&str; 20] = [
    "listen",
    "connector",
    "table",
    "attempts_table",
    "auto_create",
    "namespace",
    "tokens_file",
    "tokens_env",
    "allowed_tasks",
    "max_body_bytes",
    "limits",
    "metrics",
    "max_wait_s",
    "max_streams",
    "max_connections",
    "max_stream_s",
    "quotas",
    "callbacks",
    "notify",
    "poll_ms",
];
/// Keys accepted in `api.metrics`.
pub const API_METRICS_KEYS: [&str; 1] = ["public"];
/// Keys accepted in `api.limits`.
pub const API_LIMIT_KEYS: [&str; 3] = [
    "max_payload_bytes",
    "max_metadata_bytes",
    "max_result_bytes",
];

const PATH: &str = "api";

/// A 1-based line/entry number and its `(token, namespace, role)`, `None` when malformed.
type NumberedPair = (usize, Option<(String, String, Option<String>)>);

/// The roles a token may name (docs/http-api.md#roles).
pub const TOKEN_ROLES: [&str; 4] = ["read", "submit", "operate", "deploy"];

/// Builds the `api:` section.
pub fn build_api(
    node: &Node,
    ctx: &BuildContext<'_>,
    resources: &BTreeMap<String, ResourceEntry<'_>>,
) -> Result<ApiConfig, ConfigError> {
    if !node.is_map() {
        return Err(ConfigError::bare(node, "api must be a mapping"));
    }
    if let Some(t) = node.get("tokens") {
        return Err(ConfigError::at(
            t,
            PATH,
            "inline tokens are not allowed in YAML; use tokens_file or tokens_env",
        ));
    }
    let listen = match node.get_set("listen") {
        None => DEFAULT_API_LISTEN.parse::<SocketAddr>().map_err(|e| {
            ConfigError::at(node, PATH, format!("invalid default listen address: {e}"))
        })?,
        Some(n) => {
            let text = scalar_text(n);
            text.trim().parse::<SocketAddr>().map_err(|_| {
                ConfigError::at(
                    n,
                    PATH,
                    format!("listen must be a socket address like 127.0.0.1:8080, got '{text}'"),
                )
            })?
        }
    };
    let connector = connector_ref(node, PATH, resources, None)?;
    let table = table_name(node, "table", "executions_table", DEFAULT_TABLE, PATH)?;
    let attempts_table = table_name(
        node,
        "attempts_table",
        "attempts_table",
        DEFAULT_ATTEMPTS_TABLE,
        PATH,
    )?;
    let auto_create = auto_create(node, false, PATH)?;
    let auth = build_auth(node, ctx)?;

    let mut allowed_tasks = Vec::new();
    if let Some(list) = node.get_set("allowed_tasks") {
        let Some(items) = list.items() else {
            return Err(ConfigError::at(
                list,
                PATH,
                "allowed_tasks must be a list of task names",
            ));
        };
        for (i, item) in items.iter().enumerate() {
            match item.as_str().map(str::trim) {
                Some(s) if !s.is_empty() && s.chars().count() <= MAX_NAME_CHARS => {
                    allowed_tasks.push(s.to_owned())
                }
                _ => {
                    return Err(ConfigError::at(
                        item,
                        PATH,
                        format!("allowed_tasks[{i}] must be a non-empty string <= 255 characters"),
                    ));
                }
            }
        }
    }
    let max_body_bytes = positive(
        node,
        "max_body_bytes",
        onestep_core::settings::DEFAULT_API_MAX_BODY_BYTES,
        PATH,
    )?;
    let limits = match node.get_set("limits") {
        None => onestep_core::Limits::default(),
        Some(l) if l.is_map() => limits(l, &join(PATH, "limits"))?,
        Some(l) => return Err(ConfigError::at(l, PATH, "limits must be a mapping")),
    };
    let metrics_public = metrics_public(node)?;
    let max_wait_s = max_wait_s(node)?;
    let max_streams = bounded_u32(
        node,
        "max_streams",
        0,
        onestep_core::api_settings::MAX_API_STREAMS,
        onestep_core::api_settings::DEFAULT_API_MAX_STREAMS,
    )?;
    let max_stream_s = bounded_u32(
        node,
        "max_stream_s",
        1,
        onestep_core::api_settings::MAX_API_STREAM_S,
        onestep_core::api_settings::DEFAULT_API_MAX_STREAM_S,
    )?;
    let max_connections = bounded_u32(
        node,
        "max_connections",
        1,
        onestep_core::api_settings::MAX_API_CONNECTIONS,
        onestep_core::api_settings::DEFAULT_API_MAX_CONNECTIONS,
    )?;
    let quotas = super::quota::build_quotas(node)?;
    let callbacks = super::callbacks::build_callbacks(node)?;
    let notify = notify(node, resources.get(&connector))?;
    let poll_ms = match node.get_set("poll_ms") {
        None => None,
        Some(_) => Some(bounded_u32(
            node,
            "poll_ms",
            onestep_core::api_settings::MIN_API_POLL_MS,
            onestep_core::api_settings::MAX_API_POLL_MS,
            0,
        )?),
    };
    Ok(ApiConfig {
        listen,
        connector,
        table,
        attempts_table,
        auto_create,
        auth,
        settings: ApiSettings {
            allowed_tasks,
            max_body_bytes,
            limits,
            metrics_public,
            max_wait_s,
            max_streams,
            max_stream_s,
            quotas,
            max_connections,
            callbacks,
            notify,
            poll_ms,
        },
    })
}

/// `api.notify` (docs/http-api.md#waiting): `listen` (PostgreSQL `LISTEN`/`NOTIFY`) or `poll`;
/// absent, the backend's default. `listen` needs a PostgreSQL connector: MySQL/MariaDB and
/// SQLite have no pushed notifications.
fn notify(
    node: &Node,
    connector: Option<&ResourceEntry<'_>>,
) -> Result<Option<onestep_core::api_settings::ChangeNotify>, ConfigError> {
    use onestep_core::api_settings::ChangeNotify;
    let Some(n) = node.get_set("notify") else {
        return Ok(None);
    };
    let text = scalar_text(n);
    let mode = match text.trim() {
        "listen" => ChangeNotify::Listen,
        "poll" => ChangeNotify::Poll,
        _ => {
            return Err(ConfigError::at(
                n,
                PATH,
                format!("notify must be 'listen' or 'poll', got '{text}'"),
            ));
        }
    };
    if mode == ChangeNotify::Listen
        && let Some(r) = connector
        && r.kind.is_connector()
        && r.kind.database() != crate::model::DatabaseKind::Postgres
    {
        return Err(ConfigError::at(
            n,
            PATH,
            format!(
                "notify: listen needs a PostgreSQL connector (LISTEN/NOTIFY); '{}' is a {}, \
                 whose changes the API polls: remove notify or set it to poll",
                r.name,
                r.kind.display()
            ),
        ));
    }
    Ok(Some(mode))
}

/// `api.max_wait_s` (default and largest 60): the longest `?wait=` a request may ask for
/// (docs/http-api.md#waiting).
fn max_wait_s(node: &Node) -> Result<u32, ConfigError> {
    use onestep_core::api_settings::MAX_API_WAIT_S;
    match node.get_set("max_wait_s") {
        None => Ok(MAX_API_WAIT_S),
        Some(n) => crate::fields::integer(n)
            .and_then(|i| u32::try_from(i).ok())
            .filter(|i| *i <= MAX_API_WAIT_S)
            .ok_or_else(|| {
                ConfigError::at(
                    n,
                    PATH,
                    format!("max_wait_s must be an integer from 0 to {MAX_API_WAIT_S}"),
                )
            }),
    }
}

/// An integer key of `api:` from `min` to `max` (`default` when absent): `max_streams`,
/// `max_stream_s` (docs/http-api.md#stream).
fn bounded_u32(
    node: &Node,
    key: &str,
    min: u32,
    max: u32,
    default: u32,
) -> Result<u32, ConfigError> {
    match node.get_set(key) {
        None => Ok(default),
        Some(n) => crate::fields::integer(n)
            .and_then(|i| u32::try_from(i).ok())
            .filter(|i| (min..=max).contains(i))
            .ok_or_else(|| {
                ConfigError::at(
                    n,
                    PATH,
                    format!("{key} must be an integer from {min} to {max}"),
                )
            }),
    }
}

/// `api.metrics.public` (default false): `/metrics` shows every namespace's execution figures
/// without a token (docs/observability.md#api-metrics).
fn metrics_public(node: &Node) -> Result<bool, ConfigError> {
    let path = join(PATH, "metrics");
    match node.get_set("metrics") {
        None => Ok(false),
        Some(m) if m.is_map() => match m.get_set("public") {
            None => Ok(false),
            Some(n) => match n.value {
                crate::node::Value::Bool(b) => Ok(b),
                _ => Err(ConfigError::at(n, &path, "public must be a boolean")),
            },
        },
        Some(m) => Err(ConfigError::at(m, PATH, "metrics must be a mapping")),
    }
}

fn build_auth(node: &Node, ctx: &BuildContext<'_>) -> Result<ApiAuth, ConfigError> {
    let namespace = node.get_set("namespace");
    let file = node.get_set("tokens_file");
    let env = node.get_set("tokens_env");
    match (namespace, file, env) {
        (_, Some(f), Some(_)) => Err(ConfigError::at(
            f,
            PATH,
            "tokens_file and tokens_env are mutually exclusive",
        )),
        (Some(n), Some(_), None) | (Some(n), None, Some(_)) => Err(ConfigError::at(
            n,
            PATH,
            "namespace cannot be combined with tokens_file or tokens_env (each token names its namespace)",
        )),
        (None, None, None) => Err(ConfigError::at(
            node,
            PATH,
            "one of namespace, tokens_file or tokens_env is required",
        )),
        (Some(n), None, None) => match n.as_str().map(str::trim) {
            Some(s) if !s.is_empty() && s.chars().count() <= MAX_NAME_CHARS => {
                Ok(ApiAuth::Namespace(s.to_owned()))
            }
            _ => Err(ConfigError::at(
                n,
                PATH,
                "namespace must be non-empty and <= 255 characters",
            )),
        },
        (None, Some(f), None) => match non_empty_str(f) {
            Some(s) => Ok(ApiAuth::TokensFile(resolve_path(ctx.base_dir, s.trim()))),
            None => Err(ConfigError::at(
                f,
                PATH,
                "tokens_file must be a non-empty string",
            )),
        },
        (None, None, Some(e)) => match e.as_str().map(str::trim) {
            Some(s) if is_env_name(s) => Ok(ApiAuth::TokensEnv(s.to_owned())),
            _ => Err(ConfigError::at(
                e,
                PATH,
                "tokens_env must be an environment variable name",
            )),
        },
    }
}

impl ApiConfig {
    /// Reads the API tokens (for `onestep serve`; not done at load so that a worker sharing the
    /// YAML needs no API secrets). `Ok(None)` when auth is a fixed namespace.
    ///
    /// * `tokens_file`: one `token namespace [role]` per line (whitespace-separated); blank
    ///   lines and lines starting with `#` are skipped. Errors: `api.tokens_file: file not found:
    ///   <path>`, `api.tokens_file: line <n>: expected '<token> <namespace> [role]'`.
    /// * `tokens_env`: `token=namespace[:role],…` (a suffix after the last `:` that is not a
    ///   role name belongs to the namespace). Errors: `api.tokens_env: environment variable
    ///   '<X>' is not set`, `api.tokens_env: entry <n>: expected 'token=namespace[:role]'`.
    ///
    /// A role is `read`, `submit` or `operate` (docs/http-api.md#roles); another word is
    /// `<what> <n>: unknown role '<r>' (expected read, submit, operate or deploy)`.
    ///
    /// Duplicate tokens and empty sets are errors; namespaces follow the 1–255 character rule.
    pub fn load_tokens(&self, env: &EnvLookup) -> Result<Option<Vec<ApiToken>>, ConfigError> {
        let err = |path: &str, msg: String| ConfigError::Invalid {
            path: Some(path.to_owned()),
            message: msg,
            line: 0,
            column: 0,
        };
        let (path, pairs): (&str, Vec<NumberedPair>) = match &self.auth {
            ApiAuth::Namespace(_) => return Ok(None),
            ApiAuth::TokensFile(p) => {
                let text = std::fs::read_to_string(p).map_err(|e| {
                    if e.kind() == std::io::ErrorKind::NotFound {
                        err(
                            "api.tokens_file",
                            format!("file not found: {}", p.display()),
                        )
                    } else {
                        err(
                            "api.tokens_file",
                            format!("cannot read {}: {e}", p.display()),
                        )
                    }
                })?;
                let pairs = text
                    .lines()
                    .enumerate()
                    .filter(|(_, l)| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
                    .map(|(i, l)| {
                        let mut parts = l.split_whitespace();
                        let pair = match (parts.next(), parts.next(), parts.next(), parts.next()) {
                            (Some(t), Some(n), r, None) => {
                                Some((t.to_owned(), n.to_owned(), r.map(str::to_owned)))
                            }
                            _ => None,
                        };
                        (i + 1, pair)
                    })
                    .collect();
                ("api.tokens_file", pairs)
            }
            ApiAuth::TokensEnv(name) => {
                let value = env.get(name).ok_or_else(|| {
                    err(
                        "api.tokens_env",
                        format!("environment variable '{name}' is not set"),
                    )
                })?;
                let pairs = value
                    .split(',')
                    .filter(|e| !e.trim().is_empty())
                    .enumerate()
                    .map(|(i, e)| {
                        let pair = e
                            .split_once('=')
                            .map(|(t, rest)| {
                                let rest = rest.trim();
                                let (n, r) = match rest.rsplit_once(':') {
                                    Some((n, r)) if TOKEN_ROLES.contains(&r.trim()) => {
                                        (n.trim(), Some(r.trim().to_owned()))
                                    }
                                    _ => (rest, None),
                                };
                                (t.trim().to_owned(), n.to_owned(), r)
                            })
                            .filter(|(t, n, _)| !t.is_empty() && !n.is_empty());
                        (i + 1, pair)
                    })
                    .collect();
                ("api.tokens_env", pairs)
            }
        };
        let what = if path.ends_with("file") {
            "line"
        } else {
            "entry"
        };
        let shape = if path.ends_with("file") {
            "'<token> <namespace> [role]'"
        } else {
            "'token=namespace[:role]'"
        };
        let mut seen = BTreeSet::new();
        let mut out = Vec::new();
        for (n, pair) in pairs {
            let Some((token, namespace, role)) = pair else {
                return Err(err(path, format!("{what} {n}: expected {shape}")));
            };
            if let Some(r) = role.as_deref()
                && !TOKEN_ROLES.contains(&r)
            {
                return Err(err(
                    path,
                    format!(
                        "{what} {n}: unknown role '{r}' (expected read, submit, operate or deploy)"
                    ),
                ));
            }
            if namespace.chars().count() > MAX_NAME_CHARS {
                return Err(err(
                    path,
                    format!("{what} {n}: namespace must be non-empty and <= 255 characters"),
                ));
            }
            if !seen.insert(token.clone()) {
                return Err(err(path, format!("{what} {n}: duplicate token")));
            }
            out.push(ApiToken {
                token: Secret::new(token),
                namespace,
                role,
            });
        }
        if out.is_empty() {
            return Err(err(path, "no tokens defined".to_owned()));
        }
        Ok(Some(out))
    }
}
