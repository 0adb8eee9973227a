//! `tasks:` (docs/configuration.md#document-shape, docs/configuration.md#checks-in-both-modes, adapted): each task runs a WebAssembly component handler in a
//! sandbox, fed by one `mysql_execution_source`.

use std::collections::BTreeMap;
use std::path::Path;

use onestep_core::text::MAX_NAME_CHARS;

use super::BuildContext;
use super::resources::ResourceEntry;
use super::sandbox::build_sandbox;
use crate::error::ConfigError;
use crate::fields::{
    BadSeconds, index, integer, join, json_map, non_empty_str, number, positive_seconds,
    resolve_path,
};
use crate::model::{ExecutionSourceConfig, HandlerConfig, SandboxSettings, TaskConfig};
use crate::node::{Node, Value};
use onestep_core::settings::DEFAULT_CONCURRENCY;

/// Task keys accepted by strict validation (docs/configuration.md#strict-validation plus `sandbox`).
pub const TASK_KEYS: [&str; 16] = [
    "name",
    "description",
    "source",
    "emit",
    "dead_letter",
    "config",
    "metadata",
    "handler",
    "hooks",
    "concurrency",
    "rate_limit",
    "max_running",
    "retry",
    "timeout_s",
    "max_duration_s",
    "sandbox",
];
/// `handler` keys.
pub const HANDLER_KEYS: [&str; 2] = ["component", "params"];
const COMPONENT_HINT: &str =
    "handlers are WebAssembly components: use 'handler: {component: PATH}'";

/// Checks the handler's shape (both modes): a mapping with a non-empty `component` string;
/// `ref` and plain-string handlers are rejected with a clear message.
pub fn check_handler_shape<'a>(handler: &'a Node, path: &str) -> Result<&'a str, ConfigError> {
    match &handler.value {
        Value::Str(s) => Err(ConfigError::at(
            handler,
            path,
            format!(
                "{COMPONENT_HINT} ('{s}' is an import reference, which this build does not support)"
            ),
        )),
        Value::Map(_) => {
            if handler.get("ref").is_some() && handler.get("component").is_none() {
                return Err(ConfigError::at(
                    handler,
                    path,
                    format!("{COMPONENT_HINT} instead of 'ref'"),
                ));
            }
            handler
                .get("component")
                .and_then(non_empty_str)
                .map(str::trim)
                .ok_or_else(|| {
                    ConfigError::at(handler, path, "'component' must be a non-empty string")
                })
        }
        _ => Err(ConfigError::at(handler, path, COMPONENT_HINT)),
    }
}

/// Builds every task.
pub fn build_tasks(
    root: &Node,
    ctx: &BuildContext<'_>,
    resources: &BTreeMap<String, ResourceEntry<'_>>,
    sources: &BTreeMap<String, ExecutionSourceConfig>,
    defaults: &SandboxSettings,
) -> Result<Vec<TaskConfig>, ConfigError> {
    let Some(tasks) = root.get_set("tasks") else {
        return Ok(Vec::new());
    };
    let Some(items) = tasks.items() else {
        return Err(ConfigError::bare(tasks, "tasks must be a list"));
    };
    let mut out: Vec<TaskConfig> = Vec::new();
    for (i, node) in items.iter().enumerate() {
        let path = index("tasks", i);
        let task = build_task(node, &path, ctx, resources, sources, defaults)?;
        if out.iter().any(|t| t.name == task.name) {
            let at = node.get("name").unwrap_or(node);
            return Err(ConfigError::at(
                at,
                &path,
                format!("duplicate task name '{}'", task.name),
            ));
        }
        out.push(task);
    }
    Ok(out)
}

fn build_task(
    node: &Node,
    path: &str,
    ctx: &BuildContext<'_>,
    resources: &BTreeMap<String, ResourceEntry<'_>>,
    sources: &BTreeMap<String, ExecutionSourceConfig>,
    defaults: &SandboxSettings,
) -> Result<TaskConfig, ConfigError> {
    if !node.is_map() {
        return Err(ConfigError::bare(node, format!("{path} must be a mapping")));
    }
    for key in ["emit", "dead_letter", "hooks"] {
        if let Some(n) = node.get_set(key)
            && !matches!(&n.value, Value::Seq(v) if v.is_empty())
            && !matches!(&n.value, Value::Map(v) if v.is_empty())
        {
            return Err(ConfigError::at(
                n,
                path,
                format!("'{key}' is not supported by this build"),
            ));
        }
    }
    let Some(handler_node) = node.get_set("handler") else {
        return Err(ConfigError::bare(
            node,
            format!("{path} must define either 'handler' or 'emit'"),
        ));
    };
    let hpath = join(path, "handler");
    let component = check_handler_shape(handler_node, &hpath)?;
    let component_path = resolve_path(ctx.base_dir, component);
    if ctx.check_files && ctx.require_components && !component_path.is_file() {
        let at = handler_node.get("component").unwrap_or(handler_node);
        return Err(ConfigError::at(
            at,
            &join(&hpath, "component"),
            format!("file not found: {}", component_path.display()),
        ));
    }
    let handler = HandlerConfig {
        params: json_map(handler_node, "params", &hpath)?,
        component: component_path,
    };

    let name = match node.get_set("name") {
        None => default_name(&handler.component),
        Some(n) => match n.as_str().map(str::trim) {
            Some(s) if !s.is_empty() && s.chars().count() <= MAX_NAME_CHARS => s.to_owned(),
            _ => {
                return Err(ConfigError::at(
                    n,
                    path,
                    "name must be a non-empty string <= 255 characters",
                ));
            }
        },
    };

    let Some(source_node) = node.get("source").filter(|n| non_empty_str(n).is_some()) else {
        return Err(ConfigError::at(
            node,
            path,
            "'source' must be a non-empty string",
        ));
    };
    let source = source_node.as_str().unwrap_or("").trim().to_owned();
    match resources.get(&source) {
        None => {
            return Err(ConfigError::at(
                source_node,
                path,
                format!("unknown resource '{source}'"),
            ));
        }
        Some(r) if !r.kind.is_source() => {
            return Err(ConfigError::at(
                source_node,
                path,
                format!("resource '{source}' cannot be used as a source"),
            ));
        }
        Some(_) => {}
    }
    if let Some(s) = sources.get(&source)
        && s.deployed.is_some()
    {
        return Err(ConfigError::at(
            source_node,
            path,
            format!(
                "source '{source}' serves deployed tasks (deployed:); a task of the file needs \
                 a source that names it in task_names"
            ),
        ));
    }
    if let Some(s) = sources.get(&source)
        && s.task_name != name
    {
        return Err(ConfigError::at(
            source_node,
            path,
            format!(
                "{} is configured for task '{}', not '{name}'",
                s.source_name(),
                s.task_name
            ),
        ));
    }

    let concurrency = match node.get_set("concurrency") {
        None => DEFAULT_CONCURRENCY,
        Some(n) => match integer(n).and_then(|i| u32::try_from(i).ok()) {
            Some(c) if c >= 1 => c,
            _ => return Err(ConfigError::at(n, path, "concurrency must be >= 1")),
        },
    };
    // docs/semantics.md#max-running: fleet-wide, so independent of `concurrency`.
    let max_running = match node.get_set("max_running") {
        None => None,
        Some(n) => match integer(n).and_then(|i| u32::try_from(i).ok()) {
            Some(c) if c >= 1 => Some(c),
            _ => {
                return Err(ConfigError::at(
                    n,
                    path,
                    format!(
                        "max_running must be an integer >= 1 (got {})",
                        crate::fields::scalar_text(n)
                    ),
                ));
            }
        },
    };
    let timeout = match node.get_set("timeout_s") {
        None => None,
        Some(n) => match number(n).filter(|t| t.is_finite()).map(positive_seconds) {
            Some(Ok(d)) => Some(d),
            Some(Err(BadSeconds::OutOfRange)) => {
                return Err(ConfigError::at(n, path, "timeout_s is out of range"));
            }
            _ => return Err(ConfigError::at(n, path, "timeout_s must be > 0")),
        },
    };
    // docs/steps.md#max-duration: the whole execution, sleeps and retries included.
    let max_duration = match node.get_set("max_duration_s") {
        None => None,
        Some(n) => match number(n).filter(|t| t.is_finite()).map(positive_seconds) {
            Some(Ok(d)) if timeout.is_some_and(|t| d < t) => {
                return Err(ConfigError::at(
                    n,
                    path,
                    "max_duration_s must be >= timeout_s (it bounds the whole execution, every \
                     attempt included)",
                ));
            }
            Some(Ok(d)) => Some(d),
            Some(Err(BadSeconds::OutOfRange)) => {
                return Err(ConfigError::at(n, path, "max_duration_s is out of range"));
            }
            _ => return Err(ConfigError::at(n, path, "max_duration_s must be > 0")),
        },
    };
    let description = match node.get_set("description") {
        None => None,
        Some(n) => Some(
            n.as_str()
                .ok_or_else(|| ConfigError::at(n, path, "description must be a string"))?
                .to_owned(),
        ),
    };
    let retry = super::retry::parse_retry(node.get_set("retry"), &join(path, "retry"))?;
    let rate_limit =
        super::rate_limit::parse_rate_limit(node.get_set("rate_limit"), &join(path, "rate_limit"))?;
    let sandbox = match node.get_set("sandbox") {
        None => defaults.clone(),
        Some(n) => build_sandbox(n, &join(path, "sandbox"), ctx, defaults)?,
    };
    Ok(TaskConfig {
        name,
        description,
        source,
        handler,
        sandbox,
        concurrency,
        rate_limit,
        max_running,
        retry,
        timeout,
        max_duration,
        config: json_map(node, "config", path)?,
        metadata: json_map(node, "metadata", path)?,
    })
}

/// The default task name: the component file's stem (`summarize.wasm` → `summarize`).
fn default_name(component: &Path) -> String {
    component
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}
