//! A hostile page or client against the router (docs/security.md#the-api-and-the-dashboard): a
//! cross-site `no-cors` POST changes nothing, `[]` is not a filter, every response carries the
//! security headers, a foreign cursor answers like an unused one, a repeated `Authorization`
//! header is refused, and every error has the JSON error body.

use axum::body::Body;
use axum::http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::BodyExt;
use onestep_core::cursor::Cursor;
use serde_json::{Value, json};
use tower::ServiceExt;

use crate::support::{TOKEN_A, TOKEN_B, TestApp, id_of, req, single_settings, tenant_settings};

/// Sends a request without the OpenAPI check of [`TestApp::send`]: status, headers and body
/// (JSON, or `Value::String` of the text when the body is not JSON).
async fn send_full(app: &TestApp, request: Request<Body>) -> (StatusCode, HeaderMap, Value) {
    let resp = app
        .router
        .clone()
        .oneshot(request)
        .await
        .expect("infallible router");
    let status = resp.status();
    let headers = resp.headers().clone();
    let bytes = resp.into_body().collect().await.expect("body").to_bytes();
    let body = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    (status, headers, body)
}

/// Asserts the documented JSON error body (and content type) with `code`.
fn assert_json_error(what: &str, headers: &HeaderMap, body: &Value, code: &str) {
    let ct = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    assert!(
        ct.starts_with("application/json"),
        "{what}: content-type {ct:?}, body {body}"
    );
    assert_eq!(body["code"], code, "{what}: {body}");
    assert!(
        body["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{what}: {body}"
    );
}

async fn queued(app: &TestApp) -> usize {
    let (_, _, page) = send_full(
        app,
        req(Method::GET, "/v1/executions?status=queued", None).empty(),
    )
    .await;
    page["items"].as_array().map_or(0, Vec::len)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cross_site_posts_and_array_bodies_change_nothing() {
    // No tokens: the mode in which a page on another origin could reach the API.
    let app = TestApp::start(single_settings()).await;
    let mut ids = Vec::new();
    for i in 0..3 {
        ids.push(id_of(
            &app.submit(None, &format!("k{i}"), "echo", json!(i)).await,
        ));
    }
    assert_eq!(queued(&app).await, 3);
    let one = ids[0];
    let post = |path: &str| req(Method::POST, path, None);
    // What a browser sends cross-origin without a preflight: no content type, or text/plain,
    // form-urlencoded or multipart (fetch `mode: "no-cors"`, or a <form>).
    let refused: Vec<(&str, Request<Body>)> = vec![
        (
            "bulk cancel, no content type",
            post("/v1/executions:cancel").bare(),
        ),
        (
            "bulk cancel, text/plain, empty",
            post("/v1/executions:cancel").raw("text/plain", ""),
        ),
        (
            "bulk cancel, text/plain JSON",
            post("/v1/executions:cancel").raw("text/plain;charset=UTF-8", "{}"),
        ),
        (
            "bulk cancel, form",
            post("/v1/executions:cancel").raw("application/x-www-form-urlencoded", "a=b"),
        ),
        (
            "bulk cancel, multipart",
            post("/v1/executions:cancel").raw("multipart/form-data; boundary=x", "--x--"),
        ),
        (
            "bulk retry, text/plain",
            post("/v1/executions:retry")
                .header("Idempotency-Key", "r")
                .raw("text/plain", "{}"),
        ),
        (
            "cancel one, no content type",
            post(&format!("/v1/executions/{one}/cancel")).bare(),
        ),
        (
            "cancel one, text/plain",
            post(&format!("/v1/executions/{one}/cancel")).raw("text/plain", "{}"),
        ),
        (
            "retry one, no content type",
            post(&format!("/v1/executions/{one}/retry"))
                .header("Idempotency-Key", "r1")
                .bare(),
        ),
        (
            "submit, text/plain JSON",
            post("/v1/executions")
                .header("Idempotency-Key", "k-csrf")
                .raw("text/plain", r#"{"task_name":"echo","payload":1}"#),
        ),
    ];
    for (what, request) in refused {
        let (status, headers, body) = send_full(&app, request).await;
        assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{what}: {body}");
        assert_json_error(what, &headers, &body, "unsupported_media_type");
    }
    // JSON, but not an object: `[]` used to mean "no filter" (= everything).
    for (what, body_text) in [("an array", "[]"), ("an empty body", ""), ("null", "null")] {
        for path in ["/v1/executions:cancel", "/v1/executions:retry"] {
            let request = post(path)
                .header("Idempotency-Key", "r2")
                .raw("application/json", body_text);
            let (status, headers, body) = send_full(&app, request).await;
            assert_eq!(
                status,
                StatusCode::UNPROCESSABLE_ENTITY,
                "{path} {what}: {body}"
            );
            assert_json_error(what, &headers, &body, "invalid_body");
        }
    }
    assert_eq!(queued(&app).await, 3, "nothing was cancelled");
    assert_eq!(
        app.count_rows().await,
        3,
        "nothing was submitted or retried"
    );
    // The control: the same endpoint with a JSON object does cancel (so the test can see it).
    let (status, _, body) =
        send_full(&app, post(&format!("/v1/executions/{one}/cancel")).empty()).await;
    assert_eq!(
        status,
        StatusCode::OK,
        "an empty JSON cancel of one: {body}"
    );
    let (status, _, body) = send_full(&app, post("/v1/executions:cancel").json(&json!({}))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(queued(&app).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_response_carries_the_security_headers() {
    let app = TestApp::start(tenant_settings()).await;
    let cases: Vec<(&str, Request<Body>)> = vec![
        ("dashboard", req(Method::GET, "/ui", None).empty()),
        (
            "dashboard detail",
            req(
                Method::GET,
                "/ui/executions/0190b1a2-0000-7000-8000-000000000000",
                None,
            )
            .empty(),
        ),
        (
            "script",
            req(Method::GET, "/ui/assets/app.js", None).empty(),
        ),
        (
            "list",
            req(Method::GET, "/v1/executions", Some(TOKEN_A)).empty(),
        ),
        ("401", req(Method::GET, "/v1/executions", None).empty()),
        ("404", req(Method::GET, "/nope", None).empty()),
        ("healthz", req(Method::GET, "/healthz", None).empty()),
        ("metrics", req(Method::GET, "/metrics", None).empty()),
        ("openapi", req(Method::GET, "/openapi.json", None).empty()),
    ];
    for (what, request) in cases {
        let (status, headers, _) = send_full(&app, request).await;
        let h = |name: &str| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_else(|| panic!("{what} ({status}): no {name}"))
                .to_owned()
        };
        let csp = h("content-security-policy");
        for directive in [
            "default-src 'none'",
            "script-src 'self'",
            "style-src 'self'",
            "frame-ancestors 'none'",
        ] {
            assert!(csp.contains(directive), "{what}: {csp}");
        }
        assert!(!csp.contains("unsafe"), "{what}: {csp}");
        assert_eq!(h("x-frame-options"), "DENY", "{what}");
        assert_eq!(h("x-content-type-options"), "nosniff", "{what}");
        assert_eq!(h("referrer-policy"), "no-referrer", "{what}");
    }
    // The policy allows no inline code: the dashboard's pages must have none.
    for path in ["/ui", "/ui/executions/0190b1a2-0000-7000-8000-000000000000"] {
        let (_, _, html) = app.send_text(req(Method::GET, path, None).empty()).await;
        let lower = html.to_ascii_lowercase();
        for (i, _) in lower.match_indices("<script") {
            let tag = &lower[i..i + lower[i..].find('>').unwrap_or(0)];
            assert!(tag.contains(" src="), "{path}: inline script {tag}");
        }
        assert!(!lower.contains("<style"), "{path}: inline style element");
        assert!(!lower.contains(" style="), "{path}: inline style attribute");
        assert!(!lower.contains("javascript:"), "{path}: javascript: URL");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_and_unknown_cursors_answer_alike() {
    let app = TestApp::start(tenant_settings()).await;
    app.submit(Some(TOKEN_A), "a-1", "echo", json!(1)).await;
    app.submit(Some(TOKEN_B), "b-1", "echo", json!(1)).await;
    app.submit(Some(TOKEN_B), "b-2", "echo", json!(2)).await;
    let (_, _, b_page) = send_full(
        &app,
        req(Method::GET, "/v1/executions?limit=1", Some(TOKEN_B)).empty(),
    )
    .await;
    let foreign = b_page["next_cursor"].as_str().expect("cursor").to_owned();
    let position = Cursor::decode(&foreign).expect("decode");
    let unknown = Cursor {
        id: uuid::Uuid::now_v7(),
        ..position
    }
    .encode();
    let mut answers = Vec::new();
    for (what, cursor) in [("foreign", &foreign), ("unknown", &unknown)] {
        let (status, _, body) = send_full(
            &app,
            req(
                Method::GET,
                &format!("/v1/executions?cursor={cursor}"),
                Some(TOKEN_A),
            )
            .empty(),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{what} cursor: {body}");
        for item in body["items"].as_array().expect("items") {
            assert_eq!(item["namespace"], "tenant-a", "{what}: {item}");
        }
        answers.push(body);
    }
    assert_eq!(
        answers[0], answers[1],
        "a foreign cursor answers like an unknown one"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_authorization_header_is_refused() {
    let app = TestApp::start(tenant_settings()).await;
    for (what, first, second) in [
        ("two tokens", TOKEN_A, TOKEN_B),
        ("the same token twice", TOKEN_A, TOKEN_A),
    ] {
        let request = req(Method::GET, "/v1/executions", Some(first))
            .header("authorization", &format!("Bearer {second}"))
            .empty();
        let (status, headers, body) = send_full(&app, request).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{what}: {body}");
        assert_json_error(what, &headers, &body, "bad_request");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_error_has_the_json_error_body() {
    let app = TestApp::start(tenant_settings()).await;
    let a = app.submit(Some(TOKEN_A), "a-1", "echo", json!(1)).await;
    let id = id_of(&a);
    let get = |path: &str| req(Method::GET, path, Some(TOKEN_A));
    let long_query = format!("/v1/executions?task_name={}", "x".repeat(9000));
    let cases: Vec<(&str, Request<Body>, StatusCode, &str)> = vec![
        (
            "unknown route",
            get("/v2/anything").empty(),
            StatusCode::NOT_FOUND,
            "not_found",
        ),
        (
            "wrong method",
            get("/v1/executions:cancel").empty(),
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
        ),
        (
            "query rejection (duplicate field)",
            get(&format!(
                "/v1/executions/{id}/attempts/1/logs?after_seq=1&after_seq=2"
            ))
            .empty(),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            "target too long",
            get(&long_query).empty(),
            StatusCode::URI_TOO_LONG,
            "uri_too_long",
        ),
        (
            "headers too large",
            get("/v1/executions")
                .header("x-padding", &"p".repeat(20_000))
                .empty(),
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "headers_too_large",
        ),
        (
            "body too large",
            req(Method::POST, "/v1/executions", Some(TOKEN_A))
                .header("Idempotency-Key", "big")
                .raw("application/json", "x".repeat(5000)),
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
        ),
    ];
    for (what, request, status, code) in cases {
        let (got, headers, body) = send_full(&app, request).await;
        assert_eq!(got, status, "{what}: {body}");
        assert_json_error(what, &headers, &body, code);
    }
}
