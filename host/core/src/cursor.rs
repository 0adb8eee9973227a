//! The list cursor codec (spec §7.3, vectors §14.2).
//!
//! A cursor is the URL-safe base64 (no padding) of `{"v":1,"created_at":"<ISO>","id":"<uuid>"}`.
//! Decoding follows the reference step by step (so the `unknown cursor version` case is reported
//! for the same inputs) and finally re-encodes the parsed values: only the canonical text of a
//! cursor is accepted.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
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

/// Python's `str.isspace()` (Unicode white space plus the ASCII separators U+001C…U+001F).
fn is_python_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// `base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=True)` of CPython
/// 3.11: `-`/`_` are translated to `+`/`/` (so both alphabets pass), then `binascii.a2b_base64` in
/// strict mode, which rejects leading or discontinuous padding, data after a completing pad and
/// incomplete quads, but ignores `=` at a quad boundary and non-zero trailing bits.
fn b64decode_like_python(text: &str) -> Result<Vec<u8>, Failure> {
    if !text.is_ascii() {
        return Err(Failure::Invalid);
    }
    let pad = (4 - text.len() % 4) % 4;
    let padded: Vec<u8> = text.bytes().chain(std::iter::repeat_n(b'=', pad)).collect();
    if padded.first() == Some(&b'=') {
        return Err(Failure::Invalid);
    }
    let mut out = Vec::with_capacity(padded.len() / 4 * 3);
    let mut quad_pos = 0u32;
    let mut pads = 0u32;
    let mut padding_started = false;
    let mut acc = 0u32;
    for (i, &c) in padded.iter().enumerate() {
        if c == b'=' {
            padding_started = true;
            if quad_pos >= 2 {
                pads += 1;
                if quad_pos + pads >= 4 {
                    if i + 1 < padded.len() {
                        return Err(Failure::Invalid);
                    }
                    return Ok(out);
                }
            }
            continue;
        }
        let sextet = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            _ => return Err(Failure::Invalid),
        };
        if padding_started {
            return Err(Failure::Invalid);
        }
        pads = 0;
        acc = (acc << 6) | u32::from(sextet);
        match quad_pos {
            0 => quad_pos = 1,
            1 => {
                out.push(((acc >> 4) & 0xff) as u8);
                quad_pos = 2;
            }
            2 => {
                out.push(((acc >> 2) & 0xff) as u8);
                quad_pos = 3;
            }
            _ => {
                out.push((acc & 0xff) as u8);
                acc = 0;
                quad_pos = 0;
            }
        }
    }
    if quad_pos != 0 {
        return Err(Failure::Invalid);
    }
    Ok(out)
}

fn decode_inner(text: &str) -> Result<Cursor, Failure> {
    if text.chars().count() > MAX_CURSOR_LEN || text.chars().any(is_python_space) {
        return Err(Failure::Invalid);
    }
    let bytes = b64decode_like_python(text)?;
    let json = pyjson::bytes_to_text(&bytes).ok_or(Failure::Invalid)?;
    let members = pyjson::parse_object(&json).ok_or(Failure::Invalid)?;
    if members.len() != 3
        || !["v", "created_at", "id"]
            .iter()
            .all(|k| members.contains_key(*k))
    {
        return Err(Failure::Invalid);
    }
    match members.get("v") {
        Some(pyjson::Scalar::Int(digits)) => {
            let negative = digits.starts_with('-');
            let magnitude = digits.trim_start_matches('-').trim_start_matches('0');
            if negative || magnitude != "1" {
                return Err(Failure::UnknownVersion);
            }
        }
        _ => return Err(Failure::Invalid),
    }
    let (Some(pyjson::Scalar::Str(created_at)), Some(pyjson::Scalar::Str(id))) =
        (members.get("created_at"), members.get("id"))
    else {
        return Err(Failure::Invalid);
    };
    // Only the canonical form can survive the re-encoding check below, so RFC 3339 parsing (which
    // requires an offset: naive values are rejected) is enough.
    let created_at = DateTime::parse_from_rfc3339(created_at)
        .map_err(|_| Failure::Invalid)?
        .with_timezone(&Utc);
    let id = Uuid::parse_str(id).map_err(|_| Failure::Invalid)?;
    let cursor = Cursor { created_at, id };
    if cursor.encode() != text {
        return Err(Failure::Invalid);
    }
    Ok(cursor)
}

/// Just enough of CPython 3.11's `json.loads(bytes)` to classify a decoded cursor exactly as the
/// reference does: encoding detection (UTF-8/16/32, BOMs, `surrogatepass`), `NaN`/`Infinity`
/// literals, duplicate keys (last wins), and unlimited nesting. Lone surrogates, which Rust strings
/// cannot hold, become U+FFFD: they can only occur inside strings, and no such string can be a
/// cursor key or survive the final re-encoding check, so the outcome is unchanged.
mod pyjson {
    use std::collections::HashMap;

    /// The value of a top-level member, reduced to what the cursor checks look at.
    #[derive(Debug, Clone, PartialEq)]
    pub(super) enum Scalar {
        /// An integer literal, as written.
        Int(String),
        /// A string.
        Str(String),
        /// Anything else (float, bool, null, array, object).
        Other,
    }

    /// `bytes.decode(json.detect_encoding(bytes), "surrogatepass")`, then the BOM check.
    pub(super) fn bytes_to_text(b: &[u8]) -> Option<String> {
        let text = if b.starts_with(&[0, 0, 0xfe, 0xff]) {
            utf32(&b[4..], true)?
        } else if b.starts_with(&[0xff, 0xfe, 0, 0]) {
            utf32(&b[4..], false)?
        } else if b.starts_with(&[0xfe, 0xff]) {
            utf16(&b[2..], true)?
        } else if b.starts_with(&[0xff, 0xfe]) {
            utf16(&b[2..], false)?
        } else if let Some(rest) = b.strip_prefix(&[0xef, 0xbb, 0xbf]) {
            utf8(rest)?
        } else if b.len() >= 4 && b[0] == 0 {
            if b[1] != 0 {
                utf16(b, true)?
            } else {
                utf32(b, true)?
            }
        } else if b.len() >= 4 && b[1] == 0 {
            if b[2] != 0 || b[3] != 0 {
                utf16(b, false)?
            } else {
                utf32(b, false)?
            }
        } else if b.len() == 2 && b[0] == 0 {
            utf16(b, true)?
        } else if b.len() == 2 && b[1] == 0 {
            utf16(b, false)?
        } else {
            utf8(b)?
        };
        if text.starts_with('\u{feff}') {
            return None;
        }
        Some(text)
    }

    fn utf8(b: &[u8]) -> Option<String> {
        if let Ok(s) = std::str::from_utf8(b) {
            return Some(s.to_owned());
        }
        // `surrogatepass`: UTF-8-encoded surrogates (ED A0..BF xx) are accepted.
        let mut fixed = Vec::with_capacity(b.len());
        let mut i = 0;
        while i < b.len() {
            if b[i] == 0xed
                && i + 2 < b.len()
                && (0xa0..=0xbf).contains(&b[i + 1])
                && (0x80..=0xbf).contains(&b[i + 2])
            {
                fixed.extend_from_slice("\u{fffd}".as_bytes());
                i += 3;
            } else {
                fixed.push(b[i]);
                i += 1;
            }
        }
        String::from_utf8(fixed).ok()
    }

    fn utf16(b: &[u8], big_endian: bool) -> Option<String> {
        if !b.len().is_multiple_of(2) {
            return None;
        }
        let units = b.chunks_exact(2).map(|c| {
            if big_endian {
                u16::from_be_bytes([c[0], c[1]])
            } else {
                u16::from_le_bytes([c[0], c[1]])
            }
        });
        Some(
            char::decode_utf16(units)
                .map(|r| r.unwrap_or('\u{fffd}'))
                .collect(),
        )
    }

    fn utf32(b: &[u8], big_endian: bool) -> Option<String> {
        if !b.len().is_multiple_of(4) {
            return None;
        }
        b.chunks_exact(4)
            .map(|c| {
                let u = if big_endian {
                    u32::from_be_bytes([c[0], c[1], c[2], c[3]])
                } else {
                    u32::from_le_bytes([c[0], c[1], c[2], c[3]])
                };
                match u {
                    0xd800..=0xdfff => Some('\u{fffd}'),
                    _ => char::from_u32(u),
                }
            })
            .collect()
    }

    /// Parses a whole JSON document that must be an object; returns its members (last duplicate
    /// wins). `None` on any syntax error or when the document is not an object.
    pub(super) fn parse_object(text: &str) -> Option<HashMap<String, Scalar>> {
        let chars: Vec<char> = text.chars().collect();
        let mut p = Parser { s: &chars, i: 0 };
        p.ws();
        if p.peek() != Some('{') {
            return None;
        }
        p.i += 1;
        let mut members = HashMap::new();
        p.ws();
        if p.peek() == Some('}') {
            p.i += 1;
        } else {
            loop {
                p.ws();
                if p.peek() != Some('"') {
                    return None;
                }
                p.i += 1;
                let key = p.string()?;
                p.ws();
                if p.peek() != Some(':') {
                    return None;
                }
                p.i += 1;
                p.ws();
                let value = p.value()?;
                members.insert(key, value);
                p.ws();
                match p.peek() {
                    Some(',') => p.i += 1,
                    Some('}') => {
                        p.i += 1;
                        break;
                    }
                    _ => return None,
                }
            }
        }
        p.ws();
        if p.i != chars.len() {
            return None;
        }
        Some(members)
    }

    struct Parser<'a> {
        s: &'a [char],
        i: usize,
    }

    impl Parser<'_> {
        fn peek(&self) -> Option<char> {
            self.s.get(self.i).copied()
        }

        fn ws(&mut self) {
            while matches!(self.peek(), Some(' ' | '\t' | '\n' | '\r')) {
                self.i += 1;
            }
        }

        fn literal(&mut self, word: &str) -> Option<()> {
            for c in word.chars() {
                if self.peek() != Some(c) {
                    return None;
                }
                self.i += 1;
            }
            Some(())
        }

        fn digits(&mut self) -> usize {
            let start = self.i;
            while matches!(self.peek(), Some('0'..='9')) {
                self.i += 1;
            }
            self.i - start
        }

        /// One JSON value (Python grammar), positioned at its first character.
        fn value(&mut self) -> Option<Scalar> {
            match self.peek()? {
                '"' => {
                    self.i += 1;
                    self.string().map(Scalar::Str)
                }
                '{' | '[' => {
                    let close = if self.peek() == Some('{') { '}' } else { ']' };
                    let is_object = close == '}';
                    self.i += 1;
                    self.ws();
                    if self.peek() == Some(close) {
                        self.i += 1;
                        return Some(Scalar::Other);
                    }
                    loop {
                        self.ws();
                        if is_object {
                            if self.peek() != Some('"') {
                                return None;
                            }
                            self.i += 1;
                            self.string()?;
                            self.ws();
                            if self.peek() != Some(':') {
                                return None;
                            }
                            self.i += 1;
                            self.ws();
                        }
                        self.value()?;
                        self.ws();
                        match self.peek() {
                            Some(',') => self.i += 1,
                            Some(c) if c == close => {
                                self.i += 1;
                                return Some(Scalar::Other);
                            }
                            _ => return None,
                        }
                    }
                }
                'n' => self.literal("null").map(|_| Scalar::Other),
                't' => self.literal("true").map(|_| Scalar::Other),
                'f' => self.literal("false").map(|_| Scalar::Other),
                'N' => self.literal("NaN").map(|_| Scalar::Other),
                'I' => self.literal("Infinity").map(|_| Scalar::Other),
                '-' if self.s.get(self.i + 1) == Some(&'I') => {
                    self.literal("-Infinity").map(|_| Scalar::Other)
                }
                '-' | '0'..='9' => self.number(),
                _ => None,
            }
        }

        /// `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?`
        fn number(&mut self) -> Option<Scalar> {
            let start = self.i;
            if self.peek() == Some('-') {
                self.i += 1;
            }
            match self.peek() {
                Some('0') => self.i += 1,
                Some('1'..='9') => {
                    self.digits();
                }
                _ => return None,
            }
            let int_end = self.i;
            let mut is_float = false;
            if self.peek() == Some('.') && matches!(self.s.get(self.i + 1), Some('0'..='9')) {
                self.i += 1;
                self.digits();
                is_float = true;
            }
            if matches!(self.peek(), Some('e' | 'E')) {
                let save = self.i;
                self.i += 1;
                if matches!(self.peek(), Some('+' | '-')) {
                    self.i += 1;
                }
                if self.digits() == 0 {
                    self.i = save;
                } else {
                    is_float = true;
                }
            }
            if is_float {
                Some(Scalar::Other)
            } else {
                Some(Scalar::Int(self.s[start..int_end].iter().collect()))
            }
        }

        /// The rest of a string after its opening quote (strict: no raw control characters).
        fn string(&mut self) -> Option<String> {
            let mut out = String::new();
            loop {
                let c = self.peek()?;
                self.i += 1;
                match c {
                    '"' => return Some(out),
                    '\\' => {
                        let e = self.peek()?;
                        self.i += 1;
                        match e {
                            '"' => out.push('"'),
                            '\\' => out.push('\\'),
                            '/' => out.push('/'),
                            'b' => out.push('\u{8}'),
                            'f' => out.push('\u{c}'),
                            'n' => out.push('\n'),
                            'r' => out.push('\r'),
                            't' => out.push('\t'),
                            'u' => {
                                let hi = self.hex4()?;
                                if (0xd800..0xdc00).contains(&hi)
                                    && self.peek() == Some('\\')
                                    && self.s.get(self.i + 1) == Some(&'u')
                                {
                                    let save = self.i;
                                    self.i += 2;
                                    let lo = self.hex4()?;
                                    if (0xdc00..0xe000).contains(&lo) {
                                        let code = 0x10000 + ((hi - 0xd800) << 10) + (lo - 0xdc00);
                                        out.push(char::from_u32(code).unwrap_or('\u{fffd}'));
                                        continue;
                                    }
                                    self.i = save;
                                }
                                out.push(char::from_u32(hi).unwrap_or('\u{fffd}'));
                            }
                            _ => return None,
                        }
                    }
                    c if (c as u32) < 0x20 => return None,
                    c => out.push(c),
                }
            }
        }

        fn hex4(&mut self) -> Option<u32> {
            let mut v = 0u32;
            for _ in 0..4 {
                let d = self.peek()?.to_digit(16)?;
                self.i += 1;
                v = v * 16 + d;
            }
            Some(v)
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
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
    fn base64_matches_cpython_3_11_strict_mode() {
        // Expected results taken from `binascii.a2b_base64(s, strict_mode=True)` (3.11.7).
        let ok = |s: &str| b64decode_like_python(s).ok();
        assert_eq!(ok("QUJD"), Some(b"ABC".to_vec()));
        assert_eq!(ok("QUJD="), Some(b"ABC".to_vec())); // padded to "QUJD====": ignored
        assert_eq!(ok("QR"), Some(b"A".to_vec())); // non-zero trailing bits ignored
        assert_eq!(ok("QUI"), Some(b"AB".to_vec()));
        assert_eq!(ok("QUI=="), None); // excess data after padding
        assert_eq!(ok("QU=A"), None); // discontinuous padding
        assert_eq!(ok("=QUJD"), None); // leading padding
        assert_eq!(ok("QUJDQ"), None); // 1 more than a multiple of 4
        assert_eq!(ok("QUJD==QUJD"), None);
        assert_eq!(ok("QU+/"), ok("QU-_"));
        assert_eq!(ok("QU*A"), None);
    }

    #[test]
    fn json_like_python() {
        // Inputs that CPython's json.loads accepts (so the version check is reached).
        for json in [
            r#"{"v":2,"created_at":NaN,"id":[1,{"a":-Infinity}]}"#,
            r#"{"v":2,"created_at":"\ud800","id":"\udc00"}"#,
            r#"{"v":1,"v":2,"created_at":1,"id":1}"#,
            "\u{feff}{\"v\":2,\"created_at\":1,\"id\":1}",
        ] {
            assert_eq!(message(&b64(json)), UNKNOWN_VERSION, "{json}");
        }
        let deep = format!(
            r#"{{"v":2,"created_at":{}{},"id":1}}"#,
            "[".repeat(300),
            "]".repeat(300)
        );
        assert_eq!(message(&b64(&deep)), UNKNOWN_VERSION);
        let utf16: Vec<u8> =
            r#"{"v":2,"created_at":1,"id":1}"#.encode_utf16().flat_map(u16::to_le_bytes).collect();
        assert_eq!(message(&URL_SAFE_NO_PAD.encode(utf16)), UNKNOWN_VERSION);
        // ...and inputs it rejects.
        for json in [
            r#"{"v":2,"created_at":[1,],"id":1}"#,
            r#"{"v":2,"created_at":01,"id":1}"#,
            r#"{"v":2,"created_at":"a\x","id":1}"#,
            "{\"v\":2,\"created_at\":\"a\tb\",\"id\":1}",
            r#"{"v":2,"created_at":1,"id":1,}"#,
            r#"{"v":2,"created_at":1,"id":1}x"#,
            r#"{"v":1e0,"created_at":1,"id":1}"#,
        ] {
            assert_eq!(message(&b64(json)), INVALID, "{json}");
        }
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
