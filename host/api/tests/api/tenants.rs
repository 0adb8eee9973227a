//! Bearer-token tenants: 401 without a valid token, and no way to see or touch another tenant's
//! executions (404 exactly like a missing id).

use axum::http::{Method, StatusCode};
use serde_json::json;
use tower::ServiceExt;

use crate::support::{TOKEN_A, TOKEN_B, TestApp, id_of, req, tenant_settings};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_isolate_namespaces() {
    let app = TestApp::start(tenant_settings()).await;
    let a = app
        .submit(Some(TOKEN_A), "same-key", "echo", json!("a"))
        .await;
    assert_eq!(a["namespace"], "tenant-a");
    // The same key in another tenant is another idempotency scope.
    let b = app
        .submit(Some(TOKEN_B), "same-key", "echo", json!("b"))
        .await;
    assert_eq!(b["namespace"], "tenant-b");
    assert_ne!(a["id"], b["id"]);

    let a_id = id_of(&a);
    for (method, path) in [
        (Method::GET, format!("/v1/executions/{a_id}")),
        (Method::POST, format!("/v1/executions/{a_id}/cancel")),
        (Method::GET, format!("/v1/executions/{a_id}/result")),
    ] {
        let (status, err) = app
            .send(req(method.clone(), &path, Some(TOKEN_B)).empty())
            .await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{method} {path}");
        let missing = path.replace(&a_id.to_string(), &uuid::Uuid::new_v4().to_string());
        let (_, err_missing) = app.send(req(method, &missing, Some(TOKEN_B)).empty()).await;
        assert_eq!(err["code"], err_missing["code"]);
        assert_eq!(
            err.as_object().map(|o| o.len()),
            err_missing.as_object().map(|o| o.len())
        );
    }
    // A is untouched by B's cancel.
    let (_, view) = app
        .send(
            req(
                Method::GET,
                &format!("/v1/executions/{a_id}"),
                Some(TOKEN_A),
            )
            .empty(),
        )
        .await;
    assert_eq!(view["status"], "queued");

    let (_, page) = app
        .send(req(Method::GET, "/v1/executions", Some(TOKEN_B)).empty())
        .await;
    assert_eq!(page["items"].as_array().map(Vec::len), Some(1));
    assert_eq!(page["items"][0]["id"], b["id"]);

    // No token, a wrong token, a wrong scheme → 401 with WWW-Authenticate.
    for auth in [
        None,
        Some("Bearer not-a-known-token-at-all"),
        Some(&*format!("Basic {TOKEN_A}")),
    ] {
        let mut r = axum::http::Request::builder().uri("/v1/executions");
        if let Some(v) = auth {
            r = r.header("authorization", v);
        }
        let resp = app
            .router
            .clone()
            .oneshot(r.body(axum::body::Body::empty()).expect("request"))
            .await
            .expect("router");
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED, "{auth:?}");
        assert_eq!(
            resp.headers()
                .get("www-authenticate")
                .and_then(|v| v.to_str().ok()),
            Some("Bearer")
        );
        let (status, err) = app
            .send(match auth {
                Some(v) => req(Method::GET, "/v1/executions", None)
                    .header("authorization", v)
                    .empty(),
                None => req(Method::GET, "/v1/executions", None).empty(),
            })
            .await;
        assert_eq!(
            (status, err["code"].as_str()),
            (StatusCode::UNAUTHORIZED, Some("unauthorized"))
        );
    }
    // Health, readiness and the document need no token.
    for path in ["/healthz", "/readyz", "/openapi.json"] {
        let (status, _) = app.send(req(Method::GET, path, None).empty()).await;
        assert_eq!(status, StatusCode::OK, "{path}");
    }
    assert_eq!(app.count_rows().await, 2);
}

/// A cursor whose execution was purged between two pages is still a position
/// (docs/semantics.md#listing-and-cursors): the next page is served, not refused as foreign.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cursor_at_a_purged_execution_still_pages() {
    use onestep_core::diagnostics::PurgeRequest;
    use onestep_core::ports::{LeaseStore, Retention};
    use onestep_core::request::ClaimRequest;

    let app = TestApp::start(tenant_settings()).await;
    let old = app.submit(Some(TOKEN_A), "k-old", "echo", json!(1)).await;
    let newer = app
        .submit(Some(TOKEN_A), "k-new", "run_agent", json!(2))
        .await;
    let (status, first) = app
        .send(req(Method::GET, "/v1/executions?limit=1", Some(TOKEN_A)).empty())
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(first["items"][0]["id"], newer["id"]);
    let cursor = first["next_cursor"].as_str().expect("cursor").to_owned();

    // Finish the newer execution and purge it, as `onestep purge` would.
    let leases = app
        .backend
        .claim(&ClaimRequest {
            namespaces: onestep_core::request::NamespaceScope::One("tenant-a".into()),
            fair: Default::default(),
            task_names: vec!["run_agent".into()],
            limit: 1,
            lease_duration_s: 30.0,
            worker_id: "w1".into(),
            max_running: None,
        })
        .await
        .expect("claim");
    assert_eq!(leases.len(), 1);
    app.backend
        .complete(
            &leases[0].lease_ref(),
            &onestep_core::Completion::succeeded(json!(0)),
        )
        .await
        .expect("complete");
    let purged = app
        .backend
        .purge(&PurgeRequest {
            namespace: Some("tenant-a".into()),
            finished_before: chrono::Utc::now() + chrono::Duration::days(1),
            statuses: vec![],
            batch_size: 100,
            dry_run: false,
        })
        .await
        .expect("purge");
    assert_eq!(purged.executions, 1);

    let next = format!("/v1/executions?limit=1&cursor={cursor}");
    let (status, page) = app
        .send(req(Method::GET, &next, Some(TOKEN_A)).empty())
        .await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert_eq!(page["items"][0]["id"], old["id"]);
    assert_eq!(page["items"].as_array().map(Vec::len), Some(1));
    // The execution is gone from every namespace, so for tenant B the cursor is a position too:
    // it orders B's own rows (none here) and shows nothing of A's.
    let (status, theirs) = app
        .send(req(Method::GET, &next, Some(TOKEN_B)).empty())
        .await;
    assert_eq!(status, StatusCode::OK, "{theirs}");
    assert_eq!(theirs["items"].as_array().map(Vec::len), Some(0));
}
