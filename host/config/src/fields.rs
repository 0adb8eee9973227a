//! Small helpers shared by strict validation and the build: paths, allow-lists, scalar reads.

use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use crate::error::ConfigError;
use crate::node::{Node, Value};

/// `parent.key` (or `key` at the top).
pub(crate) fn join(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_owned()
    } else {
        format!("{parent}.{key}")
    }
}

/// `parent[i]`.
pub(crate) fn index(parent: &str, i: usize) -> String {
    format!("{parent}[{i}]")
}

/// Rejects keys outside `allowed`: `unsupported fields for <path>: <sorted, comma-separated>`.
pub(crate) fn check_allowed(node: &Node, path: &str, allowed: &[&str]) -> Result<(), ConfigError> {
    let Some(entries) = node.entries() else {
        return Ok(());
    };
    let mut unknown: Vec<(&str, &Node)> = entries
        .iter()
        .filter(|(k, _)| !allowed.contains(&k.as_str()))
        .map(|(k, v)| (k.as_str(), v))
        .collect();
    if unknown.is_empty() {
        return Ok(());
    }
    unknown.sort_by(|a, b| a.0.cmp(b.0));
    let names: Vec<&str> = unknown.iter().map(|(k, _)| *k).collect();
    Err(ConfigError::bare(
        unknown[0].1,
        format!("unsupported fields for {path}: {}", names.join(", ")),
    ))
}

/// A number (integer or float; booleans are not numbers).
pub(crate) fn number(n: &Node) -> Option<f64> {
    match n.value {
        Value::Int(i) => Some(i as f64),
        Value::Float(f) => Some(f),
        _ => None,
    }
}

/// Why a number of seconds is not a usable positive duration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BadSeconds {
    /// Zero, negative, or so small that it rounds to zero nanoseconds.
    NotPositive,
    /// Too large for a [`Duration`] (or not finite).
    OutOfRange,
}

/// The one conversion of the file's `_s` numbers: seconds (> 0) to a non-zero [`Duration`],
/// rounded to the nanosecond.
pub(crate) fn positive_seconds(seconds: f64) -> Result<Duration, BadSeconds> {
    if seconds.is_nan() || seconds <= 0.0 {
        return Err(BadSeconds::NotPositive);
    }
    match Duration::try_from_secs_f64(seconds) {
        Ok(d) if d.is_zero() => Err(BadSeconds::NotPositive),
        Ok(d) => Ok(d),
        Err(_) => Err(BadSeconds::OutOfRange),
    }
}

/// An integer (floats and booleans are not integers).
pub(crate) fn integer(n: &Node) -> Option<i64> {
    match n.value {
        Value::Int(i) => Some(i),
        _ => None,
    }
}

/// A non-empty (after trimming) string, returned untrimmed.
pub(crate) fn non_empty_str(n: &Node) -> Option<&str> {
    n.as_str().filter(|s| !s.trim().is_empty())
}

/// A scalar rendered for messages (`'x'` quoting is left to the caller).
pub(crate) fn scalar_text(n: &Node) -> String {
    match &n.value {
        Value::Null => "null".to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::Int(i) => i.to_string(),
        Value::Float(f) => f.to_string(),
        Value::Str(s) => s.clone(),
        Value::Seq(_) | Value::Map(_) => n.to_json().to_string(),
    }
}

/// A free mapping (`config`, `metadata`, `params`): absent/null → empty; otherwise must be a
/// mapping (`<key> must be a mapping` at `path`).
pub(crate) fn json_map(
    parent: &Node,
    key: &str,
    path: &str,
) -> Result<serde_json::Map<String, serde_json::Value>, ConfigError> {
    match parent.get_set(key) {
        None => Ok(serde_json::Map::new()),
        Some(n) => match n.to_json() {
            serde_json::Value::Object(m) => Ok(m),
            _ => Err(ConfigError::at(n, path, format!("{key} must be a mapping"))),
        },
    }
}

/// Resolves `p` against `base` (when relative) and removes `.`/`..` components lexically.
pub(crate) fn resolve_path(base: &Path, p: &str) -> PathBuf {
    let joined = base.join(p);
    let mut out = PathBuf::new();
    for c in joined.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    out.push(c);
                }
            }
            other => out.push(other),
        }
    }
    out
}
