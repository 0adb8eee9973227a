//! `POST /v1/executions:batch` (docs/http-api.md#batch-submit): per-item answers, invalid items
//! write nothing, replays and conflicts as for single submits, bounds on the item count.

use axum::http::{Method, StatusCode};
use serde_json::{Value, json};

use crate::support::{TestApp, req, single_settings};

async fn batch(app: &TestApp, body: &Value) -> (StatusCode, Value) {
    app.send(req(Method::POST, "/v1/executions:batch", None).json(body))
        .await
}

async fn listed(app: &TestApp) -> usize {
    let (status, page) = app
        .send(req(Method::GET, "/v1/executions?limit=200", None).empty())
        .await;
    assert_eq!(status, StatusCode::OK, "{page}");
    page["items"].as_array().map_or(0, Vec::len)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_item_answers_for_itself_and_invalid_items_write_nothing() {
    let mut settings = single_settings();
    settings.api.max_body_bytes = 1 << 20;
    let app = TestApp::start(settings).await;
    let earlier = app.submit(None, "k-earlier", "echo", json!({"n": 0})).await;

    let (status, body) = batch(
        &app,
        &json!({"items": [
            {"idempotency_key": "k-1", "task_name": "echo", "payload": {"n": 1}},
            {"idempotency_key": "k-earlier", "task_name": "echo", "payload": {"n": 0}},
            {"idempotency_key": "k-earlier", "task_name": "echo", "payload": {"n": 99}},
            {"idempotency_key": "k-2", "payload": {"n": 2}},
            {"idempotency_key": "k-3", "task_name": "not_allowed", "payload": 3},
            "not an object",
            {"idempotency_key": "", "task_name": "echo", "payload": 4},
            {"idempotency_key": "k-5", "task_name": "echo", "payload": 5, "delay_s": -1},
            {"idempotency_key": "k-6", "task_name": "run_agent", "payload": {"n": 6},
             "metadata": {"tenant": "t-1"}, "expires_at": "2099-01-01T00:00:00+08:00"},
            {"idempotency_key": "k-1", "task_name": "echo", "payload": {"n": 1}}
        ]}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let items = body["items"].as_array().expect("items").clone();
    let statuses: Vec<u64> = items
        .iter()
        .map(|i| i["status"].as_u64().unwrap_or(0))
        .collect();
    assert_eq!(
        statuses,
        [202, 200, 409, 422, 422, 422, 422, 422, 202, 200],
        "{body}"
    );
    assert_eq!(
        items[1]["execution"]["id"], earlier["id"],
        "a replay answers the earlier execution"
    );
    assert_eq!(
        items[9]["execution"]["id"], items[0]["execution"]["id"],
        "a key repeated in the batch is one execution"
    );
    assert_eq!(items[2]["error"]["code"], "conflict");
    assert_eq!(items[4]["error"]["code"], "task_not_allowed");
    for (i, item) in items.iter().enumerate().filter(|(_, i)| i["status"] == 422) {
        let message = item["error"]["message"].as_str().unwrap_or_default();
        assert!(message.starts_with(&format!("items[{i}]: ")), "{item}");
        assert!(item.get("execution").is_none(), "{item}");
    }
    assert!(
        items[3]["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("task_name"),
        "{}",
        items[3]
    );
    assert!(
        items[7]["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("delay_s"),
        "{}",
        items[7]
    );
    assert_eq!(items[8]["execution"]["metadata"]["tenant"], "t-1");
    assert_eq!(items[8]["execution"]["status"], "queued");
    // The earlier one plus the two created; nothing of the invalid items.
    assert_eq!(listed(&app).await, 3);

    // The same batch again: every valid item is now a replay, nothing new is written.
    let (status, again) = batch(
        &app,
        &json!({"items": [
            {"idempotency_key": "k-1", "task_name": "echo", "payload": {"n": 1}},
            {"idempotency_key": "k-6", "task_name": "run_agent", "payload": {"n": 6},
             "metadata": {"tenant": "t-1"}, "expires_at": "2099-01-01T00:00:00+08:00"}
        ]}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(again["items"][0]["status"], 200);
    assert_eq!(again["items"][1]["status"], 200);
    assert_eq!(
        again["items"][1]["execution"]["id"],
        items[8]["execution"]["id"]
    );
    assert_eq!(listed(&app).await, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_holds_1_to_1000_items() {
    let mut settings = single_settings();
    settings.api.max_body_bytes = 1 << 20;
    let app = TestApp::start(settings).await;
    for (body, want) in [
        (
            json!({"items": []}),
            "items must hold 1 to 1000 submissions, got 0",
        ),
        (
            json!({"items": vec![json!({"idempotency_key": "k", "task_name": "echo", "payload": 1}); 1001]}),
            "items must hold 1 to 1000 submissions, got 1001",
        ),
    ] {
        let (status, err) = batch(&app, &body).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{err}");
        assert_eq!(err["message"], want);
    }
    let (status, err) = batch(&app, &json!({"items": {"not": "a list"}})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{err}");
    assert_eq!(listed(&app).await, 0);

    // 1,000 distinct items: all created in one request.
    let items: Vec<Value> = (0..1000)
        .map(|i| json!({"idempotency_key": format!("bulk-{i}"), "task_name": "echo", "payload": i}))
        .collect();
    let (status, body) = batch(&app, &json!({ "items": items })).await;
    assert_eq!(status, StatusCode::OK);
    let created = body["items"]
        .as_array()
        .map_or(0, |a| a.iter().filter(|i| i["status"] == 202).count());
    assert_eq!(created, 1000);
}

/// Batch items take `priority` and `fairness_key` as a single submit does
/// (docs/semantics.md#priority-and-fairness-key): kept, shown, checked per item.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn items_take_priority_and_fairness_key() {
    let app = TestApp::start(single_settings()).await;
    let (status, body) = batch(
        &app,
        &json!({"items": [
            {"idempotency_key": "p-1", "task_name": "echo", "payload": 1, "priority": 0,
             "fairness_key": "tenant-7"},
            {"idempotency_key": "p-2", "task_name": "echo", "payload": 2, "priority": 12},
            {"idempotency_key": "p-3", "task_name": "echo", "payload": 3, "fairness_key": "a b"},
            {"idempotency_key": "p-4", "task_name": "echo", "payload": 4}
        ]}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let items = body["items"].as_array().expect("items");
    let statuses: Vec<u64> = items
        .iter()
        .map(|i| i["status"].as_u64().unwrap_or(0))
        .collect();
    assert_eq!(statuses, [202, 422, 422, 202], "{body}");
    assert_eq!(items[0]["execution"]["priority"], 0);
    assert_eq!(items[0]["execution"]["fairness_key"], "tenant-7");
    assert_eq!(items[3]["execution"]["priority"], 5);
    assert_eq!(items[3]["execution"]["fairness_key"], "local");
    let message = |i: usize| {
        items[i]["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    assert!(
        message(1).contains("priority must be an integer from 0 to 9 (got 12)"),
        "{}",
        message(1)
    );
    assert!(
        message(2).contains("fairness_key may contain only"),
        "{}",
        message(2)
    );
}
