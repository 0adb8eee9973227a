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
