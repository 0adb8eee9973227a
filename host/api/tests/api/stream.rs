//! `GET /v1/executions/{id}/events` (docs/http-api.md#stream) through the router on a real
//! MariaDB: the events of a cancelled execution in order, an exact resume from an event id, the
//! namespace rule, malformed ids, the stream cap (429) and the stream's maximum duration.

use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Method, StatusCode};
use futures::StreamExt;
use serde_json::{Value, json};
use sse_stream::SseStream;
use tower::ServiceExt;

use crate::support::{TOKEN_A, TOKEN_B, TestApp, id_of, req, single_settings, tenant_settings};

/// An open stream's events.
struct Events(SseStream<Body>);

impl Events {
    async fn open(app: &TestApp, id: &str, token: Option<&str>, last: Option<&str>) -> Events {
        let mut r = req(Method::GET, &format!("/v1/executions/{id}/events"), token);
        if let Some(last) = last {
            r = r.header("last-event-id", last);
        }
        let resp = app
            .router
            .clone()
            .oneshot(r.empty())
            .await
            .expect("infallible router");
        assert_eq!(resp.status(), StatusCode::OK);
        let ct = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        assert_eq!(ct, "text/event-stream");
        Events(SseStream::new(resp.into_body()))
    }

    /// The next event as (name, id, data); `None` when the server closed the stream.
    async fn next(&mut self) -> Option<(String, Option<String>, Value)> {
        loop {
            let sse = tokio::time::timeout(Duration::from_secs(20), self.0.next())
                .await
                .expect("an event within 20 s")?
                .expect("a well-formed stream");
            if let Some(name) = sse.event {
                let data =
                    serde_json::from_str(sse.data.as_deref().unwrap_or("null")).expect("JSON data");
                return Some((name, sse.id, data));
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_shows_each_change_then_ends_and_resumes_exactly() {
    let mut settings = single_settings();
    settings.api.allowed_tasks.clear();
    let app = TestApp::start(settings).await;
    let view = app.submit(None, "s-1", "t-stream", json!({"n": 1})).await;
    let id = id_of(&view).to_string();

    let mut events = Events::open(&app, &id, None, None).await;
    let (name, first_id, data) = events.next().await.expect("the first event");
    assert_eq!(
        (name.as_str(), data["status"].as_str()),
        ("status", Some("queued"))
    );
    assert_eq!(data["id"].as_str(), Some(id.as_str()));
    let first_id = first_id.expect("a status event has an id");

    // A cancel moves the version: the stream shows it (within the wait poller's 100 ms), then
    // ends.
    let (status, _) = app
        .send(req(Method::POST, &format!("/v1/executions/{id}/cancel"), None).empty())
        .await;
    assert_eq!(status, StatusCode::OK);
    let (name, cancelled_id, data) = events.next().await.expect("the cancel");
    assert_eq!(
        (name.as_str(), data["status"].as_str()),
        ("status", Some("cancelled"))
    );
    let (name, end_id, data) = events.next().await.expect("the end");
    assert_eq!(name, "end");
    assert_eq!(end_id, None, "the end event has no id of its own");
    assert_eq!(
        data,
        json!({"execution_id": id, "reason": "terminal", "status": "cancelled"})
    );
    assert!(events.next().await.is_none(), "the server closes after end");

    // Resuming after the first event gives the rest and nothing else; after the last, only end.
    let mut resumed = Events::open(&app, &id, None, Some(&first_id)).await;
    let (name, again_id, data) = resumed.next().await.expect("the cancel again");
    assert_eq!(
        (name.as_str(), data["status"].as_str()),
        ("status", Some("cancelled"))
    );
    assert_eq!(again_id, cancelled_id);
    assert_eq!(resumed.next().await.map(|e| e.0).as_deref(), Some("end"));
    let last = cancelled_id.expect("id");
    let mut resumed = Events::open(&app, &id, None, Some(&last)).await;
    assert_eq!(resumed.next().await.map(|e| e.0).as_deref(), Some("end"));
    assert!(resumed.next().await.is_none());

    // A malformed id or Last-Event-ID is 422; an unknown execution 404.
    let (status, body) = app
        .send(req(Method::GET, "/v1/executions/nope/events", None).empty())
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    for bad in ["x", "1.2.3", "1.2.3.4.5.6.7", "-5.0.0.0.0.0"] {
        let (status, body) = app
            .send(
                req(Method::GET, &format!("/v1/executions/{id}/events"), None)
                    .header("last-event-id", bad)
                    .empty(),
            )
            .await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{bad}: {body}");
        assert!(
            body["message"]
                .as_str()
                .unwrap_or_default()
                .contains("Last-Event-ID must be the id of an event"),
            "{bad}: {body}"
        );
    }
    let missing = uuid::Uuid::new_v4();
    let (status, body) = app
        .send(
            req(
                Method::GET,
                &format!("/v1/executions/{missing}/events"),
                None,
            )
            .empty(),
        )
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::NOT_FOUND, Some("not_found"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_are_per_namespace_capped_and_bounded_in_time() {
    let mut settings = tenant_settings();
    settings.api.allowed_tasks.clear();
    settings.api.max_streams = 2;
    settings.api.max_stream_s = 1;
    let app = TestApp::start(settings).await;
    let view = app
        .submit(Some(TOKEN_A), "s-2", "t-stream", json!({}))
        .await;
    let id = id_of(&view).to_string();

    // Another tenant's execution is 404, as GET answers; no token is 401.
    let (status, _) = app
        .send(
            req(
                Method::GET,
                &format!("/v1/executions/{id}/events"),
                Some(TOKEN_B),
            )
            .empty(),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = app
        .send(req(Method::GET, &format!("/v1/executions/{id}/events"), None).empty())
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    // Two streams are open; a third is refused with 429 until one closes.
    let started = Instant::now();
    let mut one = Events::open(&app, &id, Some(TOKEN_A), None).await;
    let mut two = Events::open(&app, &id, Some(TOKEN_A), None).await;
    for s in [&mut one, &mut two] {
        let (name, _, data) = s.next().await.expect("status");
        assert_eq!(
            (name.as_str(), data["status"].as_str()),
            ("status", Some("queued"))
        );
    }
    let (status, body) = app
        .send(
            req(
                Method::GET,
                &format!("/v1/executions/{id}/events"),
                Some(TOKEN_A),
            )
            .empty(),
        )
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::TOO_MANY_REQUESTS, Some("too_many_streams")),
        "{body}"
    );

    // The execution stays queued: each stream is closed after api.max_stream_s, without end.
    assert!(one.next().await.is_none());
    assert!(two.next().await.is_none());
    let lasted = started.elapsed();
    assert!(
        lasted >= Duration::from_millis(900) && lasted < Duration::from_secs(10),
        "closed after {lasted:?}"
    );
    // Their permits are back.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut three = Events::open(&app, &id, Some(TOKEN_A), None).await;
    assert_eq!(three.next().await.map(|e| e.0).as_deref(), Some("status"));
}
