//! Strict validation (`onestep check --strict`, docs/configuration.md#strict-validation): applied to the interpolated tree
//! before the build, in the documented order; the first violation stops loading. Also covers this
//! build's own sections (`handler`, `sandbox`, `api`).

use crate::build::api::{API_KEYS, API_LIMIT_KEYS, API_METRICS_KEYS};
use crate::build::resources::{RESOURCE_SECTIONS, ResourceKind, collect, source_options};
use crate::build::retry::check_retry_fields;
use crate::build::sandbox::{PREOPEN_KEYS, SANDBOX_KEYS};
use crate::build::tasks::{HANDLER_KEYS, TASK_KEYS, check_handler_shape};
use crate::build::{LEGACY_APP_KEYS, parse_logging, parse_tracing};
use crate::error::ConfigError;
use crate::fields::{check_allowed, index, integer, join, non_empty_str, scalar_text};
use crate::node::{Node, Value};

/// Allowed top-level keys (docs/configuration.md#strict-validation, plus `api`).
pub const TOP_KEYS: [&str; 16] = [
    "apiVersion",
    "kind",
    "app",
    "reporter",
    "resources",
    "connectors",
    "sources",
    "sinks",
    "hooks",
    "tasks",
    "name",
    "shutdown_timeout_s",
    "config",
    "state",
    "api",
    "deployments",
];

/// Allowed keys of `app:`.
pub const APP_KEYS: [&str; 11] = [
    "name",
    "shutdown_timeout_s",
    "config",
    "state",
    "logging",
    "env_file",
    "strict_env",
    "failure_capture",
    "sandbox",
    "metrics_addr",
    "tracing",
];

/// Runs every strict check on `root` (a mapping).
pub fn validate(root: &Node) -> Result<(), ConfigError> {
    check_allowed(root, "config", &TOP_KEYS)?;
    check_api_version(root)?;
    check_app(root)?;
    check_resources(root)?;
    check_hooks(root)?;
    check_tasks(root)?;
    check_api(root)?;
    Ok(())
}

fn check_api_version(root: &Node) -> Result<(), ConfigError> {
    let api_version = root.get("apiVersion");
    let kind = root.get("kind");
    match (api_version, kind) {
        (None, None) => Ok(()),
        (Some(n), None) | (None, Some(n)) => Err(ConfigError::bare(
            n,
            "'apiVersion' and 'kind' must be provided together in strict mode",
        )),
        (Some(v), Some(k)) => {
            if v.as_str() != Some("onestep/v1alpha1") {
                return Err(ConfigError::bare(
                    v,
                    format!(
                        "unsupported apiVersion '{}'; expected 'onestep/v1alpha1'",
                        scalar_text(v)
                    ),
                ));
            }
            if k.as_str() != Some("App") {
                return Err(ConfigError::bare(
                    k,
                    format!("unsupported kind '{}'; expected 'App'", scalar_text(k)),
                ));
            }
            Ok(())
        }
    }
}

fn check_app(root: &Node) -> Result<(), ConfigError> {
    let Some(app) = root.get("app") else {
        return Ok(());
    };
    if !app.is_map() {
        return Err(ConfigError::bare(app, "app must be a mapping"));
    }
    check_allowed(app, "app", &APP_KEYS)?;
    if let Some(l) = app.get("logging") {
        parse_logging(l)?;
    }
    if let Some(t) = app.get_set("tracing") {
        parse_tracing(t)?;
    }
    if let Some(s) = app.get_set("sandbox")
        && s.is_map()
    {
        check_allowed(s, "app.sandbox", &SANDBOX_KEYS)?;
    }
    if let Some(n) = app.get("env_file")
        && n.as_str().is_none()
    {
        return Err(ConfigError::bare(n, "app.env_file must be a string"));
    }
    if let Some(n) = app.get("strict_env")
        && !matches!(n.value, Value::Bool(_))
    {
        return Err(ConfigError::bare(n, "app.strict_env must be a boolean"));
    }
    if let Some(n) = app.get("failure_capture")
        && !n.is_map()
    {
        return Err(ConfigError::bare(
            n,
            "app.failure_capture must be a mapping",
        ));
    }
    let mut legacy: Vec<&str> = LEGACY_APP_KEYS
        .iter()
        .copied()
        .filter(|k| root.get(k).is_some())
        .collect();
    if !legacy.is_empty() {
        legacy.sort_unstable();
        return Err(ConfigError::bare(
            app,
            format!(
                "strict mode does not allow mixing 'app' with legacy top-level app fields: {}",
                legacy.join(", ")
            ),
        ));
    }
    Ok(())
}

fn check_resources(root: &Node) -> Result<(), ConfigError> {
    // Section/entry shape, type and duplicate checks are shared with the build.
    collect(root)?;
    for section in RESOURCE_SECTIONS {
        let Some(entries) = root.get_set(section).and_then(Node::entries) else {
            continue;
        };
        for (name, node) in entries {
            let r = join(section, name);
            let t = node.get("type").and_then(|t| t.as_str()).unwrap_or("");
            let Some(kind) = ResourceKind::from_type(t) else {
                continue;
            };
            check_allowed(node, &r, kind.allowed_fields())?;
            if kind.is_source() {
                check_source(node, &r)?;
            }
        }
    }
    Ok(())
}

/// The `*_execution_source` checks of docs/configuration.md#strict-validation, steps 1–6.
fn check_source(node: &Node, r: &str) -> Result<(), ConfigError> {
    // 1. namespace (or `namespaces`, checked with the source options)
    if node.get("namespaces").is_none() && node.get("namespace").and_then(non_empty_str).is_none() {
        let at = node.get("namespace").unwrap_or(node);
        return Err(ConfigError::at(
            at,
            r,
            "'namespace' must be a non-empty string",
        ));
    }
    // 2. task_names (a source with `deployed:` serves the deployed tasks instead; its rules are
    //    the build's)
    let tn = node.get("task_names");
    if node.get_set("deployed").is_some() && tn.is_none() {
        return check_source_rest(node, r);
    }
    let Some(items) = tn.and_then(Node::items).filter(|i| !i.is_empty()) else {
        return Err(ConfigError::bare(
            tn.unwrap_or(node),
            format!("'{r}.task_names' must be a non-empty list of strings"),
        ));
    };
    let mut seen = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let Some(s) = non_empty_str(item) else {
            return Err(ConfigError::bare(
                item,
                format!("'{r}.task_names[{i}]' must be a non-empty string"),
            ));
        };
        if seen.contains(&s) {
            return Err(ConfigError::bare(
                item,
                format!("'{r}.task_names' must not contain duplicate field names"),
            ));
        }
        seen.push(s);
    }
    check_source_rest(node, r)
}

/// Steps 3–6 of [`check_source`].
fn check_source_rest(node: &Node, r: &str) -> Result<(), ConfigError> {
    // 3. optional non-empty strings
    for key in ["table", "attempts_table", "worker_id"] {
        if let Some(n) = node.get_set(key)
            && non_empty_str(n).is_none()
        {
            return Err(ConfigError::bare(
                n,
                format!("'{r}.{key}' must be a non-empty string"),
            ));
        }
    }
    // 4. positive integers
    for key in [
        "max_payload_bytes",
        "max_metadata_bytes",
        "max_result_bytes",
        "reclaim_batch_size",
    ] {
        if let Some(n) = node.get_set(key) {
            match integer(n) {
                None => {
                    return Err(ConfigError::bare(
                        n,
                        format!("'{r}.{key}' must be an integer"),
                    ));
                }
                Some(i) if i < 1 => {
                    return Err(ConfigError::bare(n, format!("'{r}.{key}' must be >= 1")));
                }
                Some(_) => {}
            }
        }
    }
    // 5. auto_create
    if let Some(n) = node.get("auto_create")
        && !matches!(n.value, Value::Bool(_))
    {
        return Err(ConfigError::bare(
            n,
            format!("{r}.auto_create must be a boolean"),
        ));
    }
    // 6. the source option rules with the `R.` prefix
    source_options(node, &format!("{r}."))
        .map(|_| ())
        .map_err(|(n, msg)| ConfigError::bare(&n, msg))
}

fn check_hooks(root: &Node) -> Result<(), ConfigError> {
    let Some(hooks) = root.get_set("hooks") else {
        return Ok(());
    };
    if !hooks.is_map() {
        return Err(ConfigError::bare(hooks, "hooks must be a mapping"));
    }
    check_allowed(hooks, "hooks", &["startup", "shutdown", "events"])
}

fn check_tasks(root: &Node) -> Result<(), ConfigError> {
    let Some(tasks) = root.get_set("tasks") else {
        return Ok(());
    };
    let Some(items) = tasks.items() else {
        return Err(ConfigError::bare(tasks, "tasks must be a list"));
    };
    for (i, task) in items.iter().enumerate() {
        let path = index("tasks", i);
        if !task.is_map() {
            return Err(ConfigError::bare(task, format!("{path} must be a mapping")));
        }
        check_allowed(task, &path, &TASK_KEYS)?;
        let has_emit = task
            .get_set("emit")
            .is_some_and(|e| !matches!(&e.value, Value::Seq(v) if v.is_empty()));
        let handler = task.get_set("handler");
        if handler.is_none() && !has_emit {
            return Err(ConfigError::bare(
                task,
                format!("{path} must define either 'handler' or 'emit'"),
            ));
        }
        if let Some(h) = handler {
            let hpath = join(&path, "handler");
            check_handler_shape(h, &hpath)?;
            check_allowed(h, &hpath, &HANDLER_KEYS)?;
            if let Some(p) = h.get_set("params")
                && !p.is_map()
            {
                return Err(ConfigError::at(p, &hpath, "params must be a mapping"));
            }
        }
        if let Some(h) = task.get_set("hooks") {
            check_allowed(
                h,
                &join(&path, "hooks"),
                &["before", "after_success", "on_failure"],
            )?;
        }
        if let Some(r) = task.get_set("retry") {
            check_retry_fields(r, &join(&path, "retry"))?;
        }
        if let Some(s) = task.get_set("sandbox") {
            let spath = join(&path, "sandbox");
            check_allowed(s, &spath, &SANDBOX_KEYS)?;
            if let Some(n) = s.get_set("network") {
                check_allowed(
                    n,
                    &join(&spath, "network"),
                    &crate::build::network::NETWORK_KEYS,
                )?;
            }
            if let Some(items) = s.get_set("preopens").and_then(Node::items) {
                for (j, p) in items.iter().enumerate() {
                    check_allowed(p, &index(&join(&spath, "preopens"), j), &PREOPEN_KEYS)?;
                }
            }
        }
    }
    Ok(())
}

fn check_api(root: &Node) -> Result<(), ConfigError> {
    let Some(api) = root.get_set("api") else {
        return Ok(());
    };
    if let Some(t) = api.get("tokens") {
        return Err(ConfigError::at(
            t,
            "api",
            "inline tokens are not allowed in YAML; use tokens_file or tokens_env",
        ));
    }
    check_allowed(api, "api", &API_KEYS)?;
    if let Some(l) = api.get_set("limits") {
        check_allowed(l, "api.limits", &API_LIMIT_KEYS)?;
    }
    if let Some(m) = api.get_set("metrics") {
        check_allowed(m, "api.metrics", &API_METRICS_KEYS)?;
    }
    Ok(())
}
