//! Canonical JSON (spec §3.2): byte-identical to Python's
//! `json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)`.
//! (STUB: being implemented.)

use serde_json::Value;

/// The canonical JSON text of `value` (pure ASCII).
pub fn to_canonical_string(value: &Value) -> String {
    let _ = value;
    unimplemented!("canonical JSON is being implemented")
}
