//! The generic YAML value tree with source locations (docs/configuration.md#load-pipeline step 1).
//!
//! The document is parsed by `serde-saphyr` (YAML 1.2 core schema, anchors, aliases and merge
//! keys `<<:`) into [`Node`]s that remember the line and column of every value, so that env
//! interpolation, strict validation and the typed build can all report `path (line L, column C)`.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_saphyr::Spanned;

use crate::error::ConfigError;

/// One YAML value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// `null`, `~` or an empty value.
    Null,
    /// `true` / `false` (YAML 1.2 spellings only: `yes`/`no` stay strings).
    Bool(bool),
    /// An integer that fits `i64`.
    Int(i64),
    /// A float (may be non-finite: `.nan`, `.inf`).
    Float(f64),
    /// A string.
    Str(String),
    /// A sequence.
    Seq(Vec<Node>),
    /// A mapping, in document order (keys rendered as strings).
    Map(Vec<(String, Node)>),
}

/// A value and where it appears in the file (1-based; 0 = unknown, e.g. produced by env typing).
#[derive(Debug, Clone)]
pub struct Node {
    /// The value.
    pub value: Value,
    /// 1-based line of the value, 0 when unknown.
    pub line: u64,
    /// 1-based column of the value, 0 when unknown.
    pub column: u64,
}

impl PartialEq for Node {
    /// Compares values only (locations are ignored), as needed for "identical specs".
    fn eq(&self, other: &Self) -> bool {
        self.value == other.value
    }
}

impl Node {
    /// A node without location.
    pub fn new(value: Value) -> Self {
        Node {
            value,
            line: 0,
            column: 0,
        }
    }

    /// The same value placed at another node's location.
    pub fn at(value: Value, loc: &Node) -> Self {
        Node {
            value,
            line: loc.line,
            column: loc.column,
        }
    }

    /// Entry `key` of a mapping (`None` for non-mappings and missing keys).
    pub fn get(&self, key: &str) -> Option<&Node> {
        match &self.value {
            Value::Map(entries) => entries.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// Entry `key` unless it is absent or `null`.
    pub fn get_set(&self, key: &str) -> Option<&Node> {
        self.get(key).filter(|n| !n.is_null())
    }

    /// The entries of a mapping.
    pub fn entries(&self) -> Option<&[(String, Node)]> {
        match &self.value {
            Value::Map(entries) => Some(entries),
            _ => None,
        }
    }

    /// The items of a sequence.
    pub fn items(&self) -> Option<&[Node]> {
        match &self.value {
            Value::Seq(items) => Some(items),
            _ => None,
        }
    }

    /// The string value, if this is a string.
    pub fn as_str(&self) -> Option<&str> {
        match &self.value {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    /// True for `null`.
    pub fn is_null(&self) -> bool {
        matches!(self.value, Value::Null)
    }

    /// True for a mapping.
    pub fn is_map(&self) -> bool {
        matches!(self.value, Value::Map(_))
    }

    /// A short type name for messages (`string`, `integer`, `mapping`, …).
    pub fn type_name(&self) -> &'static str {
        match self.value {
            Value::Null => "null",
            Value::Bool(_) => "boolean",
            Value::Int(_) => "integer",
            Value::Float(_) => "number",
            Value::Str(_) => "string",
            Value::Seq(_) => "list",
            Value::Map(_) => "mapping",
        }
    }

    /// Converts to JSON (non-finite floats become `null`).
    pub fn to_json(&self) -> serde_json::Value {
        match &self.value {
            Value::Null => serde_json::Value::Null,
            Value::Bool(b) => serde_json::Value::Bool(*b),
            Value::Int(i) => serde_json::Value::from(*i),
            Value::Float(f) => serde_json::Number::from_f64(*f)
                .map(serde_json::Value::Number)
                .unwrap_or(serde_json::Value::Null),
            Value::Str(s) => serde_json::Value::String(s.clone()),
            Value::Seq(items) => items.iter().map(Node::to_json).collect(),
            Value::Map(entries) => serde_json::Value::Object(
                entries
                    .iter()
                    .map(|(k, v)| (k.clone(), v.to_json()))
                    .collect(),
            ),
        }
    }

    /// Converts JSON into a node located at `loc` (used by pure-reference typing, docs/configuration.md#environment-interpolation).
    pub fn from_json(json: &serde_json::Value, loc: &Node) -> Node {
        let value = match json {
            serde_json::Value::Null => Value::Null,
            serde_json::Value::Bool(b) => Value::Bool(*b),
            serde_json::Value::Number(n) => match n.as_i64() {
                Some(i) => Value::Int(i),
                None => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
            },
            serde_json::Value::String(s) => Value::Str(s.clone()),
            serde_json::Value::Array(items) => {
                Value::Seq(items.iter().map(|i| Node::from_json(i, loc)).collect())
            }
            serde_json::Value::Object(map) => Value::Map(
                map.iter()
                    .map(|(k, v)| (k.clone(), Node::from_json(v, loc)))
                    .collect(),
            ),
        };
        Node::at(value, loc)
    }
}

/// Parses YAML text. An empty document (or one with only comments) is an empty mapping.
pub fn parse(text: &str) -> Result<Node, ConfigError> {
    let options = serde_saphyr::options! {
        strict_booleans: true,
        with_snippet: false,
        non_finite_float_policy: serde_saphyr::NonFiniteFloatPolicy::PassThrough,
    };
    match serde_saphyr::from_str_with_options::<Option<Spanned<Raw>>>(text, options) {
        Ok(Some(root)) => Ok(spanned(root)),
        Ok(None) => Ok(Node::new(Value::Map(Vec::new()))),
        Err(e) => {
            let (line, column) = e
                .location()
                .map(|l| (l.line(), l.column()))
                .unwrap_or((0, 0));
            let text = e.without_snippet().to_string();
            // serde-saphyr appends its own location and an API hint; keep only the reason.
            let suffix = format!(" at line {line}, column {column}");
            let message = text
                .strip_suffix(&suffix)
                .unwrap_or(&text)
                .replace(", set DuplicateKeyPolicy in Options if acceptable", "");
            Err(ConfigError::Parse {
                message,
                line,
                column,
            })
        }
    }
}

fn spanned(s: Spanned<Raw>) -> Node {
    Node {
        value: s.value.0,
        line: s.referenced.line(),
        column: s.referenced.column(),
    }
}

/// A value being deserialised; children carry their spans.
struct Raw(Value);

impl<'de> Deserialize<'de> for Raw {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(RawVisitor)
    }
}

struct RawVisitor;

impl<'de> Visitor<'de> for RawVisitor {
    type Value = Raw;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML value")
    }
    fn visit_unit<E>(self) -> Result<Raw, E> {
        Ok(Raw(Value::Null))
    }
    fn visit_none<E>(self) -> Result<Raw, E> {
        Ok(Raw(Value::Null))
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Raw, D::Error> {
        Raw::deserialize(d)
    }
    fn visit_bool<E>(self, v: bool) -> Result<Raw, E> {
        Ok(Raw(Value::Bool(v)))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Raw, E> {
        Ok(Raw(Value::Int(v)))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Raw, E> {
        Ok(Raw(match i64::try_from(v) {
            Ok(i) => Value::Int(i),
            Err(_) => Value::Float(v as f64),
        }))
    }
    fn visit_i128<E>(self, v: i128) -> Result<Raw, E> {
        Ok(Raw(match i64::try_from(v) {
            Ok(i) => Value::Int(i),
            Err(_) => Value::Float(v as f64),
        }))
    }
    fn visit_u128<E>(self, v: u128) -> Result<Raw, E> {
        Ok(Raw(match i64::try_from(v) {
            Ok(i) => Value::Int(i),
            Err(_) => Value::Float(v as f64),
        }))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Raw, E> {
        Ok(Raw(Value::Float(v)))
    }
    fn visit_str<E>(self, v: &str) -> Result<Raw, E> {
        Ok(Raw(Value::Str(v.to_owned())))
    }
    fn visit_string<E>(self, v: String) -> Result<Raw, E> {
        Ok(Raw(Value::Str(v)))
    }
    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Raw, E> {
        Ok(Raw(Value::Str(String::from_utf8_lossy(v).into_owned())))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Raw, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Spanned<Raw>>()? {
            items.push(spanned(item));
        }
        Ok(Raw(Value::Seq(items)))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Raw, A::Error> {
        let mut entries: Vec<(String, Node)> = Vec::new();
        while let Some(key) = map.next_key::<Raw>()? {
            let value = spanned(map.next_value::<Spanned<Raw>>()?);
            let key = match key.0 {
                Value::Str(s) => s,
                Value::Null => "null".to_owned(),
                Value::Bool(b) => b.to_string(),
                Value::Int(i) => i.to_string(),
                Value::Float(f) => f.to_string(),
                Value::Seq(_) | Value::Map(_) => {
                    return Err(de::Error::custom("mapping keys must be scalars"));
                }
            };
            entries.push((key, value));
        }
        Ok(Raw(Value::Map(entries)))
    }
}
