//! Text-field rules (docs/semantics.md#text-fields): trimmed, lengths in Unicode code points.

use crate::error::ExecutionError;

/// Trims `value` and checks it is 1..=`max` characters; messages are the reference's:
/// `<name> must not be empty`, `<name> must be at most <max> characters`.
pub fn required_text(name: &str, value: &str, max: usize) -> Result<String, ExecutionError> {
    let t = value.trim();
    if t.is_empty() {
        return Err(ExecutionError::invalid(format!("{name} must not be empty")));
    }
    crate::storable::check_text(name, t)?;
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
        Some(t) => {
            crate::storable::check_text("reason", t)?;
            Ok(Some(t.to_owned()))
        }
    }
}

/// Maximum characters of a namespace, task name, idempotency key or worker id.
pub const MAX_NAME_CHARS: usize = 255;

/// The characters a submitted task name may hold (docs/semantics.md#task-names), as the error
/// message names them.
pub const TASK_NAME_CHARS: &str = "ASCII letters, digits, '_', '.', ':' and '-'";

/// Whether `c` may appear in a submitted task name ([`TASK_NAME_CHARS`]).
pub fn is_task_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '-')
}

/// A submitted task name (docs/semantics.md#task-names): trimmed, 1..=255 characters, each one of
/// [`TASK_NAME_CHARS`], so a name is safe in metric labels, logs and URLs.
///
/// Errors: the [`required_text`] messages, and `task_name may contain only <chars> (found <c>)`.
pub fn task_name(value: &str) -> Result<String, ExecutionError> {
    let t = required_text("task_name", value, MAX_NAME_CHARS)?;
    if let Some(c) = t.chars().find(|c| !is_task_name_char(*c)) {
        return Err(ExecutionError::invalid(format!(
            "task_name may contain only {TASK_NAME_CHARS} (found {})",
            c.escape_default()
        )));
    }
    Ok(t)
}

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

/// Whether `c` must not reach a reader verbatim (docs/security.md#invisible-characters): every
/// control character (C0 including `\n`, `\r`, `\t`, DEL, C1), the Unicode line and paragraph
/// separators, the bidirectional-text controls (they reorder what a reader sees:
/// `invoice\u{202e}gpj.exe` reads as `invoiceexe.jpg`) and the zero-width characters (they hide
/// a difference between two names that look the same).
pub fn needs_visible_escape(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            // Line and paragraph separators: some viewers break lines there.
            '\u{2028}' | '\u{2029}'
            // Bidirectional controls.
            | '\u{061c}' | '\u{200e}' | '\u{200f}'
            | '\u{202a}'..='\u{202e}'
            | '\u{2066}'..='\u{2069}'
            // Zero-width space, non-joiner, joiner, word joiner, byte order mark.
            | '\u{200b}'..='\u{200d}' | '\u{2060}' | '\u{feff}'
        )
}

/// `text` with every character of [`needs_visible_escape`] replaced by a visible escape: `\n`,
/// `\r`, `\t`, otherwise `\u{hex}`. Text without such characters is returned unchanged
/// (borrowed). Backslashes are left as they are: the result is for reading (a log line, the
/// dashboard), not for decoding back. The one function for this: guest log lines and every
/// tenant text the dashboard shows go through it.
pub fn visible(text: &str) -> std::borrow::Cow<'_, str> {
    let Some(first) = text.find(needs_visible_escape) else {
        return std::borrow::Cow::Borrowed(text);
    };
    let mut out = String::with_capacity(text.len() + 8);
    out.push_str(&text[..first]);
    for c in text[first..].chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if needs_visible_escape(c) => {
                use std::fmt::Write as _;
                // Writing to a String cannot fail.
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
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
        assert!(cancel_reason(Some("a\0b")).is_err());
        assert_eq!(
            required_text("idempotency_key", "a\0", 255)
                .unwrap_err()
                .to_string(),
            "idempotency_key must not contain the NUL character (U+0000)"
        );
    }

    #[test]
    fn task_names_use_a_documented_character_set() {
        for ok in ["echo", "orders.send:v2", "a-b_c", &"x".repeat(255)] {
            assert_eq!(task_name(ok).unwrap(), ok);
        }
        assert_eq!(task_name(" echo ").unwrap(), "echo");
        assert_eq!(
            task_name("team-b\",evil=\"1").unwrap_err().to_string(),
            "task_name may contain only ASCII letters, digits, '_', '.', ':' and '-' (found \\\")"
        );
        for bad in ["a b", "a/b", "é", "a\nb", "a}b", "a\u{202e}b"] {
            assert!(task_name(bad).is_err(), "{bad:?}");
        }
        assert!(task_name(&"x".repeat(256)).is_err());
    }

    #[test]
    fn visible_escapes_bidi_zero_width_and_controls() {
        assert!(matches!(
            visible("plain ünïcødé \\ ok"),
            std::borrow::Cow::Borrowed(_)
        ));
        assert_eq!(visible("invoice\u{202e}gpj.exe"), "invoice\\u{202e}gpj.exe");
        assert_eq!(
            visible("a\u{200b}b\u{feff}\u{2060}"),
            "a\\u{200b}b\\u{feff}\\u{2060}"
        );
        assert_eq!(
            visible("\u{61c}\u{200e}\u{200f}\u{2066}\u{2069}"),
            "\\u{61c}\\u{200e}\\u{200f}\\u{2066}\\u{2069}"
        );
        assert_eq!(
            visible("l1\nl2\r\t\u{1b}\u{85}\u{2028}"),
            "l1\\nl2\\r\\t\\u{1b}\\u{85}\\u{2028}"
        );
    }
}
