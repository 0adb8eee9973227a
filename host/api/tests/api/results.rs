//! `GET /v1/executions/{id}/result` in every status, driven through the real worker-side
//! operations of the backend (claim, complete), and cancel of a running execution.

use axum::http::{Method, StatusCode};
use onestep_core::ports::LeaseStore;
use onestep_core::request::ClaimRequest;
use onestep_core::{Completion, ErrorObject, ExecutionLease};
use serde_json::{Value, json};

use crate::support::{TestApp, id_of, req, single_settings};

async fn claim_one(app: &TestApp, task: &str) -> Vec<ExecutionLease> {
    app.backend
        .claim(&ClaimRequest {
            namespaces: onestep_core::request::NamespaceScope::One("local".into()),
            fair: Default::default(),
            task_names: vec![task.into()],
            limit: 1,
            lease_duration_s: 60.0,
            worker_id: "test-worker".into(),
            max_running: None,
        })
        .await
        .expect("claim")
}

async fn result(app: &TestApp, view: &Value) -> (StatusCode, Value) {
    let path = format!("/v1/executions/{}/result", id_of(view));
    app.send(req(Method::GET, &path, None).empty()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn result_in_every_status() {
    let mut settings = single_settings();
    settings.api.allowed_tasks.clear();
    let app = TestApp::start(settings).await;

    // queued → 409 not_ready
    let ok = app.submit(None, "ok", "t-ok", json!({"n": 1})).await;
    let (status, err) = result(&app, &ok).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(err["code"], "not_ready");
    assert_eq!(err["status"], "queued");
    assert_eq!(err["execution_id"], ok["id"]);

    // running → 409 not_ready; succeeded → 200 with the result
    let lease = claim_one(&app, "t-ok").await.pop().expect("lease");
    let (status, err) = result(&app, &ok).await;
    assert_eq!(
        (status, err["status"].as_str()),
        (StatusCode::CONFLICT, Some("running"))
    );
    app.backend
        .complete(
            &lease.lease_ref(),
            &Completion::succeeded(json!({"answer": 42})),
        )
        .await
        .expect("complete");
    let (status, body) = result(&app, &ok).await;
    assert_eq!(
        (status, body),
        (StatusCode::OK, json!({"result": {"answer": 42}}))
    );
    let (_, view) = app
        .send(req(Method::GET, &format!("/v1/executions/{}", id_of(&ok)), None).empty())
        .await;
    assert_eq!(
        (view["status"].as_str(), view["attempts"].as_u64()),
        (Some("succeeded"), Some(1))
    );
    assert!(view["started_at"].is_string() && view["finished_at"].is_string());

    // failed → 422 with the error object
    let bad = app.submit(None, "bad", "t-bad", json!(null)).await;
    let lease = claim_one(&app, "t-bad").await.pop().expect("lease");
    let error = ErrorObject::new("error", "HandlerError", Some("handler"));
    app.backend
        .complete(&lease.lease_ref(), &Completion::failed(error))
        .await
        .expect("complete");
    let (status, err) = result(&app, &bad).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(err["code"], "failed");
    assert_eq!(
        err["error"],
        json!({"kind": "error", "exception_type": "HandlerError", "stage": "handler",
               "backend": null, "operation": null, "connector_kind": null})
    );

    // Without diagnostics the 422 still names the newest attempt, without a message.
    assert_eq!(err["last_attempt"]["attempt"], 1, "{err}");
    assert_eq!(err["last_attempt"]["status"], "failed");
    assert!(err["last_attempt"]["message"].is_null());

    // cancelled (from queued) → 409 cancelled, with the canceller's reason
    let gone = app.submit(None, "gone", "t-gone", json!(1)).await;
    app.send(
        req(
            Method::POST,
            &format!("/v1/executions/{}/cancel", id_of(&gone)),
            None,
        )
        .json(&json!({"reason": "customer closed the ticket"})),
    )
    .await;
    let (status, err) = result(&app, &gone).await;
    assert_eq!(
        (status, err["code"].as_str()),
        (StatusCode::CONFLICT, Some("cancelled"))
    );
    assert_eq!(err["cancel_reason"], "customer closed the ticket");
    let (_, view) = app
        .send(
            req(
                Method::GET,
                &format!("/v1/executions/{}", id_of(&gone)),
                None,
            )
            .empty(),
        )
        .await;
    assert_eq!(
        view["cancel_reason"], "customer closed the ticket",
        "{view}"
    );
    assert!(view.get("last_attempt").is_none(), "never claimed: {view}");
    // The dashboard's detail shows the reason too.
    let (status, _, detail) = app
        .send_text(
            req(
                Method::GET,
                &format!("/ui/fragments/executions/{}", id_of(&gone)),
                None,
            )
            .empty(),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        detail.contains("<td id=\"cancel-reason\">customer closed the ticket</td>"),
        "{detail}"
    );

    // running + cancel → cancel_requested (still not ready)
    let long = app.submit(None, "long", "t-long", json!(1)).await;
    claim_one(&app, "t-long").await.pop().expect("lease");
    let (status, view) = app
        .send(
            req(
                Method::POST,
                &format!("/v1/executions/{}/cancel", id_of(&long)),
                None,
            )
            .empty(),
        )
        .await;
    assert_eq!(
        (status, view["status"].as_str()),
        (StatusCode::OK, Some("cancel_requested"))
    );
    assert!(view["cancel_requested_at"].is_string());
    let (status, err) = result(&app, &long).await;
    assert_eq!(
        (status, err["status"].as_str()),
        (StatusCode::CONFLICT, Some("cancel_requested"))
    );

    // expired (expires_at in the past; the next claim expires it) → 410
    let body = json!({"task_name": "t-old", "payload": 1, "expires_at": "2000-01-01T00:00:00Z"});
    let (status, old) = app
        .send(
            req(Method::POST, "/v1/executions", None)
                .header("Idempotency-Key", "old")
                .json(&body),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    assert!(claim_one(&app, "t-old").await.is_empty());
    let (status, err) = result(&app, &old).await;
    assert_eq!(
        (status, err["code"].as_str()),
        (StatusCode::GONE, Some("expired"))
    );
}

/// `?wait=S` answers as soon as the execution is terminal (here: completed by a worker while the
/// request waits), at the deadline with the current state otherwise, and refuses a malformed
/// or unbounded wait with a specific message (docs/http-api.md#waiting).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_answers_on_completion_or_at_the_deadline() {
    let mut settings = single_settings();
    settings.api.allowed_tasks.clear();
    let app = TestApp::start(settings).await;
    let view = app.submit(None, "w-1", "t-wait", json!({"n": 1})).await;
    let id = id_of(&view);

    // Still queued after a short wait: the state at the deadline.
    let (status, body) = app
        .send(req(Method::GET, &format!("/v1/executions/{id}?wait=0.2"), None).empty())
        .await;
    assert_eq!(
        (status, body["status"].as_str()),
        (StatusCode::OK, Some("queued"))
    );

    // A worker claims and completes it while the caller waits up to 60 s for the result.
    let started = std::time::Instant::now();
    let waiting = app.send(
        req(
            Method::GET,
            &format!("/v1/executions/{id}/result?wait=60"),
            None,
        )
        .empty(),
    );
    let worker = async {
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        let lease = claim_one(&app, "t-wait").await.pop().expect("lease");
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        app.backend
            .complete(
                &lease.lease_ref(),
                &Completion::succeeded(json!({"done": true})),
            )
            .await
            .expect("complete");
    };
    let ((status, body), ()) = tokio::join!(waiting, worker);
    assert_eq!(
        (status, body),
        (StatusCode::OK, json!({"result": {"done": true}}))
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(30),
        "answered on completion, not at the 60 s deadline ({:?})",
        started.elapsed()
    );

    // A terminal execution answers at once, with or without a wait.
    let (status, body) = app
        .send(req(Method::GET, &format!("/v1/executions/{id}?wait=60"), None).empty())
        .await;
    assert_eq!(
        (status, body["status"].as_str()),
        (StatusCode::OK, Some("succeeded"))
    );

    for bad in ["61", "-1", "abc", "NaN", "1e20"] {
        let (status, body) = app
            .send(
                req(
                    Method::GET,
                    &format!("/v1/executions/{id}?wait={bad}"),
                    None,
                )
                .empty(),
            )
            .await;
        assert_eq!(
            status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "wait={bad}: {body}"
        );
        assert!(
            body["message"]
                .as_str()
                .unwrap_or_default()
                .contains("wait must be a number of seconds from 0 to 60"),
            "wait={bad}: {body}"
        );
    }
}
