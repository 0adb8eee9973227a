//! `onestep wait --api` against a scripted HTTP server on a loopback port: the answers a real
//! `onestep serve` gives only in rare moments (a lower `api.max_wait_s`, 503 during a restart,
//! early answers while it shuts down, 401/403) in a fixed order. The real server is exercised by
//! tests/tests/e2e/api_instances.rs.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use serde_json::json;

use super::*;

/// One scripted answer.
#[derive(Clone)]
enum Step {
    /// Answer at once.
    Now(StatusCode, Value),
    /// Hold the request for the wait it asked for, then answer 200 with this body.
    Hold(Value),
}

#[derive(Default)]
struct Script {
    /// The answers in order; the last one repeats.
    steps: Mutex<VecDeque<Step>>,
    /// Each request's `wait` and `Authorization`.
    seen: Mutex<Vec<(String, Option<String>)>>,
}

impl Script {
    fn seen(&self) -> Vec<(String, Option<String>)> {
        self.seen.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

async fn answer(
    State(script): State<Arc<Script>>,
    Path(_id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> (StatusCode, Json<Value>) {
    let wait = q.get("wait").cloned().unwrap_or_default();
    let auth = headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    if let Ok(mut seen) = script.seen.lock() {
        seen.push((wait.clone(), auth));
    }
    let step = {
        let Ok(mut steps) = script.steps.lock() else {
            return (StatusCode::INTERNAL_SERVER_ERROR, Json(json!({})));
        };
        if steps.len() > 1 {
            steps.pop_front()
        } else {
            steps.front().cloned()
        }
    };
    match step {
        Some(Step::Now(status, body)) => (status, Json(body)),
        Some(Step::Hold(body)) => {
            let secs: f64 = wait.parse().unwrap_or(0.0);
            tokio::time::sleep(Duration::from_secs_f64(secs)).await;
            (StatusCode::OK, Json(body))
        }
        None => (StatusCode::INTERNAL_SERVER_ERROR, Json(json!({}))),
    }
}

/// Serves `steps` on a loopback port; the base URL and the script.
async fn serve(steps: Vec<Step>) -> (ApiBase, Arc<Script>) {
    let script = Arc::new(Script {
        steps: Mutex::new(steps.into()),
        seen: Mutex::default(),
    });
    let app = axum::Router::new()
        .route("/prefix/v1/executions/{id}", axum::routing::get(answer))
        .with_state(Arc::clone(&script));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a loopback port");
    let addr = listener.local_addr().expect("local address");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let base = ApiBase::parse(&format!("http://{addr}/prefix/")).expect("base");
    (base, script)
}

fn view(id: Uuid, status: &str) -> Value {
    let terminal = matches!(status, "succeeded" | "failed" | "cancelled" | "expired");
    json!({
        "id": id, "namespace": "ns", "task_name": "t", "status": status, "terminal": terminal,
        "attempts": 1, "metadata": {}, "version": 2,
        "created_at": "2026-08-10T12:00:00.000000Z", "available_at": "2026-08-10T12:00:00.000000Z",
        "started_at": null, "finished_at": null, "cancel_requested_at": null,
        "expires_at": null, "error": null, "priority": 5, "fairness_key": "ns",
    })
}

fn error(code: &str, message: &str) -> Value {
    json!({"code": code, "message": message})
}

async fn follow(
    base: &ApiBase,
    id: Uuid,
    token: Option<&str>,
    timeout: Option<f64>,
) -> Result<u8, Failure> {
    wait(ApiWait {
        base,
        auth: token.map(|t| bearer(t).expect("token")),
        id,
        timeout: timeout.map(Duration::from_secs_f64),
        json: true,
    })
    .await
}

#[tokio::test]
async fn it_waits_until_terminal_within_the_servers_bound_and_sends_the_token() {
    let id = Uuid::new_v4();
    let (base, script) = serve(vec![
        Step::Now(
            StatusCode::UNPROCESSABLE_ENTITY,
            error(
                "invalid_argument",
                "wait must be a number of seconds from 0 to 1, got '60.000'",
            ),
        ),
        Step::Hold(view(id, "running")),
        Step::Now(StatusCode::OK, view(id, "succeeded")),
    ])
    .await;
    let started = Instant::now();
    let code = follow(&base, id, Some("s3cr3t"), None)
        .await
        .expect("followed");
    assert_eq!(code, OK);
    let seen = script.seen();
    let waits: Vec<&str> = seen.iter().map(|(w, _)| w.as_str()).collect();
    assert_eq!(
        waits,
        ["60.000", "1.000", "1.000"],
        "asks for the bound the API named"
    );
    assert!(
        seen.iter()
            .all(|(_, a)| a.as_deref() == Some("Bearer s3cr3t")),
        "{seen:?}"
    );
    assert!(started.elapsed() >= Duration::from_secs(1), "the held wait");

    // A failed end: exit 1, no error.
    let (base, _) = serve(vec![Step::Now(StatusCode::OK, view(id, "failed"))]).await;
    assert_eq!(
        follow(&base, id, None, None).await.expect("followed"),
        FAILED
    );
}

#[tokio::test]
async fn refusals_end_the_wait_with_the_apis_message() {
    let id = Uuid::new_v4();
    let cases = [
        (
            StatusCode::NOT_FOUND,
            error("not_found", &format!("execution {id} was not found")),
            "not_found",
            "was not found",
        ),
        (
            StatusCode::UNAUTHORIZED,
            error("unauthorized", "missing or invalid bearer token"),
            "unauthorized",
            "pass its token with --token",
        ),
        (
            StatusCode::FORBIDDEN,
            error("forbidden", "this token may not read"),
            "forbidden",
            "refused the request (HTTP 403): this token may not read",
        ),
        (
            StatusCode::UNPROCESSABLE_ENTITY,
            error("invalid_argument", "the query string could not be parsed"),
            "invalid_argument",
            "(HTTP 422)",
        ),
    ];
    for (status, body, code, needle) in cases {
        let (base, script) = serve(vec![Step::Now(status, body)]).await;
        let f = follow(&base, id, None, Some(30.0))
            .await
            .expect_err("refused");
        assert_eq!(f.exit, FAILED, "{status}");
        assert_eq!(f.body.code, code);
        assert!(
            f.body.message.contains(needle),
            "{status}: {}",
            f.body.message
        );
        assert_eq!(script.seen().len(), 1, "{status}: asked once");
    }
    // A 200 that is not an execution view (a proxy's page).
    let (base, _) = serve(vec![Step::Now(StatusCode::OK, json!({"hello": 1}))]).await;
    let f = follow(&base, id, None, None).await.expect_err("not a view");
    assert_eq!(f.body.code, "unexpected_answer");
}

#[tokio::test]
async fn busy_or_failing_answers_are_asked_again() {
    let id = Uuid::new_v4();
    let (base, script) = serve(vec![
        Step::Now(StatusCode::OK, view(id, "queued")),
        Step::Now(
            StatusCode::SERVICE_UNAVAILABLE,
            error("unavailable", "the database is down"),
        ),
        Step::Now(
            StatusCode::TOO_MANY_REQUESTS,
            error("too_many", "slow down"),
        ),
        Step::Now(StatusCode::OK, view(id, "cancelled")),
    ])
    .await;
    // The first answer (queued) comes early, the next two are retried: cancelled, exit 1.
    let code = follow(&base, id, None, Some(30.0)).await.expect("followed");
    assert_eq!(code, FAILED);
    assert_eq!(script.seen().len(), 4);
}

#[tokio::test]
async fn an_unreachable_api_fails_at_once() {
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("address")
    };
    let base = ApiBase::parse(&format!("http://{closed}")).expect("base");
    let started = Instant::now();
    let f = follow(&base, Uuid::new_v4(), None, None)
        .await
        .expect_err("unreachable");
    assert_eq!((f.exit, f.body.code.as_str()), (FAILED, "unreachable"));
    assert!(
        f.body
            .message
            .starts_with(&format!("cannot reach the API at http://{closed}: ")),
        "{}",
        f.body.message
    );
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn the_timeout_ends_the_wait_with_the_last_state() {
    let id = Uuid::new_v4();
    let (base, script) = serve(vec![Step::Hold(view(id, "running"))]).await;
    let started = Instant::now();
    let f = follow(&base, id, None, Some(0.3))
        .await
        .expect_err("timeout");
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert_eq!((f.exit, f.body.code.as_str()), (FAILED, "timeout"));
    assert!(
        f.body.message.contains("is still running after"),
        "{}",
        f.body.message
    );
    let seen = script.seen();
    let asked: f64 = seen[0].0.parse().expect("a number");
    assert!(asked <= 0.3 && asked > 0.2, "asked {asked}");

    // Early answers (a server shutting down, or with waits off) back off instead of spinning.
    let (base, script) = serve(vec![Step::Now(StatusCode::OK, view(id, "running"))]).await;
    let f = follow(&base, id, None, Some(1.5))
        .await
        .expect_err("timeout");
    assert_eq!(f.body.code, "timeout");
    let n = script.seen().len();
    assert!((2..=4).contains(&n), "{n} requests in 1.5 s");
}

#[test]
fn the_api_url_and_token_are_checked() {
    let base = |s: &str| ApiBase::parse(s).map(|b| b.to_string());
    assert_eq!(
        base("http://127.0.0.1:8080"),
        Ok("http://127.0.0.1:8080".into())
    );
    assert_eq!(
        base(" http://api.local/onestep/ "),
        Ok("http://api.local/onestep".into())
    );
    assert_eq!(base("http://[::1]:9000/"), Ok("http://[::1]:9000".into()));
    for bad in [
        "https://x",
        "127.0.0.1:8080",
        "ftp://x",
        "http://",
        "http://x/?a=1",
        "",
    ] {
        assert!(ApiBase::parse(bad).is_err(), "{bad}");
    }
    let id = Uuid::nil();
    let b = ApiBase::parse("http://h:1/p").expect("base");
    assert_eq!(
        b.wait_uri(id, Duration::from_millis(2500))
            .expect("uri")
            .to_string(),
        format!("http://h:1/p/v1/executions/{id}?wait=2.500")
    );
    assert!(bearer("abc\ndef").is_err());
    assert!(bearer("  ").is_err());
    assert_eq!(bearer("tok").expect("ok"), "Bearer tok");
}

#[test]
fn the_wait_bound_is_read_from_the_apis_message() {
    assert_eq!(
        wait_bound("wait must be a number of seconds from 0 to 10, got '60.000'"),
        Some(10)
    );
    assert_eq!(
        wait_bound("wait must be a number of seconds from 0 to 0, got '1.000'"),
        Some(0)
    );
    assert_eq!(wait_bound("the query string could not be parsed"), None);
    // The API's own message, so that a change there fails here.
    assert_eq!(
        onestep_api::wait::parse_wait(Some("61.000"), 7).map_err(|m| wait_bound(&m)),
        Err(Some(7))
    );
}
