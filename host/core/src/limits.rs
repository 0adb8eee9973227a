//! Size limits on stored values (docs/semantics.md#size-limits).

use crate::error::ExecutionError;

/// Limits in bytes of canonical JSON. A value is rejected when its canonical length *exceeds*
/// the limit (equal is allowed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Limits {
    /// Payload limit in bytes (default 1 MiB).
    pub max_payload_bytes: usize,
    /// Metadata limit in bytes (default 64 KiB).
    pub max_metadata_bytes: usize,
    /// Result limit in bytes (default 1 MiB).
    pub max_result_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_payload_bytes: 1_048_576,
            max_metadata_bytes: 65_536,
            max_result_bytes: 1_048_576,
        }
    }
}

impl Limits {
    /// Checks every limit is positive (`<name> must be a positive integer`).
    pub fn validate(&self) -> Result<(), ExecutionError> {
        for (name, v) in [
            ("max_payload_bytes", self.max_payload_bytes),
            ("max_metadata_bytes", self.max_metadata_bytes),
            ("max_result_bytes", self.max_result_bytes),
        ] {
            if v == 0 {
                return Err(ExecutionError::invalid(format!(
                    "{name} must be a positive integer"
                )));
            }
        }
        Ok(())
    }
}
