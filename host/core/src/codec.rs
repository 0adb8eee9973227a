//! The reversible value codec for payload, metadata and result (docs/semantics.md#value-encoding).
//!
//! Encoding: JSON values are stored as themselves, except that an object containing the key
//! `"$onestep"` is wrapped as `{"$onestep":{"type":"mapping","items":[[key,value],…]}}` (items in
//! the object's key order, values encoded recursively) so it cannot be confused with a tag. Floats
//! that are not finite (possible only as overflowing number text such as `1e400`) are rejected.
//!
//! Decoding: `mapping` wrappers are unwrapped recursively. The other tags written by the Python
//! reference (`datetime`, `uuid`, `bytes`, `decimal`, `tuple`, `set`, `frozenset`, `enum`,
//! `namedtuple`) are validated structurally (exact field set, field types, nested values) and then
//! passed through unchanged as opaque JSON. Any other object containing `"$onestep"` is an error.
//! Error texts follow the reference's (`invalid extension tag at /`, …).

use serde_json::{Map, Value};

use crate::canonical::{NumberKind, number_kind};
use crate::error::ExecutionError;

/// The reserved key that marks a tagged (extension) object.
pub const TAG: &str = "$onestep";

/// Which stored field a value belongs to (used in error messages).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueField {
    /// The submitted payload.
    Payload,
    /// The submitted metadata object.
    Metadata,
    /// The handler's result.
    Result,
}

impl ValueField {
    /// `payload`, `metadata` or `result`.
    pub fn as_str(self) -> &'static str {
        match self {
            ValueField::Payload => "payload",
            ValueField::Metadata => "metadata",
            ValueField::Result => "result",
        }
    }
}

/// Appends a JSON-pointer token (`~` → `~0`, `/` → `~1`).
fn pointer(path: &str, token: &str) -> String {
    format!("{path}/{}", token.replace('~', "~0").replace('/', "~1"))
}

/// The path as shown in messages: the root is `/`.
fn shown(path: &str) -> &str {
    if path.is_empty() { "/" } else { path }
}

/// Encodes a user value for storage (wraps objects containing `$onestep`; rejects non-finite numbers).
///
/// Errors: `ExecutionError::Encoding("cannot encode execution <field>: cannot encode <type> at
/// <json-pointer>: <reason>")`.
pub fn encode_value(value: &Value, field: ValueField) -> Result<Value, ExecutionError> {
    encode_at(value, "").map_err(|(type_name, path, reason)| {
        ExecutionError::Encoding(format!(
            "cannot encode execution {}: cannot encode {type_name} at {}: {reason}",
            field.as_str(),
            shown(&path)
        ))
    })
}

/// [`encode_value`], then the check that every backend can store the encoded value
/// ([`crate::storable::check_json`], docs/semantics.md#storable-values).
///
/// Errors: as [`encode_value`], and `ExecutionError::Encoding("cannot store execution <field>:
/// <reason> at <json-pointer>")`.
pub fn encode_storable(value: &Value, field: ValueField) -> Result<Value, ExecutionError> {
    let encoded = encode_value(value, field)?;
    crate::storable::check_json(&encoded).map_err(|why| {
        ExecutionError::Encoding(format!(
            "cannot store execution {}: {why} (docs/semantics.md#storable-values)",
            field.as_str()
        ))
    })?;
    Ok(encoded)
}

type EncodeFailure = (&'static str, String, &'static str);

fn encode_at(value: &Value, path: &str) -> Result<Value, EncodeFailure> {
    match value {
        Value::Null | Value::Bool(_) | Value::String(_) => Ok(value.clone()),
        Value::Number(n) => match number_kind(n) {
            NumberKind::Int(_) => Ok(value.clone()),
            NumberKind::Float(x) if x.is_finite() => Ok(value.clone()),
            NumberKind::Float(_) => Err(("builtins.float", path.to_owned(), "non-finite float")),
            NumberKind::Invalid(_) => Err(("number", path.to_owned(), "invalid number text")),
        },
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, item)| encode_at(item, &pointer(path, &i.to_string())))
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array),
        Value::Object(map) => {
            if map.contains_key(TAG) {
                let items = map
                    .iter()
                    .map(|(key, item)| {
                        Ok(Value::Array(vec![
                            Value::String(key.clone()),
                            encode_at(item, &pointer(path, key))?,
                        ]))
                    })
                    .collect::<Result<Vec<_>, EncodeFailure>>()?;
                let mut body = Map::new();
                body.insert("type".into(), Value::String("mapping".into()));
                body.insert("items".into(), Value::Array(items));
                let mut wrapper = Map::new();
                wrapper.insert(TAG.into(), Value::Object(body));
                Ok(Value::Object(wrapper))
            } else {
                let mut out = Map::new();
                for (key, item) in map {
                    out.insert(key.clone(), encode_at(item, &pointer(path, key))?);
                }
                Ok(Value::Object(out))
            }
        }
    }
}

/// Why a stored value cannot be decoded ([`decode_value`]): the problem and where (a JSON
/// pointer, `/` for the root). Shown as `<problem> at <pointer>`, e.g. `invalid extension tag at
/// /a`, the reference's wording.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{problem} at {at}")]
pub struct DecodeError {
    /// What is wrong, e.g. `invalid uuid tag fields`.
    pub problem: String,
    /// The JSON pointer of the offending value (`/` for the root).
    pub at: String,
}

impl DecodeError {
    fn new(problem: impl Into<String>, path: &str) -> Self {
        DecodeError {
            problem: problem.into(),
            at: shown(path).to_owned(),
        }
    }
}

/// Decodes a stored value (unwraps `mapping`; passes other known tags through). The error is the
/// reason; callers wrap it as `cannot decode execution <id>: <reason>`.
pub fn decode_value(value: &Value) -> Result<Value, DecodeError> {
    decode_at(value, "")
}

fn decode_at(value: &Value, path: &str) -> Result<Value, DecodeError> {
    match value {
        Value::Null | Value::Bool(_) | Value::String(_) => Ok(value.clone()),
        Value::Number(n) => match number_kind(n) {
            NumberKind::Int(_) => Ok(value.clone()),
            NumberKind::Float(x) if x.is_finite() => Ok(value.clone()),
            NumberKind::Float(_) => Err(DecodeError::new("non-finite float", path)),
            NumberKind::Invalid(_) => Err(DecodeError::new("invalid encoded value", path)),
        },
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, item)| decode_at(item, &pointer(path, &i.to_string())))
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array),
        Value::Object(map) => {
            if !map.contains_key(TAG) {
                let mut out = Map::new();
                for (key, item) in map {
                    out.insert(key.clone(), decode_at(item, &pointer(path, key))?);
                }
                return Ok(Value::Object(out));
            }
            let payload = match map.get(TAG) {
                Some(Value::Object(payload)) if map.len() == 1 => payload,
                _ => return Err(DecodeError::new("invalid extension tag", path)),
            };
            decode_tag(value, payload, path)
        }
    }
}

/// Checks that `payload`'s keys are exactly `type` plus `fields`.
fn require_fields(
    payload: &Map<String, Value>,
    type_name: &str,
    fields: &[&str],
    path: &str,
) -> Result<(), DecodeError> {
    let ok = payload.len() == fields.len() + 1 && fields.iter().all(|f| payload.contains_key(*f));
    if ok {
        Ok(())
    } else {
        Err(DecodeError::new(
            format!("invalid {type_name} tag fields"),
            path,
        ))
    }
}

fn is_str(v: Option<&Value>) -> bool {
    matches!(v, Some(Value::String(_)))
}

/// Python's `x in {0, 1}`: true for `0`, `1`, `False`, `True`, `0.0`, `1.0`, `-0.0`.
fn is_zero_or_one(v: Option<&Value>) -> bool {
    match v {
        Some(Value::Bool(_)) => true,
        Some(Value::Number(n)) => match number_kind(n) {
            NumberKind::Int(text) => {
                let digits = text
                    .strip_prefix('-')
                    .unwrap_or(text)
                    .trim_start_matches('0');
                digits.is_empty() || (digits == "1" && !text.starts_with('-'))
            }
            NumberKind::Float(x) => x == 0.0 || x == 1.0,
            NumberKind::Invalid(_) => false,
        },
        _ => false,
    }
}

/// Decodes every element of a tag's list field (validation only; indexes as path tokens).
fn validate_items(items: &[Value], path: &str) -> Result<(), DecodeError> {
    for (i, item) in items.iter().enumerate() {
        decode_at(item, &pointer(path, &i.to_string()))?;
    }
    Ok(())
}

fn decode_tag(
    original: &Value,
    payload: &Map<String, Value>,
    path: &str,
) -> Result<Value, DecodeError> {
    let type_name = match payload.get("type") {
        Some(Value::String(t)) => t.as_str(),
        _ => return Err(DecodeError::new("extension type must be a string", path)),
    };
    match type_name {
        "mapping" => {
            require_fields(payload, type_name, &["items"], path)?;
            let Some(Value::Array(items)) = payload.get("items") else {
                return Err(DecodeError::new("invalid mapping tag", path));
            };
            let mut out = Map::new();
            for (index, pair) in items.iter().enumerate() {
                let key = match pair {
                    Value::Array(kv) if kv.len() == 2 => match &kv[0] {
                        Value::String(k) if !out.contains_key(k) => Some((k, &kv[1])),
                        _ => None,
                    },
                    _ => None,
                };
                let Some((key, item)) = key else {
                    return Err(DecodeError::new(
                        "invalid mapping item",
                        &pointer(path, &index.to_string()),
                    ));
                };
                let decoded = decode_at(item, &pointer(path, key))?;
                out.insert(key.clone(), decoded);
            }
            Ok(Value::Object(out))
        }
        "datetime" => {
            require_fields(payload, type_name, &["value", "fold"], path)?;
            if !is_str(payload.get("value")) || !is_zero_or_one(payload.get("fold")) {
                return Err(DecodeError::new("invalid datetime tag", path));
            }
            Ok(original.clone())
        }
        "uuid" | "bytes" | "decimal" => {
            require_fields(payload, type_name, &["value"], path)?;
            if !is_str(payload.get("value")) {
                return Err(DecodeError::new(format!("invalid {type_name} tag"), path));
            }
            Ok(original.clone())
        }
        "tuple" | "set" | "frozenset" => {
            require_fields(payload, type_name, &["values"], path)?;
            let Some(Value::Array(values)) = payload.get("values") else {
                return Err(DecodeError::new(format!("invalid {type_name} tag"), path));
            };
            validate_items(values, path)?;
            Ok(original.clone())
        }
        "enum" => {
            require_fields(
                payload,
                type_name,
                &["module", "qualname", "name", "value"],
                path,
            )?;
            if !is_str(payload.get("module")) || !is_str(payload.get("qualname")) {
                return Err(DecodeError::new("invalid recorded type", path));
            }
            if !is_str(payload.get("name")) {
                return Err(DecodeError::new("recorded type is not an enum", path));
            }
            if let Some(v) = payload.get("value") {
                decode_at(v, &pointer(path, "value"))?;
            }
            Ok(original.clone())
        }
        "namedtuple" => {
            require_fields(
                payload,
                type_name,
                &["module", "qualname", "fields", "values"],
                path,
            )?;
            if !is_str(payload.get("module")) || !is_str(payload.get("qualname")) {
                return Err(DecodeError::new("invalid recorded type", path));
            }
            match (payload.get("fields"), payload.get("values")) {
                (Some(Value::Array(fields)), Some(Value::Array(values)))
                    if fields.len() == values.len()
                        && fields.iter().all(|f| matches!(f, Value::String(_))) =>
                {
                    for (field, item) in fields.iter().zip(values) {
                        let token = field.as_str().unwrap_or_default();
                        decode_at(item, &pointer(path, token))?;
                    }
                    Ok(original.clone())
                }
                _ => Err(DecodeError::new("namedtuple definition changed", path)),
            }
        }
        other => Err(DecodeError::new(
            format!("unknown extension type {}", python_str_repr(other)),
            path,
        )),
    }
}

/// An approximation of Python's `repr(str)` for error messages.
fn python_str_repr(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::new();
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || (0x7f..0xa0).contains(&(c as u32)) => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canonical::to_canonical_string;
    use serde_json::json;

    fn parse(text: &str) -> Value {
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn plain_values_are_stored_as_themselves() {
        let v = parse(r#"{"a":[1,2.5,null,true,"x",{"b":{}}],"n":100000000000000000000,"f":1e16}"#);
        let e = encode_value(&v, ValueField::Payload).unwrap();
        assert_eq!(
            serde_json::to_string(&e).unwrap(),
            serde_json::to_string(&v).unwrap()
        );
        assert_eq!(decode_value(&e).unwrap(), v);
    }

    #[test]
    fn mapping_wrapper_both_ways() {
        let v = parse(r#"{"z":1,"$onestep":{"type":"uuid","value":"x"},"a":[{"$onestep":2}]}"#);
        let e = encode_value(&v, ValueField::Metadata).unwrap();
        assert_eq!(
            serde_json::to_string(&e).unwrap(),
            r#"{"$onestep":{"type":"mapping","items":[["z",1],["$onestep",{"type":"uuid","value":"x"}],["a",[{"$onestep":{"type":"mapping","items":[["$onestep",2]]}}]]]}}"#
        );
        let d = decode_value(&e).unwrap();
        // Round trip keeps key order too.
        assert_eq!(
            serde_json::to_string(&d).unwrap(),
            serde_json::to_string(&v).unwrap()
        );
        assert_eq!(
            to_canonical_string(
                &encode_value(&parse(r#"{"$onestep":1}"#), ValueField::Result).unwrap()
            ),
            r#"{"$onestep":{"items":[["$onestep",1]],"type":"mapping"}}"#
        );
    }

    #[test]
    fn non_finite_numbers_are_rejected() {
        let v = parse(r#"{"a/b":[1,1e400]}"#);
        let err = encode_value(&v, ValueField::Result).unwrap_err();
        assert_eq!(
            err.to_string(),
            "cannot encode execution result: cannot encode builtins.float at /a~1b/1: non-finite float"
        );
        let err = encode_value(&parse("-1e999"), ValueField::Payload).unwrap_err();
        assert!(matches!(err, ExecutionError::Encoding(_)));
        assert_eq!(
            err.to_string(),
            "cannot encode execution payload: cannot encode builtins.float at /: non-finite float"
        );
        assert_eq!(
            decode_value(&parse(r#"{"x":[1e400]}"#))
                .unwrap_err()
                .to_string(),
            "non-finite float at /x/0"
        );
    }

    #[test]
    fn known_tags_pass_through() {
        for text in [
            r#"{"$onestep":{"type":"datetime","value":"2026-08-10T12:00:00+00:00","fold":0}}"#,
            r#"{"$onestep":{"type":"datetime","value":"2026-08-10T12:00:00","fold":1}}"#,
            r#"{"$onestep":{"type":"uuid","value":"2a31b3a6-72c9-4ae3-8e8e-4d6f78c00f3a"}}"#,
            r#"{"$onestep":{"type":"bytes","value":"aGk="}}"#,
            r#"{"$onestep":{"type":"decimal","value":"1.10"}}"#,
            r#"{"$onestep":{"type":"tuple","values":[1,"a",{"$onestep":{"type":"mapping","items":[]}}]}}"#,
            r#"{"$onestep":{"type":"set","values":[1,2]}}"#,
            r#"{"$onestep":{"type":"frozenset","values":[]}}"#,
            r#"{"$onestep":{"type":"enum","module":"m","qualname":"Color","name":"RED","value":1}}"#,
            r#"{"$onestep":{"type":"namedtuple","module":"m","qualname":"P","fields":["x","y"],"values":[1,2]}}"#,
        ] {
            let v = parse(text);
            assert_eq!(decode_value(&v).unwrap(), v, "{text}");
            let nested = json!({"outer": [v.clone()]});
            assert_eq!(decode_value(&nested).unwrap(), nested);
        }
    }

    #[test]
    fn invalid_tags_are_rejected() {
        for (text, reason) in [
            (r#"{"$onestep":1}"#, "invalid extension tag at /"),
            (
                r#"{"$onestep":{"type":"uuid","value":"x"},"b":1}"#,
                "invalid extension tag at /",
            ),
            (r#"{"a":{"$onestep":[]}}"#, "invalid extension tag at /a"),
            (
                r#"{"$onestep":{"value":"x"}}"#,
                "extension type must be a string at /",
            ),
            (
                r#"{"$onestep":{"type":"nope"}}"#,
                "unknown extension type 'nope' at /",
            ),
            (
                r#"{"$onestep":{"type":"uuid","value":"x","extra":1}}"#,
                "invalid uuid tag fields at /",
            ),
            (
                r#"{"$onestep":{"type":"uuid"}}"#,
                "invalid uuid tag fields at /",
            ),
            (
                r#"{"$onestep":{"type":"uuid","value":1}}"#,
                "invalid uuid tag at /",
            ),
            (
                r#"{"$onestep":{"type":"datetime","value":"x","fold":2}}"#,
                "invalid datetime tag at /",
            ),
            (
                r#"{"$onestep":{"type":"tuple","values":{}}}"#,
                "invalid tuple tag at /",
            ),
            (
                r#"{"$onestep":{"type":"mapping","items":{}}}"#,
                "invalid mapping tag at /",
            ),
            (
                r#"{"$onestep":{"type":"mapping","items":[["a",1],["a",2]]}}"#,
                "invalid mapping item at /1",
            ),
            (
                r#"{"$onestep":{"type":"mapping","items":[[1,2]]}}"#,
                "invalid mapping item at /0",
            ),
            (
                r#"{"$onestep":{"type":"mapping","items":[["k",{"$onestep":0}]]}}"#,
                "invalid extension tag at /k",
            ),
            (
                r#"{"$onestep":{"type":"set","values":[{"$onestep":{}}]}}"#,
                "extension type must be a string at /0",
            ),
            (
                r#"{"$onestep":{"type":"namedtuple","module":"m","qualname":"P","fields":["x"],"values":[]}}"#,
                "namedtuple definition changed at /",
            ),
            (
                r#"{"$onestep":{"type":"enum","module":1,"qualname":"P","name":"x","value":1}}"#,
                "invalid recorded type at /",
            ),
        ] {
            assert_eq!(
                decode_value(&parse(text)).unwrap_err().to_string(),
                reason,
                "{text}"
            );
        }
    }
}
