//! `api.callbacks` (docs/configuration.md#api-callbacks): the origins a submit's completion
//! webhook may name (the syntax and address rules of `sandbox.network.allow`), the signing
//! secrets (Standard Webhooks `whsec_…`, usually `${VAR}` interpolated; several rotate), and the
//! retry bounds. Secrets are never repeated in an error.

use std::collections::{BTreeMap, BTreeSet};

use onestep_core::callback::{
    CallbackSettings, DEFAULT_DELIVERY_TIMEOUT, DEFAULT_FIRST_BACKOFF, DEFAULT_MAX_ATTEMPTS,
    DEFAULT_PROGRESS_INTERVAL, MAX_MAX_ATTEMPTS, PROGRESS_INTERVAL_RANGE_S, WebhookSecret,
};
use onestep_core::network::OriginPattern;
use onestep_core::text::MAX_NAME_CHARS;

use crate::error::ConfigError;
use crate::fields::{check_allowed, index, integer, join, number, positive_seconds};
use crate::node::Node;

/// Keys accepted in `api.callbacks`.
pub const CALLBACK_KEYS: [&str; 6] = [
    "allow",
    "secrets",
    "namespaces",
    "retry",
    "timeout_s",
    "progress_interval_s",
];
/// Keys accepted in `api.callbacks.retry`.
pub const CALLBACK_RETRY_KEYS: [&str; 2] = ["max_attempts", "first_backoff_s"];
/// Keys accepted in one entry of `api.callbacks.namespaces`.
pub const CALLBACK_NAMESPACE_KEYS: [&str; 1] = ["secrets"];

const PATH: &str = "api.callbacks";

/// `api.callbacks`: `None` when absent (a submit's `callback` is refused).
pub fn build_callbacks(api: &Node) -> Result<Option<CallbackSettings>, ConfigError> {
    let Some(node) = api.get_set("callbacks") else {
        return Ok(None);
    };
    if !node.is_map() {
        return Err(ConfigError::at(node, "api", "callbacks must be a mapping"));
    }
    check_allowed(node, PATH, &CALLBACK_KEYS)?;
    let allow = allow(node)?;
    let Some(secrets_node) = node.get_set("secrets") else {
        return Err(ConfigError::at(
            node,
            PATH,
            "secrets is required: one or more Standard Webhooks secrets (whsec_…, separated by \
             spaces), e.g. secrets: ${ONESTEP_WEBHOOK_SECRETS}",
        ));
    };
    let secrets = parse_secrets(secrets_node, PATH)?;
    let mut namespace_secrets = BTreeMap::new();
    if let Some(list) = node.get_set("namespaces") {
        let Some(entries) = list.entries() else {
            return Err(ConfigError::at(
                list,
                PATH,
                "namespaces must be a mapping of namespace to {secrets}",
            ));
        };
        let path = join(PATH, "namespaces");
        for (name, entry) in entries {
            let trimmed = name.trim();
            if trimmed.is_empty() || trimmed.chars().count() > MAX_NAME_CHARS {
                return Err(ConfigError::at(
                    entry,
                    &path,
                    "a namespace must be non-empty and <= 255 characters",
                ));
            }
            let here = join(&path, trimmed);
            if !entry.is_map() {
                return Err(ConfigError::at(
                    entry,
                    &here,
                    "must be a mapping with secrets",
                ));
            }
            check_allowed(entry, &here, &CALLBACK_NAMESPACE_KEYS)?;
            let Some(s) = entry.get_set("secrets") else {
                return Err(ConfigError::at(entry, &here, "secrets is required"));
            };
            if namespace_secrets
                .insert(trimmed.to_owned(), parse_secrets(s, &here)?)
                .is_some()
            {
                return Err(ConfigError::at(
                    entry,
                    &path,
                    format!("namespace '{trimmed}' is listed twice"),
                ));
            }
        }
    }
    let (mut max_attempts, mut first_backoff) = (DEFAULT_MAX_ATTEMPTS, DEFAULT_FIRST_BACKOFF);
    if let Some(retry) = node.get_set("retry") {
        let here = join(PATH, "retry");
        if !retry.is_map() {
            return Err(ConfigError::at(
                retry,
                PATH,
                "retry must be a mapping with max_attempts and/or first_backoff_s",
            ));
        }
        check_allowed(retry, &here, &CALLBACK_RETRY_KEYS)?;
        if let Some(n) = retry.get_set("max_attempts") {
            max_attempts = integer(n)
                .and_then(|i| u32::try_from(i).ok())
                .filter(|i| (1..=MAX_MAX_ATTEMPTS).contains(i))
                .ok_or_else(|| {
                    ConfigError::at(
                        n,
                        &here,
                        format!("max_attempts must be an integer from 1 to {MAX_MAX_ATTEMPTS}"),
                    )
                })?;
        }
        if let Some(n) = retry.get_set("first_backoff_s") {
            first_backoff = number(n)
                .and_then(|v| positive_seconds(v).ok())
                .filter(|d| d.as_secs() <= 3600)
                .ok_or_else(|| {
                    ConfigError::at(n, &here, "first_backoff_s must be a number > 0 and <= 3600")
                })?;
        }
    }
    let timeout = match node.get_set("timeout_s") {
        None => DEFAULT_DELIVERY_TIMEOUT,
        Some(n) => number(n)
            .and_then(|v| positive_seconds(v).ok())
            .filter(|d| d.as_secs() <= 300)
            .ok_or_else(|| ConfigError::at(n, PATH, "timeout_s must be a number > 0 and <= 300"))?,
    };
    let progress_interval = match node.get_set("progress_interval_s") {
        None => DEFAULT_PROGRESS_INTERVAL,
        Some(n) => integer(n)
            .and_then(|i| u64::try_from(i).ok())
            .filter(|i| PROGRESS_INTERVAL_RANGE_S.contains(i))
            .map(std::time::Duration::from_secs)
            .ok_or_else(|| {
                ConfigError::at(
                    n,
                    PATH,
                    format!(
                        "progress_interval_s must be a whole number of seconds from {} to {} \
                         (at most one progress delivery per callback per interval)",
                        PROGRESS_INTERVAL_RANGE_S.start(),
                        PROGRESS_INTERVAL_RANGE_S.end()
                    ),
                )
            })?,
    };
    Ok(Some(CallbackSettings {
        allow,
        secrets,
        namespace_secrets,
        max_attempts,
        first_backoff,
        timeout,
        progress_interval,
    }))
}

/// `api.callbacks.allow`: a non-empty list of origins, each parsed like `sandbox.network.allow`.
fn allow(node: &Node) -> Result<Vec<OriginPattern>, ConfigError> {
    let apath = join(PATH, "allow");
    let Some(list) = node.get_set("allow") else {
        return Err(ConfigError::at(
            node,
            PATH,
            "allow is required: the origins callback URLs may name (scheme://host[:port])",
        ));
    };
    let items = match list.items() {
        Some(items) if !items.is_empty() => items,
        _ => {
            return Err(ConfigError::at(
                list,
                PATH,
                "allow must be a non-empty list of origins (scheme://host[:port])",
            ));
        }
    };
    let mut seen = BTreeSet::new();
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let ipath = index(&apath, i);
        let Some(text) = item.as_str() else {
            return Err(ConfigError::at(
                item,
                &ipath,
                "an origin must be a string like https://hooks.example.com",
            ));
        };
        let origin =
            OriginPattern::parse(text.trim()).map_err(|why| ConfigError::at(item, &ipath, why))?;
        if !seen.insert(origin.to_string()) {
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

/// A string of space-separated `whsec_…` secrets, or a list of them.
fn parse_secrets(node: &Node, path: &str) -> Result<Vec<WebhookSecret>, ConfigError> {
    let here = join(path, "secrets");
    let text = if let Some(s) = node.as_str() {
        s.to_owned()
    } else if let Some(items) = node.items() {
        let mut parts = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            let Some(s) = item.as_str() else {
                return Err(ConfigError::at(
                    item,
                    &index(&here, i),
                    "a secret must be a string whsec_…",
                ));
            };
            parts.push(s.to_owned());
        }
        parts.join(" ")
    } else {
        return Err(ConfigError::at(
            node,
            &here,
            "secrets must be a string of whsec_… secrets separated by spaces, or a list of them",
        ));
    };
    WebhookSecret::parse_list(&text).map_err(|why| ConfigError::at(node, &here, why))
}
