//! Property tests of the storable-value check (docs/semantics.md#storable-values) on the submit
//! path and the result path: for arbitrary JSON values, task names and instants, either the
//! validation refuses the value, or the value is within every backend's bounds (checked by an
//! independent oracle here) and round-trips through encode/decode unchanged.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use chrono::{Datelike, TimeZone, Utc};
use onestep_core::codec::decode_value;
use onestep_core::cursor::Cursor;
use onestep_core::plan::encode_result;
use onestep_core::request::{SubmitRequest, prepare_submission};
use onestep_core::storable::{MAX_JSON_DEPTH, check_instant};
use onestep_core::text::{is_task_name_char, task_name};
use onestep_core::{ExecutionError, Limits};
use proptest::prelude::*;
use serde_json::{Map, Number, Value};

/// Strings that often hold U+0000, other controls, `$onestep` and non-ASCII.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z$]{0,6}",
        any::<String>(),
        Just("$onestep".to_owned()),
        "[a\u{0}\u{1}é\u{202e}]{0,4}",
    ]
}

/// Number texts: ordinary ones, and ones beyond what some backend stores.
fn number() -> impl Strategy<Value = Value> {
    let texts = prop_oneof![
        any::<i64>().prop_map(|i| i.to_string()),
        any::<f64>()
            .prop_filter("finite", |x| x.is_finite())
            .prop_map(|x| format!("{x:e}")),
        (1u32..9, -17_000i32..400).prop_map(|(m, e)| format!("{m}e{e}")),
        (1usize..420).prop_map(|n| "9".repeat(n)),
    ];
    texts.prop_map(|t| Value::Number(serde_json::from_str::<Number>(&t).unwrap()))
}

fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        number(),
        text().prop_map(Value::String),
    ];
    leaf.prop_recursive(40, 160, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
            prop::collection::vec((text(), inner), 0..3)
                .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// The oracle: nesting of the *encoded* value (an object holding `$onestep` is wrapped as
/// `{"$onestep":{"type":"mapping","items":[[k,v],…]}}`: its values sit 4 levels down).
fn encoded_depth(v: &Value) -> usize {
    match v {
        Value::Array(items) => 1 + items.iter().map(encoded_depth).max().unwrap_or(0),
        Value::Object(map) if map.contains_key("$onestep") => {
            4 + map.values().map(encoded_depth).max().unwrap_or(0)
        }
        Value::Object(map) => 1 + map.values().map(encoded_depth).max().unwrap_or(0),
        _ => 0,
    }
}

fn has_nul(v: &Value) -> bool {
    match v {
        Value::String(s) => s.contains('\0'),
        Value::Array(items) => items.iter().any(has_nul),
        Value::Object(map) => map.iter().any(|(k, v)| k.contains('\0') || has_nul(v)),
        _ => false,
    }
}

fn numbers_fit(v: &Value) -> bool {
    match v {
        Value::Number(n) => {
            let t = n.as_str();
            let finite = t.parse::<f64>().is_ok_and(f64::is_finite);
            let exp = t
                .split_once(['e', 'E'])
                .map_or(0, |(_, e)| e.parse::<i64>().unwrap());
            let frac = t
                .split_once(['e', 'E'])
                .map_or(t, |(m, _)| m)
                .split_once('.')
                .map_or(0, |(_, f)| f.len() as i64);
            finite && frac - exp <= 16_383
        }
        Value::Array(items) => items.iter().all(numbers_fit),
        Value::Object(map) => map.values().all(numbers_fit),
        _ => true,
    }
}

fn storable(v: &Value) -> bool {
    encoded_depth(v) <= MAX_JSON_DEPTH && !has_nul(v) && numbers_fit(v)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// Submit: the payload is refused exactly when the oracle says no backend-safe form exists;
    /// an accepted payload decodes back to itself.
    #[test]
    fn submit_refuses_or_round_trips(payload in json()) {
        let req = SubmitRequest { task_name: "t".into(), payload: payload.clone(), ..SubmitRequest::default() };
        let limits = Limits { max_payload_bytes: usize::MAX, ..Limits::default() };
        match prepare_submission("ns", &req, &limits) {
            Ok(prepared) => {
                prop_assert!(storable(&payload), "accepted an unstorable payload: {payload}");
                prop_assert!(encoded_depth(&prepared.payload) <= MAX_JSON_DEPTH);
                let text = prepared.payload_json();
                let reread: Value = serde_json::from_str(&text).unwrap();
                prop_assert_eq!(decode_value(&reread).unwrap(), payload);
            }
            Err(ExecutionError::Encoding(why)) => {
                prop_assert!(!storable(&payload), "refused a storable payload ({why}): {payload}");
            }
            Err(other) => prop_assert!(false, "unexpected error {other:?}"),
        }
    }

    /// Result path: the same rule for what a handler returns, as the worker and every store
    /// check it before the completion is written.
    #[test]
    fn results_are_refused_or_round_trip(result in json()) {
        match encode_result(&result, usize::MAX) {
            Ok(encoded) => {
                prop_assert!(storable(&result), "accepted an unstorable result: {result}");
                prop_assert_eq!(decode_value(&encoded).unwrap(), result);
            }
            Err(e) => {
                prop_assert_eq!(e.code(), "encoding_error");
                prop_assert!(!storable(&result), "refused a storable result ({e}): {result}");
            }
        }
    }

    /// Task names: accepted exactly when trimmed they are 1..=255 characters of the set.
    #[test]
    fn task_names_follow_the_documented_set(name in prop_oneof!["[a-zA-Z0-9_.:-]{0,260}", any::<String>(), " ?[a-z\u{0}/ \"{}=é]{1,8} ?"]) {
        let t = name.trim();
        let expected = !t.is_empty() && t.chars().count() <= 255 && t.chars().all(is_task_name_char);
        match task_name(&name) {
            Ok(v) => { prop_assert!(expected); prop_assert_eq!(v, t); }
            Err(e) => { prop_assert!(!expected, "{e}"); prop_assert_eq!(e.code(), "invalid_argument"); }
        }
    }

    /// Instants: accepted exactly in years 1000..=9999 without a leap second; an accepted one
    /// round-trips through the cursor text.
    #[test]
    fn instants_in_range_round_trip(secs in -70_000_000_000i64..260_000_000_000i64, micros in 0u32..1_000_000, leap in any::<bool>()) {
        let nanos = micros * 1000 + if leap { 1_000_000_000 } else { 0 };
        let Some(t) = Utc.timestamp_opt(secs, nanos).single() else { return Ok(()); };
        let expected = (1000..=9999).contains(&t.year()) && !leap;
        match check_instant("expires_at", &t) {
            Ok(()) => {
                prop_assert!(expected, "{t:?}");
                let c = Cursor { created_at: t, id: uuid::Uuid::nil() };
                prop_assert_eq!(Cursor::decode(&c.encode()).unwrap(), c);
            }
            Err(e) => { prop_assert!(!expected, "{t:?}: {e}"); prop_assert_eq!(e.code(), "invalid_argument"); }
        }
    }
}
