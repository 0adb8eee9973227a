//! `${…}` environment interpolation and the strict-env check (docs/configuration.md#load-pipeline step 4, docs/configuration.md#environment-interpolation).
//!
//! A reference is `${` + one or more characters other than `}` + `}`; no nesting, no escaping.
//! `${NAME}` is the value or the empty string; `${NAME:-d}` / `${NAME:d}` is the value when the
//! variable is *set* (even empty), else `d`. The inner text is split at the first `:-` if present,
//! otherwise at the first `:`. Only string values are expanded (other scalars are not), and keys
//! only where a key is a value: the origins of `sandbox.network.headers` and
//! `sandbox.network.rate_limits`, which name the same origins as `allow` and expand exactly as
//! they do. A string that is exactly one reference
//! (ignoring surrounding whitespace) is JSON-typed.

use crate::env::EnvLookup;
use crate::error::MissingVar;
use crate::node::{Node, Value};

/// One `${…}` reference found in a string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference<'a> {
    /// Byte offset of `$`.
    pub start: usize,
    /// Byte offset just after `}`.
    pub end: usize,
    /// The variable name.
    pub name: &'a str,
    /// The default, if the reference has one.
    pub default: Option<&'a str>,
}

/// Finds every reference in `s`, left to right.
pub fn references(s: &str) -> Vec<Reference<'_>> {
    let mut out = Vec::new();
    let mut pos = 0;
    while let Some(off) = s[pos..].find("${") {
        let start = pos + off;
        let inner_start = start + 2;
        let Some(close) = s[inner_start..].find('}') else {
            break;
        };
        if close == 0 {
            // `${}` is not a reference; keep scanning after the `$`.
            pos = start + 1;
            continue;
        }
        let inner = &s[inner_start..inner_start + close];
        let (name, default) = split_reference(inner);
        let end = inner_start + close + 1;
        out.push(Reference {
            start,
            end,
            name,
            default,
        });
        pos = end;
    }
    out
}

/// Splits the inside of `${…}` into name and default: at the first `:-` if present, else at the
/// first `:` (so `A:b:-c` is variable `A:b` with default `c`).
pub fn split_reference(inner: &str) -> (&str, Option<&str>) {
    if let Some((name, default)) = inner.split_once(":-") {
        (name, Some(default))
    } else if let Some((name, default)) = inner.split_once(':') {
        (name, Some(default))
    } else {
        (inner, None)
    }
}

fn resolve(r: &Reference<'_>, env: &EnvLookup) -> String {
    match (env.get(r.name), r.default) {
        (Some(v), _) => v,
        (None, Some(d)) => d.to_owned(),
        (None, None) => String::new(),
    }
}

/// Expands every reference in `s` (always a string result).
pub fn expand_text(s: &str, env: &EnvLookup) -> String {
    let mut out = String::with_capacity(s.len());
    let mut last = 0;
    for r in references(s) {
        out.push_str(&s[last..r.start]);
        out.push_str(&resolve(&r, env));
        last = r.end;
    }
    out.push_str(&s[last..]);
    out
}

/// Expands a string value located at `loc`, applying pure-reference JSON typing: when the whole
/// string (ignoring surrounding whitespace) is one reference, the expanded text becomes a number,
/// boolean, array or object if it parses as such JSON; `null`, JSON strings, invalid JSON and the
/// empty string stay strings.
pub fn expand_value(s: &str, loc: &Node, env: &EnvLookup) -> Node {
    let refs = references(s);
    if refs.is_empty() {
        return Node::at(Value::Str(s.to_owned()), loc);
    }
    let expanded = expand_text(s, env);
    let trimmed_start = s.len() - s.trim_start().len();
    let trimmed_end = s.trim_end().len();
    if let [only] = refs.as_slice()
        && only.start == trimmed_start
        && only.end == trimmed_end
    {
        let value = resolve(only, env);
        if let Ok(json) = serde_json::from_str::<serde_json::Value>(&value)
            && !matches!(json, serde_json::Value::Null | serde_json::Value::String(_))
        {
            return Node::from_json(&json, loc);
        }
    }
    Node::at(Value::Str(expanded), loc)
}

/// Expands every string value of the tree (docs/configuration.md#load-pipeline step 5), and
/// the origin keys of every `network.headers` mapping.
pub fn expand_tree(node: &Node, env: &EnvLookup) -> Node {
    expand_at(node, env, false)
}

/// Whether the entries of the mapping under `key` are keyed by origins (`network.headers`,
/// `network.rate_limits`).
fn keys_are_values(parent: &str, key: &str) -> bool {
    parent == "network" && (key == "headers" || key == "rate_limits")
}

fn expand_at(node: &Node, env: &EnvLookup, expand_keys: bool) -> Node {
    match &node.value {
        Value::Str(s) => expand_value(s, node, env),
        Value::Seq(items) => Node::at(
            Value::Seq(items.iter().map(|i| expand_at(i, env, false)).collect()),
            node,
        ),
        Value::Map(entries) => Node::at(
            Value::Map(
                entries
                    .iter()
                    .map(|(k, v)| {
                        let key = if expand_keys {
                            expand_text(k, env)
                        } else {
                            k.clone()
                        };
                        (key, expand_child(k, v, env))
                    })
                    .collect(),
            ),
            node,
        ),
        _ => node.clone(),
    }
}

/// Expands the value of entry `key`: a `network` mapping expands its `headers` keys.
fn expand_child(key: &str, value: &Node, env: &EnvLookup) -> Node {
    match (&value.value, key) {
        (Value::Map(entries), "network") => Node::at(
            Value::Map(
                entries
                    .iter()
                    .map(|(k, v)| (k.clone(), expand_at(v, env, keys_are_values("network", k))))
                    .collect(),
            ),
            value,
        ),
        _ => expand_at(value, env, false),
    }
}

/// Every reference in an injected header's value (`network.headers.<origin>.<name>`) whose
/// expansion is empty, as `(path, variable)`: such a header would send `Bearer ` upstream, so
/// strict loading refuses it (docs/configuration.md#sandbox-network).
pub fn empty_header_refs(root: &Node, env: &EnvLookup) -> Vec<MissingVar> {
    let mut out = Vec::new();
    walk_headers(root, "config", env, &mut out);
    out
}

fn walk_headers(node: &Node, path: &str, env: &EnvLookup, out: &mut Vec<MissingVar>) {
    match &node.value {
        Value::Seq(items) => {
            for (i, item) in items.iter().enumerate() {
                walk_headers(item, &format!("{path}[{i}]"), env, out);
            }
        }
        Value::Map(entries) => {
            for (k, v) in entries {
                let child = format!("{path}.{k}");
                if path.ends_with(".network") && k == "headers" {
                    for (origin, pairs) in v.entries().into_iter().flatten() {
                        for (name, value) in pairs.entries().into_iter().flatten() {
                            let Value::Str(raw) = &value.value else {
                                continue;
                            };
                            for r in references(raw) {
                                if resolve(&r, env).is_empty() {
                                    out.push(MissingVar {
                                        name: r.name.to_owned(),
                                        path: format!("{child}[{origin:?}].{name}"),
                                    });
                                }
                            }
                        }
                    }
                } else {
                    walk_headers(v, &child, env, out);
                }
            }
        }
        _ => {}
    }
}

/// Every `${VAR}` reference without a default whose variable is unset, in document order, with
/// paths like `config.resources.db.dsn` (docs/configuration.md#load-pipeline step 4).
pub fn missing_vars(root: &Node, env: &EnvLookup) -> Vec<MissingVar> {
    let mut out = Vec::new();
    walk_missing(root, "config", env, &mut out);
    out
}

fn walk_missing(node: &Node, path: &str, env: &EnvLookup, out: &mut Vec<MissingVar>) {
    match &node.value {
        Value::Str(s) => {
            for r in references(s) {
                if r.default.is_none() && !env.is_set(r.name) {
                    out.push(MissingVar {
                        name: r.name.to_owned(),
                        path: path.to_owned(),
                    });
                }
            }
        }
        Value::Seq(items) => {
            for (i, item) in items.iter().enumerate() {
                walk_missing(item, &format!("{path}[{i}]"), env, out);
            }
        }
        Value::Map(entries) => {
            for (k, v) in entries {
                let child = format!("{path}.{k}");
                if path.ends_with(".network") && (k == "headers" || k == "rate_limits") {
                    // The origin keys expand too.
                    for (origin, _) in v.entries().into_iter().flatten() {
                        for r in references(origin) {
                            if r.default.is_none() && !env.is_set(r.name) {
                                out.push(MissingVar {
                                    name: r.name.to_owned(),
                                    path: child.clone(),
                                });
                            }
                        }
                    }
                }
                walk_missing(v, &child, env, out);
            }
        }
        _ => {}
    }
}
