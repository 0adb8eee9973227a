//! Builds and validates a task's `sandbox.network:` block into the runtime's
//! [`NetworkSettings`] (defined once in `onestep_core::sandbox`)
//! (docs/configuration.md#sandbox-network): every `allow` entry parsed as an origin
//! ([`OriginPattern::parse`], the rule the runtime matches with), `headers` only for allowed
//! origins, header names and values checked, every limit positive. Errors carry the file
//! location like the rest of the configuration.

use std::collections::BTreeSet;

use crate::error::ConfigError;
use crate::fields::{index, integer, join, number, positive_seconds};
use crate::model::{AllowedOrigin, MAX_CONNECTIONS_LIMIT, NetworkSettings, OriginPattern, Secret};
use crate::node::{Node, Value};

/// `sandbox.network` keys (strict validation).
pub const NETWORK_KEYS: [&str; 10] = [
    "allow",
    "headers",
    "rate_limits",
    "max_response_bytes",
    "max_request_bytes",
    "connect_timeout_s",
    "request_timeout_s",
    "max_concurrent_requests",
    "max_connections",
    "max_requests",
];

/// Builds `sandbox.network` at `path` (e.g. `tasks[0].sandbox.network`).
pub fn build_network(node: &Node, path: &str) -> Result<NetworkSettings, ConfigError> {
    if !node.is_map() {
        return Err(ConfigError::at(node, path, "network must be a mapping"));
    }
    let d = NetworkSettings::default();
    let mut allow: Vec<AllowedOrigin> = Vec::new();
    if let Some(list) = node.get_set("allow") {
        let Some(items) = list.items() else {
            return Err(ConfigError::at(
                list,
                path,
                "allow must be a list of origins (scheme://host[:port])",
            ));
        };
        let apath = join(path, "allow");
        let mut seen = BTreeSet::new();
        for (i, item) in items.iter().enumerate() {
            let ipath = index(&apath, i);
            let Some(text) = item.as_str() else {
                return Err(ConfigError::at(
                    item,
                    &ipath,
                    "an origin must be a string like https://api.example.com",
                ));
            };
            let origin = OriginPattern::parse(text.trim())
                .map_err(|why| ConfigError::at(item, &ipath, why))?;
            if !seen.insert(origin.to_string()) {
                return Err(ConfigError::at(
                    item,
                    &ipath,
                    format!("duplicate origin {origin}"),
                ));
            }
            allow.push(AllowedOrigin {
                origin,
                headers: Vec::new(),
                rate_limit: None,
            });
        }
    }
    if let Some(map) = node.get_set("headers") {
        build_headers(map, &join(path, "headers"), &mut allow)?;
    }
    if let Some(map) = node.get_set("rate_limits") {
        build_rate_limits(map, &join(path, "rate_limits"), &mut allow)?;
    }
    let bytes = |key: &str, default: u64| -> Result<u64, ConfigError> {
        match node.get_set(key) {
            None => Ok(default),
            Some(n) => match integer(n).and_then(|i| u64::try_from(i).ok()) {
                Some(v) if v >= 1 => Ok(v),
                _ => Err(ConfigError::at(
                    n,
                    path,
                    format!("{key} must be an integer >= 1"),
                )),
            },
        }
    };
    let secs = |key: &str, default| -> Result<std::time::Duration, ConfigError> {
        match node.get_set(key) {
            None => Ok(default),
            Some(n) => number(n)
                .and_then(|v| positive_seconds(v).ok())
                .ok_or_else(|| ConfigError::at(n, path, format!("{key} must be a number > 0"))),
        }
    };
    let max_concurrent_requests = match node.get_set("max_concurrent_requests") {
        None => d.max_concurrent_requests,
        Some(n) => match integer(n).and_then(|i| u32::try_from(i).ok()) {
            Some(v) if v >= 1 => v,
            _ => {
                return Err(ConfigError::at(
                    n,
                    path,
                    "max_concurrent_requests must be an integer from 1 to 4294967295",
                ));
            }
        },
    };
    let max_connections = match node.get_set("max_connections") {
        None => d.max_connections,
        Some(n) => match integer(n).and_then(|i| u32::try_from(i).ok()) {
            Some(v) if (1..=MAX_CONNECTIONS_LIMIT).contains(&v) => v,
            _ => {
                return Err(ConfigError::at(
                    n,
                    path,
                    format!("max_connections must be an integer from 1 to {MAX_CONNECTIONS_LIMIT}"),
                ));
            }
        },
    };
    let max_requests = match node.get_set("max_requests") {
        None => d.max_requests,
        Some(n) => match integer(n).and_then(|i| u64::try_from(i).ok()) {
            Some(v) if v >= 1 => v,
            _ => {
                return Err(ConfigError::at(
                    n,
                    path,
                    "max_requests must be an integer >= 1",
                ));
            }
        },
    };
    Ok(NetworkSettings {
        allow,
        max_response_bytes: bytes("max_response_bytes", d.max_response_bytes)?,
        max_request_bytes: bytes("max_request_bytes", d.max_request_bytes)?,
        connect_timeout: secs("connect_timeout_s", d.connect_timeout)?,
        request_timeout: secs("request_timeout_s", d.request_timeout)?,
        max_concurrent_requests,
        max_connections,
        max_requests,
    })
}

/// Sets the injected headers of each allowed origin `headers` names.
fn build_headers(map: &Node, path: &str, allow: &mut [AllowedOrigin]) -> Result<(), ConfigError> {
    let Some(entries) = map.entries() else {
        return Err(ConfigError::at(
            map,
            path,
            "headers must be a mapping of origin to {Header-Name: value}",
        ));
    };
    let mut seen: Vec<OriginPattern> = Vec::new();
    for (key, value) in entries {
        let origin =
            OriginPattern::parse(key.trim()).map_err(|why| ConfigError::at(value, path, why))?;
        let Some(entry) = allow.iter_mut().find(|a| a.origin == origin) else {
            return Err(ConfigError::at(
                value,
                path,
                format!("{key:?} is not one of sandbox.network.allow"),
            ));
        };
        if seen.contains(&origin) {
            return Err(ConfigError::at(
                value,
                path,
                format!("headers for {origin} are given twice"),
            ));
        }
        let opath = format!("{path}[{key:?}]");
        let Some(pairs) = value.entries() else {
            return Err(ConfigError::at(
                value,
                &opath,
                "must be a mapping of header name to value",
            ));
        };
        let mut headers = Vec::new();
        for (name, v) in pairs {
            if !is_header_name(name) {
                return Err(ConfigError::at(
                    v,
                    &opath,
                    format!(
                        "{name:?} is not an HTTP header name (letters, digits and !#$%&'*+-.^_`|~)"
                    ),
                ));
            }
            if headers
                .iter()
                .any(|(seen, _): &(String, Secret)| seen.eq_ignore_ascii_case(name))
            {
                return Err(ConfigError::at(
                    v,
                    &opath,
                    format!("header {name} is given twice (names are case-insensitive)"),
                ));
            }
            let text = match &v.value {
                Value::Str(s) => s.clone(),
                Value::Int(_) | Value::Float(_) | Value::Bool(_) => crate::fields::scalar_text(v),
                _ => {
                    return Err(ConfigError::at(
                        v,
                        &opath,
                        format!("the value of {name} must be a string"),
                    ));
                }
            };
            // Never quote the value: it is a secret.
            if text.chars().any(|c| c.is_control() && c != '\t') {
                return Err(ConfigError::at(
                    v,
                    &opath,
                    format!("the value of {name} contains a control character (line break?)"),
                ));
            }
            headers.push((name.clone(), Secret::new(text)));
        }
        entry.headers = headers;
        seen.push(origin);
    }
    Ok(())
}

/// Sets the fleet-wide outbound rate limit of each allowed origin `rate_limits` names
/// (docs/configuration.md#sandbox-network): `{origin: {per_second, burst}}`, each origin one of
/// `allow` (as written there), each at most once.
fn build_rate_limits(
    map: &Node,
    path: &str,
    allow: &mut [AllowedOrigin],
) -> Result<(), ConfigError> {
    let Some(entries) = map.entries() else {
        return Err(ConfigError::at(
            map,
            path,
            "rate_limits must be a mapping of origin to {per_second: NUMBER, burst: INTEGER}",
        ));
    };
    let mut seen: Vec<OriginPattern> = Vec::new();
    for (key, value) in entries {
        let origin =
            OriginPattern::parse(key.trim()).map_err(|why| ConfigError::at(value, path, why))?;
        let Some(entry) = allow.iter_mut().find(|a| a.origin == origin) else {
            return Err(ConfigError::at(
                value,
                path,
                format!("{key:?} is not one of sandbox.network.allow"),
            ));
        };
        if seen.contains(&origin) {
            return Err(ConfigError::at(
                value,
                path,
                format!("the rate limit of {origin} is given twice"),
            ));
        }
        let opath = format!("{path}[{key:?}]");
        entry.rate_limit = super::rate_limit::parse_rate_limit(Some(value), &opath)?;
        seen.push(origin);
    }
    Ok(())
}

/// An RFC 9110 token.
pub(crate) fn is_header_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}
