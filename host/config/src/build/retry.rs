//! `retry:` (docs/semantics.md#retry-policies, docs/configuration.md#document-shape): a type string or a mapping with `type`, producing
//! [`RetryPolicy`]. Type strings are trimmed, lower-cased, `-` → `_`.

use onestep_core::retry::{Jitter, RetryPolicy};

use crate::error::ConfigError;
use crate::fields::{check_allowed, integer, join, number, scalar_text};
use crate::node::{Node, Value};

/// A recognised retry type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RetryType {
    NoRetry,
    MaxAttempts,
    Exponential,
    ByFailureKind,
}

impl RetryType {
    fn fields(self) -> &'static [&'static str] {
        match self {
            RetryType::NoRetry => &["type"],
            RetryType::MaxAttempts => &["type", "max_attempts", "delay_s"],
            RetryType::Exponential => &[
                "type",
                "max_attempts",
                "min_delay_s",
                "max_delay_s",
                "multiplier",
                "jitter",
            ],
            RetryType::ByFailureKind => &["type", "default", "error", "timeout", "cancelled"],
        }
    }
}

/// The retry type of a spec (`None` for `null`).
fn retry_type(node: &Node, path: &str) -> Result<Option<RetryType>, ConfigError> {
    let type_node = match &node.value {
        Value::Null => return Ok(None),
        Value::Str(_) => node,
        Value::Map(_) => match node.get_set("type") {
            Some(t) => t,
            None => {
                return Err(ConfigError::at(
                    node,
                    path,
                    "'type' must be a non-empty string",
                ));
            }
        },
        _ => {
            return Err(ConfigError::at(
                node,
                path,
                "retry must be a string or a mapping",
            ));
        }
    };
    let raw = scalar_text(type_node);
    let t = match raw.trim().to_ascii_lowercase().replace('-', "_").as_str() {
        "no_retry" | "none" => RetryType::NoRetry,
        "max_attempts" => RetryType::MaxAttempts,
        "exponential_backoff" => RetryType::Exponential,
        "by_failure_kind" => RetryType::ByFailureKind,
        _ => {
            return Err(ConfigError::at(
                type_node,
                path,
                format!("unsupported retry type '{}'", raw.trim()),
            ));
        }
    };
    Ok(Some(t))
}

/// Strict check (docs/configuration.md#strict-validation): a known type and only its own fields, recursively.
pub fn check_retry_fields(node: &Node, path: &str) -> Result<(), ConfigError> {
    let Some(t) = retry_type(node, path)? else {
        return Ok(());
    };
    check_allowed(node, path, t.fields())?;
    if t == RetryType::ByFailureKind {
        for key in ["default", "error", "timeout", "cancelled"] {
            if let Some(sub) = node.get_set(key) {
                check_retry_fields(sub, &join(path, key))?;
            }
        }
    }
    Ok(())
}

/// Builds the policy (absent/`null` → `NoRetry`) and applies the constructor rules of docs/semantics.md#retry-policies.
/// Errors are reported at `path` (e.g. `tasks[0].retry`).
pub fn parse_retry(node: Option<&Node>, path: &str) -> Result<RetryPolicy, ConfigError> {
    let Some(node) = node else {
        return Ok(RetryPolicy::NoRetry);
    };
    let policy = parse_inner(node, path)?;
    policy
        .validate()
        .map_err(|e| ConfigError::at(node, path, e.to_string()))?;
    Ok(policy)
}

fn parse_inner(node: &Node, path: &str) -> Result<RetryPolicy, ConfigError> {
    let Some(t) = retry_type(node, path)? else {
        return Ok(RetryPolicy::NoRetry);
    };
    let field = |key: &str| node.get_set(key);
    let max_attempts = || -> Result<u32, ConfigError> {
        match field("max_attempts") {
            None => Ok(3),
            Some(n) => match integer(n) {
                Some(i) if i < 1 => Err(ConfigError::at(n, path, "max_attempts must be >= 1")),
                Some(i) => u32::try_from(i)
                    .map_err(|_| ConfigError::at(n, path, "max_attempts must be <= 4294967295")),
                None => Err(ConfigError::at(n, path, "max_attempts must be an integer")),
            },
        }
    };
    let float = |key: &str, default: f64| -> Result<f64, ConfigError> {
        match field(key) {
            None => Ok(default),
            Some(n) => {
                number(n).ok_or_else(|| ConfigError::at(n, path, format!("{key} must be a number")))
            }
        }
    };
    Ok(match t {
        RetryType::NoRetry => RetryPolicy::NoRetry,
        RetryType::MaxAttempts => {
            RetryPolicy::MaxAttempts {
                max_attempts: max_attempts()?,
                delay_s: match field("delay_s") {
                    None => None,
                    Some(n) => Some(number(n).ok_or_else(|| {
                        ConfigError::at(n, path, "delay_s must be a number or null")
                    })?),
                },
            }
        }
        RetryType::Exponential => RetryPolicy::ExponentialBackoff {
            max_attempts: max_attempts()?,
            min_delay_s: float("min_delay_s", 1.0)?,
            max_delay_s: float("max_delay_s", 60.0)?,
            multiplier: float("multiplier", 2.0)?,
            jitter: match field("jitter") {
                None => Jitter::None,
                Some(n) => match n.as_str().map(|s| s.trim().to_ascii_lowercase()).as_deref() {
                    Some("none") => Jitter::None,
                    Some("full") => Jitter::Full,
                    Some("equal") => Jitter::Equal,
                    _ => {
                        return Err(ConfigError::at(
                            n,
                            path,
                            "jitter must be one of ['equal', 'full', 'none']",
                        ));
                    }
                },
            },
        },
        RetryType::ByFailureKind => {
            let sub = |key: &str| -> Result<Option<Box<RetryPolicy>>, ConfigError> {
                match field(key) {
                    None => Ok(None),
                    Some(n) => {
                        let sub_path = join(path, key);
                        let p = parse_inner(n, &sub_path)?;
                        p.validate()
                            .map_err(|e| ConfigError::at(n, &sub_path, e.to_string()))?;
                        Ok(Some(Box::new(p)))
                    }
                }
            };
            RetryPolicy::ByFailureKind {
                default: sub("default")?,
                error: sub("error")?,
                timeout: sub("timeout")?,
                cancelled: sub("cancelled")?,
            }
        }
    })
}
