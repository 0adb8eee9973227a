//! Completion webhooks through the router (docs/http-api.md#callbacks), on MariaDB: a submit's
//! callback checked against `api.callbacks` (422 `callback_not_allowed` with a specific
//! message), the outbox row written with the execution, one sender pass posting the signed
//! message to a loopback receiver, the deliveries and redeliver endpoints (their bodies checked
//! against the OpenAPI document), and the namespace scoping.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::{HeaderMap, Method, StatusCode};
use onestep_api::ApiSettings;
use onestep_api::callbacks::CallbackSender;
use onestep_core::callback::{CallbackSettings, WebhookSecret, sign};
use onestep_core::network::OriginPattern;
use serde_json::{Value, json};

use crate::support::{AppSettings, TestApp, id_of, req, single_settings};

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

type Received = Arc<Mutex<Vec<(HeaderMap, String)>>>;

async fn receiver() -> (u16, Received) {
    let got: Received = Arc::default();
    let state = got.clone();
    let app = axum::Router::new().fallback(move |headers: HeaderMap, body: String| {
        let got = state.clone();
        async move {
            got.lock().expect("lock").push((headers, body));
            StatusCode::NO_CONTENT
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (port, got)
}

fn settings(port: u16) -> (AppSettings, CallbackSettings) {
    let callbacks = CallbackSettings {
        allow: vec![OriginPattern::parse(&format!("http://127.0.0.1:{port}")).expect("origin")],
        secrets: WebhookSecret::parse_list(SECRET).expect("secret"),
        namespace_secrets: BTreeMap::new(),
        max_attempts: 2,
        first_backoff: Duration::from_secs(1),
        timeout: Duration::from_secs(5),
        progress_interval: Duration::from_secs(1),
    };
    let base = single_settings();
    let app = AppSettings {
        api: ApiSettings {
            callbacks: Some(callbacks.clone()),
            ..base.api
        },
        ..base
    };
    (app, callbacks)
}

async fn submit(app: &TestApp, key: &str, callback: Value) -> (StatusCode, Value) {
    app.send(
        req(Method::POST, "/v1/executions", None)
            .header("idempotency-key", key)
            .json(&json!({"task_name": "echo", "payload": 1, "callback": callback})),
    )
    .await
}

#[tokio::test]
async fn callbacks_are_checked_written_delivered_and_listed() {
    let (port, got) = receiver().await;
    let (app_settings, callbacks) = settings(port);
    let app = TestApp::start(app_settings).await;

    for (callback, want) in [
        (
            json!({"url": "http://127.0.0.1:1/x"}),
            "is not in api.callbacks.allow",
        ),
        (
            json!({"url": "ftp://127.0.0.1/x"}),
            "absolute http:// or https:// URL",
        ),
        (
            json!({"url": format!("http://127.0.0.1:{port}/"), "events": []}),
            "must not be empty",
        ),
        (
            json!({"url": format!("http://127.0.0.1:{port}/"), "extra": 1}),
            "unknown field",
        ),
    ] {
        let (status, body) = submit(&app, "refused", callback.clone()).await;
        assert_eq!(
            status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{callback}: {body}"
        );
        let message = body["message"].as_str().unwrap_or_default();
        assert!(message.contains(want), "{callback}: {body}");
    }
    assert_eq!(
        app.count_rows().await,
        0,
        "a refused callback writes nothing"
    );

    let url = format!("http://127.0.0.1:{port}/hook");
    let (status, view) = submit(&app, "k1", json!({"url": url})).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{view}");
    let id = id_of(&view);
    let path = format!("/v1/executions/{id}/deliveries");
    let (status, pending) = app.send(req(Method::GET, &path, None).empty()).await;
    assert_eq!(status, StatusCode::OK, "{pending}");
    assert_eq!(pending["state"], "pending");
    assert_eq!(pending["items"], json!([]));

    let sender = CallbackSender::new(
        Arc::new(app.backend.clone()),
        Arc::new(app.backend.clone()),
        callbacks,
    )
    .expect("sender");
    assert_eq!(
        sender.pass().await.expect("pass"),
        0,
        "nothing due while queued"
    );
    let (status, _) = app
        .send(req(Method::POST, &format!("/v1/executions/{id}/cancel"), None).json(&json!({})))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(sender.pass().await.expect("pass"), 1);

    let received = got.lock().expect("lock").clone();
    assert_eq!(received.len(), 1);
    let (headers, body) = &received[0];
    let h = |n: &str| headers[n].to_str().expect("header").to_owned();
    let ts: i64 = h("webhook-timestamp").parse().expect("timestamp");
    let secrets = WebhookSecret::parse_list(SECRET).expect("secret");
    assert_eq!(
        h("webhook-signature"),
        sign(&secrets, &h("webhook-id"), ts, body.as_bytes())
    );
    let payload: Value = serde_json::from_str(body).expect("json");
    assert_eq!(payload["type"], "execution.cancelled");
    assert_eq!(payload["data"]["id"], id.to_string());

    let (status, done) = app.send(req(Method::GET, &path, None).empty()).await;
    assert_eq!(status, StatusCode::OK, "{done}");
    assert_eq!(done["state"], "delivered");
    assert_eq!(done["items"][0]["status"], 204);
    assert_eq!(done["items"][0]["webhook_id"], h("webhook-id"));

    // The dashboard's detail fragment shows the section and, to an operator, the button.
    let (status, _, page) = app
        .send_text(req(Method::GET, &format!("/ui/fragments/executions/{id}"), None).empty())
        .await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains("id=\"deliveries-table\""), "{page}");
    assert!(page.contains("id=\"redeliver\""), "{page}");
    assert!(page.contains(&format!("127.0.0.1:{port}")), "{page}");

    let (status, again) = app
        .send(
            req(
                Method::POST,
                &format!("/v1/executions/{id}/deliveries:redeliver"),
                None,
            )
            .empty(),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{again}");
    assert_eq!(again["state"], "pending");
    assert_eq!(sender.pass().await.expect("pass"), 1);
    assert_eq!(got.lock().expect("lock").len(), 2);

    let (status, body) = app
        .send(
            req(
                Method::GET,
                &format!("/v1/executions/{}/deliveries", uuid::Uuid::new_v4()),
                None,
            )
            .empty(),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    // A batch item with a callback is refused on its own.
    let (status, body) = app
        .send(
            req(Method::POST, "/v1/executions:batch", None).json(&json!({"items": [
            {"task_name": "echo", "payload": 1, "idempotency_key": "b1", "callback": {"url": url}},
            {"task_name": "echo", "payload": 2, "idempotency_key": "b2"}]})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["items"][0]["status"], 422, "{body}");
    assert_eq!(body["items"][0]["error"]["code"], "callback_not_allowed");
    assert_eq!(body["items"][1]["status"], 202, "{body}");
}

#[tokio::test]
async fn without_api_callbacks_a_callback_is_refused() {
    let app = TestApp::start(single_settings()).await;
    let (status, body) = submit(&app, "k", json!({"url": "https://hooks.example.com/"})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["code"], "callback_not_allowed");
    assert!(
        body["message"]
            .as_str()
            .unwrap_or_default()
            .contains("not enabled"),
        "{body}"
    );
    assert_eq!(app.count_rows().await, 0);
}

/// `started`, `progress` and the terminal event through one sender on MariaDB: each derived
/// from the execution's durable state (the claim's `started_at`, the heartbeat's stored
/// progress, the completion), in order, one signed message each with its own stable
/// `webhook-id`, progress throttled, counted in the API's `/metrics`.
#[tokio::test]
async fn started_progress_and_terminal_are_delivered_in_order_and_counted() {
    use onestep_core::Completion;
    use onestep_core::diagnostics::{AttemptProgress, LiveDiagnostics};
    use onestep_core::ports::LeaseStore;

    let (port, got) = receiver().await;
    let (app_settings, callbacks) = settings(port);
    let app = TestApp::start(app_settings).await;
    let (status, view) = submit(
        &app,
        "ev1",
        json!({"url": format!("http://127.0.0.1:{port}/ev"),
               "events": ["started", "progress", "terminal"]}),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{view}");
    let id = id_of(&view);
    let sender = CallbackSender::new(
        Arc::new(app.backend.clone()),
        Arc::new(app.backend.clone()),
        callbacks,
    )
    .expect("sender")
    .with_metrics(app.state.webhook_metrics());
    assert_eq!(sender.pass().await.expect("pass"), 0, "queued: nothing");

    let lease = app
        .backend
        .claim(&onestep_core::request::ClaimRequest {
            namespaces: onestep_core::request::NamespaceScope::One("local".into()),
            task_names: vec!["echo".into()],
            limit: 1,
            lease_duration_s: 300.0,
            worker_id: "w".into(),
            fair: Default::default(),
            max_running: None,
        })
        .await
        .expect("claim")
        .remove(0);
    assert_eq!(sender.pass().await.expect("pass"), 1, "started");
    assert_eq!(sender.pass().await.expect("pass"), 0, "nothing new");
    let report = |done: u64| LiveDiagnostics {
        progress: Some(AttemptProgress {
            done,
            total: 4,
            note: "pages".into(),
            at: chrono::Utc::now(),
        }),
        log: None,
    };
    assert!(
        app.backend
            .record_live(&[(lease.lease_ref(), report(1))])
            .await
            .expect("live")
    );
    assert_eq!(sender.pass().await.expect("pass"), 1, "progress 1");
    app.backend
        .record_live(&[(lease.lease_ref(), report(2))])
        .await
        .expect("live");
    assert_eq!(sender.pass().await.expect("pass"), 0, "throttled (1 s)");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(sender.pass().await.expect("pass"), 1, "progress 2");
    app.backend
        .record_live(&[(lease.lease_ref(), report(3))])
        .await
        .expect("live");
    app.backend
        .complete(&lease.lease_ref(), &Completion::succeeded(json!(1)))
        .await
        .expect("complete");
    assert_eq!(
        sender.pass().await.expect("pass"),
        1,
        "terminal, not progress 3"
    );
    assert_eq!(sender.pass().await.expect("pass"), 0, "delivered");

    let received = got.lock().expect("lock").clone();
    let simple = id.simple();
    let seen: Vec<(String, String, Option<u64>)> = received
        .iter()
        .map(|(headers, body)| {
            let payload: Value = serde_json::from_str(body).expect("json");
            let ts: i64 = headers["webhook-timestamp"]
                .to_str()
                .expect("ts")
                .parse()
                .expect("ts");
            let wid = headers["webhook-id"].to_str().expect("id").to_owned();
            let secrets = WebhookSecret::parse_list(SECRET).expect("secret");
            assert_eq!(
                headers["webhook-signature"].to_str().expect("sig"),
                sign(&secrets, &wid, ts, body.as_bytes())
            );
            (
                payload["type"].as_str().expect("type").to_owned(),
                wid,
                payload["data"]["progress"]["done"].as_u64(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        vec![
            (
                "execution.started".into(),
                format!("msg_{simple}_started"),
                None
            ),
            (
                "execution.progress".into(),
                format!("msg_{simple}_progress_1"),
                Some(1)
            ),
            (
                "execution.progress".into(),
                format!("msg_{simple}_progress_2"),
                Some(2)
            ),
            (
                "execution.succeeded".into(),
                format!("msg_{simple}_terminal"),
                None
            ),
        ]
    );
    let (status, listed) = app
        .send(
            req(
                Method::GET,
                &format!("/v1/executions/{id}/deliveries"),
                None,
            )
            .empty(),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{listed}");
    assert_eq!(listed["state"], "delivered");
    let events: Vec<&str> = listed["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| i["event"].as_str().expect("event"))
        .collect();
    assert_eq!(
        events,
        vec![
            "execution.started",
            "execution.progress",
            "execution.progress",
            "execution.succeeded"
        ]
    );
    let (status, _, text) = app
        .send_text(req(Method::GET, "/metrics", None).empty())
        .await;
    assert_eq!(status, StatusCode::OK);
    for line in [
        "onestep_webhook_deliveries_total{event=\"started\",outcome=\"acknowledged\"} 1",
        "onestep_webhook_deliveries_total{event=\"progress\",outcome=\"acknowledged\"} 2",
        "onestep_webhook_deliveries_total{event=\"terminal\",outcome=\"acknowledged\"} 1",
        "onestep_webhook_delivery_duration_seconds_count{event=\"progress\"} 2",
    ] {
        assert!(text.contains(line), "no {line:?} in\n{text}");
    }
}
