//! The list cursor codec (docs/semantics.md#listing-and-cursors; the reference's test vectors are in the tests below).
//!
//! A cursor is the URL-safe base64 (no padding) of `{"v":1,"created_at":"<ISO>","id":"<uuid>"}`.
//! Decoding uses the `base64` crate and `serde_json`, checks the shape and the version, and finally
//! re-encodes the parsed values: only the canonical text of a cursor is accepted.

use base64::Engine as _;
use base64::alphabet::URL_SAFE;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::error::ExecutionError;
use crate::timefmt::utc_isoformat;

/// Longest accepted cursor text, in characters.
pub const MAX_CURSOR_LEN: usize = 1024;

/// The only cursor version.
pub const CURSOR_VERSION: u32 = 1;

const INVALID: &str = "invalid execution cursor";
const UNKNOWN_VERSION: &str = "unknown cursor version";

/// A position in the `created_at DESC, id DESC` order: the last item of the previous page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    /// The item's `created_at` (UTC, microseconds).
    pub created_at: DateTime<Utc>,
    /// The item's id.
    pub id: Uuid,
}

enum Failure {
    Invalid,
    UnknownVersion,
}

impl From<Failure> for ExecutionError {
    fn from(f: Failure) -> Self {
        ExecutionError::InvalidArgument(
            match f {
                Failure::Invalid => INVALID,
                Failure::UnknownVersion => UNKNOWN_VERSION,
            }
            .to_owned(),
        )
    }
}

impl Cursor {
    /// The canonical cursor text.
    pub fn encode(&self) -> String {
        let json = format!(
            "{{\"v\":{CURSOR_VERSION},\"created_at\":\"{}\",\"id\":\"{}\"}}",
            utc_isoformat(&self.created_at),
            self.id.as_hyphenated()
        );
        URL_SAFE_NO_PAD.encode(json.as_bytes())
    }

    /// Parses a cursor; `invalid execution cursor` / `unknown cursor version` on failure
    /// (both [`ExecutionError::InvalidArgument`]).
    pub fn decode(text: &str) -> Result<Cursor, ExecutionError> {
        Ok(decode_inner(text)?)
    }
}

/// The error for a cursor that is well-formed but may not be used (docs/semantics.md#listing-and-cursors).
pub(crate) fn invalid_cursor() -> ExecutionError {
    Failure::Invalid.into()
}

/// Decoder for cursor text: URL-safe alphabet, padding optional (the re-encoding check rejects
/// padded input anyway).
const DECODER: GeneralPurpose = GeneralPurpose::new(
    &URL_SAFE,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

fn decode_inner(text: &str) -> Result<Cursor, Failure> {
    if text.is_empty()
        || text.chars().count() > MAX_CURSOR_LEN
        || text.chars().any(char::is_whitespace)
    {
        return Err(Failure::Invalid);
    }
    let bytes = DECODER.decode(text).map_err(|_| Failure::Invalid)?;
    let value: serde_json::Value = serde_json::from_slice(&bytes).map_err(|_| Failure::Invalid)?;
    let members = value.as_object().ok_or(Failure::Invalid)?;
    if members.len() != 3
        || !["v", "created_at", "id"]
            .iter()
            .all(|k| members.contains_key(*k))
    {
        return Err(Failure::Invalid);
    }
    // `v` must be an integer (not a boolean or a float); any integer but 1 is another version.
    match members.get("v") {
        Some(serde_json::Value::Number(n)) => {
            let text = n.to_string();
            if text.contains(['.', 'e', 'E']) {
                return Err(Failure::Invalid);
            }
            if n.as_u64() != Some(u64::from(CURSOR_VERSION)) {
                return Err(Failure::UnknownVersion);
            }
        }
        _ => return Err(Failure::Invalid),
    }
    let (Some(serde_json::Value::String(created_at)), Some(serde_json::Value::String(id))) =
        (members.get("created_at"), members.get("id"))
    else {
        return Err(Failure::Invalid);
    };
    // Only the canonical form can survive the re-encoding check below, so RFC 3339 parsing (which
    // requires an offset: naive values are rejected) is enough.
    let created_at = DateTime::parse_from_rfc3339(created_at)
        .map_err(|_| Failure::Invalid)?
        .with_timezone(&Utc);
    // An instant no backend stores cannot name a row (docs/semantics.md#storable-values).
    crate::storable::check_instant("created_at", &created_at).map_err(|_| Failure::Invalid)?;
    let id = Uuid::parse_str(id).map_err(|_| Failure::Invalid)?;
    let cursor = Cursor { created_at, id };
    if cursor.encode() != text {
        return Err(Failure::Invalid);
    }
    Ok(cursor)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    const ID: &str = "2a31b3a6-72c9-4ae3-8e8e-4d6f78c00f3a";
    const FIRST: &str = "eyJ2IjoxLCJjcmVhdGVkX2F0IjoiMjAyNi0wOC0xMFQxMjowMDowMC4xMjM0NTYrMDA6MDAiLCJpZCI6IjJhMzFiM2E2LTcyYzktNGFlMy04ZThlLTRkNmY3OGMwMGYzYSJ9";
    const SECOND: &str = "eyJ2IjoxLCJjcmVhdGVkX2F0IjoiMjAyNi0wOC0xMFQxMjowMDowMCswMDowMCIsImlkIjoiMmEzMWIzYTYtNzJjOS00YWUzLThlOGUtNGQ2Zjc4YzAwZjNhIn0";

    fn first() -> Cursor {
        Cursor {
            created_at: Utc.with_ymd_and_hms(2026, 8, 10, 12, 0, 0).unwrap()
                + chrono::Duration::microseconds(123_456),
            id: Uuid::parse_str(ID).unwrap(),
        }
    }

    fn second() -> Cursor {
        Cursor {
            created_at: Utc.with_ymd_and_hms(2026, 8, 10, 12, 0, 0).unwrap(),
            id: Uuid::parse_str(ID).unwrap(),
        }
    }

    fn b64(json: &str) -> String {
        URL_SAFE_NO_PAD.encode(json.as_bytes())
    }

    fn message(text: &str) -> String {
        match Cursor::decode(text) {
            Err(ExecutionError::InvalidArgument(m)) => m,
            other => panic!("unexpected {other:?} for {text}"),
        }
    }

    #[test]
    fn vectors_encode_and_decode() {
        assert_eq!(first().encode(), FIRST);
        assert_eq!(second().encode(), SECOND);
        assert_eq!(Cursor::decode(FIRST).unwrap(), first());
        assert_eq!(Cursor::decode(SECOND).unwrap(), second());
        assert_eq!(
            String::from_utf8(URL_SAFE_NO_PAD.decode(FIRST).unwrap()).unwrap(),
            format!(r#"{{"v":1,"created_at":"2026-08-10T12:00:00.123456+00:00","id":"{ID}"}}"#)
        );
    }

    #[test]
    fn rejected_vectors() {
        assert_eq!(message(&format!("{FIRST}=")), INVALID);
        assert_eq!(message(&FIRST.to_uppercase()), INVALID);
        assert_eq!(message(&SECOND[..SECOND.len() - 1]), INVALID);
        assert_eq!(message("not-a-cursor"), INVALID);
        let v2 = b64(&format!(
            r#"{{"v":2,"created_at":"2026-08-10T12:00:00+00:00","id":"{ID}"}}"#
        ));
        assert_eq!(message(&v2), UNKNOWN_VERSION);
    }

    #[test]
    fn strictness() {
        let ts = "2026-08-10T12:00:00+00:00";
        for json in [
            // Wrong key order / spacing / extra or missing keys / types.
            format!(r#"{{"created_at":"{ts}","v":1,"id":"{ID}"}}"#),
            format!(r#"{{"v": 1,"created_at":"{ts}","id":"{ID}"}}"#),
            format!(r#"{{"v":1,"created_at":"{ts}","id":"{ID}","x":1}}"#),
            format!(r#"{{"v":1,"created_at":"{ts}"}}"#),
            format!(r#"{{"v":true,"created_at":"{ts}","id":"{ID}"}}"#),
            format!(r#"{{"v":1.0,"created_at":"{ts}","id":"{ID}"}}"#),
            format!(r#"{{"v":"1","created_at":"{ts}","id":"{ID}"}}"#),
            format!(r#"{{"v":1,"created_at":1,"id":"{ID}"}}"#),
            // Non-canonical timestamps and ids.
            format!(r#"{{"v":1,"created_at":"2026-08-10T12:00:00","id":"{ID}"}}"#),
            format!(r#"{{"v":1,"created_at":"2026-08-10T12:00:00Z","id":"{ID}"}}"#),
            format!(r#"{{"v":1,"created_at":"2026-08-10T20:00:00+08:00","id":"{ID}"}}"#),
            format!(r#"{{"v":1,"created_at":"2026-08-10T12:00:00.000000+00:00","id":"{ID}"}}"#),
            format!(
                r#"{{"v":1,"created_at":"{ts}","id":"{}"}}"#,
                ID.to_uppercase()
            ),
            format!(
                r#"{{"v":1,"created_at":"{ts}","id":"{}"}}"#,
                ID.replace('-', "")
            ),
            "[]".to_owned(),
            "1".to_owned(),
        ] {
            assert_eq!(message(&b64(&json)), INVALID, "{json}");
        }
        // Version check precedes the other field checks, as in the reference.
        for json in [
            r#"{"v":2,"created_at":1,"id":null}"#,
            r#"{"v":0,"created_at":"x","id":"y"}"#,
            r#"{"v":-1,"created_at":"x","id":"y"}"#,
            r#"{"v":100000000000000000000,"created_at":"x","id":"y"}"#,
            r#"{"id":"y", "v" : 2 ,"created_at":"x"}"#,
        ] {
            assert_eq!(message(&b64(json)), UNKNOWN_VERSION, "{json}");
        }
        // Whitespace, length, non-ASCII, standard alphabet.
        assert_eq!(message(&format!(" {FIRST}")), INVALID);
        assert_eq!(message(&format!("{FIRST}\n")), INVALID);
        assert_eq!(message(&"A".repeat(1028)), INVALID);
        assert_eq!(message("é"), INVALID);
        assert_eq!(message(""), INVALID);
        let with_std = b64(r#"{"v":1,"created_at":"?>?>","id":"y"}"#);
        assert!(with_std.contains('_') || with_std.contains('-'));
        assert_eq!(
            message(&with_std.replace('_', "/").replace('-', "+")),
            INVALID
        );
    }

    #[test]
    fn round_trip_random_instants() {
        for micros in [0i64, 1, 999_999, 500_000, 123] {
            let c = Cursor {
                created_at: Utc.with_ymd_and_hms(1999, 12, 31, 23, 59, 59).unwrap()
                    + chrono::Duration::microseconds(micros),
                id: Uuid::new_v4(),
            };
            assert_eq!(Cursor::decode(&c.encode()).unwrap(), c);
        }
    }
}
