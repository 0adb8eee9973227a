//! Hostile tenant data in the dashboard and in `/metrics` (issue 28 items 8, 9 and 12;
//! docs/security.md#dashboard-and-metrics): a deep 960 KB-class payload renders a bounded
//! fragment and downloads whole; bidi and invisible characters show escaped; task names that
//! try to break out of a metric label are escaped, and the per-namespace figures need an
//! `operate` token or `api.metrics.public`.

use std::sync::Arc;

use axum::http::{Method, StatusCode};
use http_body_util::BodyExt;
use mysql_async::prelude::Queryable;
use onestep_api::auth::Role;
use onestep_api::{ApiSettings, ApiState, Tenancy, TokenTable, router};
use onestep_core::Limits;
use openmetrics_parser::openmetrics::parse_openmetrics;
use serde_json::{Value, json};
use tower::ServiceExt;

use crate::support::{AppSettings, TestApp, id_of, req};

const READ_A: &str = "token-hostile-read-aaaaaaaaaaaa";
const OPERATE_A: &str = "token-hostile-operate-aaaaaaaa";
const OPERATE_B: &str = "token-hostile-operate-bbbbbbbb";

fn settings() -> AppSettings {
    let table = TokenTable::from_entries([
        (READ_A, "team-a", Role::Read),
        (OPERATE_A, "team-a", Role::Operate),
        (OPERATE_B, "team-b", Role::Operate),
    ])
    .expect("tokens");
    let api = ApiSettings {
        limits: Limits {
            max_payload_bytes: 1024 * 1024,
            max_metadata_bytes: 4096,
            max_result_bytes: 1024 * 1024,
        },
        ..ApiSettings::default()
    };
    AppSettings {
        tenancy: Tenancy::Tokens(table),
        api,
    }
}

/// ~960 KB: 480,000 zeros in an array nested 30 deep (storable on every backend), ~30 MB when
/// pretty-printed whole.
fn nested_payload() -> Value {
    let mut v = Value::Array(vec![json!(0); 480_000]);
    for _ in 0..29 {
        v = Value::Array(vec![v]);
    }
    v
}

async fn get_raw(
    app: &TestApp,
    path: &str,
    token: Option<&str>,
) -> (StatusCode, axum::http::HeaderMap, Vec<u8>) {
    let resp = app
        .router
        .clone()
        .oneshot(req(Method::GET, path, token).empty())
        .await
        .expect("infallible router");
    let status = resp.status();
    let headers = resp.headers().clone();
    let bytes = resp.into_body().collect().await.expect("body").to_bytes();
    (status, headers, bytes.to_vec())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deep_payload_preview_is_bounded_and_downloads_whole() {
    let app = TestApp::start(settings()).await;
    let payload = nested_payload();
    let compact = serde_json::to_vec(&payload).expect("json").len();
    let body = json!({"task_name": "big", "payload": payload,
                      "metadata": {"file": "invoice\u{202e}gpj.exe", "z\u{200b}w": "x"}});
    let (status, v) = app
        .send(
            req(Method::POST, "/v1/executions", Some(OPERATE_A))
                .header("idempotency-key", "deep-1")
                .json(&body),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{v}");
    let id = id_of(&v);

    let path = format!("/ui/fragments/executions/{id}");
    let started = std::time::Instant::now();
    let (status, _, html) = get_raw(&app, &path, Some(READ_A)).await;
    let html = String::from_utf8(html).expect("utf-8");
    println!(
        "detail fragment of a {compact}-byte payload nested 30 deep: {} bytes in {:?}",
        html.len(),
        started.elapsed()
    );
    assert_eq!(status, StatusCode::OK);
    assert!(html.len() <= 256 * 1024, "{} bytes", html.len());
    assert!(html.contains("id=\"truncated-payload\""));
    assert!(html.contains("data-download=\"payload\""));
    // Bidi and zero-width characters of tenant text are shown escaped.
    assert!(
        html.contains("invoice\\u{202e}gpj.exe"),
        "metadata value escaped"
    );
    assert!(html.contains("z\\u{200b}w"), "metadata key escaped");
    assert!(!html.contains('\u{202e}') && !html.contains('\u{200b}'));

    // The auto-refresh of a live execution leaves the values out.
    let (status, _, refresh) = get_raw(&app, &format!("{path}?values=false"), Some(READ_A)).await;
    let refresh = String::from_utf8(refresh).expect("utf-8");
    assert_eq!(status, StatusCode::OK);
    assert!(refresh.contains("data-kept=\"true\"") && !refresh.contains("value-payload"));
    assert!(refresh.len() < 8 * 1024, "{} bytes", refresh.len());

    // The download is the stored value, whole, as a JSON attachment.
    let download = format!("{path}/values/payload");
    let (status, headers, raw) = get_raw(&app, &download, Some(READ_A)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers["content-type"], "application/json");
    let disposition = headers["content-disposition"].to_str().expect("ascii");
    assert!(disposition.starts_with("attachment;"), "{disposition}");
    let got: Value = serde_json::from_slice(&raw).expect("JSON");
    assert_eq!(got, nested_payload());
    let (status, _, raw) = get_raw(&app, &format!("{path}/values/metadata"), Some(READ_A)).await;
    assert_eq!(status, StatusCode::OK);
    let got: Value = serde_json::from_slice(&raw).expect("JSON");
    assert_eq!(got["file"], "invoice\u{202e}gpj.exe");
    // Same tenancy as the detail page: no token 401, another tenant 404, no result yet 404.
    assert_eq!(
        get_raw(&app, &download, None).await.0,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        get_raw(&app, &download, Some(OPERATE_B)).await.0,
        StatusCode::NOT_FOUND
    );
    let result = format!("{path}/values/result");
    assert_eq!(
        get_raw(&app, &result, Some(READ_A)).await.0,
        StatusCode::NOT_FOUND
    );
    let other = format!("{path}/values/secrets");
    assert_eq!(
        get_raw(&app, &other, Some(READ_A)).await.0,
        StatusCode::UNPROCESSABLE_ENTITY
    );
}

/// Task names a tenant could choose (the API may refuse some at submit: they are written to
/// the table directly, as the worker's config or the Python reference could).
const HOSTILE: [&str; 4] = [
    "x\",namespace=\"team-b\",task=\"y\",status=\"queued\"} 999999\nonestep_executions{namespace=\"team-b",
    "back\\slash\\",
    "brace}{",
    "new\nline",
];

fn labels(text: &str) -> Vec<(String, String)> {
    let parsed = parse_openmetrics(text).unwrap_or_else(|e| panic!("{e:?} in:\n{text}"));
    let mut out: Vec<(String, String)> = parsed
        .families
        .get("onestep_executions")
        .map(|f| {
            f.iter_samples()
                .map(|s| {
                    let l = s.get_labelset().expect("labels");
                    (
                        l.get_label_value("namespace")
                            .unwrap_or_default()
                            .to_owned(),
                        l.get_label_value("task").unwrap_or_default().to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_escape_hostile_task_names_and_need_an_operator() {
    let app = TestApp::start(settings()).await;
    for (i, name) in HOSTILE.iter().enumerate() {
        let x = app
            .submit(Some(OPERATE_A), &format!("h-{i}"), "plain", json!(i))
            .await;
        let mut c = app.pool.get_conn().await.expect("conn");
        c.exec_drop(
            format!(
                "UPDATE `{}` SET task_name = ? WHERE id = ?",
                app.backend.tables().executions
            ),
            (*name, id_of(&x).to_string()),
        )
        .await
        .expect("rename task");
    }
    app.submit(Some(OPERATE_B), "b-1", "theirs", json!(1)).await;
    let scrape = |token: Option<&'static str>, router: axum::Router| async move {
        let resp = router
            .oneshot(req(Method::GET, "/metrics", token).empty())
            .await
            .expect("infallible router");
        assert_eq!(resp.status(), StatusCode::OK);
        let bytes = resp.into_body().collect().await.expect("body").to_bytes();
        String::from_utf8(bytes.to_vec()).expect("utf-8")
    };

    // An operate token of team-a: team-a's figures, every hostile name back exactly, nothing
    // forged for team-b.
    let text = scrape(Some(OPERATE_A), app.router.clone()).await;
    let mut want: Vec<(String, String)> = HOSTILE
        .iter()
        .map(|t| ("team-a".to_owned(), (*t).to_owned()))
        .collect();
    want.sort();
    assert_eq!(labels(&text), want, "{text}");
    // No token, a read token: request counts only, no namespace or task label.
    for token in [None, Some(READ_A)] {
        let text = scrape(token, app.router.clone()).await;
        assert!(
            !text.contains("namespace=") && !text.contains("task="),
            "{text}"
        );
        assert!(text.contains("onestep_api_requests_total"), "{text}");
        assert!(labels(&text).is_empty());
    }
    // api.metrics.public: every namespace, to anyone.
    let AppSettings { tenancy, mut api } = settings();
    api.metrics_public = true;
    let state = ApiState::new(
        Arc::new(app.backend.clone()),
        Arc::new(app.backend.clone()),
        tenancy,
        api,
    )
    .expect("state")
    .with_insights(Arc::new(app.backend.clone()));
    let text = scrape(None, router(state)).await;
    let mut all = want.clone();
    all.push(("team-b".to_owned(), "theirs".to_owned()));
    all.sort();
    assert_eq!(labels(&text), all, "{text}");
}
