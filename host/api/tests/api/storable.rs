//! Values some backend cannot store (docs/semantics.md#storable-values) get 422 with the same
//! code on every server, before any SQL runs: bad years and leap seconds in `expires_at` and the
//! list filters (a panic in the MySQL driver before), deep JSON (500 on MariaDB before), NUL
//! characters, task names outside the documented set. Values at the bounds get 202/200.

use axum::http::{Method, StatusCode};
use serde_json::{Value, json};

use crate::support::{TOKEN_A, TestApp, req, servers, tenant_settings};

fn deep(depth: usize) -> Value {
    serde_json::from_str(&format!("{}1{}", "[".repeat(depth), "]".repeat(depth))).expect("json")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unstorable_values_get_the_same_422_on_every_server() {
    for (server, admin) in servers() {
        // Every task name allowed (the default), so the name rules themselves answer.
        let mut settings = tenant_settings();
        settings.api.allowed_tasks.clear();
        settings.api.max_body_bytes = 64 * 1024;
        let app = TestApp::start_on(&admin, settings).await;
        let submit = |key: &str, body: Value| {
            req(Method::POST, "/v1/executions", Some(TOKEN_A))
                .header("Idempotency-Key", key)
                .json(&body)
        };
        let bad_submits: Vec<(&str, Value, &str, &str)> = vec![
            (
                "deep payload",
                json!({"task_name": "echo", "payload": deep(32)}),
                "encoding_error",
                "nesting depth over 31",
            ),
            (
                "NUL payload",
                json!({"task_name": "echo", "payload": {"s": "a\u{0}b"}}),
                "encoding_error",
                "NUL",
            ),
            (
                "NUL metadata",
                json!({"task_name": "echo", "payload": 1, "metadata": {"a\u{0}": "x"}}),
                "encoding_error",
                "NUL",
            ),
            (
                "NUL task",
                json!({"task_name": "ec\u{0}ho", "payload": 1}),
                "invalid_argument",
                "task_name",
            ),
            (
                "task outside the set",
                json!({"task_name": "team-b\",x=\"1", "payload": 1}),
                "invalid_argument",
                "task_name may contain only",
            ),
            (
                "year 0",
                json!({"task_name": "echo", "payload": 1, "expires_at": "0000-01-01T00:00:00Z"}),
                "invalid_argument",
                "expires_at must be between",
            ),
            (
                "year 999",
                json!({"task_name": "echo", "payload": 1, "expires_at": "0999-12-31T23:59:59Z"}),
                "invalid_argument",
                "expires_at must be between",
            ),
            (
                "leap second",
                json!({"task_name": "echo", "payload": 1, "expires_at": "2016-12-31T23:59:60Z"}),
                "invalid_argument",
                "leap second",
            ),
        ];
        for (what, body, code, needle) in bad_submits {
            let (status, got) = app.send(submit(what, body)).await;
            assert_eq!(
                status,
                StatusCode::UNPROCESSABLE_ENTITY,
                "{server} {what}: {got}"
            );
            assert_eq!(got["code"], code, "{server} {what}: {got}");
            let message = got["message"].as_str().unwrap_or_default();
            assert!(message.contains(needle), "{server} {what}: {got}");
        }
        let bad_lists = [
            ("created_from=0000-01-01T00:00:00Z", "created_from"),
            ("created_before=0500-01-01T00:00:00Z", "created_before"),
            ("created_from=2016-12-31T23:59:60Z", "leap second"),
            ("task_name=a%00b", "NUL"),
            ("idempotency_key=a%00b", "NUL"),
            ("metadata=k%3Da%00b", "NUL"),
            ("exception_type=a%00b", "NUL"),
        ];
        for (query, needle) in bad_lists {
            let path = format!("/v1/executions?{query}");
            let (status, got) = app
                .send(req(Method::GET, &path, Some(TOKEN_A)).empty())
                .await;
            assert_eq!(
                status,
                StatusCode::UNPROCESSABLE_ENTITY,
                "{server} {query}: {got}"
            );
            assert_eq!(got["code"], "invalid_argument", "{server} {query}: {got}");
            assert!(
                got["message"].as_str().unwrap_or_default().contains(needle),
                "{server} {query}: {got}"
            );
        }
        assert_eq!(
            app.count_rows().await,
            0,
            "{server}: a refused request wrote nothing"
        );
        // The bounds themselves are stored.
        let body = json!({
            "task_name": "orders.send:v2",
            "payload": deep(31),
            "expires_at": "9999-12-31T23:59:59.999999Z",
        });
        let (status, got) = app.send(submit("edge", body)).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{server}: {got}");
        let (status, got) = app
            .send(
                req(
                    Method::GET,
                    "/v1/executions?created_from=1000-01-01T00:00:00Z&created_before=9999-12-31T23:59:59Z",
                    Some(TOKEN_A),
                )
                .empty(),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{server}: {got}");
        assert_eq!(
            got["items"].as_array().map(Vec::len),
            Some(1),
            "{server}: {got}"
        );
    }
}
