//! Retry, bulk cancel / retry and token roles (docs/http-api.md#retry,
//! docs/http-api.md#bulk-operations, docs/http-api.md#roles) against real MariaDB and MySQL.

use std::sync::Arc;

use axum::http::{Method, StatusCode};
use onestep_api::auth::Role;
use onestep_api::{Tenancy, TokenTable};
use onestep_core::ports::{ExecutionStore, LeaseStore};
use onestep_core::request::{ClaimRequest, SubmitRequest};
use onestep_core::{Completion, ErrorObject, ExecutionClient};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::support::{AppSettings, TestApp, id_of, req, servers, single_settings};

/// Claims every queued execution of `task` and completes each as failed.
async fn fail_all(app: &TestApp, task: &str) -> Vec<Uuid> {
    let leases = app
        .backend
        .claim(&ClaimRequest {
            namespaces: onestep_core::request::NamespaceScope::One("local".into()),
            fair: Default::default(),
            task_names: vec![task.into()],
            limit: 500,
            lease_duration_s: 30.0,
            worker_id: "test-worker".into(),
            max_running: None,
        })
        .await
        .expect("claim");
    let mut ids = Vec::new();
    for lease in leases {
        let done = app
            .backend
            .complete(
                &lease.lease_ref(),
                &Completion::failed(ErrorObject::new("error", "ValueError", Some("handler"))),
            )
            .await
            .expect("complete");
        assert_eq!(done.status.as_str(), "failed");
        ids.push(done.id);
    }
    ids
}

fn retry_path(id: &str) -> String {
    format!("/v1/executions/{id}/retry")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_rules_link_and_idempotency() {
    for (server, admin) in servers() {
        let app = TestApp::start_on(&admin, single_settings()).await;
        let body = json!({"task_name": "echo", "payload": {"n": 1}, "metadata": {"team": "a"}});
        let (status, x) = app
            .send(
                req(Method::POST, "/v1/executions", None)
                    .header("idempotency-key", "orig-x")
                    .json(&body),
            )
            .await;
        assert_eq!(status, StatusCode::ACCEPTED, "{server}: {x}");
        let x_id = id_of(&x);
        // Queued: not retryable, with the exact status; nothing written.
        let (status, err) = app
            .send(
                req(Method::POST, &retry_path(&x_id.to_string()), None)
                    .header("idempotency-key", "r1")
                    .empty(),
            )
            .await;
        assert_eq!(status, StatusCode::CONFLICT, "{server}");
        assert_eq!(err["code"], "not_retryable");
        assert_eq!(err["status"], "queued");
        assert_eq!(app.count_rows().await, 1);

        let failed = fail_all(&app, "echo").await;
        assert_eq!(failed, vec![x_id]);
        // The key is required.
        let (status, err) = app
            .send(req(Method::POST, &retry_path(&x_id.to_string()), None).empty())
            .await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{server}");
        assert_eq!(err["code"], "invalid_argument");
        let (status, first) = app
            .send(
                req(Method::POST, &retry_path(&x_id.to_string()), None)
                    .header("idempotency-key", "r1")
                    .empty(),
            )
            .await;
        assert_eq!(status, StatusCode::ACCEPTED, "{server}: {first}");
        let new_id = id_of(&first);
        assert_ne!(new_id, x_id);
        assert_eq!(first["status"], "queued");
        assert_eq!(first["task_name"], "echo");
        assert_eq!(first["metadata"]["team"], "a");
        assert_eq!(first["metadata"]["onestep.retry_of"], x_id.to_string());
        let stored = app
            .backend
            .get("local", new_id)
            .await
            .expect("get")
            .expect("row");
        assert_eq!(stored.payload, json!({"n": 1}));
        // The same key on the same original: the same new execution.
        let (status, again) = app
            .send(
                req(Method::POST, &retry_path(&x_id.to_string()), None)
                    .header("idempotency-key", "r1")
                    .empty(),
            )
            .await;
        assert_eq!(status, StatusCode::ACCEPTED);
        assert_eq!(again["id"], first["id"]);
        assert_eq!(app.count_rows().await, 2);
        // The same key on another original is a conflict.
        app.submit(None, "orig-y", "echo", json!(2)).await;
        let y = fail_all(&app, "echo").await;
        assert_eq!(y.len(), 2, "the retry and y were claimed");
        let y_id = y
            .iter()
            .copied()
            .find(|id| *id != new_id)
            .expect("y failed");
        let (status, err) = app
            .send(
                req(Method::POST, &retry_path(&y_id.to_string()), None)
                    .header("idempotency-key", "r1")
                    .empty(),
            )
            .await;
        assert_eq!(status, StatusCode::CONFLICT, "{server}");
        assert_eq!(err["code"], "conflict");
        // A retry of the retry links to its immediate original.
        let (status, second) = app
            .send(
                req(Method::POST, &retry_path(&new_id.to_string()), None)
                    .header("idempotency-key", "r2")
                    .empty(),
            )
            .await;
        assert_eq!(status, StatusCode::ACCEPTED);
        assert_eq!(second["metadata"]["onestep.retry_of"], new_id.to_string());
        // Missing and malformed ids; the link cannot be forged on submit.
        let (status, _) = app
            .send(
                req(Method::POST, &retry_path(&Uuid::new_v4().to_string()), None)
                    .header("idempotency-key", "r3")
                    .empty(),
            )
            .await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        let (status, _) = app
            .send(
                req(Method::POST, &retry_path("nope"), None)
                    .header("idempotency-key", "r3")
                    .empty(),
            )
            .await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
        let forged = json!({"task_name": "echo", "payload": 1,
                            "metadata": {"onestep.retry_of": x_id.to_string()}});
        let (status, err) = app
            .send(
                req(Method::POST, "/v1/executions", None)
                    .header("idempotency-key", "forged")
                    .json(&forged),
            )
            .await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(
            err["message"],
            "metadata key 'onestep.retry_of' is reserved"
        );
    }
}

async fn seed(app: &TestApp, task: &str, n: usize) {
    let client = ExecutionClient::new(
        Arc::new(app.backend.clone()) as Arc<dyn ExecutionStore>,
        "local",
        single_settings().api.limits,
    )
    .expect("client");
    let requests: Vec<SubmitRequest> = (0..n)
        .map(|i| SubmitRequest {
            task_name: task.into(),
            payload: json!(i),
            idempotency_key: Some(format!("{task}-{i}")),
            ..SubmitRequest::default()
        })
        .collect();
    for r in client.submit_many(&requests).await.expect("seed") {
        r.expect("seeded item");
    }
}

async fn bulk(app: &TestApp, op: &str, key: Option<&str>, body: Value) -> (StatusCode, Value) {
    let mut r = req(Method::POST, &format!("/v1/executions:{op}"), None);
    if let Some(k) = key {
        r = r.header("idempotency-key", k);
    }
    app.send(r.json(&body)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_cancel_and_retry_in_bounded_calls() {
    for (server, admin) in servers() {
        let app = TestApp::start_on(&admin, single_settings()).await;
        seed(&app, "echo", 250).await;
        seed(&app, "run_agent", 5).await;
        // Bad input: exact codes, nothing changed.
        for (body, code) in [
            (json!({"statuz": "queued"}), "invalid_body"),
            (json!({"max_items": 0}), "invalid_argument"),
            (json!({"max_items": 10001}), "invalid_argument"),
            (json!({"status": "waiting"}), "invalid_argument"),
            (json!({"cursor": "garbage"}), "invalid_argument"),
        ] {
            let (status, err) = bulk(&app, "cancel", None, body.clone()).await;
            assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{server} {body}");
            assert_eq!(err["code"], code, "{body}");
        }
        // 250 in calls of at most 100, going on with the cursor.
        let mut cursor = Value::Null;
        let mut calls = Vec::new();
        loop {
            let (status, out) = bulk(
                &app,
                "cancel",
                None,
                json!({"task_name": "echo", "status": "queued", "max_items": 100,
                       "cursor": cursor, "reason": "bulk test"}),
            )
            .await;
            assert_eq!(status, StatusCode::OK, "{server}: {out}");
            calls.push((out["matched"].as_u64(), out["cancelled"].as_u64()));
            cursor = out["next_cursor"].clone();
            if cursor.is_null() {
                break;
            }
        }
        assert_eq!(
            calls,
            vec![
                (Some(100), Some(100)),
                (Some(100), Some(100)),
                (Some(50), Some(50))
            ],
            "{server}"
        );
        let (_, page) = app
            .send(req(Method::GET, "/v1/executions?status=queued&limit=200", None).empty())
            .await;
        let queued = page["items"].as_array().expect("items");
        assert_eq!(queued.len(), 5, "only run_agent is left queued");
        assert!(queued.iter().all(|e| e["task_name"] == "run_agent"));

        // Bulk retry: the key is required; repeating the call creates nothing twice.
        let (status, _) = bulk(&app, "retry", None, json!({"status": "cancelled"})).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
        let filter = json!({"task_name": "echo"});
        let (status, first) = bulk(&app, "retry", Some("bulk-1"), filter.clone()).await;
        assert_eq!(status, StatusCode::OK, "{server}: {first}");
        assert_eq!(first["matched"], 250);
        assert_eq!(first["retried"], 250);
        assert_eq!(first["skipped"], 0);
        assert_eq!(app.count_rows().await, 505);
        let (_, again) = bulk(&app, "retry", Some("bulk-1"), filter).await;
        // The walk now meets the 250 new (queued, skipped) rows and the same 250 originals.
        assert_eq!(again["retried"], 250);
        assert_eq!(again["skipped"], 250);
        assert_eq!(again["new_ids"], first["new_ids"]);
        assert_eq!(
            app.count_rows().await,
            505,
            "{server}: nothing created twice"
        );
    }
}

const READ: &str = "token-read-aaaaaaaaaaaaaaaaaaaa";
const SUBMIT: &str = "token-submit-aaaaaaaaaaaaaaaaaa";
const DEFAULT: &str = "token-default-aaaaaaaaaaaaaaaaa";
const OPERATE: &str = "token-operate-aaaaaaaaaaaaaaaaa";

fn role_settings() -> AppSettings {
    let table = TokenTable::from_entries([
        (READ, "local", Role::Read),
        (SUBMIT, "local", Role::Submit),
        (DEFAULT, "local", Role::Default),
        (OPERATE, "local", Role::Operate),
    ])
    .expect("tokens");
    AppSettings {
        tenancy: Tenancy::Tokens(table),
        ..single_settings()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roles_refuse_with_403_and_write_nothing() {
    let app = TestApp::start(role_settings()).await;
    let x = app.submit(Some(OPERATE), "x", "echo", json!(1)).await;
    let x_id = id_of(&x).to_string();
    let submit = json!({"task_name": "echo", "payload": 2});
    // (token, may submit, may cancel, may operate, role name)
    for (token, s, c, o, name) in [
        (READ, false, false, false, "read"),
        (SUBMIT, true, false, false, "submit"),
        (DEFAULT, true, true, false, "default"),
        (OPERATE, true, true, true, "operate"),
    ] {
        let (status, me) = app
            .send(req(Method::GET, "/v1/whoami", Some(token)).empty())
            .await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(me["role"], name);
        assert_eq!(me["namespace"], "local");
        assert_eq!(me["can_operate"], o);
        let (status, _) = app
            .send(req(Method::GET, "/v1/executions", Some(token)).empty())
            .await;
        assert_eq!(status, StatusCode::OK, "{name} reads");

        let rows = app.count_rows().await;
        let (status, err) = app
            .send(
                req(Method::POST, "/v1/executions", Some(token))
                    .header("idempotency-key", &format!("k-{name}"))
                    .json(&submit),
            )
            .await;
        if s {
            assert_eq!(status, StatusCode::ACCEPTED, "{name}");
        } else {
            assert_eq!(status, StatusCode::FORBIDDEN, "{name}");
            assert_eq!(err["code"], "forbidden");
            assert_eq!(app.count_rows().await, rows);
        }
        // Cancel of an already-cancelled row changes nothing, so every allowed role can repeat it.
        let (status, _) = app
            .send(
                req(
                    Method::POST,
                    &format!("/v1/executions/{x_id}/cancel"),
                    Some(token),
                )
                .empty(),
            )
            .await;
        assert_eq!(
            status,
            if c {
                StatusCode::OK
            } else {
                StatusCode::FORBIDDEN
            },
            "{name} cancel"
        );
        let (status, err) = app
            .send(
                req(Method::POST, &retry_path(&x_id), Some(token))
                    .header("idempotency-key", &format!("r-{name}"))
                    .empty(),
            )
            .await;
        if o {
            // Cancelled by now: retried.
            assert_eq!(status, StatusCode::ACCEPTED, "{name}: {err}");
        } else {
            assert_eq!(status, StatusCode::FORBIDDEN, "{name} retry");
        }
        for op in ["cancel", "retry"] {
            let (status, _) = app
                .send(
                    req(Method::POST, &format!("/v1/executions:{op}"), Some(token))
                        .header("idempotency-key", "b")
                        .json(&json!({"status": "succeeded"})),
                )
                .await;
            assert_eq!(
                status,
                if o {
                    StatusCode::OK
                } else {
                    StatusCode::FORBIDDEN
                },
                "{name} bulk {op}"
            );
        }
    }
    let (status, _) = app
        .send(req(Method::GET, "/v1/whoami", Some("not-a-token-at-all")).empty())
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_filters_in_list_and_bulk() {
    let app = TestApp::start(single_settings()).await;
    for (key, team) in [("s1", "red"), ("s2", "blue"), ("s3", "red")] {
        let body = json!({"task_name": "echo", "payload": key, "metadata": {"team": team}});
        let (status, _) = app
            .send(
                req(Method::POST, "/v1/executions", None)
                    .header("idempotency-key", key)
                    .json(&body),
            )
            .await;
        assert_eq!(status, StatusCode::ACCEPTED);
    }
    let list = |q: &str| req(Method::GET, &format!("/v1/executions?{q}"), None).empty();
    let (status, page) = app.send(list("metadata=team%3Dred")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(page["items"].as_array().map(Vec::len), Some(2));
    let (_, page) = app.send(list("idempotency_key=s2")).await;
    assert_eq!(page["items"][0]["metadata"]["team"], "blue");
    assert_eq!(page["items"].as_array().map(Vec::len), Some(1));
    let (_, page) = app.send(list("created_from=2999-01-01T00:00:00Z")).await;
    assert_eq!(page["items"].as_array().map(Vec::len), Some(0));
    for (q, message) in [
        ("created_from=yesterday", "created_from must be an RFC 3339"),
        ("metadata=team", "metadata must be key=value"),
        (
            "created_from=2026-01-02T00:00:00Z&created_before=2026-01-01T00:00:00Z",
            "created_from must be before created_before",
        ),
    ] {
        let (status, err) = app.send(list(q)).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{q}");
        assert!(
            err["message"]
                .as_str()
                .is_some_and(|m| m.starts_with(message)),
            "{q}: {err}"
        );
    }
    // Bulk cancel takes the same filters.
    let (status, out) = bulk(&app, "cancel", None, json!({"metadata": "team=red"})).await;
    assert_eq!(status, StatusCode::OK, "{out}");
    assert_eq!(out["matched"], 2);
    assert_eq!(out["cancelled"], 2);
    let (_, page) = app.send(list("status=queued")).await;
    assert_eq!(page["items"].as_array().map(Vec::len), Some(1));
}

/// `GET /v1/rate-limits` (docs/http-api.md#rate-limits): `operate` only; the buckets workers
/// wrote, throttled first, with why; the dashboard overview shows them to operate tokens only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limits_show_operators_who_is_throttled_and_why() {
    use onestep_core::rate::{RateLimit, RateLimitStore};
    let app = TestApp::start(role_settings()).await;
    let (status, empty) = app
        .send(req(Method::GET, "/v1/rate-limits", Some(OPERATE)).empty())
        .await;
    assert_eq!(status, StatusCode::OK, "{empty}");
    assert_eq!(
        (empty["kept"].clone(), empty["items"].clone()),
        (json!(true), json!([]))
    );

    let rate = RateLimit {
        per_second: 0.001,
        burst: 2,
    };
    let b = &app.backend;
    assert_eq!(
        b.take("task:summarize", rate, 2)
            .await
            .expect("take")
            .granted,
        2
    );
    b.take("task:echo", rate, 1).await.expect("take");
    let until = chrono::Utc::now() + chrono::Duration::seconds(120);
    b.pause("origin:https://api.openai.com:443", rate, until)
        .await
        .expect("pause");
    b.take("max_running:summarize", rate, 1)
        .await
        .expect("take");

    let (status, got) = app
        .send(req(Method::GET, "/v1/rate-limits", Some(OPERATE)).empty())
        .await;
    assert_eq!(status, StatusCode::OK, "{got}");
    let rows: Vec<(String, String, Value)> = got["items"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|i| {
                    (
                        i["kind"].as_str().unwrap_or_default().to_owned(),
                        i["target"].as_str().unwrap_or_default().to_owned(),
                        i["throttled"].clone(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(
        rows,
        [
            (
                "origin".into(),
                "https://api.openai.com:443".into(),
                json!("paused")
            ),
            ("task".into(), "summarize".into(), json!("drained")),
            ("task".into(), "echo".into(), Value::Null),
        ],
        "paused, then fewest tokens; the cap's lock row is not listed: {got}"
    );
    assert!(got["items"][0]["paused_until"].is_string(), "{got}");

    let (status, cut) = app
        .send(req(Method::GET, "/v1/rate-limits?limit=1", Some(OPERATE)).empty())
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        (
            cut["items"].as_array().map(Vec::len),
            cut["truncated"].clone()
        ),
        (Some(1), json!(true))
    );
    let (status, err) = app
        .send(req(Method::GET, "/v1/rate-limits?limit=0", Some(OPERATE)).empty())
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{err}");
    assert!(
        err["message"]
            .as_str()
            .unwrap_or_default()
            .contains("from 1 to 1000"),
        "{err}"
    );

    for token in [READ, SUBMIT, DEFAULT] {
        let (status, err) = app
            .send(req(Method::GET, "/v1/rate-limits", Some(token)).empty())
            .await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{token}: {err}");
        assert!(!err.to_string().contains("openai"), "{err}");
    }

    // The dashboard overview: the table for operate tokens, nothing of it for the others.
    let (status, _ct, page) = app
        .send_text(req(Method::GET, "/ui/fragments/overview", Some(OPERATE)).empty())
        .await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(page.contains("id=\"throttles\""), "{page}");
    assert!(
        page.contains("paused by the upstream&#x27;s Retry-After")
            || page.contains("paused by the upstream's Retry-After"),
        "{page}"
    );
    assert!(page.contains("out of tokens"), "{page}");
    let (status, _ct, page) = app
        .send_text(req(Method::GET, "/ui/fragments/overview", Some(DEFAULT)).empty())
        .await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(
        !page.contains("throttles") && !page.contains("openai"),
        "{page}"
    );
}
