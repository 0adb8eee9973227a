//! The reversible value codec for payload, metadata and result (spec §3.1). (STUB: being implemented.)

use serde_json::Value;

use crate::error::ExecutionError;

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

/// Encodes a user value for storage (wraps objects containing `$onestep`; rejects non-finite numbers).
pub fn encode_value(value: &Value, field: ValueField) -> Result<Value, ExecutionError> {
    let _ = (value, field);
    unimplemented!("codec is being implemented")
}

/// Decodes a stored value (unwraps `mapping`; passes other known tags through). The error is the
/// reason text; callers wrap it as `cannot decode execution <id>: <reason>`.
pub fn decode_value(value: &Value) -> Result<Value, String> {
    let _ = value;
    unimplemented!("codec is being implemented")
}
