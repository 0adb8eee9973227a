//! `GET /v1/executions/{id}/attempts` and `GET /v1/executions/{id}/attempts/{n}/logs` on a real
//! MariaDB (docs/http-api.md#attempts): a worker's live and final diagnostics as the API shows
//! them (checked against the OpenAPI document like every response), `progress` in the view of a
//! running execution only, `after_seq`, and the exact errors for bad ids, bad numbers, absent
//! attempts and another namespace's execution.

use axum::http::{Method, StatusCode};
use onestep_core::diagnostics::{
    AttemptDiagnostics, AttemptProgress, LiveDiagnostics, LogLine, LogTail, RunFacts,
};
use onestep_core::ports::LeaseStore;
use onestep_core::request::ClaimRequest;
use onestep_core::{Completion, ErrorObject};
use serde_json::json;

use crate::support::{TestApp, id_of, req, single_settings};

fn line(seq: u64, message: &str) -> LogLine {
    LogLine {
        seq,
        at: chrono::Utc::now(),
        level: if seq.is_multiple_of(2) {
            "warn"
        } else {
            "stdout"
        }
        .into(),
        message: message.into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attempts_and_logs_of_an_execution() {
    let app = TestApp::start(single_settings()).await;
    let view = app
        .submit(None, "k-attempts", "run_agent", json!({"n": 1}))
        .await;
    let id = id_of(&view);
    let path = format!("/v1/executions/{id}/attempts");

    // No attempt yet.
    let (status, body) = app.send(req(Method::GET, &path, None).empty()).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["items"], json!([]));

    let leases = app
        .backend
        .claim(&ClaimRequest {
            namespaces: onestep_core::request::NamespaceScope::One("local".into()),
            fair: Default::default(),
            task_names: vec!["run_agent".into()],
            limit: 1,
            lease_duration_s: 30.0,
            worker_id: "w-api".into(),
            max_running: None,
        })
        .await
        .expect("claim");
    let lease = leases[0].lease_ref();
    let progress = AttemptProgress {
        done: 2,
        total: 8,
        note: "pages".into(),
        at: chrono::Utc::now(),
    };
    app.backend
        .record_live(&[(
            lease,
            LiveDiagnostics {
                progress: Some(progress.clone()),
                log: Some(LogTail {
                    total_lines: 2,
                    lines: vec![line(1, "one"), line(2, "two")],
                }),
            },
        )])
        .await
        .expect("live");

    // Running: the view carries the progress, the attempt too.
    let (status, got) = app
        .send(req(Method::GET, &format!("/v1/executions/{id}"), None).empty())
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(got["status"], "running");
    assert_eq!(got["progress"]["done"], 2);
    assert_eq!(got["progress"]["total"], 8);
    assert_eq!(got["progress"]["note"], "pages");
    let (_, body) = app.send(req(Method::GET, &path, None).empty()).await;
    assert_eq!(body["items"][0]["status"], "running");
    assert_eq!(body["items"][0]["worker_id"], "w-api");
    assert_eq!(body["items"][0]["log_lines"], 2);
    assert_eq!(body["items"][0]["message"], json!(null));

    // Following: only lines after `after_seq`.
    let logs = format!("{path}/1/logs");
    let (status, body) = app
        .send(req(Method::GET, &format!("{logs}?after_seq=1"), None).empty())
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["total_lines"], 2);
    assert_eq!(body["lines"].as_array().map(Vec::len), Some(1));
    assert_eq!(body["lines"][0]["message"], "two");
    assert_eq!(body["lines"][0]["level"], "warn");

    // The final write.
    let digest = "0f".repeat(32);
    app.backend
        .complete(
            &lease,
            &Completion::failed(ErrorObject::new("error", "HandlerError", Some("handler")))
                .with_diagnostics(AttemptDiagnostics {
                    message: Some("no such column: amount".into()),
                    progress: Some(progress),
                    log: Some(LogTail {
                        total_lines: 3,
                        lines: vec![line(1, "one"), line(2, "two"), line(3, "three")],
                    }),
                    facts: RunFacts {
                        trap_kind: None,
                        component_digest: Some(digest.clone()),
                        fuel_consumed: None,
                        peak_memory_bytes: Some(131072),
                    },
                }),
        )
        .await
        .expect("complete");
    let (_, got) = app
        .send(req(Method::GET, &format!("/v1/executions/{id}"), None).empty())
        .await;
    assert_eq!(got["status"], "failed");
    assert!(
        got.get("progress").is_none(),
        "progress only while running: {got}"
    );
    // The caller's view: the newest attempt with the handler's own message.
    let last = &got["last_attempt"];
    assert_eq!(last["attempt"], 1, "{got}");
    assert_eq!(last["status"], "failed");
    assert_eq!(last["message"], "no such column: amount");
    assert_eq!(last["progress"]["note"], "pages");
    assert!(last["finished_at"].is_string());
    assert!(got.get("cancel_reason").is_none(), "{got}");
    // `/result`'s 422 carries it too.
    let (status, err) = app
        .send(req(Method::GET, &format!("/v1/executions/{id}/result"), None).empty())
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{err}");
    assert_eq!(err["code"], "failed");
    assert_eq!(err["last_attempt"]["message"], "no such column: amount");
    assert_eq!(err["last_attempt"]["attempt"], 1);
    let (_, body) = app.send(req(Method::GET, &path, None).empty()).await;
    let a = &body["items"][0];
    assert_eq!(a["attempt"], 1);
    assert_eq!(a["status"], "failed");
    assert_eq!(a["message"], "no such column: amount");
    assert_eq!(a["error"]["exception_type"], "HandlerError");
    assert_eq!(a["component_digest"], digest.as_str());
    assert_eq!(a["peak_memory_bytes"], 131072);
    assert_eq!(a["progress"]["done"], 2);
    assert_eq!(a["diagnostics"], true);
    assert!(a["finished_at"].is_string());
    let (_, body) = app.send(req(Method::GET, &logs, None).empty()).await;
    let messages: Vec<&str> = body["lines"]
        .as_array()
        .expect("lines")
        .iter()
        .filter_map(|l| l["message"].as_str())
        .collect();
    assert_eq!(messages, ["one", "two", "three"]);
    assert_eq!(body["dropped_lines"], 0);

    // The dashboard's detail shows the attempt with its diagnostics; its log loads on demand.
    let (status, _, detail) = app
        .send_text(req(Method::GET, &format!("/ui/fragments/executions/{id}"), None).empty())
        .await;
    assert_eq!(status, StatusCode::OK);
    for needle in [
        "id=\"attempt-1\"",
        "w-api",
        "HandlerError (error)",
        "<span id=\"message-1\">no such column: amount</span>",
        "2&#x2f;8 pages (at ", // minijinja escapes `/` too
        &format!("title=\"sha256:{digest}\""),
        "128.0 KiB",
        "log: 3 lines",
    ] {
        assert!(detail.contains(needle), "{needle:?} in {detail}");
    }
    let (status, _, log) = app
        .send_text(
            req(
                Method::GET,
                &format!("/ui/fragments/executions/{id}/attempts/1/logs"),
                None,
            )
            .empty(),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        log.contains("warn two") && log.contains("stdout three") && !log.contains("not kept"),
        "{log}"
    );
    let (status, _, _) = app
        .send_text(
            req(
                Method::GET,
                &format!("/ui/fragments/executions/{id}/attempts/0/logs"),
                None,
            )
            .empty(),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);

    // Bad input, absent attempts, unknown executions.
    for (uri, status, needle) in [
        (
            format!("{path}/0/logs"),
            StatusCode::UNPROCESSABLE_ENTITY,
            "attempt number must be a positive integer",
        ),
        (
            format!("{path}/x/logs"),
            StatusCode::UNPROCESSABLE_ENTITY,
            "got 'x'",
        ),
        (
            format!("{logs}?after_seq=-1"),
            StatusCode::UNPROCESSABLE_ENTITY,
            "after_seq must be a non-negative integer",
        ),
        (
            format!("{path}/2/logs"),
            StatusCode::NOT_FOUND,
            "has no attempt 2",
        ),
        (
            "/v1/executions/not-a-uuid/attempts".to_owned(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "UUID",
        ),
        (
            format!("/v1/executions/{}/attempts", uuid::Uuid::new_v4()),
            StatusCode::NOT_FOUND,
            "not found",
        ),
    ] {
        let (got, body) = app.send(req(Method::GET, &uri, None).empty()).await;
        assert_eq!(got, status, "{uri}: {body}");
        let message = body["message"].as_str().unwrap_or_default();
        assert!(message.contains(needle), "{uri}: {body}");
    }
}
