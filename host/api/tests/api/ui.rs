//! The dashboard's routes through the router (docs/ui.md): shells without a token, fragments
//! only with one, buttons only for the roles that may use them, values escaped. The browser
//! tests (tests/tests/ui_browser.rs) drive the same pages in a real Chromium.

use axum::http::{Method, StatusCode};
use onestep_api::auth::Role;
use onestep_api::{ApiSettings, Tenancy, TokenTable};
use serde_json::json;

use crate::support::{TestApp, id_of, req, single_settings};

const READ: &str = "token-ui-read-aaaaaaaaaaaaaaaaa";
const OPERATE: &str = "token-ui-operate-aaaaaaaaaaaaaa";

fn settings() -> ApiSettings {
    let table = TokenTable::from_entries([
        (READ, "local", Role::Read),
        (OPERATE, "local", Role::Operate),
    ])
    .expect("tokens");
    ApiSettings {
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
