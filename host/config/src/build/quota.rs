//! `api.quotas` (docs/configuration.md#api-quotas): per-namespace and per-fairness-key limits of
//! waiting executions, checked at submit (docs/http-api.md#quotas).

use std::collections::BTreeMap;

use onestep_core::quota::{DEFAULT_RETRY_AFTER_S, MAX_RETRY_AFTER_S, QuotaSettings, SubmitQuota};
use onestep_core::text::MAX_NAME_CHARS;

use crate::error::ConfigError;
use crate::fields::{check_allowed, integer, join};
use crate::node::Node;

/// Keys accepted in `api.quotas`.
pub const QUOTA_KEYS: [&str; 4] = [
    "max_queued",
    "max_queued_per_key",
    "retry_after_s",
    "namespaces",
];
/// Keys accepted in one entry of `api.quotas.namespaces`.
pub const QUOTA_NAMESPACE_KEYS: [&str; 2] = ["max_queued", "max_queued_per_key"];

const PATH: &str = "api.quotas";

/// The largest limit (the counts are 32-bit).
const MAX_LIMIT: i64 = u32::MAX as i64;

/// `api.quotas`: `None` when absent (no quota).
pub fn build_quotas(api: &Node) -> Result<Option<QuotaSettings>, ConfigError> {
    let Some(node) = api.get_set("quotas") else {
        return Ok(None);
    };
    if !node.is_map() {
        return Err(ConfigError::at(node, "api", "quotas must be a mapping"));
    }
    check_allowed(node, PATH, &QUOTA_KEYS)?;
    let default = limits(node, PATH)?;
    let retry_after_s = match node.get_set("retry_after_s") {
        None => DEFAULT_RETRY_AFTER_S,
        Some(n) => integer(n)
            .and_then(|i| u32::try_from(i).ok())
            .filter(|i| (1..=MAX_RETRY_AFTER_S).contains(i))
            .ok_or_else(|| {
                ConfigError::at(
                    n,
                    PATH,
                    format!("retry_after_s must be an integer from 1 to {MAX_RETRY_AFTER_S}"),
                )
            })?,
    };
    let mut namespaces = BTreeMap::new();
    if let Some(list) = node.get_set("namespaces") {
        let Some(entries) = list.entries() else {
            return Err(ConfigError::at(
                list,
                PATH,
                "namespaces must be a mapping of namespace to {max_queued, max_queued_per_key}",
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
                    "must be a mapping with max_queued and/or max_queued_per_key",
                ));
            }
            check_allowed(entry, &here, &QUOTA_NAMESPACE_KEYS)?;
            let own = limits(entry, &here)?;
            if !own.is_limited() {
                return Err(ConfigError::at(
                    entry,
                    &here,
                    "must set max_queued and/or max_queued_per_key",
                ));
            }
            if namespaces.insert(trimmed.to_owned(), own).is_some() {
                return Err(ConfigError::at(
                    entry,
                    &path,
                    format!("namespace '{trimmed}' is listed twice"),
                ));
            }
        }
    }
    Ok(Some(QuotaSettings {
        default,
        retry_after_s,
        namespaces,
    }))
}

/// `max_queued` and `max_queued_per_key` of `node` (each optional, an integer >= 1).
fn limits(node: &Node, path: &str) -> Result<SubmitQuota, ConfigError> {
    let one = |key: &str| -> Result<Option<u32>, ConfigError> {
        match node.get_set(key) {
            None => Ok(None),
            Some(n) => integer(n)
                .filter(|i| (1..=MAX_LIMIT).contains(i))
                .and_then(|i| u32::try_from(i).ok())
                .map(Some)
                .ok_or_else(|| {
                    ConfigError::at(
                        n,
                        path,
                        format!("{key} must be an integer from 1 to {MAX_LIMIT}"),
                    )
                }),
        }
    };
    Ok(SubmitQuota {
        max_queued: one("max_queued")?,
        max_queued_per_key: one("max_queued_per_key")?,
    })
}
