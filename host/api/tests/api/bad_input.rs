//! The bad-input table: each request with its exact status and `code`, and nothing written.

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use serde_json::{Value, json};

use crate::support::{TOKEN_A, TOKEN_B, TestApp, id_of, req, tenant_settings};

fn post(key: Option<&str>, body: &Value) -> Request<Body> {
    let mut r = req(Method::POST, "/v1/executions", Some(TOKEN_A));
    if let Some(k) = key {
        r = r.header("Idempotency-Key", k);
    }
    r.json(body)
}

fn post_raw(content_type: &str, body: impl Into<Body>) -> Request<Body> {
    req(Method::POST, "/v1/executions", Some(TOKEN_A))
        .header("Idempotency-Key", "k")
        .raw(content_type, body)
}

fn get(path: &str) -> Request<Body> {
    req(Method::GET, path, Some(TOKEN_A)).empty()
}

/// A submit body of exactly `len` bytes.
fn body_of_len(len: usize) -> String {
    let head = r#"{"task_name":"echo","payload":""#;
    let tail = r#""}"#;
    format!("{head}{}{tail}", "a".repeat(len - head.len() - tail.len()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_inputs_get_their_status_and_code_and_write_nothing() {
    let app = TestApp::start(tenant_settings()).await;
    // Tenant B owns one execution; tenant A sends every bad request.
    let b = app
        .submit(Some(TOKEN_B), "b-key", "echo", json!({"x": 1}))
        .await;
    let b_id = id_of(&b);
    let (_, b_page) = app
        .send(req(Method::GET, "/v1/executions", Some(TOKEN_B)).empty())
        .await;
    // (A foreign cursor is a position, like an unused one: hostile.rs.)
    let b2 = app.submit(Some(TOKEN_B), "b-key-2", "echo", json!(2)).await;
    assert_eq!(b_page["items"].as_array().map(Vec::len), Some(1));
    let rows_before = app.count_rows().await;
    assert_eq!(rows_before, 2);

    let ok = |task: &str| json!({"task_name": task, "payload": 1});
    let long_reason = json!({"reason": "r".repeat(501)});
    let cases: Vec<(&str, Request<Body>, u16, &str)> = vec![
        (
            "malformed JSON",
            post_raw("application/json", "{\"task_name\": \"echo\","),
            422,
            "invalid_json",
        ),
        (
            "not JSON at all",
            post_raw("application/json", "task_name=echo"),
            422,
            "invalid_json",
        ),
        (
            "body is a list",
            post(Some("k"), &json!([1, 2])),
            422,
            "invalid_body",
        ),
        (
            "missing task_name",
            post(Some("k"), &json!({"payload": 1})),
            422,
            "invalid_body",
        ),
        (
            "missing payload",
            post(Some("k"), &json!({"task_name": "echo"})),
            422,
            "invalid_body",
        ),
        (
            "task_name not a string",
            post(Some("k"), &json!({"task_name": 7, "payload": 1})),
            422,
            "invalid_body",
        ),
        (
            "delay_s a string",
            post(
                Some("k"),
                &json!({"task_name": "echo", "payload": 1, "delay_s": "soon"}),
            ),
            422,
            "invalid_body",
        ),
        (
            "delay_s negative",
            post(
                Some("k"),
                &json!({"task_name": "echo", "payload": 1, "delay_s": -1}),
            ),
            422,
            "invalid_argument",
        ),
        (
            "expires_at a number",
            post(
                Some("k"),
                &json!({"task_name": "echo", "payload": 1, "expires_at": 1700000000}),
            ),
            422,
            "invalid_body",
        ),
        (
            "metadata a list",
            post(
                Some("k"),
                &json!({"task_name": "echo", "payload": 1, "metadata": [1]}),
            ),
            422,
            "invalid_argument",
        ),
        (
            "reserved metadata key",
            post(
                Some("k"),
                &json!({"task_name": "echo", "payload": 1, "metadata": {"onestep.execution": 1}}),
            ),
            422,
            "invalid_argument",
        ),
        (
            "priority over 9",
            post(
                Some("k"),
                &json!({"task_name": "echo", "payload": 1, "priority": 10}),
            ),
            422,
            "invalid_argument",
        ),
        (
            "priority negative",
            post(
                Some("k"),
                &json!({"task_name": "echo", "payload": 1, "priority": -1}),
            ),
            422,
            "invalid_argument",
        ),
        (
            "priority a string",
            post(
                Some("k"),
                &json!({"task_name": "echo", "payload": 1, "priority": "1"}),
            ),
            422,
            "invalid_argument",
        ),
        (
            "priority a fraction",
            post(
                Some("k"),
                &json!({"task_name": "echo", "payload": 1, "priority": 1.5}),
            ),
            422,
            "invalid_argument",
        ),
        (
            "fairness_key with a slash",
            post(
                Some("k"),
                &json!({"task_name": "echo", "payload": 1, "fairness_key": "a/b"}),
            ),
            422,
            "invalid_argument",
        ),
        (
            "fairness_key empty",
            post(
                Some("k"),
                &json!({"task_name": "echo", "payload": 1, "fairness_key": " "}),
            ),
            422,
            "invalid_argument",
        ),
        (
            "fairness_key over 255",
            post(
                Some("k"),
                &json!({"task_name": "echo", "payload": 1, "fairness_key": "k".repeat(256)}),
            ),
            422,
            "invalid_argument",
        ),
        (
            "naive expires_at",
            post(
                Some("k"),
                &json!({"task_name": "echo", "payload": 1, "expires_at": "2099-01-01T00:00:00"}),
            ),
            422,
            "invalid_argument",
        ),
        (
            "garbage expires_at",
            post(
                Some("k"),
                &json!({"task_name": "echo", "payload": 1, "expires_at": "next week"}),
            ),
            422,
            "invalid_argument",
        ),
        // payload limit 1000: a string of 999 characters is 1001 bytes of canonical JSON.
        (
            "payload 1 byte over the limit",
            post(
                Some("k"),
                &json!({"task_name": "echo", "payload": "p".repeat(999)}),
            ),
            422,
            "encoding_error",
        ),
        (
            "metadata over the limit",
            post(
                Some("k"),
                &json!({"task_name": "echo", "payload": 1, "metadata": {"m": "m".repeat(600)}}),
            ),
            422,
            "encoding_error",
        ),
        // body limit 4096 bytes.
        (
            "body 1 byte over the limit",
            post_raw("application/json", body_of_len(4097)),
            413,
            "payload_too_large",
        ),
        (
            "not JSON content type",
            post_raw("text/plain", "{}"),
            415,
            "unsupported_media_type",
        ),
        (
            "unknown task",
            post(Some("k"), &ok("rm_rf")),
            422,
            "task_not_allowed",
        ),
        (
            "empty task_name",
            post(Some("k"), &ok("")),
            422,
            "task_not_allowed",
        ),
        (
            "missing key",
            post(None, &ok("echo")),
            422,
            "invalid_argument",
        ),
        (
            "empty key",
            post(Some(""), &ok("echo")),
            422,
            "invalid_argument",
        ),
        (
            "blank key",
            post(Some("   "), &ok("echo")),
            422,
            "invalid_argument",
        ),
        (
            "256-char key",
            post(Some(&"k".repeat(256)), &ok("echo")),
            422,
            "invalid_argument",
        ),
        (
            "malformed UUID (get)",
            get("/v1/executions/not-a-uuid"),
            422,
            "invalid_argument",
        ),
        (
            "malformed UUID (result)",
            get("/v1/executions/1234/result"),
            422,
            "invalid_argument",
        ),
        (
            "malformed UUID (cancel)",
            req(Method::POST, "/v1/executions/zzz/cancel", Some(TOKEN_A)).empty(),
            422,
            "invalid_argument",
        ),
        (
            "bad cursor",
            get("/v1/executions?cursor=not-a-cursor"),
            422,
            "invalid_argument",
        ),
        (
            "empty cursor",
            get("/v1/executions?cursor="),
            422,
            "invalid_argument",
        ),
        (
            "limit 0",
            get("/v1/executions?limit=0"),
            422,
            "invalid_argument",
        ),
        (
            "limit 201",
            get("/v1/executions?limit=201"),
            422,
            "invalid_argument",
        ),
        (
            "limit not a number",
            get("/v1/executions?limit=ten"),
            422,
            "invalid_argument",
        ),
        (
            "unknown status",
            get("/v1/executions?status=done"),
            422,
            "invalid_argument",
        ),
        (
            "reason of 501 chars",
            req(
                Method::POST,
                &format!("/v1/executions/{b_id}/cancel"),
                Some(TOKEN_B),
            )
            .json(&long_reason),
            422,
            "invalid_argument",
        ),
        (
            "cancel body wrong type",
            req(
                Method::POST,
                &format!("/v1/executions/{b_id}/cancel"),
                Some(TOKEN_B),
            )
            .json(&json!({"reason": 5})),
            422,
            "invalid_body",
        ),
        (
            "wrong token",
            req(
                Method::POST,
                "/v1/executions",
                Some("token-wrong-wrong-wrong-wrong"),
            )
            .header("Idempotency-Key", "k")
            .json(&ok("echo")),
            401,
            "unauthorized",
        ),
        (
            "other tenant's execution (get)",
            get(&format!("/v1/executions/{b_id}")),
            404,
            "not_found",
        ),
        (
            "other tenant's execution (cancel)",
            req(
                Method::POST,
                &format!("/v1/executions/{b_id}/cancel"),
                Some(TOKEN_A),
            )
            .empty(),
            404,
            "not_found",
        ),
        (
            "other tenant's execution (result)",
            get(&format!("/v1/executions/{b_id}/result")),
            404,
            "not_found",
        ),
    ];
    for (name, request, status, code) in cases {
        let (got, body) = app.send(request).await;
        assert_eq!(got.as_u16(), status, "{name}: {body}");
        assert_eq!(body["code"], code, "{name}: {body}");
        assert!(
            body["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{name}"
        );
    }
    assert_eq!(
        app.count_rows().await,
        rows_before,
        "a bad request wrote a row"
    );
    for (id, view) in [(b_id, &b), (id_of(&b2), &b2)] {
        let (_, now) = app
            .send(req(Method::GET, &format!("/v1/executions/{id}"), Some(TOKEN_B)).empty())
            .await;
        assert_eq!(&now, view, "tenant B's execution changed");
    }

    // The boundaries themselves are accepted: a body of exactly 4096 bytes and a payload of
    // exactly 1000 bytes.
    let (status, _) = app
        .send(post_raw("application/json", body_of_len(4096)))
        .await;
    assert_eq!(
        status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "4096-byte body passes the body limit"
    );
    let (status, _) = app
        .send(post(
            Some("edge"),
            &json!({"task_name": "echo", "payload": "p".repeat(998)}),
        ))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    assert_eq!(app.count_rows().await, rows_before + 1);
}
