//! Idempotency under concurrency: 64 simultaneous POSTs with one key and body create one
//! execution; the same key with another body is a 409; nothing else is written.

use std::sync::Arc;

use axum::http::{Method, StatusCode};
use serde_json::json;

use crate::support::{TestApp, req, single_settings};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_concurrent_posts_create_one_execution() {
    let app = Arc::new(TestApp::start(single_settings()).await);
    let body = json!({"task_name": "run_agent", "payload": {"document_id": "doc-123"}, "metadata": {"a": [1, 2]}});
    let barrier = Arc::new(tokio::sync::Barrier::new(64));
    let tasks: Vec<_> = (0..64)
        .map(|_| {
            let app = Arc::clone(&app);
            let body = body.clone();
            let barrier = Arc::clone(&barrier);
            tokio::spawn(async move {
                barrier.wait().await;
                app.send(
                    req(Method::POST, "/v1/executions", None)
                        .header("Idempotency-Key", "req-concurrent-0001")
                        .json(&body),
                )
                .await
            })
        })
        .collect();
    let mut ids = std::collections::BTreeSet::new();
    for t in tasks {
        let (status, view) = t.await.expect("task");
        assert_eq!(status, StatusCode::ACCEPTED, "{view}");
        ids.insert(view["id"].as_str().expect("id").to_owned());
    }
    assert_eq!(ids.len(), 1, "{ids:?}");

    let other = json!({"task_name": "run_agent", "payload": {"document_id": "doc-999"}});
    let (status, err) = app
        .send(
            req(Method::POST, "/v1/executions", None)
                .header("Idempotency-Key", "req-concurrent-0001")
                .json(&other),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(err["code"], "conflict");
    assert_eq!(
        err["execution_id"].as_str(),
        ids.iter().next().map(String::as_str)
    );
    assert_eq!(app.count_rows().await, 1);
    assert_eq!(app.count_attempts().await, 0);
}
