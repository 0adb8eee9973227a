//! The dashboard's routes through the router (docs/ui.md): shells without a token, fragments
//! only with one, buttons only for the roles that may use them, values escaped. The browser
//! tests (tests/tests/ui_browser.rs) drive the same pages in a real Chromium.

use axum::http::{Method, StatusCode};
use onestep_api::auth::Role;
use onestep_api::{Tenancy, TokenTable};
use serde_json::json;

use crate::support::{AppSettings, TestApp, id_of, req, single_settings};

const READ: &str = "token-ui-read-aaaaaaaaaaaaaaaaa";
const OPERATE: &str = "token-ui-operate-aaaaaaaaaaaaaa";

fn settings() -> AppSettings {
    let table = TokenTable::from_entries([
        (READ, "local", Role::Read),
        (OPERATE, "local", Role::Operate),
    ])
    .expect("tokens");
    AppSettings {
        tenancy: Tenancy::Tokens(table),
        ..single_settings()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shells_fragments_and_roles() {
    let app = TestApp::start(settings()).await;
    let x = app
        .submit(Some(OPERATE), "k1", "echo", json!({"html": "<b>bold</b>"}))
        .await;
    let id = id_of(&x);

    // Shells and assets need no token and hold no data.
    for path in ["/ui", &format!("/ui/executions/{id}")] {
        let (status, ct, body) = app.send_text(req(Method::GET, path, None).empty()).await;
        assert_eq!(status, StatusCode::OK, "{path}");
        assert!(ct.starts_with("text/html"), "{ct}");
        assert!(body.contains("/ui/assets/app.js"));
        assert!(!body.contains("<b>bold</b>"));
    }
    let (status, ct, js) = app
        .send_text(req(Method::GET, "/ui/assets/app.js", None).empty())
        .await;
    assert_eq!(status, StatusCode::OK);
    assert!(ct.starts_with("text/javascript"));
    assert!(js.contains("sessionStorage") && !js.contains("http://") && !js.contains("https://"));

    // Fragments: 401 without a token.
    for path in [
        "/ui/fragments/list".to_owned(),
        "/ui/fragments/overview".to_owned(),
        format!("/ui/fragments/executions/{id}"),
    ] {
        let (status, _, _) = app.send_text(req(Method::GET, &path, None).empty()).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{path}");
    }
    let (status, _, list) = app
        .send_text(req(Method::GET, "/ui/fragments/list?status=queued", Some(READ)).empty())
        .await;
    assert_eq!(status, StatusCode::OK);
    assert!(list.contains(&id.to_string()));
    assert!(list.contains("data-live=\"true\""), "{list}");
    let (_, _, none) = app
        .send_text(req(Method::GET, "/ui/fragments/list?status=failed", Some(READ)).empty())
        .await;
    assert!(none.contains("No executions match"), "{none}");
    let (status, _, _) = app
        .send_text(req(Method::GET, "/ui/fragments/list?status=bogus", Some(READ)).empty())
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);

    let (_, _, overview) = app
        .send_text(req(Method::GET, "/ui/fragments/overview", Some(READ)).empty())
        .await;
    assert!(overview.contains("<th>echo</th>"), "{overview}");

    let path = format!("/ui/fragments/executions/{id}");
    let (_, _, as_read) = app
        .send_text(req(Method::GET, &path, Some(READ)).empty())
        .await;
    let (_, _, as_operate) = app
        .send_text(req(Method::GET, &path, Some(OPERATE)).empty())
        .await;
    assert!(!as_read.contains("data-action"), "read sees no action");
    assert!(as_operate.contains("data-action=\"cancel\""));
    // The payload is shown pretty-printed and escaped.
    assert!(
        as_read.contains("&lt;b&gt;bold") && !as_read.contains("<b>bold"),
        "{as_read}"
    );
}

/// docs/ui.md#overview: figures younger than 5 s are reused as they are; older (up to 60 s)
/// are answered at once while one background read replaces them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overview_is_cached_then_refreshed_in_the_background() {
    let app = TestApp::start(settings()).await;
    app.submit(Some(OPERATE), "k1", "echo", json!({})).await;
    let overview = || async {
        let (status, _, body) = app
            .send_text(req(Method::GET, "/ui/fragments/overview", Some(READ)).empty())
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body
    };
    assert!(overview().await.contains("<th>echo</th>"));
    app.submit(Some(OPERATE), "k2", "run_agent", json!({}))
        .await;
    // Fresh: the cached figures, without the new task.
    assert!(!overview().await.contains("<th>run_agent</th>"));
    tokio::time::sleep(std::time::Duration::from_millis(5_200)).await;
    // Stale: still the old figures in this answer (the re-read runs after it) ...
    let stale = overview().await;
    assert!(
        stale.contains("<th>echo</th>") && !stale.contains("<th>run_agent</th>"),
        "{stale}"
    );
    // ... and the next answers show the re-read figures.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        if overview().await.contains("<th>run_agent</th>") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the background re-read never replaced the stale figures"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// A metadata search examines at most 1000 rows per page (docs/semantics.md#search-window): with
/// the only match behind 1,500 newer rows, the first page is `partial` and empty, its cursor
/// leads to the match; the dashboard says what it examined; a bulk cancel still finds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_window_partial_pages() {
    let app = TestApp::start(settings()).await;
    let (status, x) = app
        .send(
            req(Method::POST, "/v1/executions", Some(OPERATE))
                .header("idempotency-key", "old-red")
                .json(&json!({"task_name": "echo", "payload": 1, "metadata": {"team": "red"}})),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{x}");
    let id = id_of(&x);
    let seeded = app
        .backend
        .seed_history(&onestep_core::history::HistorySeed {
            namespace: "local".into(),
            task_name: "echo".into(),
            count: 1500,
            ids: onestep_core::history::HistoryIds::V7,
            before: chrono::Utc::now() + chrono::Duration::hours(1),
            idempotency_keys: false,
        })
        .await
        .expect("seed");
    assert_eq!(seeded, 1500);
    let list = |q: &str| req(Method::GET, &format!("/v1/executions?{q}"), Some(READ)).empty();
    let (status, first) = app.send(list("metadata=team%3Dred")).await;
    assert_eq!(status, StatusCode::OK, "{first}");
    assert_eq!(first["items"].as_array().map(Vec::len), Some(0), "{first}");
    assert_eq!(first["partial"], true);
    let cursor = first["next_cursor"].as_str().expect("cursor").to_owned();
    let (_, second) = app
        .send(list(&format!("metadata=team%3Dred&cursor={cursor}")))
        .await;
    assert_eq!(second["items"][0]["id"], id.to_string(), "{second}");
    assert_eq!(second["partial"], false);
    assert!(second["next_cursor"].is_null());
    // Without the residual filter the page is an ordinary one.
    let (_, plain) = app.send(list("limit=5")).await;
    assert_eq!(plain["partial"], false);
    assert_eq!(plain["items"].as_array().map(Vec::len), Some(5));
    let (status, _, html) = app
        .send_text(
            req(
                Method::GET,
                "/ui/fragments/list?metadata=team%3Dred",
                Some(READ),
            )
            .empty(),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        html.contains("No matches among the 1000 executions examined"),
        "{html}"
    );
    assert!(
        html.contains(&format!("data-cursor=\"{cursor}\"")),
        "{html}"
    );
    let (status, out) = app
        .send(
            req(Method::POST, "/v1/executions:cancel", Some(OPERATE))
                .json(&json!({"metadata": "team=red"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{out}");
    assert_eq!(
        (out["matched"].clone(), out["cancelled"].clone()),
        (json!(1), json!(1))
    );
    assert!(out["next_cursor"].is_null());
}
