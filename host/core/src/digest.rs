//! The submission digest (spec §7.1.3). (STUB: being implemented.)

use chrono::{DateTime, FixedOffset};
use serde_json::Value;

/// Lowercase hex SHA-256 of the canonical JSON of
/// `{namespace, task_name, payload, metadata, delay_s, expires_at}` (all already trimmed/encoded).
pub fn submission_digest(
    namespace: &str,
    task_name: &str,
    encoded_payload: &Value,
    encoded_metadata: &Value,
    delay_s: Option<f64>,
    expires_at: Option<&DateTime<FixedOffset>>,
) -> String {
    let _ = (
        namespace,
        task_name,
        encoded_payload,
        encoded_metadata,
        delay_s,
        expires_at,
    );
    unimplemented!("digest is being implemented")
}
