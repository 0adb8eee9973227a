//! What every backend can store (docs/semantics.md#storable-values): the one check, applied
//! before any write, that a value stored on MariaDB, MySQL or PostgreSQL reads back the same on
//! each, so that the same request gets the same answer on every backend.
//!
//! The bounds come from the servers themselves: MariaDB's `json_valid` (the `CHECK` on the JSON
//! columns) refuses documents nested 32 containers deep; PostgreSQL refuses U+0000 in `text` and
//! in `jsonb` strings and keys, and a `numeric` with more than 16383 digits after the point; MySQL
//! reads a JSON number as a double, so an integer beyond the double range is refused; the
//! `DATETIME(6)` columns and the MySQL driver's conversions hold years 1000..=9999 only, and no
//! backend keeps a leap second (`…:60`).

use std::fmt;

use chrono::{DateTime, Datelike, Timelike, Utc};
use serde_json::Value;

use crate::canonical::{NumberKind, number_kind};
use crate::error::ExecutionError;

/// Deepest nesting of arrays and objects a stored JSON value may have (`[[1]]` is 2 deep):
/// MariaDB's `json_valid` accepts 31 and refuses 32 (MySQL's JSON type allows 100).
pub const MAX_JSON_DEPTH: usize = 31;

/// Most digits a JSON number may need after the decimal point (PostgreSQL's `numeric`).
pub const MAX_NUMBER_SCALE: i64 = 16_383;

/// First year a stored instant may have (UTC).
pub const MIN_YEAR: i32 = 1000;

/// Last year a stored instant may have (UTC).
pub const MAX_YEAR: i32 = 9999;

/// Checks a text stored as a column value or compared with one: no U+0000 (PostgreSQL `text`).
///
/// Errors: `<field> must not contain the NUL character (U+0000)`.
pub fn check_text(field: &str, value: &str) -> Result<(), ExecutionError> {
    if value.contains('\0') {
        return Err(ExecutionError::invalid(format!(
            "{field} must not contain the NUL character (U+0000)"
        )));
    }
    Ok(())
}

/// Checks an instant stored or compared with a stored one: UTC year 1000..=9999, no leap second.
///
/// Errors: `<field> must be between 1000-01-01T00:00:00Z and 9999-12-31T23:59:59.999999Z` and
/// `<field> must not be a leap second (second 60)`.
pub fn check_instant(field: &str, t: &DateTime<Utc>) -> Result<(), ExecutionError> {
    if !(MIN_YEAR..=MAX_YEAR).contains(&t.year()) {
        return Err(ExecutionError::invalid(format!(
            "{field} must be between 1000-01-01T00:00:00Z and 9999-12-31T23:59:59.999999Z"
        )));
    }
    if t.nanosecond() >= 1_000_000_000 {
        return Err(ExecutionError::invalid(format!(
            "{field} must not be a leap second (second 60)"
        )));
    }
    Ok(())
}

/// Why a value cannot be stored on every backend ([`check_json`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unstorable {
    /// A string holds U+0000 (PostgreSQL).
    NulInString,
    /// An object key holds U+0000 (PostgreSQL).
    NulInKey,
    /// Arrays and objects nested deeper than [`MAX_JSON_DEPTH`] (MariaDB).
    TooDeep,
    /// A number no backend stores the same (its reason).
    Number(&'static str),
}

impl fmt::Display for Unstorable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unstorable::NulInString => f.write_str("a string contains the NUL character (U+0000)"),
            Unstorable::NulInKey => {
                f.write_str("an object key contains the NUL character (U+0000)")
            }
            Unstorable::TooDeep => write!(
                f,
                "nesting depth over {MAX_JSON_DEPTH} (arrays and objects)"
            ),
            Unstorable::Number(why) => f.write_str(why),
        }
    }
}

/// [`check_json`]'s error: what is wrong and where (a JSON pointer, `/` for the root). Shown as
/// `<reason> at <pointer>`, e.g. `nesting depth over 31 (arrays and objects) at /a/0/…`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason} at {at}")]
pub struct StorableError {
    /// What is wrong.
    pub reason: Unstorable,
    /// The JSON pointer of the offending value (`/` for the root; a NUL in a key shown as
    /// `\u0000`).
    pub at: String,
}

impl StorableError {
    fn new(reason: Unstorable, path: &str) -> Self {
        StorableError {
            reason,
            at: shown(path).to_owned(),
        }
    }
}

/// Checks an encoded JSON value (what is written, [`crate::codec::encode_value`]'s output):
/// nesting depth, U+0000 in strings and keys, number range. The error is the reason with its
/// JSON pointer, e.g. `nesting depth over 31 at /a/0/…`.
pub fn check_json(value: &Value) -> Result<(), StorableError> {
    let mut path = String::new();
    check_at(value, 0, &mut path)
}

fn shown(path: &str) -> &str {
    if path.is_empty() { "/" } else { path }
}

fn check_at(value: &Value, depth: usize, path: &mut String) -> Result<(), StorableError> {
    match value {
        Value::Null | Value::Bool(_) => Ok(()),
        Value::String(s) => {
            if s.contains('\0') {
                return Err(StorableError::new(Unstorable::NulInString, path));
            }
            Ok(())
        }
        Value::Number(n) => {
            check_number(n).map_err(|why| StorableError::new(Unstorable::Number(why), path))
        }
        Value::Array(items) => {
            enter(depth, path)?;
            for (i, item) in items.iter().enumerate() {
                let len = path.len();
                path.push('/');
                path.push_str(&i.to_string());
                check_at(item, depth + 1, path)?;
                path.truncate(len);
            }
            Ok(())
        }
        Value::Object(map) => {
            enter(depth, path)?;
            for (key, item) in map {
                let len = path.len();
                path.push('/');
                path.push_str(&key.replace('~', "~0").replace('/', "~1"));
                if key.contains('\0') {
                    return Err(StorableError::new(
                        Unstorable::NulInKey,
                        &path.replace('\0', "\\u0000"),
                    ));
                }
                check_at(item, depth + 1, path)?;
                path.truncate(len);
            }
            Ok(())
        }
    }
}

/// A container at `depth` (0 = the root) makes the value `depth + 1` deep.
fn enter(depth: usize, path: &str) -> Result<(), StorableError> {
    if depth >= MAX_JSON_DEPTH {
        return Err(StorableError::new(Unstorable::TooDeep, path));
    }
    Ok(())
}

fn check_number(n: &serde_json::Number) -> Result<(), &'static str> {
    let text = n.as_str();
    match number_kind(n) {
        NumberKind::Int(_) => {
            if text.parse::<f64>().map_or(true, |x| !x.is_finite()) {
                return Err("an integer beyond the range of a 64-bit float");
            }
            Ok(())
        }
        NumberKind::Float(x) if !x.is_finite() => {
            Err("a number beyond the range of a 64-bit float")
        }
        NumberKind::Float(_) => {
            if scale(text) > MAX_NUMBER_SCALE {
                return Err("a number with more than 16383 digits after the decimal point");
            }
            Ok(())
        }
        NumberKind::Invalid(_) => Err("invalid number text"),
    }
}

/// Digits after the decimal point of a JSON number text written positionally.
fn scale(text: &str) -> i64 {
    let (mantissa, exponent) = match text.find(['e', 'E']) {
        Some(at) => (&text[..at], text[at + 1..].parse::<i64>().unwrap_or(0)),
        None => (text, 0),
    };
    let fraction = mantissa.split_once('.').map_or(0, |(_, f)| f.len() as i64);
    fraction.saturating_sub(exponent)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn nested(depth: usize) -> Value {
        let text = format!("{}1{}", "[".repeat(depth), "]".repeat(depth));
        serde_json::from_str(&text).unwrap()
    }

    #[test]
    fn depth_bound_is_mariadbs() {
        assert!(check_json(&nested(31)).is_ok());
        assert_eq!(
            check_json(&nested(32)).unwrap_err().to_string(),
            format!(
                "nesting depth over 31 (arrays and objects) at /{}",
                "0/".repeat(31).trim_end_matches('/')
            )
        );
        assert!(check_json(&serde_json::json!(1)).is_ok());
    }

    #[test]
    fn nul_in_strings_and_keys() {
        let v: Value = serde_json::from_str(r#"{"a":["x\u0000y"]}"#).unwrap();
        assert_eq!(
            check_json(&v).unwrap_err().to_string(),
            "a string contains the NUL character (U+0000) at /a/0"
        );
        let v: Value = serde_json::from_str(r#"{"k\u0000":1}"#).unwrap();
        assert!(
            check_json(&v)
                .unwrap_err()
                .to_string()
                .starts_with("an object key contains")
        );
        assert!(check_text("task_name", "a\0b").is_err());
        assert!(check_text("task_name", "ab").is_ok());
    }

    #[test]
    fn numbers() {
        let ok = |t: &str| check_json(&serde_json::from_str(t).unwrap()).is_ok();
        assert!(ok("1e300"));
        assert!(ok(&"9".repeat(300)));
        assert!(!ok(&"9".repeat(400)));
        assert!(ok("1e-16383"));
        assert!(!ok("1e-16384"));
        assert!(!ok("0.1e-16383"));
        assert!(ok("12.5e1"));
    }

    #[test]
    fn instants() {
        let t = |y| Utc.with_ymd_and_hms(y, 1, 1, 0, 0, 0).unwrap();
        assert!(check_instant("created_from", &t(1000)).is_ok());
        assert!(check_instant("created_from", &t(9999)).is_ok());
        assert!(check_instant("created_from", &t(999)).is_err());
        assert!(check_instant("created_from", &t(0)).is_err());
        let leap = DateTime::parse_from_rfc3339("2016-12-31T23:59:60Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(
            check_instant("expires_at", &leap).unwrap_err().to_string(),
            "expires_at must not be a leap second (second 60)"
        );
    }
}
