//! A task's `sandbox:` block and the worker-wide `app.sandbox` defaults
//! (docs/configuration.md#sandbox, docs/configuration.md#worker-wide-sandbox-defaults), built
//! directly into the runtime's [`SandboxSettings`] (defined once in `onestep_core::sandbox`):
//! each key parsed and validated here with its file location, each default the struct's own.

use std::collections::{BTreeMap, BTreeSet};

use super::BuildContext;
use crate::env::is_env_name;
use crate::error::ConfigError;
use crate::fields::{index, integer, join, non_empty_str, resolve_path};
use crate::model::{
    MAX_OPEN_HANDLES_LIMIT, MIN_LOG_MESSAGE_BYTES, MIN_MEMORY_LIMIT_BYTES, NetworkSettings,
    Preopen, PreopenMode, SandboxSettings,
};
use crate::node::{Node, Value};

/// `sandbox` keys.
pub const SANDBOX_KEYS: [&str; 18] = [
    "memory_limit_bytes",
    "fuel",
    "preopens",
    "env",
    "env_values",
    "output_limit_bytes",
    // per-attempt instance limits (docs/configuration.md#sandbox-instance-limits)
    "max_instances",
    "max_tables",
    "max_memories",
    "max_table_elements",
    "max_open_handles",
    // log limits (docs/configuration.md#sandbox-log-limits)
    "log_limit_bytes",
    "max_log_lines",
    "max_log_message_bytes",
    "log_rate_bytes_per_minute",
    // outbound HTTP (docs/configuration.md#sandbox-network)
    "network",
    // after a cancel, how long the guest may run on to return by itself
    "cancel_grace_ms",
    // header bytes of wasi:http objects held at once (docs/configuration.md#sandbox-http-resources)
    "http_fields_limit_bytes",
];
/// Smallest accepted `sandbox.http_fields_limit_bytes`: 1 KiB.
pub const MIN_HTTP_FIELDS_LIMIT_BYTES: u64 = 1024;
/// Largest accepted `sandbox.cancel_grace_ms` (one minute).
pub const MAX_CANCEL_GRACE_MS: u64 = 60_000;
/// `sandbox` keys that grant a capability: per task only, never in `app.sandbox`.
pub const SANDBOX_CAPABILITY_KEYS: [&str; 4] = ["preopens", "env", "env_values", "network"];
/// Smallest accepted `log_limit_bytes` and `log_rate_bytes_per_minute` (defined in core, where
/// the deploy API's settings check uses it too).
pub use onestep_core::settings::MIN_LOG_BYTES;
/// Largest accepted `max_log_message_bytes`.
pub const MAX_LOG_MESSAGE_BYTES: u64 = 1024 * 1024;

/// Largest accepted `sandbox.max_instances`, `max_tables` and `max_memories`: the pool
/// reserves address space for `concurrency` times each.
pub const MAX_SANDBOX_COUNT: u64 = 1000;
/// Largest accepted `sandbox.max_table_elements` (80 MB of host memory per table).
pub const MAX_SANDBOX_TABLE_ELEMENTS: u64 = 10_000_000;
/// Keys of one `sandbox.preopens` entry.
pub const PREOPEN_KEYS: [&str; 3] = ["host", "guest", "mode"];

/// `app.sandbox` (docs/configuration.md#worker-wide-sandbox-defaults): the limits every task's
/// `sandbox:` starts from, validated like a task's; capabilities are refused there in both modes
/// (they are granted per task). The built-in defaults when absent.
pub fn build_sandbox_defaults(
    root: &Node,
    ctx: &BuildContext<'_>,
) -> Result<SandboxSettings, ConfigError> {
    let Some(node) = root.get("app").and_then(|a| a.get_set("sandbox")) else {
        return Ok(SandboxSettings::default());
    };
    let path = "app.sandbox";
    for key in SANDBOX_CAPABILITY_KEYS {
        if let Some(n) = node.get(key) {
            return Err(ConfigError::at(
                n,
                path,
                format!(
                    "{key} grants a capability and is set per task (tasks[].sandbox.{key}); \
                     app.sandbox holds only default limits"
                ),
            ));
        }
    }
    build_sandbox(node, path, ctx, &SandboxSettings::default())
}

/// A task's `sandbox:`: every limit not set here comes from `base` (the worker-wide defaults of
/// `app.sandbox`), every capability (preopens, env, env_values, network) only from here.
pub fn build_sandbox(
    node: &Node,
    path: &str,
    ctx: &BuildContext<'_>,
    base: &SandboxSettings,
) -> Result<SandboxSettings, ConfigError> {
    if !node.is_map() {
        return Err(ConfigError::at(node, path, "sandbox must be a mapping"));
    }
    let int_at_least = |key: &str, min: u64, default: u64, msg: &str| -> Result<u64, ConfigError> {
        match node.get_set(key) {
            None => Ok(default),
            Some(n) => match integer(n).and_then(|i| u64::try_from(i).ok()) {
                Some(v) if v >= min => Ok(v),
                _ => Err(ConfigError::at(n, path, msg)),
            },
        }
    };
    let memory_limit_bytes = int_at_least(
        "memory_limit_bytes",
        MIN_MEMORY_LIMIT_BYTES,
        base.memory_limit_bytes,
        "memory_limit_bytes must be an integer >= 1048576 (1 MiB)",
    )?;
    let output_limit_bytes = int_at_least(
        "output_limit_bytes",
        1,
        base.output_limit_bytes,
        "output_limit_bytes must be an integer >= 1",
    )?;
    // Per-attempt instance limits (docs/configuration.md#sandbox-instance-limits).
    let count = |key: &str, default: u32| -> Result<u32, ConfigError> {
        let msg = format!("{key} must be an integer from 1 to {MAX_SANDBOX_COUNT}");
        let v = int_at_least(key, 1, u64::from(default), &msg)?;
        match (v <= MAX_SANDBOX_COUNT)
            .then(|| u32::try_from(v).ok())
            .flatten()
        {
            Some(v) => Ok(v),
            None => Err(ConfigError::at(
                node.get_set(key).unwrap_or(node),
                path,
                msg,
            )),
        }
    };
    let max_instances = count("max_instances", base.max_instances)?;
    let max_tables = count("max_tables", base.max_tables)?;
    let max_memories = count("max_memories", base.max_memories)?;
    let elements_msg =
        format!("max_table_elements must be an integer from 1 to {MAX_SANDBOX_TABLE_ELEMENTS}");
    let max_table_elements = int_at_least(
        "max_table_elements",
        1,
        base.max_table_elements,
        &elements_msg,
    )?;
    if max_table_elements > MAX_SANDBOX_TABLE_ELEMENTS {
        let n = node.get_set("max_table_elements").unwrap_or(node);
        return Err(ConfigError::at(n, path, elements_msg));
    }
    let max_open_handles = match node.get_set("max_open_handles") {
        None => base.max_open_handles,
        Some(n) => match integer(n).and_then(|i| u32::try_from(i).ok()) {
            Some(v) if (1..=MAX_OPEN_HANDLES_LIMIT).contains(&v) => v,
            _ => {
                return Err(ConfigError::at(
                    n,
                    path,
                    format!(
                        "max_open_handles must be an integer from 1 to {MAX_OPEN_HANDLES_LIMIT}"
                    ),
                ));
            }
        },
    };
    // Log limits (docs/configuration.md#sandbox-log-limits).
    let log_limit_bytes = int_at_least(
        "log_limit_bytes",
        MIN_LOG_BYTES,
        base.log_limit_bytes,
        &format!("log_limit_bytes must be an integer >= {MIN_LOG_BYTES}"),
    )?;
    let max_log_lines = int_at_least(
        "max_log_lines",
        1,
        base.max_log_lines,
        "max_log_lines must be an integer >= 1",
    )?;
    let message_msg = format!(
        "max_log_message_bytes must be an integer from {MIN_LOG_MESSAGE_BYTES} to {MAX_LOG_MESSAGE_BYTES}"
    );
    let max_log_message_bytes = int_at_least(
        "max_log_message_bytes",
        MIN_LOG_MESSAGE_BYTES,
        base.max_log_message_bytes,
        &message_msg,
    )?;
    if max_log_message_bytes > MAX_LOG_MESSAGE_BYTES {
        let n = node.get_set("max_log_message_bytes").unwrap_or(node);
        return Err(ConfigError::at(n, path, message_msg));
    }
    let log_rate_bytes_per_minute = int_at_least(
        "log_rate_bytes_per_minute",
        MIN_LOG_BYTES,
        base.log_rate_bytes_per_minute,
        &format!("log_rate_bytes_per_minute must be an integer >= {MIN_LOG_BYTES}"),
    )?;
    let http_fields_limit_bytes = int_at_least(
        "http_fields_limit_bytes",
        MIN_HTTP_FIELDS_LIMIT_BYTES,
        base.http_fields_limit_bytes,
        &format!("http_fields_limit_bytes must be an integer >= {MIN_HTTP_FIELDS_LIMIT_BYTES}"),
    )?;
    let cancel_grace = match node.get_set("cancel_grace_ms") {
        None => base.cancel_grace,
        Some(n) => match integer(n).and_then(|i| u64::try_from(i).ok()) {
            Some(ms) if ms <= MAX_CANCEL_GRACE_MS => std::time::Duration::from_millis(ms),
            _ => {
                return Err(ConfigError::at(
                    n,
                    path,
                    format!("cancel_grace_ms must be an integer from 0 to {MAX_CANCEL_GRACE_MS}"),
                ));
            }
        },
    };
    let fuel = match node.get_set("fuel") {
        // An explicit `fuel: null` is unlimited, whatever the default.
        None if node.get("fuel").is_some() => None,
        None => base.fuel,
        Some(_) => Some(int_at_least(
            "fuel",
            1,
            1,
            "fuel must be null (unlimited) or an integer >= 1",
        )?),
    };

    let mut preopens = Vec::new();
    if let Some(list) = node.get_set("preopens") {
        let Some(items) = list.items() else {
            return Err(ConfigError::at(list, path, "preopens must be a list"));
        };
        let mut guests = BTreeSet::new();
        for (i, item) in items.iter().enumerate() {
            let ppath = index(&join(path, "preopens"), i);
            let p = build_preopen(item, &ppath, ctx)?;
            if !guests.insert(p.guest.clone()) {
                return Err(ConfigError::at(
                    item,
                    &ppath,
                    format!("duplicate guest path '{}'", p.guest),
                ));
            }
            preopens.push(p);
        }
    }

    let mut env = Vec::new();
    if let Some(list) = node.get_set("env") {
        let Some(items) = list.items() else {
            return Err(ConfigError::at(
                list,
                path,
                "env must be a list of variable names",
            ));
        };
        for (i, item) in items.iter().enumerate() {
            match item.as_str().map(str::trim) {
                Some(s) if is_env_name(s) => env.push(s.to_owned()),
                _ => {
                    return Err(ConfigError::at(
                        item,
                        path,
                        format!(
                            "env[{i}] must be an environment variable name ([A-Za-z_][A-Za-z0-9_]*)"
                        ),
                    ));
                }
            }
        }
    }

    let mut env_values = BTreeMap::new();
    if let Some(map) = node.get_set("env_values") {
        let Some(entries) = map.entries() else {
            return Err(ConfigError::at(map, path, "env_values must be a mapping"));
        };
        for (k, v) in entries {
            if !is_env_name(k) {
                return Err(ConfigError::at(
                    v,
                    path,
                    format!("env_values key '{k}' must be an environment variable name"),
                ));
            }
            let value = match &v.value {
                Value::Str(s) => s.clone(),
                Value::Int(_) | Value::Float(_) | Value::Bool(_) => crate::fields::scalar_text(v),
                _ => {
                    return Err(ConfigError::at(
                        v,
                        path,
                        format!("env_values.{k} must be a string"),
                    ));
                }
            };
            env_values.insert(k.clone(), value);
        }
    }

    let network = match node.get_set("network") {
        None => NetworkSettings::default(),
        Some(n) => super::network::build_network(n, &join(path, "network"))?,
    };

    Ok(SandboxSettings {
        network,
        memory_limit_bytes,
        fuel,
        preopens,
        env,
        env_values,
        output_limit_bytes,
        max_instances,
        max_tables,
        max_memories,
        max_table_elements,
        max_open_handles,
        log_limit_bytes,
        max_log_lines,
        max_log_message_bytes,
        log_rate_bytes_per_minute,
        cancel_grace,
        http_fields_limit_bytes,
        // Not file keys: the runtime's defaults.
        ..SandboxSettings::default()
    })
}

fn build_preopen(node: &Node, path: &str, ctx: &BuildContext<'_>) -> Result<Preopen, ConfigError> {
    if !node.is_map() {
        return Err(ConfigError::bare(node, format!("{path} must be a mapping")));
    }
    let Some(host) = node.get("host").and_then(non_empty_str) else {
        return Err(ConfigError::at(
            node,
            path,
            "'host' must be a non-empty string",
        ));
    };
    let Some(guest_node) = node.get("guest").filter(|n| non_empty_str(n).is_some()) else {
        return Err(ConfigError::at(
            node,
            path,
            "'guest' must be a non-empty string",
        ));
    };
    let guest = guest_node.as_str().unwrap_or("").trim();
    if !guest.starts_with('/') || guest.split('/').any(|c| c == "..") {
        return Err(ConfigError::at(
            guest_node,
            path,
            format!("guest path '{guest}' must be absolute and must not contain '..'"),
        ));
    }
    let guest = if guest.len() > 1 {
        guest.trim_end_matches('/')
    } else {
        guest
    };
    let mode = match node.get_set("mode") {
        None => PreopenMode::Ro,
        Some(n) => match n.as_str().map(str::trim) {
            Some("ro") => PreopenMode::Ro,
            Some("rw") => PreopenMode::Rw,
            _ => return Err(ConfigError::at(n, path, "mode must be 'ro' or 'rw'")),
        },
    };
    let host_path = resolve_path(ctx.base_dir, host.trim());
    if ctx.check_files {
        let at = node.get("host").unwrap_or(node);
        let hpath = join(path, "host");
        if !host_path.exists() {
            return Err(ConfigError::at(
                at,
                &hpath,
                format!("directory not found: {}", host_path.display()),
            ));
        }
        if !host_path.is_dir() {
            return Err(ConfigError::at(
                at,
                &hpath,
                format!("not a directory: {}", host_path.display()),
            ));
        }
    }
    Ok(Preopen {
        host: host_path,
        guest: guest.to_owned(),
        mode,
    })
}
