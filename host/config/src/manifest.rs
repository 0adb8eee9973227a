//! The tenant's deployment manifest (`handler.yaml` for `onestep deploy handler.yaml`,
//! docs/deployment-policy.md#the-manifest): which namespace and task, the component file, and
//! the task settings a tenant may choose — sandbox limits, the outbound allow-list with
//! injected headers (plain values or operator-held secrets by name:
//! `Authorization: {secret: openai}`), `timeout_s`, `retry`, `concurrency` and the handler's
//! `params`. Parsed by the same YAML reader and validated by the same builders as a task of the
//! worker's configuration (same bounds, same messages, every error with its path and line), then
//! resolved into the core [`DeploymentSettings`] the policy checks and the store keeps.
//!
//! The manifest is tenant input: it is never `${VAR}` interpolated (a tenant must not read the
//! operator's environment), and settings only the operator may grant (host directories, host
//! environment variables, fleet-wide rate limits, the task's source) are refused by name.

use std::path::{Path, PathBuf};

use onestep_core::deploy_policy::{
    DeploymentSettings, HeaderValue, InjectedHeader, MANIFEST_API_VERSION, MANIFEST_KIND,
};
use onestep_core::network::OriginPattern;
use onestep_core::settings::DEFAULT_CONCURRENCY;
use onestep_core::text::MAX_NAME_CHARS;

use crate::build::BuildContext;
use crate::build::deployments::{is_secret_name, without_network_keys};
use crate::build::network::is_header_name;
use crate::error::ConfigError;
use crate::fields::{
    BadSeconds, integer, join, json_map, non_empty_str, number, positive_seconds, resolve_path,
    scalar_text,
};
use crate::model::SandboxSettings;
use crate::node::{self, Node, Value};

/// Top-level keys of a manifest.
pub const MANIFEST_KEYS: [&str; 10] = [
    "apiVersion",
    "kind",
    "namespace",
    "task",
    "description",
    "handler",
    "sandbox",
    "timeout_s",
    "retry",
    "concurrency",
];
/// Task keys of the worker's configuration a manifest may not set, and why.
const OPERATOR_TASK_KEYS: [(&str, &str); 8] = [
    ("source", "the execution source is the operator's"),
    (
        "rate_limit",
        "a fleet-wide rate limit is set by the operator",
    ),
    ("max_running", "a fleet-wide cap is set by the operator"),
    ("config", "pass values to the handler in handler.params"),
    ("metadata", "task metadata is the operator's"),
    ("name", "the task is named by 'task'"),
    ("emit", "this build runs handlers only"),
    ("hooks", "this build runs handlers only"),
];
/// `sandbox` keys a manifest may set.
pub const MANIFEST_SANDBOX_KEYS: [&str; 11] = [
    "memory_limit_bytes",
    "fuel",
    "max_instances",
    "max_tables",
    "max_memories",
    "max_table_elements",
    "output_limit_bytes",
    "log_limit_bytes",
    "max_log_lines",
    "env_values",
    "network",
];
/// `sandbox` keys of a task only the operator may set, and why.
const OPERATOR_SANDBOX_KEYS: [(&str, &str); 7] = [
    ("preopens", "it grants host directories"),
    ("env", "it passes the host's environment variables"),
    ("max_open_handles", "a worker-wide limit"),
    ("max_log_message_bytes", "a worker-wide limit"),
    ("log_rate_bytes_per_minute", "a worker-wide limit"),
    ("cancel_grace_ms", "a worker-wide limit"),
    ("http_fields_limit_bytes", "host memory outside the sandbox"),
];
/// `sandbox.network` keys a manifest may set.
pub const MANIFEST_NETWORK_KEYS: [&str; 9] = [
    "allow",
    "headers",
    "max_response_bytes",
    "max_request_bytes",
    "connect_timeout_s",
    "request_timeout_s",
    "max_concurrent_requests",
    "max_connections",
    "max_requests",
];
/// `handler` keys of a manifest.
pub const MANIFEST_HANDLER_KEYS: [&str; 2] = ["component", "params"];

/// A parsed manifest.
#[derive(Debug, Clone, PartialEq)]
pub struct DeploymentManifest {
    /// What the deployment asks for, every unset value resolved to its built-in default.
    pub settings: DeploymentSettings,
    /// `handler.component`, resolved against the manifest's directory; `None` when the
    /// manifest does not name one (the component then travels beside it).
    pub component: Option<PathBuf>,
}

/// Whether a header name looks like it carries a credential: its value must then be an
/// operator-held secret (`{secret: NAME}`), never a literal stored and shown in plain text.
/// `Authorization`, `Proxy-Authorization`, `Cookie`, and any name containing `key`, `token`,
/// `secret`, `auth`, `passw`, `credential`, `session` or `signature` (case-insensitive).
pub fn is_credential_header(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    n == "cookie"
        || [
            "key",
            "token",
            "secret",
            "auth",
            "passw",
            "credential",
            "session",
            "signature",
        ]
        .iter()
        .any(|w| n.contains(w))
}

/// Reads and parses a manifest file; `handler.component` is required (relative to the file's
/// directory).
pub fn load_manifest(path: &Path) -> Result<DeploymentManifest, ConfigError> {
    let read_err = |reason: String| ConfigError::Read {
        path: path.to_path_buf(),
        reason,
    };
    let bytes = std::fs::read(path).map_err(|e| read_err(e.to_string()))?;
    let text =
        String::from_utf8(bytes).map_err(|_| read_err("the file is not valid UTF-8".into()))?;
    let base = std::path::absolute(path)
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| PathBuf::from("."));
    let m = parse_manifest(&text, &base)?;
    if m.component.is_none() {
        return Err(ConfigError::Invalid {
            path: Some("handler".into()),
            message: "'component' is required: the path of the .wasm component to deploy".into(),
            line: 0,
            column: 0,
        });
    }
    Ok(m)
}

/// Parses manifest text; relative paths resolve against `base_dir`. The first error stops,
/// naming its path (`sandbox.network.headers["https://api.openai.com:443"]`), what is wrong and
/// what is allowed.
pub fn parse_manifest(text: &str, base_dir: &Path) -> Result<DeploymentManifest, ConfigError> {
    let root = node::parse(text)?;
    if !root.is_map() {
        return Err(ConfigError::bare(
            &root,
            "a deployment manifest must be a mapping at the top level",
        ));
    }
    check_keys(&root, "manifest", &MANIFEST_KEYS, &OPERATOR_TASK_KEYS)?;
    for (key, expected) in [
        ("apiVersion", MANIFEST_API_VERSION),
        ("kind", MANIFEST_KIND),
    ] {
        match root.get(key) {
            Some(n) if n.as_str() == Some(expected) => {}
            Some(n) => {
                return Err(ConfigError::at(
                    n,
                    key,
                    format!("expected {expected:?}, got {:?}", scalar_text(n)),
                ));
            }
            None => {
                return Err(ConfigError::at(
                    &root,
                    key,
                    format!("is required: {key}: {expected}"),
                ));
            }
        }
    }
    let namespace = match root
        .get_set("namespace")
        .map(|n| (n, n.as_str().map(str::trim)))
    {
        Some((_, Some(s))) if !s.is_empty() && s.chars().count() <= MAX_NAME_CHARS => s.to_owned(),
        Some((n, _)) => {
            return Err(ConfigError::at(
                n,
                "namespace",
                "must be a non-empty string <= 255 characters",
            ));
        }
        None => return Err(ConfigError::at(&root, "namespace", "is required")),
    };
    let task = match root.get_set("task") {
        Some(n) => match n.as_str().map(onestep_core::text::task_name) {
            Some(Ok(t)) => t,
            Some(Err(e)) => return Err(ConfigError::at(n, "task", e.to_string())),
            None => return Err(ConfigError::at(n, "task", "must be a string")),
        },
        None => return Err(ConfigError::at(&root, "task", "is required")),
    };
    let description = match root.get_set("description") {
        None => None,
        Some(n) => Some(
            n.as_str()
                .ok_or_else(|| ConfigError::at(n, "description", "must be a string"))?
                .to_owned(),
        ),
    };
    let (component, params) = match root.get_set("handler") {
        None => (None, serde_json::Map::new()),
        Some(h) if h.is_map() => {
            check_keys(h, "handler", &MANIFEST_HANDLER_KEYS, &[])?;
            let component = match h.get_set("component") {
                None => None,
                Some(c) => match non_empty_str(c) {
                    Some(p) => Some(resolve_path(base_dir, p.trim())),
                    None => {
                        return Err(ConfigError::at(
                            c,
                            "handler.component",
                            "must be a non-empty string (the .wasm file's path)",
                        ));
                    }
                },
            };
            (component, json_map(h, "params", "handler")?)
        }
        Some(h) => {
            return Err(ConfigError::at(
                h,
                "handler",
                "must be a mapping {component: PATH, params: {...}}",
            ));
        }
    };
    let concurrency = match root.get_set("concurrency") {
        None => DEFAULT_CONCURRENCY,
        Some(n) => match integer(n).and_then(|i| u32::try_from(i).ok()) {
            Some(c) if c >= 1 => c,
            _ => {
                return Err(ConfigError::at(
                    n,
                    "concurrency",
                    format!("must be an integer >= 1 (got {})", scalar_text(n)),
                ));
            }
        },
    };
    let timeout = match root.get_set("timeout_s") {
        None => None,
        Some(n) => match number(n).filter(|t| t.is_finite()).map(positive_seconds) {
            Some(Ok(d)) => Some(d),
            Some(Err(BadSeconds::OutOfRange)) => {
                return Err(ConfigError::at(n, "timeout_s", "is out of range"));
            }
            _ => return Err(ConfigError::at(n, "timeout_s", "must be a number > 0")),
        },
    };
    if let Some(r) = root.get_set("retry") {
        crate::build::retry::check_retry_fields(r, "retry")?;
    }
    let retry = crate::build::retry::parse_retry(root.get_set("retry"), "retry")?;
    let (sandbox, headers) = match root.get_set("sandbox") {
        None => (SandboxSettings::default(), Vec::new()),
        Some(s) => build_tenant_sandbox(s, base_dir)?,
    };
    Ok(DeploymentManifest {
        settings: DeploymentSettings {
            namespace,
            task,
            description,
            sandbox,
            headers,
            timeout,
            retry,
            concurrency,
            params,
        },
        component,
    })
}

/// Refuses keys outside `allowed`, naming operator-only ones with their reason.
fn check_keys(
    node: &Node,
    path: &str,
    allowed: &[&str],
    operator_only: &[(&str, &str)],
) -> Result<(), ConfigError> {
    let Some(entries) = node.entries() else {
        return Ok(());
    };
    for (k, v) in entries {
        if allowed.contains(&k.as_str()) {
            continue;
        }
        let here = if path == "manifest" {
            k.clone()
        } else {
            join(path, k)
        };
        let message = match operator_only.iter().find(|(key, _)| key == k) {
            Some((_, why)) => format!(
                "is not set by a deployment manifest ({why}); a manifest may set here: {}",
                allowed.join(", ")
            ),
            None => format!(
                "unknown field; a manifest may set here: {}",
                allowed.join(", ")
            ),
        };
        return Err(ConfigError::at(v, &here, message));
    }
    Ok(())
}

fn build_tenant_sandbox(
    node: &Node,
    base_dir: &Path,
) -> Result<(SandboxSettings, Vec<InjectedHeader>), ConfigError> {
    if !node.is_map() {
        return Err(ConfigError::at(node, "sandbox", "must be a mapping"));
    }
    check_keys(
        node,
        "sandbox",
        &MANIFEST_SANDBOX_KEYS,
        &OPERATOR_SANDBOX_KEYS,
    )?;
    let network = node.get_set("network");
    if let Some(n) = network {
        if !n.is_map() {
            return Err(ConfigError::at(n, "sandbox.network", "must be a mapping"));
        }
        check_keys(
            n,
            "sandbox.network",
            &MANIFEST_NETWORK_KEYS,
            &[(
                "rate_limits",
                "an origin's rate limit is a fleet-wide bucket shared by every task",
            )],
        )?;
    }
    let ctx = BuildContext {
        base_dir,
        check_files: false,
        require_components: false,
        require_dsn: false,
    };
    // Injected headers take `{secret: NAME}` values: parsed below, not by the task builder.
    let without_headers = without_network_keys(node, &["headers"]);
    let sandbox = crate::build::sandbox::build_sandbox(
        &without_headers,
        "sandbox",
        &ctx,
        &SandboxSettings::default(),
    )?;
    let headers = match network.and_then(|n| n.get_set("headers")) {
        None => Vec::new(),
        Some(h) => build_headers(h, &sandbox)?,
    };
    Ok((sandbox, headers))
}

fn build_headers(
    map: &Node,
    sandbox: &SandboxSettings,
) -> Result<Vec<InjectedHeader>, ConfigError> {
    const PATH: &str = "sandbox.network.headers";
    let Some(entries) = map.entries() else {
        return Err(ConfigError::at(
            map,
            PATH,
            "must be a mapping of origin to {Header-Name: value or {secret: NAME}}",
        ));
    };
    let mut out: Vec<InjectedHeader> = Vec::new();
    let mut seen: Vec<OriginPattern> = Vec::new();
    for (key, value) in entries {
        let origin =
            OriginPattern::parse(key.trim()).map_err(|why| ConfigError::at(value, PATH, why))?;
        let opath = format!("{PATH}[{key:?}]");
        if !sandbox.network.allow.iter().any(|a| a.origin == origin) {
            return Err(ConfigError::at(
                value,
                &opath,
                "is not one of sandbox.network.allow",
            ));
        }
        if seen.contains(&origin) {
            return Err(ConfigError::at(
                value,
                &opath,
                format!("headers for {origin} are given twice"),
            ));
        }
        seen.push(origin.clone());
        let Some(pairs) = value.entries() else {
            return Err(ConfigError::at(
                value,
                &opath,
                "must be a mapping of header name to value or {secret: NAME}",
            ));
        };
        let mut names: Vec<&str> = Vec::new();
        for (name, v) in pairs {
            let hpath = format!("{opath}.{name}");
            if !is_header_name(name) {
                return Err(ConfigError::at(
                    v,
                    &opath,
                    format!(
                        "{name:?} is not an HTTP header name (letters, digits and !#$%&'*+-.^_`|~)"
                    ),
                ));
            }
            if names.iter().any(|n| n.eq_ignore_ascii_case(name)) {
                return Err(ConfigError::at(
                    v,
                    &hpath,
                    "is given twice (names are case-insensitive)",
                ));
            }
            names.push(name);
            let value = header_value(v, name, &hpath)?;
            out.push(InjectedHeader {
                origin: origin.clone(),
                name: name.clone(),
                value,
            });
        }
    }
    Ok(out)
}

fn header_value(v: &Node, name: &str, path: &str) -> Result<HeaderValue, ConfigError> {
    match &v.value {
        Value::Map(_) => {
            check_keys(v, path, &["secret"], &[])?;
            match v.get("secret").and_then(Node::as_str).map(str::trim) {
                Some(s) if is_secret_name(s) => Ok(HeaderValue::Secret(s.to_owned())),
                _ => Err(ConfigError::at(
                    v,
                    path,
                    "must be {secret: NAME}, NAME an operator-held secret (1 to 64 letters, \
                     digits, '_', '-' and '.')",
                )),
            }
        }
        Value::Str(_) | Value::Int(_) | Value::Float(_) | Value::Bool(_) => {
            if is_credential_header(name) {
                return Err(ConfigError::at(
                    v,
                    path,
                    "looks like a credential: reference an operator-held secret with \
                     {secret: NAME} (a literal would be stored and shown in plain text)",
                ));
            }
            let text = scalar_text(v);
            if text.chars().any(|c| c.is_control() && c != '\t') {
                return Err(ConfigError::at(
                    v,
                    path,
                    "contains a control character (line break?)",
                ));
            }
            Ok(HeaderValue::Literal(text))
        }
        _ => Err(ConfigError::at(
            v,
            path,
            "must be a string or {secret: NAME}",
        )),
    }
}

#[cfg(test)]
#[path = "manifest_tests.rs"]
mod tests;
