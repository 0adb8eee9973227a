//! Quotas at submit (docs/http-api.md#quotas): over `api.quotas`, a new submit answers `429
//! quota_exceeded` with `Retry-After` and a `quota` object; the replay of an accepted submit
//! still answers 202; a batch answers 429 per item; every 202 is in the table and nothing else.

use axum::http::{Method, StatusCode};
use onestep_api::ApiSettings;
use onestep_core::quota::{QuotaSettings, SubmitQuota};
use serde_json::json;
use tower::ServiceExt;

use crate::support::{AppSettings, TestApp, id_of, req, single_settings};

fn quota_settings(max_queued: u32, per_key: Option<u32>) -> AppSettings {
    let base = single_settings();
    AppSettings {
        api: ApiSettings {
            quotas: Some(QuotaSettings {
                default: SubmitQuota {
                    max_queued: Some(max_queued),
                    max_queued_per_key: per_key,
                },
                retry_after_s: 7,
                ..QuotaSettings::default()
            }),
            ..base.api
        },
        ..base
    }
}

#[tokio::test]
async fn quotas_answer_429_with_retry_after_and_lose_no_accepted_submit() {
    let app = TestApp::start(quota_settings(3, None)).await;
    let mut accepted = Vec::new();
    for i in 0..3 {
        let v = app.submit(None, &format!("k{i}"), "echo", json!(i)).await;
        accepted.push(id_of(&v));
    }
    // Over the quota: 429, Retry-After, the quota named.
    let request = req(Method::POST, "/v1/executions", None)
        .header("idempotency-key", "k3")
        .json(&json!({"task_name": "echo", "payload": 3}));
    let resp = app.router.clone().oneshot(request).await.expect("router");
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(resp.headers()["retry-after"], "7");
    let (status, body) = app
        .send(
            req(Method::POST, "/v1/executions", None)
                .header("idempotency-key", "k3")
                .json(&json!({"task_name": "echo", "payload": 3})),
        )
        .await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert_eq!(body["code"], "quota_exceeded");
    assert_eq!(
        body["quota"],
        json!({"name": "max_queued", "limit": 3, "namespace": "local", "retry_after_s": 7})
    );
    let message = body["message"].as_str().expect("message");
    assert!(
        message.contains("namespace \"local\"") && message.contains("max_queued"),
        "{message}"
    );
    // The replay of an accepted submit still answers 202 with the same execution.
    let again = app.submit(None, "k0", "echo", json!(0)).await;
    assert_eq!(id_of(&again), accepted[0]);
    // A batch: the replay replays, the new items answer 429 each.
    let (status, body) = app
        .send(
            req(Method::POST, "/v1/executions:batch", None).json(&json!({"items": [
                {"idempotency_key": "k1", "task_name": "echo", "payload": 1},
                {"idempotency_key": "b1", "task_name": "echo", "payload": "b1"},
                {"idempotency_key": "b2", "task_name": "echo", "payload": "b2"},
            ]})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let items = body["items"].as_array().expect("items");
    assert_eq!(items[0]["status"], 200);
    assert_eq!(id_of(&items[0]["execution"]), accepted[1]);
    for (i, item) in items.iter().enumerate().skip(1) {
        assert_eq!(item["status"], 429, "{item}");
        assert_eq!(item["error"]["code"], "quota_exceeded");
        assert_eq!(item["error"]["quota"]["retry_after_s"], 7);
        assert!(
            item["error"]["message"]
                .as_str()
                .expect("message")
                .starts_with(&format!("items[{i}]: quota exceeded")),
            "{item}"
        );
    }
    // Nothing lost, nothing extra: the table holds exactly the accepted executions.
    assert_eq!(app.count_rows().await, 3);
    for id in &accepted {
        let (status, v) = app
            .send(req(Method::GET, &format!("/v1/executions/{id}"), None).empty())
            .await;
        assert_eq!(status, StatusCode::OK, "{v}");
    }
    // Refusals are counted by namespace and quota (an operate caller: no tokens here).
    let (status, _, text) = app
        .send_text(req(Method::GET, "/metrics", None).empty())
        .await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        text.contains(
            "onestep_api_quota_refusals_total{namespace=\"local\",quota=\"max_queued\"} 4"
        ),
        "{text}"
    );
    assert!(
        text.contains("onestep_api_submits_total{outcome=\"quota_exceeded\"} 2"),
        "{text}"
    );
}

#[tokio::test]
async fn a_batch_admits_in_order_up_to_the_key_quota() {
    let app = TestApp::start(quota_settings(100, Some(2))).await;
    let (status, body) = app
        .send(
            req(Method::POST, "/v1/executions:batch", None).json(&json!({"items": [
                {"idempotency_key": "a1", "task_name": "echo", "payload": 1, "fairness_key": "a"},
                {"idempotency_key": "b1", "task_name": "echo", "payload": 2, "fairness_key": "b"},
                {"idempotency_key": "a2", "task_name": "echo", "payload": 3, "fairness_key": "a"},
                {"idempotency_key": "a3", "task_name": "echo", "payload": 4, "fairness_key": "a"},
                {"idempotency_key": "a1", "task_name": "echo", "payload": 1, "fairness_key": "a"},
            ]})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let statuses: Vec<u64> = body["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| i["status"].as_u64().expect("status"))
        .collect();
    assert_eq!(statuses, [202, 202, 202, 429, 200]);
    assert_eq!(
        body["items"][3]["error"]["quota"],
        json!({"name": "max_queued_per_key", "limit": 2, "namespace": "local",
               "fairness_key": "a", "retry_after_s": 7})
    );
    assert_eq!(app.count_rows().await, 3);
}
