//! `GET /v1/executions/{id}/events` (docs/http-api.md#stream) through the router on a real
//! MariaDB: the events of a cancelled execution in order, an exact resume from an event id, the
//! namespace rule, malformed ids, the stream cap (429) and the stream's maximum duration; and
//! `GET /v1/executions/events?ids=…` (docs/http-api.md#stream-of-several-executions) on MariaDB
//! and MySQL 9: several executions in order per id, another tenant's id indistinguishable from an
//! unknown one, exact resumes, and refused `ids`.

use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Method, StatusCode};
use futures::StreamExt;
use serde_json::{Value, json};
use sse_stream::SseStream;
use tower::ServiceExt;

use crate::support::{
    TOKEN_A, TOKEN_B, TestApp, id_of, req, servers, single_settings, tenant_settings,
};

/// An open stream's events.
struct Events(SseStream<Body>);

impl Events {
    async fn open(app: &TestApp, id: &str, token: Option<&str>, last: Option<&str>) -> Events {
        Self::open_uri(app, &format!("/v1/executions/{id}/events"), token, last).await
    }

    async fn open_uri(app: &TestApp, uri: &str, token: Option<&str>, last: Option<&str>) -> Events {
        let mut r = req(Method::GET, uri, token);
        if let Some(last) = last {
            r = r.header("last-event-id", last);
        }
        let resp = app
            .router
            .clone()
            .oneshot(r.empty())
            .await
            .expect("infallible router");
        assert_eq!(resp.status(), StatusCode::OK);
        let ct = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        assert_eq!(ct, "text/event-stream");
        Events(SseStream::new(resp.into_body()))
    }

    /// The next event as (name, id, data); `None` when the server closed the stream.
    async fn next(&mut self) -> Option<(String, Option<String>, Value)> {
        loop {
            let sse = tokio::time::timeout(Duration::from_secs(20), self.0.next())
                .await
                .expect("an event within 20 s")?
                .expect("a well-formed stream");
            if let Some(name) = sse.event {
                let data =
                    serde_json::from_str(sse.data.as_deref().unwrap_or("null")).expect("JSON data");
                return Some((name, sse.id, data));
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_shows_each_change_then_ends_and_resumes_exactly() {
    let mut settings = single_settings();
    settings.api.allowed_tasks.clear();
    let app = TestApp::start(settings).await;
    let view = app.submit(None, "s-1", "t-stream", json!({"n": 1})).await;
    let id = id_of(&view).to_string();

    let mut events = Events::open(&app, &id, None, None).await;
    let (name, first_id, data) = events.next().await.expect("the first event");
    assert_eq!(
        (name.as_str(), data["status"].as_str()),
        ("status", Some("queued"))
    );
    assert_eq!(data["id"].as_str(), Some(id.as_str()));
    let first_id = first_id.expect("a status event has an id");

    // A cancel moves the version: the stream shows it (within the wait poller's 100 ms), then
    // ends.
    let (status, _) = app
        .send(req(Method::POST, &format!("/v1/executions/{id}/cancel"), None).empty())
        .await;
    assert_eq!(status, StatusCode::OK);
    let (name, cancelled_id, data) = events.next().await.expect("the cancel");
    assert_eq!(
        (name.as_str(), data["status"].as_str()),
        ("status", Some("cancelled"))
    );
    let (name, end_id, data) = events.next().await.expect("the end");
    assert_eq!(name, "end");
    assert_eq!(end_id, None, "the end event has no id of its own");
    assert_eq!(
        data,
        json!({"execution_id": id, "reason": "terminal", "status": "cancelled"})
    );
    assert!(events.next().await.is_none(), "the server closes after end");

    // Resuming after the first event gives the rest and nothing else; after the last, only end.
    let mut resumed = Events::open(&app, &id, None, Some(&first_id)).await;
    let (name, again_id, data) = resumed.next().await.expect("the cancel again");
    assert_eq!(
        (name.as_str(), data["status"].as_str()),
        ("status", Some("cancelled"))
    );
    assert_eq!(again_id, cancelled_id);
    assert_eq!(resumed.next().await.map(|e| e.0).as_deref(), Some("end"));
    let last = cancelled_id.expect("id");
    let mut resumed = Events::open(&app, &id, None, Some(&last)).await;
    assert_eq!(resumed.next().await.map(|e| e.0).as_deref(), Some("end"));
    assert!(resumed.next().await.is_none());

    // A malformed id or Last-Event-ID is 422; an unknown execution 404.
    let (status, body) = app
        .send(req(Method::GET, "/v1/executions/nope/events", None).empty())
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    for bad in ["x", "1.2.3", "1.2.3.4.5.6.7", "-5.0.0.0.0.0"] {
        let (status, body) = app
            .send(
                req(Method::GET, &format!("/v1/executions/{id}/events"), None)
                    .header("last-event-id", bad)
                    .empty(),
            )
            .await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{bad}: {body}");
        assert!(
            body["message"]
                .as_str()
                .unwrap_or_default()
                .contains("Last-Event-ID must be the id of an event"),
            "{bad}: {body}"
        );
    }
    let missing = uuid::Uuid::new_v4();
    let (status, body) = app
        .send(
            req(
                Method::GET,
                &format!("/v1/executions/{missing}/events"),
                None,
            )
            .empty(),
        )
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::NOT_FOUND, Some("not_found"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_are_per_namespace_capped_and_bounded_in_time() {
    let mut settings = tenant_settings();
    settings.api.allowed_tasks.clear();
    settings.api.max_streams = 2;
    settings.api.max_stream_s = 1;
    let app = TestApp::start(settings).await;
    let view = app
        .submit(Some(TOKEN_A), "s-2", "t-stream", json!({}))
        .await;
    let id = id_of(&view).to_string();

    // Another tenant's execution is 404, as GET answers; no token is 401.
    let (status, _) = app
        .send(
            req(
                Method::GET,
                &format!("/v1/executions/{id}/events"),
                Some(TOKEN_B),
            )
            .empty(),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = app
        .send(req(Method::GET, &format!("/v1/executions/{id}/events"), None).empty())
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    // Two streams are open; a third is refused with 429 until one closes.
    let started = Instant::now();
    let mut one = Events::open(&app, &id, Some(TOKEN_A), None).await;
    let mut two = Events::open(&app, &id, Some(TOKEN_A), None).await;
    for s in [&mut one, &mut two] {
        let (name, _, data) = s.next().await.expect("status");
        assert_eq!(
            (name.as_str(), data["status"].as_str()),
            ("status", Some("queued"))
        );
    }
    let (status, body) = app
        .send(
            req(
                Method::GET,
                &format!("/v1/executions/{id}/events"),
                Some(TOKEN_A),
            )
            .empty(),
        )
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::TOO_MANY_REQUESTS, Some("too_many_streams")),
        "{body}"
    );

    // The execution stays queued: each stream is closed after api.max_stream_s, without end.
    assert!(one.next().await.is_none());
    assert!(two.next().await.is_none());
    let lasted = started.elapsed();
    assert!(
        lasted >= Duration::from_millis(900) && lasted < Duration::from_secs(10),
        "closed after {lasted:?}"
    );
    // Their permits are back.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut three = Events::open(&app, &id, Some(TOKEN_A), None).await;
    assert_eq!(three.next().await.map(|e| e.0).as_deref(), Some("status"));

    // A stream of several executions takes one permit, whatever the number of its ids.
    let uri = format!("/v1/executions/events?ids={id},{}", uuid::Uuid::new_v4());
    let mut four = Events::open_uri(&app, &uri, Some(TOKEN_A), None).await;
    assert_eq!(four.next().await.map(|e| e.0).as_deref(), Some("status"));
    let (status, body) = app
        .send(req(Method::GET, &uri, Some(TOKEN_A)).empty())
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::TOO_MANY_REQUESTS, Some("too_many_streams")),
        "{body}"
    );
}

/// Every event of a stream of several executions until the server closes it.
async fn drain(
    app: &TestApp,
    ids: &[&str],
    token: &str,
    last: Option<&str>,
) -> Vec<(String, String, Value)> {
    let uri = format!("/v1/executions/events?ids={}", ids.join(","));
    let mut events = Events::open_uri(app, &uri, Some(token), last).await;
    let mut out = Vec::new();
    while let Some((name, id, data)) = events.next().await {
        let id = id.expect("every event of a stream of several executions has an id");
        out.push((name, id, data));
    }
    out
}

/// The (event, status) sequence of one execution in a list of events.
fn of_execution(events: &[(String, String, Value)], id: &str) -> Vec<(String, String)> {
    events
        .iter()
        .filter(|(_, _, d)| d["execution_id"].as_str() == Some(id))
        .map(|(name, _, d)| (name.clone(), d["status"].as_str().unwrap_or("").to_owned()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_stream_follows_several_executions_of_the_callers_namespace() {
    for (server, admin) in servers() {
        let mut settings = tenant_settings();
        settings.api.allowed_tasks.clear();
        let app = TestApp::start_on(&admin, settings).await;
        let mut ids = Vec::new();
        for n in 0..3 {
            let view = app
                .submit(Some(TOKEN_A), &format!("m-{n}"), "t-many", json!({"n": n}))
                .await;
            ids.push(id_of(&view).to_string());
        }
        let theirs =
            id_of(&app.submit(Some(TOKEN_B), "m-b", "t-many", json!({})).await).to_string();
        let unknown = uuid::Uuid::new_v4().to_string();
        let listed = [
            ids[0].as_str(),
            theirs.as_str(),
            ids[1].as_str(),
            unknown.as_str(),
            ids[2].as_str(),
        ];

        // Open the stream, read the three queued statuses, then cancel the three executions one
        // by one (the second first) while it is open.
        let uri = format!("/v1/executions/events?ids={}", listed.join(","));
        let mut stream = Events::open_uri(&app, &uri, Some(TOKEN_A), None).await;
        let mut seen = Vec::new();
        for _ in 0..3 {
            let (name, id, data) = stream.next().await.expect("a queued status");
            assert_eq!(
                (name.as_str(), data["status"].as_str()),
                ("status", Some("queued")),
                "[{server}] {data}"
            );
            seen.push((name, id.expect("an id"), data));
        }
        for i in [1, 0, 2] {
            let (status, _) = app
                .send(
                    req(
                        Method::POST,
                        &format!("/v1/executions/{}/cancel", ids[i]),
                        Some(TOKEN_A),
                    )
                    .json(&json!({})),
                )
                .await;
            assert_eq!(status, StatusCode::OK, "[{server}]");
        }
        while let Some((name, id, data)) = stream.next().await {
            seen.push((name, id.expect("an id"), data));
        }
        // Per execution, in order: queued, cancelled, end; nothing of the other tenant's
        // execution or the unknown id; each event's id is new.
        for id in &ids {
            assert_eq!(
                of_execution(&seen, id),
                [
                    ("status".to_owned(), "queued".to_owned()),
                    ("status".to_owned(), "cancelled".to_owned()),
                    ("end".to_owned(), "cancelled".to_owned()),
                ],
                "[{server}] events of {id}"
            );
        }
        assert_eq!(seen.len(), 9, "[{server}] nothing else: {seen:?}");
        let distinct: std::collections::HashSet<&str> =
            seen.iter().map(|(_, id, _)| id.as_str()).collect();
        assert_eq!(distinct.len(), seen.len(), "[{server}] no event id twice");
        for (_, _, data) in &seen {
            assert_eq!(data["namespace"].as_str().unwrap_or("tenant-a"), "tenant-a");
        }

        // Resuming from any event's id with the same ids gives exactly what followed it, per
        // execution (statuses the stream had already passed are not shown again).
        for (k, (_, last, _)) in seen.iter().enumerate() {
            let rest = drain(&app, &listed, TOKEN_A, Some(last)).await;
            for id in &ids {
                let before = of_execution(&seen[..=k], id);
                let wanted = of_execution(&seen[k + 1..], id);
                let got = of_execution(&rest, id);
                // The queued status of an execution not yet shown at event k is read again
                // as cancelled (a status event is the execution as read).
                let wanted: Vec<_> = if before.is_empty() {
                    wanted.into_iter().filter(|(_, s)| s != "queued").collect()
                } else {
                    wanted
                };
                assert_eq!(got, wanted, "[{server}] resumed after event {k}, {id}");
            }
        }
        // A client that read the executions starts from their versions: only what changed.
        let versions: Vec<String> = listed
            .iter()
            .map(|id| {
                seen.iter()
                    .filter(|(n, _, d)| n == "status" && d["id"].as_str() == Some(id))
                    .filter_map(|(_, _, d)| d["version"].as_i64())
                    .max()
                    .unwrap_or(-1)
                    .to_string()
            })
            .collect();
        let rest = drain(&app, &listed, TOKEN_A, Some(&versions.join(","))).await;
        assert_eq!(
            rest.iter().map(|(n, _, _)| n.as_str()).collect::<Vec<_>>(),
            ["end", "end", "end"],
            "[{server}] from the current versions, only the ends: {rest:?}"
        );

        // Another tenant's id and an unknown one: the same answer, no event at all.
        assert!(drain(&app, &[&theirs], TOKEN_A, None).await.is_empty());
        assert!(drain(&app, &[&unknown], TOKEN_A, None).await.is_empty());
        // Its own tenant sees it.
        let mut own = Events::open_uri(
            &app,
            &format!("/v1/executions/events?ids={theirs}"),
            Some(TOKEN_B),
            None,
        )
        .await;
        let (name, _, data) = own.next().await.expect("its status");
        assert_eq!(
            (
                name.as_str(),
                data["execution_id"].as_str(),
                data["status"].as_str()
            ),
            ("status", Some(theirs.as_str()), Some("queued")),
            "[{server}]"
        );

        // Malformed ids and Last-Event-IDs are 422 with a specific message; no token is 401.
        let many: Vec<String> = (0..201).map(|_| uuid::Uuid::new_v4().to_string()).collect();
        for (query, last, wanted) in [
            ("", None, "ids is required"),
            ("?ids=", None, "ids is required"),
            (
                "?ids=nope",
                None,
                "ids item 1 is not an execution id (UUID): 'nope'",
            ),
            (&*format!("?ids={},", ids[0]), None, "ids item 2 is empty"),
            (&*format!("?ids={0},{0}", ids[0]), None, "twice"),
            (
                &*format!("?ids={}", many.join(",")),
                None,
                "ids lists 201 items; at most 200",
            ),
            (
                &*format!("?ids={}", ids[0]),
                Some("1,2"),
                "2 positions for 1 ids",
            ),
            (
                &*format!("?ids={}", ids[0]),
                Some("x"),
                "position 1 is malformed",
            ),
        ] {
            let mut r = req(
                Method::GET,
                &format!("/v1/executions/events{query}"),
                Some(TOKEN_A),
            );
            if let Some(last) = last {
                r = r.header("last-event-id", last);
            }
            let (status, body) = app.send(r.empty()).await;
            assert_eq!(
                (status, body["code"].as_str()),
                (StatusCode::UNPROCESSABLE_ENTITY, Some("invalid_argument")),
                "[{server}] {query}: {body}"
            );
            assert!(
                body["message"]
                    .as_str()
                    .unwrap_or_default()
                    .contains(wanted),
                "[{server}] {query}: {body}"
            );
        }
        let (status, _) = app
            .send(
                req(
                    Method::GET,
                    &format!("/v1/executions/events?ids={}", ids[0]),
                    None,
                )
                .empty(),
            )
            .await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "[{server}]");
    }
}
