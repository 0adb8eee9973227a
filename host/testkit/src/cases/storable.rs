//! Storable values (docs/semantics.md#storable-values): what one backend can store, every backend
//! stores and reads back the same; what one cannot, every backend refuses with the same error
//! before any SQL runs — never a panic, a driver error or a 500.

use chrono::{DateTime, FixedOffset, Utc};
use onestep_core::cursor::Cursor;
use onestep_core::request::{ListQuery, ListSearch, SubmitRequest};
use onestep_core::{ExecutionClient, ExecutionError, ExecutionStatus};
use serde_json::{Value, json};

use super::{NS, TASK, case, claim_one, get, submit, success};
use crate::suite::{Case, Fixture};

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case("storable_bounds_are_stored_everywhere", |fx| {
            Box::pin(bounds_stored(fx))
        }),
        case("unstorable_inputs_are_refused_alike", |fx| {
            Box::pin(inputs_refused(fx))
        }),
        case("unstorable_results_are_refused_before_the_write", |fx| {
            Box::pin(results_refused(fx))
        }),
        case("storable_property_values_round_trip", |fx| {
            Box::pin(property_round_trip(fx))
        }),
    ]
}

/// JSON nested `depth` arrays deep around `1`.
fn deep(depth: usize) -> Value {
    serde_json::from_str(&format!("{}1{}", "[".repeat(depth), "]".repeat(depth))).expect("json")
}

fn at(text: &str) -> DateTime<FixedOffset> {
    DateTime::parse_from_rfc3339(text).expect("rfc 3339")
}

fn utc(text: &str) -> DateTime<Utc> {
    at(text).with_timezone(&Utc)
}

fn canonical(v: &Value) -> String {
    onestep_core::canonical::to_canonical_string(v)
}

fn client(fx: &Fixture) -> ExecutionClient {
    ExecutionClient::new(fx.store.clone(), NS, fx.limits).expect("client")
}

fn request(payload: Value) -> SubmitRequest {
    SubmitRequest {
        task_name: TASK.into(),
        payload,
        ..SubmitRequest::default()
    }
}

/// The edge of every bound is accepted and reads back unchanged.
async fn bounds_stored(fx: Fixture) {
    let c = client(&fx);
    let payload = json!({
        "deep": deep(30),
        "controls": "\u{1}\u{7f}\u{202e}\u{ffff}",
        "small": 1e-300,
    });
    let metadata = json!({"m": deep(30), "k\u{1}": "v"});
    for (expires, key) in [
        ("1000-01-01T00:00:00Z", "first-instant"),
        ("9999-12-31T23:59:59.999999Z", "last-instant"),
        ("9999-12-31T23:59:59.999999+00:00", "last-instant-offset"),
    ] {
        let e = c
            .submit(&SubmitRequest {
                task_name: "orders.send:v2-a_b".into(),
                idempotency_key: Some(key.into()),
                metadata: Some(metadata.clone()),
                expires_at: Some(at(expires)),
                ..request(payload.clone())
            })
            .await
            .unwrap_or_else(|err| panic!("{expires}: {err}"));
        let back = get(&fx, e.id).await;
        // Equal as values (PostgreSQL's `jsonb` keeps neither key order nor number text).
        assert_eq!(canonical(&back.payload), canonical(&payload), "{expires}");
        assert_eq!(
            canonical(&Value::Object(back.metadata.clone())),
            canonical(&metadata),
            "{expires}"
        );
        assert_eq!(back.expires_at, Some(utc(expires)), "{expires}");
    }
    // The widest filters that every backend holds.
    let page = c
        .search(
            &ListQuery::default(),
            &ListSearch {
                created_from: Some(utc("1000-01-01T00:00:00Z")),
                created_before: Some(utc("9999-12-31T23:59:59.999999Z")),
                ..ListSearch::default()
            },
        )
        .await
        .expect("search at the bounds");
    assert_eq!(page.items.len(), 3);
    let cursor = Cursor {
        created_at: utc("9999-12-31T23:59:59.999999Z"),
        id: uuid::Uuid::nil(),
    };
    let page = c
        .list(&ListQuery {
            cursor: Some(cursor.encode()),
            ..ListQuery::default()
        })
        .await
        .expect("list after the last instant");
    assert_eq!(page.items.len(), 3);
}

fn expect_refused<T: std::fmt::Debug>(
    what: &str,
    r: Result<T, ExecutionError>,
    code: &str,
    needle: &str,
) {
    match r {
        Err(e) => {
            assert_eq!(e.code(), code, "{what}: {e}");
            assert!(e.to_string().contains(needle), "{what}: {e}");
        }
        Ok(v) => panic!("{what}: expected {code}, got {v:?}"),
    }
}

/// Every input path that reaches SQL refuses what some backend cannot store, with the same
/// error on every backend.
async fn inputs_refused(fx: Fixture) {
    let c = client(&fx);
    let nul = "a\u{0}b";
    let bad_json: Vec<(&str, Value, &str)> = vec![
        ("payload depth 32", deep(32), "nesting depth over 31"),
        ("payload depth 40", deep(40), "nesting depth over 31"),
        ("payload NUL string", json!({"s": nul}), "NUL"),
        ("payload NUL key", json!({"a\u{0}": 1}), "NUL"),
        (
            "payload huge integer",
            serde_json::from_str(&"9".repeat(400)).expect("json"),
            "range",
        ),
        (
            "payload tiny number",
            serde_json::from_str("1e-20000").expect("json"),
            "16383",
        ),
    ];
    for (what, payload, needle) in bad_json {
        expect_refused(
            what,
            c.submit(&request(payload)).await,
            "encoding_error",
            needle,
        );
    }
    for (what, metadata) in [
        ("metadata depth", json!({"m": deep(31)})),
        ("metadata NUL", json!({"m": nul})),
    ] {
        let r = c
            .submit(&SubmitRequest {
                metadata: Some(metadata),
                ..request(json!(1))
            })
            .await;
        expect_refused(what, r, "encoding_error", "cannot store execution metadata");
    }
    for (what, task) in [
        ("task NUL", nul),
        ("task space", "a b"),
        ("task quote", "x\",namespace=\"b"),
    ] {
        let r = c
            .submit(&SubmitRequest {
                task_name: task.into(),
                ..request(json!(1))
            })
            .await;
        expect_refused(what, r, "invalid_argument", "task_name");
    }
    let r = c
        .submit(&SubmitRequest {
            idempotency_key: Some(nul.into()),
            ..request(json!(1))
        })
        .await;
    expect_refused("key NUL", r, "invalid_argument", "idempotency_key");
    for text in [
        "0000-01-01T00:00:00Z",
        "0999-12-31T23:59:59.999999Z",
        "1000-01-01T00:30:00+01:00",
        "2016-12-31T23:59:60Z",
    ] {
        let r = c
            .submit(&SubmitRequest {
                expires_at: Some(at(text)),
                ..request(json!(1))
            })
            .await;
        expect_refused(text, r, "invalid_argument", "expires_at");
        let r = c
            .search(
                &ListQuery::default(),
                &ListSearch {
                    created_from: Some(utc(text)),
                    ..ListSearch::default()
                },
            )
            .await;
        expect_refused(text, r, "invalid_argument", "created_from");
        let r = c
            .search(
                &ListQuery::default(),
                &ListSearch {
                    created_before: Some(utc(text)),
                    ..ListSearch::default()
                },
            )
            .await;
        expect_refused(text, r, "invalid_argument", "created_before");
        if text.contains(":60") {
            // A cursor's text cannot carry a leap second: its encoder writes second 59.
            continue;
        }
        let cursor = Cursor {
            created_at: utc(text),
            id: uuid::Uuid::nil(),
        };
        let r = c
            .list(&ListQuery {
                cursor: Some(cursor.encode()),
                ..ListQuery::default()
            })
            .await;
        expect_refused(text, r, "invalid_argument", "invalid execution cursor");
    }
    let r = c
        .list(&ListQuery {
            task_name: Some(nul.into()),
            ..ListQuery::default()
        })
        .await;
    expect_refused("task filter NUL", r, "invalid_argument", "task_name");
    for (what, search) in [
        (
            "key filter NUL",
            ListSearch {
                idempotency_key: Some(nul.into()),
                ..ListSearch::default()
            },
        ),
        (
            "metadata key NUL",
            ListSearch {
                metadata: Some((nul.into(), "v".into())),
                ..ListSearch::default()
            },
        ),
        (
            "metadata value NUL",
            ListSearch {
                metadata: Some(("k".into(), nul.into())),
                ..ListSearch::default()
            },
        ),
        (
            "exception filter NUL",
            ListSearch {
                exception_type: Some(nul.into()),
                ..ListSearch::default()
            },
        ),
    ] {
        let r = c.search(&ListQuery::default(), &search).await;
        expect_refused(what, r, "invalid_argument", "NUL");
    }
    let e = submit(&fx, json!(1)).await;
    expect_refused(
        "cancel reason NUL",
        c.cancel(e.id, Some(nul)).await,
        "invalid_argument",
        "reason",
    );
    assert_eq!(get(&fx, e.id).await.status, ExecutionStatus::Queued);
    // Nothing was written by any refused request.
    let page = c.list(&ListQuery::default()).await.expect("list");
    assert_eq!(page.items.len(), 1);
}

/// A result no backend can store is refused before the write (`encoding_error`) and the lease
/// stays the worker's, so it can fail the attempt; a result at the bounds is stored.
async fn results_refused(fx: Fixture) {
    let e = submit(&fx, json!(1)).await;
    let lease = claim_one(&fx, 30.0).await;
    for (what, result) in [
        ("depth 32", deep(32)),
        ("NUL", json!(["a\u{0}"])),
        ("NUL key", json!({"\u{0}": 1})),
    ] {
        let r = fx
            .leases
            .complete(&lease.lease_ref(), &success(result))
            .await;
        expect_refused(what, r, "encoding_error", "cannot store execution result");
        assert_eq!(
            get(&fx, e.id).await.status,
            ExecutionStatus::Running,
            "{what}"
        );
    }
    let done = fx
        .leases
        .complete(&lease.lease_ref(), &success(deep(31)))
        .await
        .expect("depth 31 is stored");
    assert_eq!(done.result, Some(deep(31)));
    assert_eq!(get(&fx, e.id).await.result, Some(deep(31)));
}

/// Arbitrary JSON (proptest, a few dozen deterministic cases per backend): either core refuses
/// it, or the backend stores it and reads back an equal value — never a backend error.
async fn property_round_trip(fx: Fixture) {
    let c = client(&fx);
    let (mut stored, mut refused) = (0, 0);
    for (i, payload) in property_values(48).into_iter().enumerate() {
        match c.submit(&request(payload.clone())).await {
            Ok(e) => {
                stored += 1;
                let back = get(&fx, e.id).await;
                assert_eq!(canonical(&back.payload), canonical(&payload), "case {i}");
            }
            Err(ExecutionError::Encoding(_)) => refused += 1,
            Err(other) => panic!("case {i}: {other:?} for {payload}"),
        }
    }
    assert!(
        stored > 0 && refused > 0,
        "stored {stored}, refused {refused}"
    );
}

/// `n` arbitrary JSON values from a fixed seed (the same on every backend).
fn property_values(n: usize) -> Vec<Value> {
    use proptest::prelude::*;
    use proptest::strategy::ValueTree;
    use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

    let text = prop_oneof!["[a-z$]{0,4}", any::<String>(), "[a\u{0}\u{1}é]{0,3}"];
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |x| x.is_finite())
            .prop_map(Value::from),
        text.clone().prop_map(Value::String),
    ];
    let json = leaf.prop_recursive(36, 64, 3, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
            prop::collection::vec((text.clone(), inner), 0..3)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    });
    let mut runner = TestRunner::new_with_rng(
        Config::default(),
        TestRng::from_seed(RngAlgorithm::ChaCha, &[7; 32]),
    );
    (0..n)
        .map(|_| json.new_tree(&mut runner).expect("value").current())
        .collect()
}
