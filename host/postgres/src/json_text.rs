//! JSON text for `jsonb` columns (docs/postgres.md#json-numbers). `jsonb` stores numbers as
//! `numeric`, which forgets an exponent: `1e16` comes back as the integer `10000000000000000`,
//! and whether a number is a float is read from its text (docs/semantics.md#canonical-json).
//! So every number written with an exponent is rewritten in positional form with a fraction
//! (`1e16` → `10000000000000000.0`, `1e-05` → `0.00001`): the same value, which `numeric`
//! keeps digit for digit, and which reads back as the same float. Everything else is written
//! as `serde_json` writes it.

use serde_json::Value;

/// Largest exponent rewritten; larger ones (far outside any float) are left as written.
const MAX_EXPONENT: i64 = 400;

/// `value` as JSON text whose numbers survive a `jsonb` round trip.
pub fn to_text(value: &Value) -> String {
    let mut out = String::new();
    write(value, &mut out);
    out
}

fn write(value: &Value, out: &mut String) {
    match value {
        Value::Number(n) => out.push_str(&positional(&n.to_string())),
        Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write(v, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            for (i, (k, v)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                write(v, out);
            }
            out.push('}');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// A JSON number text without an exponent; texts without one are returned unchanged.
fn positional(text: &str) -> String {
    let Some(at) = text.find(['e', 'E']) else {
        return text.to_owned();
    };
    let (mantissa, exp) = (&text[..at], &text[at + 1..]);
    let Ok(exp) = exp.parse::<i64>() else {
        return text.to_owned();
    };
    if exp.abs() > MAX_EXPONENT {
        return text.to_owned();
    }
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let (int_part, frac_part) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits = format!("{int_part}{frac_part}");
    // Position of the decimal point within `digits` after applying the exponent.
    let point = i64::try_from(int_part.len()).unwrap_or(0) + exp;
    let (whole, frac) = if point <= 0 {
        let zeros = "0".repeat(usize::try_from(-point).unwrap_or(0));
        ("0".to_owned(), format!("{zeros}{digits}"))
    } else {
        let p = usize::try_from(point).unwrap_or(0);
        if p >= digits.len() {
            (
                format!("{digits}{}", "0".repeat(p - digits.len())),
                String::new(),
            )
        } else {
            (digits[..p].to_owned(), digits[p..].to_owned())
        }
    };
    let whole = whole.trim_start_matches('0');
    let whole = if whole.is_empty() { "0" } else { whole };
    let frac = frac.trim_end_matches('0');
    let frac = if frac.is_empty() { "0" } else { frac };
    format!("{sign}{whole}.{frac}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn exponents_become_positional_floats() {
        for (input, want) in [
            ("1e16", "10000000000000000.0"),
            ("1e+16", "10000000000000000.0"),
            ("1.5e3", "1500.0"),
            ("-2.25E-3", "-0.00225"),
            ("1e-05", "0.00001"),
            ("0e0", "0.0"),
            ("12", "12"),
            ("2.5", "2.5"),
            ("1e999", "1e999"),
        ] {
            assert_eq!(positional(input), want, "{input}");
        }
    }

    #[test]
    fn structure_and_strings_are_kept() {
        let v = json!({"b": [1, 1e16, "x\"é"], "a": {"$onestep": null}});
        let text = to_text(&v);
        assert_eq!(
            text,
            r#"{"b":[1,10000000000000000.0,"x\"é"],"a":{"$onestep":null}}"#
        );
        let back: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            onestep_core::canonical::to_canonical_string(&back),
            onestep_core::canonical::to_canonical_string(&v)
        );
    }
}
