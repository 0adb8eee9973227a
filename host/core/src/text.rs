//! Text-field rules (docs/semantics.md#text-fields): trimmed, lengths in Unicode code points.

use crate::error::ExecutionError;

/// Trims `value` and checks it is 1..=`max` characters; messages are the reference's:
/// `<name> must not be empty`, `<name> must be at most <max> characters`.
pub fn required_text(name: &str, value: &str, max: usize) -> Result<String, ExecutionError> {
    let t = value.trim();
    if t.is_empty() {
        return Err(ExecutionError::invalid(format!("{name} must not be empty")));
    }
    if t.chars().count() > max {
        return Err(ExecutionError::invalid(format!(
            "{name} must be at most {max} characters"
        )));
    }
    Ok(t.to_owned())
}

/// Like [`required_text`] for an optional value (a whitespace-only value is still an error).
pub fn optional_text(
    name: &str,
    value: Option<&str>,
    max: usize,
) -> Result<Option<String>, ExecutionError> {
    value.map(|v| required_text(name, v, max)).transpose()
}

/// A cancel reason: trimmed; empty → absent; more than 500 characters → error (docs/semantics.md#cancellation).
pub fn cancel_reason(value: Option<&str>) -> Result<Option<String>, ExecutionError> {
    match value.map(str::trim) {
        None | Some("") => Ok(None),
        Some(t) if t.chars().count() > 500 => Err(ExecutionError::invalid(
            "reason must be at most 500 characters",
        )),
        Some(t) => Ok(Some(t.to_owned())),
    }
}

/// Maximum characters of a namespace, task name, idempotency key or worker id.
pub const MAX_NAME_CHARS: usize = 255;

/// The longest prefix of `text` of at most `max_bytes` bytes that ends on a character boundary.
pub fn truncate_utf8(text: &str, max_bytes: usize) -> &str {
    if text.len() <= max_bytes {
        return text;
    }
    let mut end = max_bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trims_and_counts_characters() {
        assert_eq!(
            required_text("namespace", " agent-api ", 255)
                .ok()
                .as_deref(),
            Some("agent-api")
        );
        assert!(required_text("namespace", "  ", 255).is_err());
        let s = "é".repeat(255);
        assert!(required_text("idempotency_key", &s, 255).is_ok());
        let s = "é".repeat(256);
        assert!(required_text("idempotency_key", &s, 255).is_err());
        assert_eq!(cancel_reason(Some("   ")).ok(), Some(None));
        assert!(cancel_reason(Some(&"x".repeat(501))).is_err());
        assert!(cancel_reason(Some(&"x".repeat(500))).is_ok());
    }
}
