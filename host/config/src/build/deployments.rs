//! The operator's `deployments:` section (docs/configuration.md#deployments,
//! docs/deployment-policy.md): the operator-held secrets a deployment may reference by name
//! (`secrets:`, each a header value bound to the origins it may be sent to) and the policy
//! ceilings (`policy: {default, namespaces}`) that every tenant deployment must stay within.
//! Built into [`DeploymentsConfig`]: the core [`DeploymentPolicy`] the API checks deployments
//! with, plus the secret values the worker injects. Unknown keys are errors in both modes;
//! secret values are never repeated in an error.

use std::collections::{BTreeMap, BTreeSet};

use onestep_core::components::MAX_COMPONENT_BYTES;
use onestep_core::deploy_policy::{DeploymentPolicy, MAX_MAX_TASKS, PolicyCeiling};
use onestep_core::network::OriginPattern;
use onestep_core::text::MAX_NAME_CHARS;
use serde::Serialize;

use super::BuildContext;
use crate::error::ConfigError;
use crate::fields::{
    BadSeconds, check_allowed, index, integer, join, number, positive_seconds, scalar_text,
};
use crate::model::{SandboxSettings, Secret};
use crate::node::{Node, Value};

/// Keys of `deployments:`.
pub const DEPLOYMENTS_KEYS: [&str; 2] = ["secrets", "policy"];
/// Keys of one `deployments.secrets.<name>` entry.
pub const SECRET_KEYS: [&str; 2] = ["value", "origins"];
/// Keys of `deployments.policy`.
pub const POLICY_KEYS: [&str; 2] = ["default", "namespaces"];
/// Keys of one ceiling (`deployments.policy.default`, `deployments.policy.namespaces.<ns>`).
pub const CEILING_KEYS: [&str; 7] = [
    "max_component_bytes",
    "max_tasks",
    "timeout_s",
    "concurrency",
    "max_attempts",
    "secrets",
    "sandbox",
];
/// Keys of a ceiling's `sandbox:` (the sandbox keys a deployment may set, but `env_values`).
pub const CEILING_SANDBOX_KEYS: [&str; 10] = [
    "memory_limit_bytes",
    "fuel",
    "max_instances",
    "max_tables",
    "max_memories",
    "max_table_elements",
    "output_limit_bytes",
    "log_limit_bytes",
    "max_log_lines",
    "network",
];
/// Keys of a ceiling's `sandbox.network:`.
pub const CEILING_NETWORK_KEYS: [&str; 6] = [
    "allow",
    "max_response_bytes",
    "max_request_bytes",
    "max_requests",
    "max_concurrent_requests",
    "max_connections",
];

const PATH: &str = "deployments";

/// One operator-held secret: a header value a deployment may reference by name.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OperatorSecret {
    /// The header value (usually `${VAR}` interpolated); never printed.
    pub value: Secret,
    /// The origins it may be sent to (a deployment's header naming it must be for an origin
    /// within these).
    pub origins: Vec<OriginPattern>,
}

/// The `deployments:` section, built.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct DeploymentsConfig {
    /// The ceilings and the secret names: what `POST /v1/deployments` checks against.
    pub policy: DeploymentPolicy,
    /// The secret values by name (for the worker that injects them).
    pub secrets: BTreeMap<String, OperatorSecret>,
}

/// Whether `name` is a valid secret name: 1 to 64 ASCII letters, digits, `_`, `-` and `.`.
pub fn is_secret_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// Builds `deployments:`; `None` when absent (no namespace can deploy).
pub fn build_deployments(
    root: &Node,
    ctx: &BuildContext<'_>,
) -> Result<Option<DeploymentsConfig>, ConfigError> {
    let Some(node) = root.get_set(PATH) else {
        return Ok(None);
    };
    if !node.is_map() {
        return Err(ConfigError::bare(node, "deployments must be a mapping"));
    }
    check_allowed(node, PATH, &DEPLOYMENTS_KEYS)?;
    let secrets = match node.get_set("secrets") {
        None => BTreeMap::new(),
        Some(s) => build_secrets(s)?,
    };
    let mut policy = DeploymentPolicy {
        secret_names: secrets.keys().cloned().collect(),
        ..DeploymentPolicy::default()
    };
    if let Some(p) = node.get_set("policy") {
        let ppath = join(PATH, "policy");
        if !p.is_map() {
            return Err(ConfigError::at(
                p,
                &ppath,
                "must be a mapping with default and/or namespaces",
            ));
        }
        check_allowed(p, &ppath, &POLICY_KEYS)?;
        if let Some(d) = p.get_set("default") {
            policy.default = Some(build_ceiling(d, &join(&ppath, "default"), ctx, &secrets)?);
        }
        if let Some(list) = p.get_set("namespaces") {
            let npath = join(&ppath, "namespaces");
            let Some(entries) = list.entries() else {
                return Err(ConfigError::at(
                    list,
                    &npath,
                    "must be a mapping of namespace to ceiling",
                ));
            };
            for (name, entry) in entries {
                let trimmed = name.trim();
                if trimmed.is_empty() || trimmed.chars().count() > MAX_NAME_CHARS {
                    return Err(ConfigError::at(
                        entry,
                        &npath,
                        "a namespace must be non-empty and <= 255 characters",
                    ));
                }
                let here = join(&npath, trimmed);
                let ceiling = build_ceiling(entry, &here, ctx, &secrets)?;
                if policy
                    .namespaces
                    .insert(trimmed.to_owned(), ceiling)
                    .is_some()
                {
                    return Err(ConfigError::at(
                        entry,
                        &npath,
                        format!("namespace {trimmed:?} is given twice"),
                    ));
                }
            }
        }
    }
    Ok(Some(DeploymentsConfig { policy, secrets }))
}

fn build_secrets(node: &Node) -> Result<BTreeMap<String, OperatorSecret>, ConfigError> {
    let path = join(PATH, "secrets");
    let Some(entries) = node.entries() else {
        return Err(ConfigError::at(
            node,
            &path,
            "must be a mapping of secret name to {value, origins}",
        ));
    };
    let mut out = BTreeMap::new();
    for (name, entry) in entries {
        if !is_secret_name(name) {
            return Err(ConfigError::at(
                entry,
                &path,
                format!(
                    "{name:?} is not a secret name (1 to 64 letters, digits, '_', '-' and '.')"
                ),
            ));
        }
        let here = join(&path, name);
        if !entry.is_map() {
            return Err(ConfigError::at(
                entry,
                &here,
                "must be a mapping with value and origins",
            ));
        }
        check_allowed(entry, &here, &SECRET_KEYS)?;
        let value = match entry.get_set("value").map(|v| &v.value) {
            Some(Value::Str(s)) if !s.trim().is_empty() => s.clone(),
            Some(Value::Str(_)) => {
                return Err(ConfigError::at(
                    entry,
                    &here,
                    "value is empty (is the variable it names set?)",
                ));
            }
            _ => {
                return Err(ConfigError::at(
                    entry,
                    &here,
                    "value must be a string, e.g. value: \"Bearer ${OPENAI_API_KEY}\"",
                ));
            }
        };
        // Never quote the value: it is a secret.
        if value.chars().any(|c| c.is_control() && c != '\t') {
            return Err(ConfigError::at(
                entry,
                &here,
                "value contains a control character (line break?)",
            ));
        }
        let origins = origin_list(entry.get_set("origins"), &join(&here, "origins"))?;
        if origins.is_empty() {
            return Err(ConfigError::at(
                entry,
                &here,
                "origins is required: the origins this secret may be sent to \
                 (scheme://host[:port])",
            ));
        }
        out.insert(
            name.clone(),
            OperatorSecret {
                value: Secret::new(value),
                origins,
            },
        );
    }
    Ok(out)
}

/// A list of origins (each [`OriginPattern::parse`]d, unique); empty when absent.
fn origin_list(node: Option<&Node>, path: &str) -> Result<Vec<OriginPattern>, ConfigError> {
    let Some(list) = node else {
        return Ok(Vec::new());
    };
    let Some(items) = list.items() else {
        return Err(ConfigError::at(
            list,
            path,
            "must be a list of origins (scheme://host[:port])",
        ));
    };
    let mut out: Vec<OriginPattern> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let ipath = index(path, i);
        let Some(text) = item.as_str() else {
            return Err(ConfigError::at(
                item,
                &ipath,
                "an origin must be a string like https://api.example.com",
            ));
        };
        let origin =
            OriginPattern::parse(text.trim()).map_err(|why| ConfigError::at(item, &ipath, why))?;
        if out.contains(&origin) {
            return Err(ConfigError::at(
                item,
                &ipath,
                format!("duplicate origin {origin}"),
            ));
        }
        out.push(origin);
    }
    Ok(out)
}

fn build_ceiling(
    node: &Node,
    path: &str,
    ctx: &BuildContext<'_>,
    secrets: &BTreeMap<String, OperatorSecret>,
) -> Result<PolicyCeiling, ConfigError> {
    if !node.is_map() {
        return Err(ConfigError::at(
            node,
            path,
            format!(
                "must be a mapping of ceilings ({})",
                CEILING_KEYS.join(", ")
            ),
        ));
    }
    check_allowed(node, path, &CEILING_KEYS)?;
    let mut c = PolicyCeiling::default();
    let positive = |key: &str, max: u64| -> Result<Option<u64>, ConfigError> {
        match node.get_set(key) {
            None => Ok(None),
            Some(n) => match integer(n).and_then(|i| u64::try_from(i).ok()) {
                Some(v) if (1..=max).contains(&v) => Ok(Some(v)),
                _ => Err(ConfigError::at(
                    n,
                    path,
                    format!(
                        "{key} must be an integer from 1 to {max} (got {})",
                        scalar_text(n)
                    ),
                )),
            },
        }
    };
    if let Some(v) = positive("max_component_bytes", MAX_COMPONENT_BYTES as u64)? {
        c.max_component_bytes = v;
    }
    if let Some(v) = positive("max_tasks", u64::from(MAX_MAX_TASKS))? {
        c.max_tasks = u32::try_from(v).unwrap_or(MAX_MAX_TASKS);
    }
    if let Some(v) = positive("concurrency", u64::from(u32::MAX))? {
        c.concurrency = u32::try_from(v).unwrap_or(u32::MAX);
    }
    if let Some(v) = positive("max_attempts", u64::from(u32::MAX))? {
        c.max_attempts = u32::try_from(v).unwrap_or(u32::MAX);
    }
    c.timeout = match node.get_set("timeout_s") {
        None => None,
        Some(n) => match number(n).filter(|t| t.is_finite()).map(positive_seconds) {
            Some(Ok(d)) => Some(d),
            Some(Err(BadSeconds::OutOfRange)) => {
                return Err(ConfigError::at(n, path, "timeout_s is out of range"));
            }
            _ => {
                return Err(ConfigError::at(
                    n,
                    path,
                    "timeout_s must be a number > 0 (leave it out for no ceiling)",
                ));
            }
        },
    };
    if let Some(list) = node.get_set("secrets") {
        let spath = join(path, "secrets");
        let Some(items) = list.items() else {
            return Err(ConfigError::at(
                list,
                &spath,
                "must be a list of secret names (declared in deployments.secrets)",
            ));
        };
        for (i, item) in items.iter().enumerate() {
            let ipath = index(&spath, i);
            let name = item.as_str().map(str::trim).unwrap_or_default();
            let Some(secret) = secrets.get(name) else {
                return Err(ConfigError::at(
                    item,
                    &ipath,
                    format!(
                        "{:?} is not a secret declared in deployments.secrets (declared: {})",
                        scalar_text(item),
                        declared(secrets.keys())
                    ),
                ));
            };
            if c.secrets
                .insert(name.to_owned(), secret.origins.clone())
                .is_some()
            {
                return Err(ConfigError::at(
                    item,
                    &ipath,
                    format!("secret {name:?} is listed twice"),
                ));
            }
        }
    }
    if let Some(s) = node.get_set("sandbox") {
        ceiling_sandbox(s, &join(path, "sandbox"), ctx, &mut c)?;
    }
    Ok(c)
}

fn declared<'a>(names: impl Iterator<Item = &'a String>) -> String {
    let v: BTreeSet<&str> = names.map(String::as_str).collect();
    if v.is_empty() {
        "none".into()
    } else {
        v.into_iter().collect::<Vec<_>>().join(", ")
    }
}

/// A ceiling's `sandbox:`: validated by the task sandbox's own builder (same bounds and
/// messages), restricted to the keys a ceiling has.
fn ceiling_sandbox(
    node: &Node,
    path: &str,
    ctx: &BuildContext<'_>,
    c: &mut PolicyCeiling,
) -> Result<(), ConfigError> {
    if !node.is_map() {
        return Err(ConfigError::at(node, path, "sandbox must be a mapping"));
    }
    check_allowed(node, path, &CEILING_SANDBOX_KEYS)?;
    let mut allow = Vec::new();
    if let Some(n) = node.get_set("network") {
        let npath = join(path, "network");
        if !n.is_map() {
            return Err(ConfigError::at(n, &npath, "network must be a mapping"));
        }
        check_allowed(n, &npath, &CEILING_NETWORK_KEYS)?;
        allow = origin_list(n.get_set("allow"), &join(&npath, "allow"))?;
    }
    // `allow` is taken above (with its own messages); the builder sees the limits only.
    let limits_only = without_network_allow(node);
    let s: SandboxSettings =
        super::sandbox::build_sandbox(&limits_only, path, ctx, &SandboxSettings::default())?;
    c.memory_limit_bytes = s.memory_limit_bytes;
    c.fuel = s.fuel;
    c.max_instances = s.max_instances;
    c.max_tables = s.max_tables;
    c.max_memories = s.max_memories;
    c.max_table_elements = s.max_table_elements;
    c.output_limit_bytes = s.output_limit_bytes;
    c.log_limit_bytes = s.log_limit_bytes;
    c.max_log_lines = s.max_log_lines;
    c.max_response_bytes = s.network.max_response_bytes;
    c.max_request_bytes = s.network.max_request_bytes;
    c.max_requests = s.network.max_requests;
    c.max_concurrent_requests = s.network.max_concurrent_requests;
    c.max_connections = s.network.max_connections;
    c.allow = allow;
    Ok(())
}

/// A copy of a sandbox node without `network.allow` (and so without anything naming origins).
pub(crate) fn without_network_allow(node: &Node) -> Node {
    without_network_keys(node, &["allow", "headers"])
}

/// A copy of a sandbox node whose `network` lacks `keys`.
pub(crate) fn without_network_keys(node: &Node, keys: &[&str]) -> Node {
    let Value::Map(entries) = &node.value else {
        return node.clone();
    };
    let entries = entries
        .iter()
        .map(|(k, v)| match (&**k, &v.value) {
            ("network", Value::Map(net)) => (
                k.clone(),
                Node::at(
                    Value::Map(
                        net.iter()
                            .filter(|(nk, _)| !keys.contains(&nk.as_str()))
                            .cloned()
                            .collect(),
                    ),
                    v,
                ),
            ),
            _ => (k.clone(), v.clone()),
        })
        .collect();
    Node::at(Value::Map(entries), node)
}
