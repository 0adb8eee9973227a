//! `GET /v1/executions/{id}/steps` on a real MariaDB (docs/http-api.md#steps): the steps a
//! worker saved, in first-save order with size, time and attempt, without values by default;
//! `?values=true` with the values within the response's 4 MiB budget (`values_omitted` counts
//! the rest); `?key=` one step; another tenant's execution is a 404; bad ids, flags and keys
//! are 422 with the exact message. Every response is checked against the OpenAPI document.

use axum::http::{Method, StatusCode};
use onestep_core::ports::LeaseStore;
use onestep_core::request::ClaimRequest;
use onestep_core::steps::{MAX_STEP_BYTES, StepStore};
use serde_json::json;

use crate::support::{TOKEN_A, TOKEN_B, TestApp, id_of, req, single_settings, tenant_settings};

fn claim_of(namespace: &str) -> ClaimRequest {
    ClaimRequest {
        namespaces: onestep_core::request::NamespaceScope::One(namespace.into()),
        fair: Default::default(),
        task_names: vec!["run_agent".into()],
        limit: 1,
        lease_duration_s: 300.0,
        worker_id: "w-steps".into(),
        max_running: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steps_of_an_execution() {
    let app = TestApp::start(single_settings()).await;
    let view = app
        .submit(None, "k-steps", "run_agent", json!({"n": 1}))
        .await;
    let id = id_of(&view);
    let path = format!("/v1/executions/{id}/steps");

    // None yet.
    let (status, body) = app.send(req(Method::GET, &path, None).empty()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body,
        json!({"execution_id": id, "items": [], "total_bytes": 0, "steps_kept": true,
               "values_omitted": 0})
    );

    let leases = app.backend.claim(&claim_of("local")).await.expect("claim");
    let lease = leases[0].lease_ref();
    app.backend
        .save(&lease, "model-0", r#"{"reply":"hi"}"#)
        .await
        .expect("save");
    app.backend
        .save(&lease, "tool-0", "[1,2,3]")
        .await
        .expect("save");
    app.backend
        .save(&lease, "model-0", r#"{"reply":"hello"}"#)
        .await
        .expect("overwrite");

    // Without values: key, size, when, which attempt, in first-save order.
    let (status, body) = app.send(req(Method::GET, &path, None).empty()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let items = body["items"].as_array().expect("items");
    let keys: Vec<&str> = items
        .iter()
        .map(|i| i["key"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(keys, ["model-0", "tool-0"]);
    assert_eq!(items[0]["bytes"], 17);
    assert_eq!(items[1]["bytes"], 7);
    assert_eq!(body["total_bytes"], 24);
    for item in items {
        assert_eq!(item["attempt"], 1);
        assert_eq!(item["attempt_id"], json!(lease.attempt_id));
        assert!(
            item["saved_at"]
                .as_str()
                .is_some_and(|s| s.ends_with("+00:00")),
            "{item}"
        );
        assert!(item.get("value").is_none(), "no value by default: {item}");
    }

    // With values: the JSON each step saved.
    let (status, body) = app
        .send(req(Method::GET, &format!("{path}?values=true"), None).empty())
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["items"][0]["value"], json!({"reply": "hello"}));
    assert_eq!(body["items"][1]["value"], json!([1, 2, 3]));
    assert_eq!(body["values_omitted"], 0);

    // One key.
    let (status, body) = app
        .send(req(Method::GET, &format!("{path}?values=1&key=tool-0"), None).empty())
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["items"].as_array().map(Vec::len), Some(1));
    assert_eq!(body["items"][0]["key"], "tool-0");
    assert_eq!(body["items"][0]["value"], json!([1, 2, 3]));
    assert_eq!(body["total_bytes"], 7);
    let (_, body) = app
        .send(req(Method::GET, &format!("{path}?key=absent"), None).empty())
        .await;
    assert_eq!(body["items"], json!([]));

    // Exact refusals.
    for (query, message) in [
        ("values=yes", "values must be true or false, got 'yes'"),
        ("key=", "invalid step key: the key is empty"),
    ] {
        let (status, body) = app
            .send(req(Method::GET, &format!("{path}?{query}"), None).empty())
            .await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{query}: {body}");
        assert_eq!(body["message"], message, "{query}");
    }
    let long = "k".repeat(256);
    let (status, body) = app
        .send(req(Method::GET, &format!("{path}?key={long}"), None).empty())
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(
        body["message"]
            .as_str()
            .is_some_and(|m| m.contains("over the limit of 255")),
        "{body}"
    );
    let (status, body) = app
        .send(req(Method::GET, "/v1/executions/not-a-uuid/steps", None).empty())
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    let absent = uuid::Uuid::new_v4();
    let (status, body) = app
        .send(req(Method::GET, &format!("/v1/executions/{absent}/steps"), None).empty())
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(body["message"], format!("execution {absent} was not found"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_stop_at_the_response_budget() {
    let app = TestApp::start(single_settings()).await;
    let view = app
        .submit(None, "k-budget", "run_agent", json!({"n": 1}))
        .await;
    let id = id_of(&view);
    let lease = app.backend.claim(&claim_of("local")).await.expect("claim")[0].lease_ref();
    // Five of the largest values (1 MiB each): four fit the 4 MiB of one response.
    let largest = format!("\"{}\"", "x".repeat(MAX_STEP_BYTES - 2));
    for i in 0..5 {
        app.backend
            .save(&lease, &format!("page-{i}"), &largest)
            .await
            .expect("save");
    }
    let path = format!("/v1/executions/{id}/steps?values=true");
    let (status, body) = app.send(req(Method::GET, &path, None).empty()).await;
    assert_eq!(status, StatusCode::OK);
    let items = body["items"].as_array().expect("items");
    assert_eq!(items.len(), 5);
    let with_value = items.iter().filter(|i| i.get("value").is_some()).count();
    assert_eq!(with_value, 4);
    assert!(items[4].get("value").is_none());
    assert_eq!(body["values_omitted"], 1);
    assert_eq!(body["total_bytes"], 5 * MAX_STEP_BYTES as u64);
    // The omitted one, by its key.
    let (_, body) = app
        .send(req(Method::GET, &format!("{path}&key=page-4"), None).empty())
        .await;
    assert_eq!(body["values_omitted"], 0);
    assert_eq!(
        body["items"][0]["value"].as_str().map(str::len),
        Some(MAX_STEP_BYTES - 2)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_tenant_sees_no_steps() {
    let app = TestApp::start(tenant_settings()).await;
    let view = app
        .submit(Some(TOKEN_A), "k-tenant", "run_agent", json!({"n": 1}))
        .await;
    let id = id_of(&view);
    let lease = app
        .backend
        .claim(&claim_of("tenant-a"))
        .await
        .expect("claim")[0]
        .lease_ref();
    app.backend
        .save(&lease, "secret", "42")
        .await
        .expect("save");
    let path = format!("/v1/executions/{id}/steps?values=true");
    let (status, body) = app
        .send(req(Method::GET, &path, Some(TOKEN_A)).empty())
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["items"][0]["value"], 42);
    let (status, body) = app
        .send(req(Method::GET, &path, Some(TOKEN_B)).empty())
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(body["message"], format!("execution {id} was not found"));
    assert!(!body.to_string().contains("secret"));
    let (status, _) = app.send(req(Method::GET, &path, None).empty()).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}
