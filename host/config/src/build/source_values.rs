//! The value readers a source's table options share with the API section: table names,
//! `auto_create`, positive integers and the value-size limits (docs/semantics.md#size-limits).

use onestep_core::Limits;
use onestep_core::names::validate_table_name;

use crate::error::ConfigError;
use crate::fields::integer;
use crate::node::Node;

/// Reads `table`/`attempts_table` (identifier rules of docs/semantics.md#tables-and-names; null → default).
pub fn table_name(
    node: &Node,
    key: &str,
    field: &str,
    default: &str,
    path: &str,
) -> Result<String, ConfigError> {
    match node.get_set(key) {
        None => Ok(default.to_owned()),
        Some(n) => {
            let s = n.as_str().unwrap_or("");
            validate_table_name(field, s).map_err(|e| ConfigError::at(n, path, e.to_string()))?;
            Ok(s.to_owned())
        }
    }
}

/// Reads `auto_create` (must be a boolean in both modes, docs/semantics.md#compatibility-with-the-reference).
pub fn auto_create(node: &Node, default: bool, path: &str) -> Result<bool, ConfigError> {
    match node.get_set("auto_create") {
        None => Ok(default),
        Some(n) => match n.value {
            crate::node::Value::Bool(b) => Ok(b),
            _ => Err(ConfigError::at(n, path, "auto_create must be a boolean")),
        },
    }
}

/// Reads a positive integer option (`<key> must be a positive integer`).
pub fn positive(node: &Node, key: &str, default: u64, path: &str) -> Result<u64, ConfigError> {
    match node.get_set(key) {
        None => Ok(default),
        Some(n) => match integer(n) {
            Some(i) if i >= 1 => Ok(i as u64),
            _ => Err(ConfigError::at(
                n,
                path,
                format!("{key} must be a positive integer"),
            )),
        },
    }
}

/// Reads the three value-size limits of docs/semantics.md#size-limits.
pub fn limits(node: &Node, path: &str) -> Result<Limits, ConfigError> {
    let d = Limits::default();
    let get = |key: &str, default: usize| -> Result<usize, ConfigError> {
        let v = positive(node, key, default as u64, path)?;
        usize::try_from(v)
            .map_err(|_| ConfigError::at(node, path, format!("{key} must be a positive integer")))
    };
    Ok(Limits {
        max_payload_bytes: get("max_payload_bytes", d.max_payload_bytes)?,
        max_metadata_bytes: get("max_metadata_bytes", d.max_metadata_bytes)?,
        max_result_bytes: get("max_result_bytes", d.max_result_bytes)?,
    })
}
