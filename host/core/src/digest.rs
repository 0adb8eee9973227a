//! The submission digest (docs/semantics.md#submission-digest).

use chrono::{DateTime, FixedOffset};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::canonical::{python_float_repr, to_canonical_string};
use crate::timefmt::python_isoformat;

/// What the digest covers (all already trimmed/encoded/checked).
#[derive(Debug, Clone, Copy)]
pub struct DigestFields<'a> {
    /// Namespace.
    pub namespace: &'a str,
    /// Task name.
    pub task_name: &'a str,
    /// Encoded payload.
    pub encoded_payload: &'a Value,
    /// Encoded metadata object.
    pub encoded_metadata: &'a Value,
    /// The caller's delay, as given.
    pub delay_s: Option<f64>,
    /// The caller's `expires_at`, with its own offset.
    pub expires_at: Option<&'a DateTime<FixedOffset>>,
    /// Checked priority; in the digest only when it is not the default 5.
    pub priority: u8,
    /// Checked fairness key; in the digest only when given.
    pub fairness_key: Option<&'a str>,
}

/// Lowercase hex SHA-256 of the canonical JSON of
/// `{namespace, task_name, payload, metadata, delay_s, expires_at}` (all already trimmed/encoded),
/// plus `priority` when it is not 5 and `fairness_key` when one was given: a submission that
/// sets neither hashes exactly as the reference hashes it (docs/semantics.md#submission-digest).
///
/// `delay_s` is written as a float (`5` → `5.0`) or `null`; `expires_at` is Python's `isoformat()`
/// of the caller's value, with the caller's own offset, or `null`.
pub fn submission_digest(fields: &DigestFields<'_>) -> String {
    hex::encode(Sha256::digest(submission_digest_text(fields).as_bytes()))
}

/// The canonical JSON text that [`submission_digest`] hashes (keys in sorted order:
/// `delay_s`, `expires_at`, [`fairness_key`], `metadata`, `namespace`, `payload`, [`priority`],
/// `task_name`).
pub fn submission_digest_text(f: &DigestFields<'_>) -> String {
    let delay = match f.delay_s {
        Some(d) => python_float_repr(d),
        None => "null".to_owned(),
    };
    let expires = match f.expires_at {
        Some(t) => to_canonical_string(&Value::String(python_isoformat(t))),
        None => "null".to_owned(),
    };
    let fairness = match f.fairness_key {
        Some(k) => format!(
            "\"fairness_key\":{},",
            to_canonical_string(&Value::String(k.to_owned()))
        ),
        None => String::new(),
    };
    let priority = if f.priority == crate::schedule::DEFAULT_PRIORITY {
        String::new()
    } else {
        format!("\"priority\":{},", f.priority)
    };
    format!(
        "{{\"delay_s\":{delay},\"expires_at\":{expires},{fairness}\"metadata\":{},\"namespace\":{},\"payload\":{},{priority}\"task_name\":{}}}",
        to_canonical_string(f.encoded_metadata),
        to_canonical_string(&Value::String(f.namespace.to_owned())),
        to_canonical_string(f.encoded_payload),
        to_canonical_string(&Value::String(f.task_name.to_owned())),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{ValueField, encode_value};
    use chrono::{TimeZone, Utc};
    use serde_json::json;

    #[allow(clippy::too_many_arguments)]
    fn check(
        namespace: &str,
        task: &str,
        payload: &Value,
        metadata: &Value,
        delay: Option<f64>,
        expires: Option<&DateTime<FixedOffset>>,
        text: &str,
        digest: &str,
    ) {
        let payload = encode_value(payload, ValueField::Payload).unwrap();
        let metadata = encode_value(metadata, ValueField::Metadata).unwrap();
        let fields = DigestFields {
            namespace,
            task_name: task,
            encoded_payload: &payload,
            encoded_metadata: &metadata,
            delay_s: delay,
            expires_at: expires,
            priority: 5,
            fairness_key: None,
        };
        assert_eq!(submission_digest_text(&fields), text);
        assert_eq!(submission_digest(&fields), digest);
        // Same text as building the object and canonicalising it.
        let mut obj = serde_json::Map::new();
        obj.insert("namespace".into(), json!(namespace));
        obj.insert("task_name".into(), json!(task));
        obj.insert("payload".into(), payload);
        obj.insert("metadata".into(), metadata);
        obj.insert(
            "delay_s".into(),
            delay.map_or(Value::Null, |d| {
                Value::Number(serde_json::Number::from_f64(d).unwrap())
            }),
        );
        obj.insert(
            "expires_at".into(),
            expires.map_or(Value::Null, |t| Value::String(python_isoformat(t))),
        );
        assert_eq!(to_canonical_string(&Value::Object(obj)), text);
    }

    #[test]
    fn vector_1() {
        check(
            "agent-api",
            "run_agent",
            &json!({"document_id": "doc-123"}),
            &json!({}),
            None,
            None,
            r#"{"delay_s":null,"expires_at":null,"metadata":{},"namespace":"agent-api","payload":{"document_id":"doc-123"},"task_name":"run_agent"}"#,
            "78d3247632cca9f1c5f4756570d73bb38228bf241b6eecab58d9d4da890a26e2",
        );
    }

    #[test]
    fn vector_2() {
        let payload: Value =
            serde_json::from_str(r#"{"b":[1,2.5,true,null],"a":"é😀\n"}"#).unwrap();
        let plus8 = FixedOffset::east_opt(8 * 3600).unwrap();
        let expires = plus8.with_ymd_and_hms(2026, 8, 10, 20, 0, 0).unwrap();
        check(
            " agent-api ".trim(),
            "run_agent",
            &payload,
            &json!({"tenant": "t1"}),
            Some(f64::from(5)),
            Some(&expires),
            r#"{"delay_s":5.0,"expires_at":"2026-08-10T20:00:00+08:00","metadata":{"tenant":"t1"},"namespace":"agent-api","payload":{"a":"\u00e9\ud83d\ude00\n","b":[1,2.5,true,null]},"task_name":"run_agent"}"#,
            "f44ffe8022b5a9624263921464f372b5d660c401edef9d8ade52a3205d3fcee7",
        );
    }

    #[test]
    fn vector_3() {
        let payload: Value = serde_json::from_str("0.00001").unwrap();
        let expires = (Utc.with_ymd_and_hms(2026, 8, 10, 12, 0, 0).unwrap()
            + chrono::Duration::microseconds(500))
        .fixed_offset();
        check(
            "ns",
            "t",
            &payload,
            &json!({}),
            Some(0.1),
            Some(&expires),
            r#"{"delay_s":0.1,"expires_at":"2026-08-10T12:00:00.000500+00:00","metadata":{},"namespace":"ns","payload":1e-05,"task_name":"t"}"#,
            "1e8306aecbd246df98e4b31ab0d794d611640f7c2576c7162168c93683a7c185",
        );
    }

    #[test]
    fn vector_4() {
        let payload: Value =
            serde_json::from_str(r#"{"$onestep":1,"x":1e16,"y":100000000000000000000,"z":0.0}"#)
                .unwrap();
        check(
            "ns",
            "t",
            &payload,
            &json!({}),
            None,
            None,
            r#"{"delay_s":null,"expires_at":null,"metadata":{},"namespace":"ns","payload":{"$onestep":{"items":[["$onestep",1],["x",1e+16],["y",100000000000000000000],["z",0.0]],"type":"mapping"}},"task_name":"t"}"#,
            "570e616aed958885ebc6e2d71a73b24bfc2baa51ef6cca3c4c411e0d351602e4",
        );
    }

    fn plain<'a>(
        p: &'a Value,
        delay_s: Option<f64>,
        expires_at: Option<&'a DateTime<FixedOffset>>,
    ) -> DigestFields<'a> {
        DigestFields {
            namespace: "ns",
            task_name: "t",
            encoded_payload: p,
            encoded_metadata: p,
            delay_s,
            expires_at,
            priority: 5,
            fairness_key: None,
        }
    }

    #[test]
    fn delay_zero_differs_from_absent_and_offsets_matter() {
        let p = json!({});
        let a = submission_digest(&plain(&p, None, None));
        let b = submission_digest(&plain(&p, Some(0.0), None));
        assert_ne!(a, b);
        let utc = Utc
            .with_ymd_and_hms(2026, 8, 10, 12, 0, 0)
            .unwrap()
            .fixed_offset();
        let plus8 = utc.with_timezone(&FixedOffset::east_opt(8 * 3600).unwrap());
        assert_ne!(
            submission_digest(&plain(&p, None, Some(&utc))),
            submission_digest(&plain(&p, None, Some(&plus8)))
        );
    }

    #[test]
    fn priority_and_fairness_key_enter_only_when_not_default() {
        let p = json!({});
        let base = plain(&p, None, None);
        // Priority 5 and no key: the reference's text, unchanged.
        assert_eq!(
            submission_digest_text(&base),
            r#"{"delay_s":null,"expires_at":null,"metadata":{},"namespace":"ns","payload":{},"task_name":"t"}"#
        );
        let urgent = DigestFields {
            priority: 0,
            ..base
        };
        assert_eq!(
            submission_digest_text(&urgent),
            r#"{"delay_s":null,"expires_at":null,"metadata":{},"namespace":"ns","payload":{},"priority":0,"task_name":"t"}"#
        );
        let keyed = DigestFields {
            fairness_key: Some("tenant-1"),
            ..base
        };
        assert_eq!(
            submission_digest_text(&keyed),
            r#"{"delay_s":null,"expires_at":null,"fairness_key":"tenant-1","metadata":{},"namespace":"ns","payload":{},"task_name":"t"}"#
        );
        // The same text as canonicalising the object with both keys.
        let both = DigestFields {
            priority: 9,
            fairness_key: Some("k"),
            ..base
        };
        let obj = json!({"delay_s": null, "expires_at": null, "fairness_key": "k", "metadata": {},
            "namespace": "ns", "payload": {}, "priority": 9, "task_name": "t"});
        assert_eq!(submission_digest_text(&both), to_canonical_string(&obj));
        let digests = [base, urgent, keyed, both].map(|f| submission_digest(&f));
        for (i, a) in digests.iter().enumerate() {
            assert!(digests[i + 1..].iter().all(|b| b != a));
        }
    }
}
