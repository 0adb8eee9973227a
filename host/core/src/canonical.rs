//! Canonical JSON (docs/semantics.md#canonical-json): byte-identical to Python's
//! `json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)`.
//!
//! The workspace enables `serde_json`'s `arbitrary_precision`, so a [`Number`] keeps the text it was
//! parsed from. A number whose text has no `.`, `e` or `E` is an integer (Python `int`): it is
//! written in plain decimal, whatever its size (`-0` → `0`). Any other number is a float (Python
//! `float`, including `1e16` and `100e0`): it is rounded to the nearest binary64 value and written in
//! Python's `repr` form (shortest round-trip digits; positional when the decimal exponent `e`
//! satisfies −4 ≤ e < 16, scientific otherwise). Values that overflow to infinity are written as
//! `Infinity` / `-Infinity`, exactly as Python's `json.dumps` does (the value codec rejects them
//! before they can be stored).

use serde_json::{Number, Value};

/// The canonical JSON text of `value` (pure ASCII).
pub fn to_canonical_string(value: &Value) -> String {
    let mut out = String::new();
    write_value(value, &mut out);
    out
}

/// The length in bytes of [`to_canonical_string`]`(value)`, computed without building the text.
///
/// This is the measure of the size limits (docs/semantics.md#size-limits): `{}` is 2, `"é"` is 8.
pub fn canonical_len(value: &Value) -> usize {
    let mut counter = Counter(0);
    write_value(value, &mut counter);
    counter.0
}

/// Python's `repr()` of a binary64 float (`5.0`, `1e-05`, `1e+16`, `-0.0`, `inf`-like values as
/// `Infinity`/`-Infinity`/`NaN`, which is how `json.dumps` writes them).
pub fn python_float_repr(x: f64) -> String {
    let mut out = String::new();
    write_float(x, &mut out);
    out
}

/// A destination for canonical text: a `String`, or a byte counter.
trait Sink {
    fn push_str(&mut self, s: &str);
    fn push(&mut self, c: char);
}

impl Sink for String {
    fn push_str(&mut self, s: &str) {
        String::push_str(self, s);
    }
    fn push(&mut self, c: char) {
        String::push(self, c);
    }
}

/// Counts the bytes that would be written.
struct Counter(usize);

impl Sink for Counter {
    fn push_str(&mut self, s: &str) {
        self.0 += s.len();
    }
    fn push(&mut self, c: char) {
        self.0 += c.len_utf8();
    }
}

fn write_value<S: Sink>(value: &Value, out: &mut S) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(n) => write_number(n, out),
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            // Rust orders `str` by UTF-8 bytes, which is the same as code point order (Python's
            // `str` order), astral characters included.
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (key, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(key, out);
                out.push(':');
                write_value(item, out);
            }
            out.push('}');
        }
    }
}

/// How a JSON number's text is interpreted by Python's `json.loads`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum NumberKind<'a> {
    /// An `int`: optional `-`, then digits (as written; may carry leading zeros if constructed
    /// unchecked).
    Int(&'a str),
    /// A `float` (possibly non-finite if it overflowed).
    Float(f64),
    /// Text that is not a number at all (only possible through `Number::from_string_unchecked`).
    Invalid(&'a str),
}

/// Classifies a number by its text, the way Python's JSON decoder does.
pub(crate) fn number_kind(n: &Number) -> NumberKind<'_> {
    let text = n.as_str();
    let digits = text.strip_prefix('-').unwrap_or(text);
    if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        return NumberKind::Int(text);
    }
    match text.parse::<f64>() {
        Ok(x) => NumberKind::Float(x),
        Err(_) => NumberKind::Invalid(text),
    }
}

fn write_number<S: Sink>(n: &Number, out: &mut S) {
    match number_kind(n) {
        NumberKind::Int(text) => write_int(text, out),
        NumberKind::Float(x) => write_float(x, out),
        // Not reachable from parsed JSON; keep the text rather than lose it.
        NumberKind::Invalid(text) => out.push_str(text),
    }
}

/// Writes an integer's text in Python's `str(int)` form: no leading zeros, no `-0`.
fn write_int<S: Sink>(text: &str, out: &mut S) {
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let trimmed = digits.trim_start_matches('0');
    if trimmed.is_empty() {
        out.push('0');
        return;
    }
    if negative {
        out.push('-');
    }
    out.push_str(trimmed);
}

/// Writes `x` in Python `repr` form (CPython `format_float_short`, mode `r`).
fn write_float<S: Sink>(x: f64, out: &mut S) {
    if x.is_nan() {
        out.push_str("NaN");
        return;
    }
    if x.is_infinite() {
        out.push_str(if x > 0.0 { "Infinity" } else { "-Infinity" });
        return;
    }
    // Rust's `{:e}` yields the shortest digit string that round-trips (closest to the exact value),
    // e.g. `1.5e16`, `5e-324`, `-0e0`.
    let sci = format!("{x:e}");
    let (negative, body) = match sci.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, sci.as_str()),
    };
    let (mantissa, exp_text) = body.split_once('e').unwrap_or((body, "0"));
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let exp: i32 = exp_text.parse().unwrap_or(0);
    if negative {
        out.push('-');
    }
    let n = digits.len() as i32;
    // Python's `decpt`: value = 0.d1d2… × 10^decpt.
    let decpt = exp + 1;
    if (-4..16).contains(&exp) {
        if decpt <= 0 {
            out.push_str("0.");
            for _ in 0..(-decpt) {
                out.push('0');
            }
            out.push_str(&digits);
        } else if decpt >= n {
            out.push_str(&digits);
            for _ in 0..(decpt - n) {
                out.push('0');
            }
            out.push_str(".0");
        } else {
            let split = decpt as usize;
            out.push_str(&digits[..split]);
            out.push('.');
            out.push_str(&digits[split..]);
        }
    } else {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        out.push('e');
        out.push(if exp < 0 { '-' } else { '+' });
        let abs = exp.unsigned_abs();
        if abs < 10 {
            out.push('0');
        }
        out.push_str(&abs.to_string());
    }
}

/// Writes a JSON string the way Python's `ensure_ascii=True` encoder does.
fn write_string<S: Sink>(s: &str, out: &mut S) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push('"');
    let mut units = [0u16; 2];
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            ' '..='~' => out.push(c),
            _ => {
                for unit in c.encode_utf16(&mut units).iter() {
                    let u = *unit;
                    out.push_str("\\u");
                    for shift in [12u16, 8, 4, 0] {
                        out.push(char::from(HEX[usize::from((u >> shift) & 0xf)]));
                    }
                }
            }
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use serde_json::{Map, json};
    use std::io::Write;
    use std::process::{Command, Stdio};

    fn canon(text: &str) -> String {
        let v: Value = serde_json::from_str(text).unwrap();
        to_canonical_string(&v)
    }

    #[test]
    fn scalars() {
        assert_eq!(canon("null"), "null");
        assert_eq!(canon("true"), "true");
        assert_eq!(canon("false"), "false");
        assert_eq!(canon("0"), "0");
        assert_eq!(canon("-0"), "0");
        assert_eq!(canon("-12"), "-12");
        assert_eq!(canon("100000000000000000000"), "100000000000000000000");
        assert_eq!(
            canon("-123456789012345678901234567890"),
            "-123456789012345678901234567890"
        );
    }

    #[test]
    fn floats_in_python_repr_form() {
        for (text, expected) in [
            ("5.0", "5.0"),
            ("5e0", "5.0"),
            ("1E2", "100.0"),
            ("0.0", "0.0"),
            ("-0.0", "-0.0"),
            ("0.1", "0.1"),
            ("0.0001", "0.0001"),
            ("0.00001", "1e-05"),
            ("1e-5", "1e-05"),
            ("2.5e-7", "2.5e-07"),
            ("1e16", "1e+16"),
            ("1.5e16", "1.5e+16"),
            ("1e15", "1000000000000000.0"),
            ("9999999999999998.0", "9999999999999998.0"),
            ("123456789.125", "123456789.125"),
            ("5e-324", "5e-324"),
            ("1.7976931348623157e308", "1.7976931348623157e+308"),
            ("0.30000000000000004", "0.30000000000000004"),
            ("1e100", "1e+100"),
            ("1e-100", "1e-100"),
            ("1e400", "Infinity"),
            ("-1e400", "-Infinity"),
            ("1e-400", "0.0"),
            ("2.5", "2.5"),
        ] {
            assert_eq!(canon(text), expected, "{text}");
        }
        assert_eq!(python_float_repr(0.1 + 0.2), "0.30000000000000004");
        assert_eq!(python_float_repr(f64::NAN), "NaN");
        assert_eq!(to_canonical_string(&json!(5.0)), "5.0");
        assert_eq!(to_canonical_string(&json!(1e16)), "1e+16");
        assert_eq!(to_canonical_string(&json!(5)), "5");
    }

    #[test]
    fn strings_and_escapes() {
        assert_eq!(
            to_canonical_string(&json!("a\"b\\c\n\r\t\u{8}\u{c}/\u{1}\u{7f}é😀")),
            r#""a\"b\\c\n\r\t\b\f/\u0001\u007f\u00e9\ud83d\ude00""#
        );
        assert_eq!(to_canonical_string(&json!("\u{FFFF}")), r#""\uffff""#);
    }

    #[test]
    fn objects_sorted_recursively_arrays_kept() {
        assert_eq!(
            canon(r#"{"b":[3,1,{"z":1,"a":2}],"a":{"y":null,"x":true}}"#),
            r#"{"a":{"x":true,"y":null},"b":[3,1,{"a":2,"z":1}]}"#
        );
        // Astral characters sort after every BMP character (code point order).
        let mut map = Map::new();
        map.insert("😀".into(), json!(1));
        map.insert("\u{FFFF}".into(), json!(2));
        map.insert("é".into(), json!(3));
        map.insert("Z".into(), json!(4));
        assert_eq!(
            to_canonical_string(&Value::Object(map)),
            r#"{"Z":4,"\u00e9":3,"\uffff":2,"\ud83d\ude00":1}"#
        );
    }

    #[test]
    fn sizes() {
        assert_eq!(canonical_len(&json!({})), 2);
        assert_eq!(canonical_len(&json!("é")), 8);
        assert_eq!(canonical_len(&json!("😀")), 14);
        let v: Value =
            serde_json::from_str(r#"{"b":[1,2.5,true,null],"a":"é😀\n","c":1e16}"#).unwrap();
        assert_eq!(canonical_len(&v), to_canonical_string(&v).len());
    }

    // ---- differential test against CPython's json.dumps ----------------------------------------

    const KEY_CHARS: &[char] = &[
        'a',
        'b',
        'Z',
        '_',
        '$',
        ' ',
        '"',
        '\\',
        '/',
        '\n',
        '\u{1}',
        '\u{7f}',
        'é',
        'ß',
        '\u{7ff}',
        '\u{800}',
        '中',
        '\u{d7ff}',
        '\u{e000}',
        '\u{fffd}',
        '\u{ffff}',
        '\u{10000}',
        '😀',
        '\u{10ffff}',
    ];

    fn random_string(rng: &mut StdRng) -> String {
        let len = rng.random_range(0..6);
        (0..len)
            .map(|_| KEY_CHARS[rng.random_range(0..KEY_CHARS.len())])
            .collect()
    }

    fn random_float_text(rng: &mut StdRng) -> String {
        const FIXED: &[&str] = &[
            "1e16",
            "1e-5",
            "1e-05",
            "0.0001",
            "5e-324",
            "1.7976931348623157e308",
            "-0.0",
            "0.0",
            "0.30000000000000004",
            "9007199254740993.0",
            "1e15",
            "123456789012345678.0",
            "2.5e-7",
            "1E+2",
            "4.9406564584124654e-324",
            "2.2250738585072014e-308",
            "1e22",
            "1e23",
            "-1.5e16",
            "1e400",
            "100e-2",
        ];
        match rng.random_range(0..4) {
            0 => FIXED[rng.random_range(0..FIXED.len())].to_string(),
            1 => {
                // Arbitrary bit patterns (finite only).
                loop {
                    let x = f64::from_bits(rng.random::<u64>());
                    if x.is_finite() {
                        return format!("{x:e}");
                    }
                }
            }
            2 => {
                // Short decimals across the positional/scientific boundary.
                let mantissa: i64 = rng.random_range(-99_999..100_000);
                let exp: i32 = rng.random_range(-25..25);
                format!("{mantissa}e{exp}")
            }
            _ => {
                let a: f64 = rng.random_range(-1000.0..1000.0);
                let b: f64 = rng.random_range(-1.0..1.0);
                format!("{:?}", a + b)
            }
        }
    }

    fn random_value(rng: &mut StdRng, depth: u32) -> Value {
        let choice = if depth >= 4 {
            rng.random_range(0..6)
        } else {
            rng.random_range(0..8)
        };
        match choice {
            0 => Value::Null,
            1 => Value::Bool(rng.random()),
            2 => {
                let text = match rng.random_range(0..3) {
                    0 => rng.random_range(-1000i64..1000).to_string(),
                    1 => format!("{}", rng.random::<i64>()),
                    _ => format!("-{}{}", rng.random::<u64>(), rng.random::<u64>()),
                };
                serde_json::from_str(&text).unwrap()
            }
            3 | 4 => serde_json::from_str(&random_float_text(rng)).unwrap(),
            5 => Value::String(random_string(rng)),
            6 => Value::Array(
                (0..rng.random_range(0..5))
                    .map(|_| random_value(rng, depth + 1))
                    .collect(),
            ),
            _ => {
                let mut map = Map::new();
                for _ in 0..rng.random_range(0..6) {
                    map.insert(random_string(rng), random_value(rng, depth + 1));
                }
                Value::Object(map)
            }
        }
    }

    /// Runs CPython's `json.dumps(json.loads(line), sort_keys=True, separators=(",", ":"),
    /// ensure_ascii=True)` over every value; `None` when `python3` is unavailable.
    fn python_canonical(values: &[Value]) -> Option<Vec<String>> {
        if Command::new("python3").arg("--version").output().is_err() {
            eprintln!("SKIPPED: python3 is not available");
            return None;
        }
        // One input line per value (serde_json output preserves number text and key order).
        let input: String = values
            .iter()
            .map(|v| serde_json::to_string(v).unwrap() + "\n")
            .collect();
        let script = "import json,sys\n\
            for line in sys.stdin:\n\
            \x20   v=json.loads(line)\n\
            \x20   sys.stdout.write(json.dumps(v,sort_keys=True,separators=(',',':'),ensure_ascii=True)+'\\n')\n";
        let mut child = Command::new("python3")
            .args(["-c", script])
            .env("PYTHONIOENCODING", "utf-8")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()).unwrap());
        let output = child.wait_with_output().unwrap();
        writer.join().unwrap();
        assert!(output.status.success(), "python3 failed");
        let text = String::from_utf8(output.stdout).unwrap();
        let lines: Vec<String> = text.lines().map(str::to_owned).collect();
        assert_eq!(lines.len(), values.len());
        Some(lines)
    }

    #[test]
    fn differential_against_python_json_dumps() {
        let mut rng = StdRng::seed_from_u64(0x0e57e9);
        let values: Vec<Value> = (0..400).map(|_| random_value(&mut rng, 0)).collect();
        let Some(expected) = python_canonical(&values) else {
            return;
        };
        for (v, want) in values.iter().zip(&expected) {
            assert_eq!(&to_canonical_string(v), want, "input {v}");
            assert_eq!(canonical_len(v), want.len());
        }
    }

    #[test]
    fn differential_floats_against_python_repr() {
        let mut rng = StdRng::seed_from_u64(0xf10a7);
        let values: Vec<Value> = (0..3000)
            .map(|_| serde_json::from_str(&random_float_text(&mut rng)).unwrap())
            .collect();
        let Some(expected) = python_canonical(&values) else {
            return;
        };
        for (v, want) in values.iter().zip(&expected) {
            assert_eq!(&to_canonical_string(v), want, "input {v}");
        }
    }
}
