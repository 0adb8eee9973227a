//! The happy paths of every endpoint, list paging and filters, health and readiness, the OpenAPI
//! document, and JSON errors for unknown routes.

use axum::http::{Method, StatusCode};
use mysql_async::prelude::Queryable;
use serde_json::{Value, json};

use crate::support::{TOKEN_A, TOKEN_B, TestApp, id_of, req, single_settings, tenant_settings};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submit_get_replay_cancel_and_the_execution_view() {
    let app = TestApp::start(single_settings()).await;
    let body = json!({
        "task_name": "run_agent",
        "payload": {"document_id": "doc-123"},
        "metadata": {"requested_by": "u1"},
        "delay_s": 0,
        "expires_at": "2099-01-01T08:00:00+08:00"
    });
    let post = || {
        req(Method::POST, "/v1/executions", None)
            .header("Idempotency-Key", "req-20260810-0001")
            .json(&body)
    };
    let (status, view) = app.send(post()).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let keys: Vec<&str> = view
        .as_object()
        .expect("object")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "id",
            "namespace",
            "task_name",
            "status",
            "terminal",
            "attempts",
            "metadata",
            "version",
            "created_at",
            "available_at",
            "started_at",
            "finished_at",
            "cancel_requested_at",
            "expires_at",
            "error",
            "priority",
            "fairness_key"
        ]
    );
    assert_eq!(view["namespace"], "local");
    assert_eq!(
        (view["priority"].clone(), view["fairness_key"].clone()),
        (json!(5), json!("local"))
    );
    assert_eq!(view["status"], "queued");
    assert_eq!(view["terminal"], false);
    assert_eq!(view["metadata"], json!({"requested_by": "u1"}));
    assert_eq!(view["expires_at"], "2099-01-01T00:00:00+00:00");
    assert!(
        view["created_at"]
            .as_str()
            .is_some_and(|s| s.ends_with("+00:00"))
    );

    // Replay: same key and body → same execution, 202 again.
    let (status, again) = app.send(post()).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    assert_eq!(again["id"], view["id"]);

    let id = id_of(&view);
    let (status, got) = app
        .send(req(Method::GET, &format!("/v1/executions/{id}"), None).empty())
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(got, view);
    // The simple (32 hex digit) form of a UUID is accepted too.
    let simple = id.simple().to_string();
    let (status, _) = app
        .send(req(Method::GET, &format!("/v1/executions/{simple}"), None).empty())
        .await;
    assert_eq!(status, StatusCode::OK);

    let (status, cancelled) = app
        .send(
            req(Method::POST, &format!("/v1/executions/{id}/cancel"), None)
                .json(&json!({"reason": "user left the page"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(cancelled["status"], "cancelled");
    assert_eq!(cancelled["terminal"], true);
    // A second cancel (empty body) changes nothing.
    let (status, again) = app
        .send(req(Method::POST, &format!("/v1/executions/{id}/cancel"), None).empty())
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(again["version"], cancelled["version"]);

    let missing = uuid::Uuid::new_v4();
    for (method, path) in [
        (Method::GET, format!("/v1/executions/{missing}")),
        (Method::POST, format!("/v1/executions/{missing}/cancel")),
        (Method::GET, format!("/v1/executions/{missing}/result")),
    ] {
        let (status, err) = app.send(req(method, &path, None).empty()).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
        assert_eq!(err["code"], "not_found");
    }
    assert_eq!(app.count_rows().await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn priority_and_fairness_key_are_submitted_shown_and_part_of_the_replay() {
    let app = TestApp::start(single_settings()).await;
    let post = |key: &str, body: serde_json::Value| {
        req(Method::POST, "/v1/executions", None)
            .header("Idempotency-Key", key)
            .json(&body)
    };
    let body = json!({"task_name": "run_agent", "payload": 1, "priority": 0,
        "fairness_key": " tenant-42 "});
    let (status, view) = app.send(post("p-1", body.clone())).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{view}");
    assert_eq!(
        (view["priority"].clone(), view["fairness_key"].clone()),
        (json!(0), json!("tenant-42"))
    );
    let id = id_of(&view);
    // The same body replays; another priority or key under the same idempotency key conflicts.
    let (status, again) = app.send(post("p-1", body)).await;
    assert_eq!((status, id_of(&again)), (StatusCode::ACCEPTED, id));
    for other in [
        json!({"task_name": "run_agent", "payload": 1, "priority": 1, "fairness_key": "tenant-42"}),
        json!({"task_name": "run_agent", "payload": 1, "priority": 0}),
        json!({"task_name": "run_agent", "payload": 1, "fairness_key": "tenant-42"}),
    ] {
        let (status, err) = app.send(post("p-1", other)).await;
        assert_eq!(status, StatusCode::CONFLICT, "{err}");
    }
    // An explicit priority 5 is the same submission as none.
    let plain = json!({"task_name": "run_agent", "payload": 2});
    let (_, first) = app.send(post("p-2", plain)).await;
    let (status, five) = app
        .send(post(
            "p-2",
            json!({"task_name": "run_agent", "payload": 2, "priority": 5}),
        ))
        .await;
    assert_eq!(
        (status, id_of(&five)),
        (StatusCode::ACCEPTED, id_of(&first))
    );
    let (status, got) = app
        .send(req(Method::GET, &format!("/v1/executions/{id}"), None).empty())
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        (got["priority"].clone(), got["fairness_key"].clone()),
        (json!(0), json!("tenant-42"))
    );
}

#[tokio::test]
async fn list_pages_and_filters() {
    let app = TestApp::start(single_settings()).await;
    let mut ids = Vec::new();
    for i in 0..5 {
        let task = if i % 2 == 0 { "echo" } else { "run_agent" };
        ids.push(app.submit(None, &format!("k{i}"), task, json!(i)).await["id"].clone());
    }
    let last = app.submit(None, "k5", "echo", json!(5)).await;
    let cancel = format!("/v1/executions/{}/cancel", id_of(&last));
    app.send(req(Method::POST, &cancel, None).empty()).await;
    ids.push(last["id"].clone());

    // Pages of 2, newest first, no duplicates or gaps.
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let uri = match &cursor {
            None => "/v1/executions?limit=2".to_owned(),
            Some(c) => format!("/v1/executions?limit=2&cursor={c}"),
        };
        let (status, page) = app.send(req(Method::GET, &uri, None).empty()).await;
        assert_eq!(status, StatusCode::OK, "{page}");
        let items = page["items"].as_array().expect("items");
        assert!(items.len() <= 2);
        seen.extend(items.iter().map(|i| i["id"].clone()));
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
    }
    ids.reverse();
    assert_eq!(seen, ids);

    let list = |q: &'static str| req(Method::GET, q, None).empty();
    let (_, page) = app.send(list("/v1/executions?task_name=run_agent")).await;
    assert_eq!(page["items"].as_array().map(Vec::len), Some(2));
    let (_, page) = app.send(list("/v1/executions?status=cancelled")).await;
    assert_eq!(page["items"][0]["id"], last["id"]);
    assert_eq!(page["items"].as_array().map(Vec::len), Some(1));
    let (_, page) = app
        .send(list(
            "/v1/executions?task_name=echo&status=queued&limit=200",
        ))
        .await;
    assert_eq!(page["items"].as_array().map(Vec::len), Some(3));
    assert_eq!(page["next_cursor"], Value::Null);
    let (_, page) = app.send(list("/v1/executions")).await;
    assert_eq!(page["items"].as_array().map(Vec::len), Some(6));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_readiness_and_openapi() {
    let app = TestApp::start(single_settings()).await;
    let (status, body) = app.send(req(Method::GET, "/healthz", None).empty()).await;
    assert_eq!((status, body), (StatusCode::OK, json!({"status": "ok"})));
    let (status, _) = app.send(req(Method::GET, "/readyz", None).empty()).await;
    assert_eq!(status, StatusCode::OK);

    let (status, doc) = app
        .send(req(Method::GET, "/openapi.json", None).empty())
        .await;
    assert_eq!(status, StatusCode::OK);
    assert!(doc["openapi"].as_str().is_some_and(|v| v.starts_with("3.")));
    for path in [
        "/v1/executions",
        "/v1/executions/{id}",
        "/v1/executions/{id}/cancel",
        "/v1/executions/{id}/result",
        "/healthz",
        "/readyz",
    ] {
        assert!(doc["paths"].get(path).is_some(), "{path} missing");
    }
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );

    // Unknown routes and methods: JSON errors.
    let (status, err) = app.send(req(Method::GET, "/nope", None).empty()).await;
    assert_eq!(
        (status, err["code"].as_str()),
        (StatusCode::NOT_FOUND, Some("not_found"))
    );
    let (status, err) = app
        .send(req(Method::DELETE, "/v1/executions", None).empty())
        .await;
    assert_eq!(
        (status, err["code"].as_str()),
        (StatusCode::METHOD_NOT_ALLOWED, Some("method_not_allowed"))
    );

    // Tables gone → not ready, without internals in the body.
    let mut c = app.pool.get_conn().await.expect("conn");
    c.query_drop(format!("DROP TABLE `{}`", app.backend.tables().attempts))
        .await
        .expect("drop attempts");
    drop(c);
    let (status, err) = app.send(req(Method::GET, "/readyz", None).empty()).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(err["code"], "backend_unavailable");
    assert!(!err.to_string().contains(&app.db.name), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_requests_by_route_template_and_status() {
    use http_body_util::BodyExt;
    use tower::ServiceExt;
    let app = TestApp::start(single_settings()).await;
    let body = json!({"task_name": "run_agent", "payload": 1});
    let (status, view) = app
        .send(
            req(Method::POST, "/v1/executions", None)
                .header("Idempotency-Key", "m-1")
                .json(&body),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let id = id_of(&view);
    // A replay (same key, same body) and a conflict (same key, other body).
    let (status, _) = app
        .send(
            req(Method::POST, "/v1/executions", None)
                .header("Idempotency-Key", "m-1")
                .json(&body),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let (status, _) = app
        .send(
            req(Method::POST, "/v1/executions", None)
                .header("Idempotency-Key", "m-1")
                .json(&json!({"task_name": "run_agent", "payload": 2})),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT);
    for _ in 0..2 {
        let (status, _) = app
            .send(req(Method::GET, &format!("/v1/executions/{id}"), None).empty())
            .await;
        assert_eq!(status, StatusCode::OK);
    }
    let missing = uuid::Uuid::new_v4();
    let (status, _) = app
        .send(req(Method::GET, &format!("/v1/executions/{missing}"), None).empty())
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = app.send(req(Method::GET, "/nope", None).empty()).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    let resp = app
        .router
        .clone()
        .oneshot(req(Method::GET, "/metrics", None).empty())
        .await
        .expect("infallible router");
    assert_eq!(resp.status(), StatusCode::OK);
    let bytes = resp.into_body().collect().await.expect("body").to_bytes();
    let text = String::from_utf8_lossy(&bytes);
    for line in [
        r#"onestep_api_requests_total{method="POST",route="/v1/executions",status="202"} 2"#,
        r#"onestep_api_requests_total{method="POST",route="/v1/executions",status="409"} 1"#,
        r#"onestep_api_submits_total{outcome="created"} 1"#,
        r#"onestep_api_submits_total{outcome="replayed"} 1"#,
        r#"onestep_api_submits_total{outcome="conflict"} 1"#,
        r#"onestep_api_requests_total{method="GET",route="/v1/executions/{id}",status="200"} 2"#,
        r#"onestep_api_requests_total{method="GET",route="/v1/executions/{id}",status="404"} 1"#,
        r#"onestep_api_requests_total{method="GET",route="unmatched",status="404"} 1"#,
        r#"onestep_api_request_duration_seconds_count{method="GET",route="/v1/executions/{id}"} 3"#,
        // The sampled gauge: the one execution, queued.
        r#"onestep_executions{namespace="local",task="run_agent",status="queued"} 1"#,
    ] {
        assert!(text.contains(line), "missing {line:?} in:\n{text}");
    }
    assert!(
        text.contains("onestep_executions_sampled_timestamp_seconds "),
        "{text}"
    );
    // A second execution within the sample interval: the gauge is not re-read yet.
    let (status, _) = app
        .send(
            req(Method::POST, "/v1/executions", None)
                .header("Idempotency-Key", "m-2")
                .json(&json!({"task_name": "run_agent", "payload": 3})),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let resp = app
        .router
        .clone()
        .oneshot(req(Method::GET, "/metrics", None).empty())
        .await
        .expect("infallible router");
    let bytes = resp.into_body().collect().await.expect("body").to_bytes();
    let again = String::from_utf8_lossy(&bytes);
    assert!(
        again.contains(
            r#"onestep_executions{namespace="local",task="run_agent",status="queued"} 1"#
        ),
        "sampled at most every 15 s:\n{again}"
    );
    assert!(
        !text.contains(&id.to_string()),
        "no execution id in labels:\n{text}"
    );
}

#[tokio::test]
async fn keys_show_each_tenants_busiest_fairness_keys_only() {
    let app = TestApp::start(tenant_settings()).await;
    let post = |token: &'static str, key: String, body: serde_json::Value| {
        req(Method::POST, "/v1/executions", Some(token))
            .header("Idempotency-Key", &key)
            .json(&body)
    };
    for i in 0..3 {
        let body = json!({"task_name": "run_agent", "payload": i, "fairness_key": "tenant-42"});
        let (status, v) = app.send(post(TOKEN_A, format!("a-{i}"), body)).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{v}");
    }
    let body = json!({"task_name": "echo", "payload": 1});
    let (status, _) = app.send(post(TOKEN_A, "a-plain".into(), body)).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let body = json!({"task_name": "echo", "payload": 1, "fairness_key": "b-secret"});
    let (status, _) = app.send(post(TOKEN_B, "b-1".into(), body)).await;
    assert_eq!(status, StatusCode::ACCEPTED);

    let (status, keys) = app
        .send(req(Method::GET, "/v1/keys", Some(TOKEN_A)).empty())
        .await;
    assert_eq!(status, StatusCode::OK, "{keys}");
    let ns = keys["namespace"].as_str().unwrap_or_default().to_owned();
    assert_eq!(
        keys["items"],
        json!([
            {"task_name": "run_agent", "fairness_key": "tenant-42", "waiting": 3, "running": 0},
            {"task_name": "echo", "fairness_key": ns, "waiting": 1, "running": 0},
        ]),
        "busiest first; a submit without a key is its namespace's"
    );
    assert_eq!(keys["truncated"], json!(false));
    assert!(!keys.to_string().contains("b-secret"), "{keys}");

    let (status, cut) = app
        .send(req(Method::GET, "/v1/keys?limit=1", Some(TOKEN_A)).empty())
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        (
            cut["items"].as_array().map(Vec::len),
            cut["truncated"].clone()
        ),
        (Some(1), json!(true))
    );

    for bad in ["0", "1001", "x"] {
        let (status, err) = app
            .send(req(Method::GET, &format!("/v1/keys?limit={bad}"), Some(TOKEN_A)).empty())
            .await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{err}");
        assert!(
            err["message"]
                .as_str()
                .unwrap_or_default()
                .contains("limit must be an integer from 1 to 1000"),
            "{err}"
        );
    }
    let (status, _) = app.send(req(Method::GET, "/v1/keys", None).empty()).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}
