//! A hostile tenant against the deployments API (docs/deployment-policy.md#threat-model-a-tenant-with-a-deploy-token),
//! on real MariaDB and MySQL with the real load check: what a `deploy` token of its own namespace
//! tries in order to exceed the operator's ceilings, reach another namespace or exhaust the
//! server, and the refusal each attempt gets.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::http::{Method, StatusCode};
use onestep_api::deploy::DeployApi;
use onestep_api::router;
use onestep_core::deploy_policy::{DeploymentPolicy, PolicyCeiling};
use serde_json::{Value, json};

use crate::deploy::{
    DEPLOY_A, RuntimeVetter, component, deploy, origin, policy, revision, settings, start, upload,
};
use crate::support::{TestApp, req, servers};

/// The same app (same database) with the operator's policy replaced, as after the operator
/// edits `deployments:` and restarts `onestep serve`.
fn with_policy(app: &mut TestApp, policy: Option<DeploymentPolicy>) {
    use onestep_core::backend::Backend;
    let state = app.state.clone().with_deployments(DeployApi {
        components: app.backend.components(),
        deployments: app.backend.deployments(),
        vetter: Arc::new(RuntimeVetter),
        policy,
    });
    app.router = router(state.clone());
    app.state = state;
}

async fn activate(app: &TestApp, task: &str, version: i64) -> (StatusCode, Value) {
    app.send(
        req(
            Method::POST,
            &format!("/v1/deployments/{task}/versions/{version}/activate"),
            Some(DEPLOY_A),
        )
        .json(&json!({"note": "roll back"})),
    )
    .await
}

async fn active_version(app: &TestApp, task: &str) -> Value {
    let (s, t) = app
        .send(
            req(
                Method::GET,
                &format!("/v1/deployments/{task}"),
                Some(DEPLOY_A),
            )
            .empty(),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{t}");
    t["active"]["version"].clone()
}

/// A rollback is a deploy of an old version: it is checked against the operator's policy **as it
/// is now**. An operator who revoked a secret, an origin or memory from a namespace must not see
/// the tenant get it back by activating a version deployed before the change; a namespace whose
/// policy was removed cannot activate at all. Deactivating (giving up) stays allowed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollback_is_checked_against_the_current_policy() {
    for (server, admin) in servers() {
        let mut app = start(&admin, Some(policy())).await;
        let (_, c) = upload(&app, DEPLOY_A, component("echo.wasm")).await;
        let digest = c["digest"].as_str().expect("digest").to_owned();
        // v1 under the first policy: the openai secret, 128 MiB.
        let granted = settings(
            "echo",
            json!({
                "sandbox": {
                    "memory_limit_bytes": 134217728u64,
                    "network": {"allow": [{"origin": "https://api.openai.com"}]},
                },
                "headers": [{"origin": "https://api.openai.com", "name": "Authorization",
                             "value": {"secret": "openai"}}],
            }),
        );
        let (s, d) = deploy(
            &app,
            DEPLOY_A,
            json!({"settings": granted, "digest": digest}),
        )
        .await;
        assert_eq!(s, StatusCode::CREATED, "{server}: {d}");
        // v2: the defaults.
        let (s, d) = deploy(
            &app,
            DEPLOY_A,
            json!({"settings": settings("echo", json!({})), "digest": digest}),
        )
        .await;
        assert_eq!(s, StatusCode::CREATED, "{server}: {d}");

        // The operator revokes the secret, the origin and half the memory.
        let lowered = PolicyCeiling {
            memory_limit_bytes: 64 << 20,
            concurrency: 4,
            max_attempts: 3,
            max_component_bytes: 1_000_000,
            ..PolicyCeiling::default()
        };
        let mut p = policy();
        p.namespaces.insert("tenant-a".into(), lowered);
        with_policy(&mut app, Some(p));
        let rev = revision(&app).await;
        let (s, e) = activate(&app, "echo", 1).await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{server}: {e}");
        assert_eq!(e["code"], "policy_violation", "{e}");
        let limits: Vec<&str> = e["violations"]
            .as_array()
            .expect("violations")
            .iter()
            .filter_map(|v| v["limit"].as_str())
            .collect();
        assert!(limits.contains(&"sandbox.memory_limit_bytes"), "{e}");
        assert!(limits.contains(&"sandbox.network.allow[0]"), "{e}");
        assert!(
            limits
                .iter()
                .any(|l| l.starts_with("sandbox.network.headers")),
            "{e}"
        );
        assert!(
            e["message"]
                .as_str()
                .unwrap_or_default()
                .contains("version 1"),
            "the refusal names the version: {e}"
        );
        // Nothing changed: v2 still serves, the revision did not move.
        assert_eq!(revision(&app).await, rev, "{server}");
        assert_eq!(active_version(&app, "echo").await, 2, "{server}");
        // The version within the new policy is still activatable (it is the active one).
        let (s, e) = activate(&app, "echo", 2).await;
        assert_eq!(s, StatusCode::OK, "{server}: {e}");

        // The operator removes the namespace's policy entirely: no activation at all, but the
        // tenant may still stop its task.
        let mut p = policy();
        p.namespaces = BTreeMap::new();
        with_policy(&mut app, Some(p));
        let (s, e) = activate(&app, "echo", 1).await;
        assert_eq!(s, StatusCode::FORBIDDEN, "{server}: {e}");
        assert_eq!(e["violations"][0]["kind"], "no_policy", "{e}");
        assert_eq!(revision(&app).await, rev, "{server}");
        let (s, e) = app
            .send(
                req(
                    Method::POST,
                    "/v1/deployments/echo/deactivate",
                    Some(DEPLOY_A),
                )
                .empty(),
            )
            .await;
        assert_eq!(s, StatusCode::OK, "{server}: {e}");
        // The origin helper is shared with the other deploy tests.
        let _ = origin("https://api.openai.com");
    }
}

/// An upload whose body never ends: `declared` bytes announced, `sent` sent, the rest held back
/// until the returned sender is dropped. The request runs on its own task.
fn stalled_upload(
    app: &TestApp,
    token: &str,
    declared: usize,
    sent: usize,
) -> (
    tokio::sync::mpsc::Sender<Result<axum::body::Bytes, std::io::Error>>,
    tokio::task::JoinHandle<StatusCode>,
) {
    use tower::ServiceExt;
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<axum::body::Bytes, std::io::Error>>(4);
    let body = axum::body::Body::from_stream(futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    }));
    let request = req(Method::POST, "/v1/components", Some(token))
        .header("content-length", &declared.to_string())
        .raw("application/wasm", body);
    let router = app.router.clone();
    let handle = tokio::spawn(async move {
        router
            .oneshot(request)
            .await
            .map(|r| r.status())
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    });
    let first = tx.clone();
    tokio::spawn(async move {
        let _ = first
            .send(Ok(axum::body::Bytes::from(vec![0u8; sent])))
            .await;
    });
    (tx, handle)
}

/// The API holds a component upload's (and a deploy's) bytes in memory, so how many it holds at
/// once is bounded: at most two per namespace (a third answers 429 `deploy_busy` at once, before
/// its body is read) and a byte budget for the whole server (a transfer that does not fit answers
/// 429 too), so a tenant opening hundreds of stalled 64 MiB uploads cannot exhaust the API's
/// memory (it took 1.6 GB with 24 of them before), and another namespace still gets through with
/// what fits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn component_transfers_are_bounded_per_namespace_and_in_total() {
    for (server, admin) in servers() {
        let mut p = policy();
        let a = p.namespaces["tenant-a"].clone();
        p.namespaces.insert("tenant-b".into(), a);
        let mut app = start(&admin, Some(p)).await;
        // A budget of 3 MB: each transfer reserves twice its size (the body and its copy).
        app.state =
            app.state
                .clone()
                .with_transfer_limits(onestep_api::transfers::TransferLimits {
                    per_namespace: 2,
                    budget_bytes: 3_000_000,
                });
        app.router = router(app.state.clone());
        let (s, c) = upload(&app, DEPLOY_A, component("echo.wasm")).await;
        assert_eq!(s, StatusCode::CREATED, "{server}: {c}");
        let echo = c["digest"].clone();

        let (hold1, first) = stalled_upload(&app, DEPLOY_A, 600_000, 1000);
        let (hold2, second) = stalled_upload(&app, DEPLOY_A, 600_000, 1000);
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        assert!(!first.is_finished() && !second.is_finished(), "{server}");

        // A third transfer of the same namespace: refused at once, its body never read.
        let started = std::time::Instant::now();
        let (s, e) = upload(&app, DEPLOY_A, component("countdown.wasm")).await;
        assert_eq!(s, StatusCode::TOO_MANY_REQUESTS, "{server}: {e}");
        assert_eq!(e["code"], "deploy_busy", "{e}");
        let msg = e["message"].as_str().unwrap_or_default();
        assert!(msg.contains("tenant-a") && msg.contains("2 "), "{msg}");
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        // A deploy of that namespace is a transfer too (it reads the component's bytes).
        let (s, e) = deploy(
            &app,
            DEPLOY_A,
            json!({"settings": settings("echo", json!({})), "digest": echo}),
        )
        .await;
        assert_eq!(s, StatusCode::TOO_MANY_REQUESTS, "{server}: {e}");

        // Another namespace: a large upload does not fit the server's budget (2 × 1.2 MB held),
        // a small one does.
        let mut big = vec![1u8; 600_000];
        big[0] = 2;
        let (s, e) = app
            .send(
                req(
                    Method::POST,
                    "/v1/components",
                    Some(crate::deploy::DEPLOY_B),
                )
                .raw("application/wasm", big),
            )
            .await;
        assert_eq!(s, StatusCode::TOO_MANY_REQUESTS, "{server}: {e}");
        assert_eq!(e["code"], "deploy_busy", "{e}");
        assert!(
            e["message"]
                .as_str()
                .unwrap_or_default()
                .contains("3000000"),
            "{e}"
        );
        let (s, e) = upload(&app, crate::deploy::DEPLOY_B, component("flaky.wasm")).await;
        assert_eq!(s, StatusCode::CREATED, "{server}: {e}");

        // The stalled uploads end (their bodies fail); their reservations are given back.
        for hold in [hold1, hold2] {
            let _ = hold
                .send(Err(std::io::Error::other("the client went away")))
                .await;
        }
        for h in [first, second] {
            let status = tokio::time::timeout(std::time::Duration::from_secs(10), h)
                .await
                .expect("ends")
                .expect("task");
            assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{server}");
        }
        let (s, e) = upload(&app, DEPLOY_A, component("countdown.wasm")).await;
        assert_eq!(s, StatusCode::CREATED, "{server}: {e}");
    }
}

/// Every task with an active version costs every following worker a claim loop polling the
/// database and a compiled build (one idle worker with 317 deployed tasks made ~2,500 queries/s
/// on MariaDB), so the tasks of a namespace with an active version are a ceiling (`max_tasks`,
/// default 20): one more deploy or activation is refused with 422 `policy_violation` naming
/// `tasks`, and writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tasks_of_a_namespace_are_a_ceiling() {
    for (server, admin) in servers() {
        let mut p = policy();
        if let Some(c) = p.namespaces.get_mut("tenant-a") {
            c.max_tasks = 2;
        }
        let app = start(&admin, Some(p)).await;
        let (_, c) = upload(&app, DEPLOY_A, component("echo.wasm")).await;
        let digest = c["digest"].clone();
        for task in ["t1", "t2"] {
            let (s, e) = deploy(
                &app,
                DEPLOY_A,
                json!({"settings": settings(task, json!({})), "digest": digest}),
            )
            .await;
            assert_eq!(s, StatusCode::CREATED, "{server}: {e}");
        }
        let rev = revision(&app).await;
        let (s, e) = deploy(
            &app,
            DEPLOY_A,
            json!({"settings": settings("t3", json!({})), "digest": digest}),
        )
        .await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{server}: {e}");
        assert_eq!(e["code"], "policy_violation", "{e}");
        assert_eq!(e["violations"][0]["limit"], "tasks", "{e}");
        assert!(
            e["message"].as_str().unwrap_or_default().contains(
                "asked 3 tasks with an active version, the ceiling for namespace \"tenant-a\" is 2"
            ),
            "{e}"
        );
        assert_eq!(revision(&app).await, rev, "{server}");
        // A new version of an active task is not a new task.
        let (s, e) = deploy(
            &app,
            DEPLOY_A,
            json!({"settings": settings("t1", json!({"concurrency": 2})), "digest": digest}),
        )
        .await;
        assert_eq!(s, StatusCode::CREATED, "{server}: {e}");
        // Deactivate t2, deploy t3; then t2 cannot come back by activation.
        let (s, e) = app
            .send(
                req(
                    Method::POST,
                    "/v1/deployments/t2/deactivate",
                    Some(DEPLOY_A),
                )
                .empty(),
            )
            .await;
        assert_eq!(s, StatusCode::OK, "{e}");
        let (s, e) = deploy(
            &app,
            DEPLOY_A,
            json!({"settings": settings("t3", json!({})), "digest": digest}),
        )
        .await;
        assert_eq!(s, StatusCode::CREATED, "{server}: {e}");
        let (s, e) = activate(&app, "t2", 1).await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{server}: {e}");
        assert_eq!(e["violations"][0]["limit"], "tasks", "{e}");
    }
}

/// A digest is a name, not a capability. Before, a tenant that learned another namespace's
/// digest could deploy (run) that component in its own namespace without ever holding its
/// bytes, tell whether any digest is stored (`unknown_component` or not), read its exact size
/// from the component ceiling violation, and learn from an upload's `created: false` that
/// another tenant stored the same bytes. Now a deploy names only a component its namespace
/// uploaded; anything else is answered exactly as bytes never stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_namespaces_digest_is_not_a_capability() {
    for (server, admin) in servers() {
        let mut p = policy();
        let mut small = p.namespaces["tenant-a"].clone();
        // tenant-b's ceiling is below the component's size: the size oracle of before.
        small.max_component_bytes = 10_000;
        p.namespaces.insert("tenant-b".into(), small);
        let app = start(&admin, Some(p)).await;
        let b = crate::deploy::DEPLOY_B;
        let secret_bytes = component("echo.wasm");
        let (s, c) = upload(&app, DEPLOY_A, secret_bytes.clone()).await;
        assert_eq!(s, StatusCode::CREATED, "{server}: {c}");
        let digest = c["digest"].clone();
        let mut other = settings("stolen", json!({}));
        other["namespace"] = json!("tenant-b");

        // tenant-b deploys tenant-a's digest: the same refusal as for bytes never stored.
        let (s, e) = deploy(&app, b, json!({"settings": other, "digest": digest})).await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{server}: {e}");
        assert_eq!(e["code"], "unknown_component", "{e}");
        let never = onestep_core::components::ComponentDigest::of(b"never stored");
        let (_, e2) = deploy(
            &app,
            b,
            json!({"settings": other, "digest": never.as_str()}),
        )
        .await;
        assert_eq!(
            e["message"]
                .as_str()
                .unwrap_or_default()
                .replace(digest.as_str().unwrap_or_default(), "D"),
            e2["message"]
                .as_str()
                .unwrap_or_default()
                .replace(never.as_str(), "D"),
            "the refusal tells nothing about the other namespace's component"
        );
        assert!(
            !e.to_string().contains(&secret_bytes.len().to_string()),
            "no size: {e}"
        );
        let (s, h) = app
            .send(req(Method::GET, "/v1/deployments", Some(b)).empty())
            .await;
        assert_eq!((s, &h["items"]), (StatusCode::OK, &json!([])), "{server}");

        // Uploading the same bytes: new for tenant-b (nothing told of tenant-a) — and over its
        // ceiling here, so refused before anything is read.
        let (s, e) = upload(&app, b, secret_bytes.clone()).await;
        assert_eq!(s, StatusCode::PAYLOAD_TOO_LARGE, "{server}: {e}");
        let small_bytes = b"a small blob both namespaces upload".to_vec();
        let (s, c) = upload(&app, DEPLOY_A, small_bytes.clone()).await;
        assert_eq!(
            (s, &c["created"]),
            (StatusCode::CREATED, &json!(true)),
            "{c}"
        );
        let (s, c) = upload(&app, b, small_bytes.clone()).await;
        assert_eq!(
            (s, &c["created"]),
            (StatusCode::CREATED, &json!(true)),
            "{server}: another namespace's upload of the same bytes is not revealed: {c}"
        );
        let (s, c) = upload(&app, b, small_bytes).await;
        assert_eq!((s, &c["created"]), (StatusCode::OK, &json!(false)), "{c}");

        // The owner deploys its own digest as before.
        let (s, d) = deploy(
            &app,
            DEPLOY_A,
            json!({"settings": settings("echo", json!({})), "digest": digest}),
        )
        .await;
        assert_eq!(s, StatusCode::CREATED, "{server}: {d}");

        // A namespace no policy covers is refused before its digest is looked at (403, as its
        // uploads), so it cannot probe the store either.
        let mut c_ns = settings("x", json!({}));
        c_ns["namespace"] = json!("tenant-c");
        let mut p = policy();
        p.namespaces.remove("tenant-b");
        let mut app = app;
        with_policy(&mut app, Some(p));
        let mut other_b = settings("x", json!({}));
        other_b["namespace"] = json!("tenant-b");
        let (s, e) = deploy(&app, b, json!({"settings": other_b, "digest": digest})).await;
        assert_eq!(s, StatusCode::FORBIDDEN, "{server}: {e}");
        assert_eq!(e["violations"][0]["kind"], "no_policy", "{e}");
        let _ = c_ns;
    }
}

/// The operator's secrets of other namespaces are not revealed: before, naming a secret the
/// operator holds for another namespace answered "which namespace … may not reference" while a
/// made-up name answered "which the operator does not hold", so a tenant could enumerate the
/// other tenants' secret names. Both now get the same answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secret_names_of_other_namespaces_are_not_revealed() {
    for (server, admin) in servers() {
        let app = start(&admin, Some(policy())).await;
        let (_, c) = upload(&app, DEPLOY_A, component("echo.wasm")).await;
        let digest = c["digest"].clone();
        let asking = |name: &str| {
            settings(
                "echo",
                json!({
                    "sandbox": {"network": {"allow": [{"origin": "https://api.openai.com"}]}},
                    "headers": [{"origin": "https://api.openai.com", "name": "Authorization",
                                 "value": {"secret": name}}],
                }),
            )
        };
        // "github" is held by the operator (for others), "nope" is not held at all.
        let mut answers = Vec::new();
        for name in ["github", "nope"] {
            let (s, e) = deploy(
                &app,
                DEPLOY_A,
                json!({"settings": asking(name), "digest": digest}),
            )
            .await;
            assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{server}: {e}");
            assert_eq!(e["violations"][0]["kind"], "secret_not_allowed", "{e}");
            answers.push(
                e["message"]
                    .as_str()
                    .unwrap_or_default()
                    .replace(&format!("{name:?}"), "NAME"),
            );
        }
        assert_eq!(answers[0], answers[1], "{server}");
        assert!(
            answers[0].contains("may reference: openai"),
            "{}",
            answers[0]
        );
    }
}

/// `POST /v1/deployments` takes the typed settings as JSON; they must obey the rules a manifest's
/// parser enforces, or a tenant gets through JSON what the manifest refuses. Before: task names
/// the submit API refuses (`a/b`, a right-to-left override that reorders what a reader of the
/// dashboard sees, a zero-width joiner) became deployments no execution can ever reach, each a
/// claim loop on every worker; environment names with `=` or U+0000 reached the sandbox; zero
/// limits the manifest calls invalid were accepted. Every refusal names the field and the rule,
/// and a bad number names where it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_settings_obey_the_manifests_rules() {
    for (server, admin) in servers() {
        let app = start(&admin, Some(policy())).await;
        let (_, c) = upload(&app, DEPLOY_A, component("echo.wasm")).await;
        let digest = c["digest"].clone();
        let base = settings("echo", json!({}));
        let with = |path: &[&str], v: Value| {
            let mut s = base.clone();
            let mut at = &mut s;
            for (i, key) in path.iter().enumerate() {
                if i + 1 == path.len() {
                    at[*key] = v.clone();
                } else {
                    at = &mut at[*key];
                }
            }
            s
        };
        let cases: Vec<(Value, &str, &str)> = vec![
            (
                with(&["task"], json!("a/b")),
                "invalid_argument",
                "task may contain only",
            ),
            (
                with(&["task"], json!("a\u{202e}b")),
                "invalid_argument",
                "task may contain only",
            ),
            (
                with(&["task"], json!("a\u{200d}b")),
                "invalid_argument",
                "task may contain only",
            ),
            (
                with(&["sandbox", "env_values"], json!({"A=B": "x"})),
                "invalid_argument",
                "sandbox.env_values key \"A=B\" must be an environment variable name",
            ),
            (
                with(&["sandbox", "env_values"], json!({"A\u{0}": "x"})),
                "invalid_argument",
                "must be an environment variable name",
            ),
            (
                with(&["sandbox", "fuel"], json!(0)),
                "invalid_argument",
                "sandbox.fuel must be null (unlimited) or an integer >= 1",
            ),
            (
                with(&["sandbox", "output_limit_bytes"], json!(0)),
                "invalid_argument",
                "sandbox.output_limit_bytes must be an integer >= 1",
            ),
            (
                with(&["sandbox", "log_limit_bytes"], json!(10)),
                "invalid_argument",
                "sandbox.log_limit_bytes must be an integer >= 1024",
            ),
            (
                with(&["sandbox", "max_log_lines"], json!(0)),
                "invalid_argument",
                "sandbox.max_log_lines must be an integer >= 1",
            ),
            (
                with(&["sandbox", "network", "max_connections"], json!(0)),
                "invalid_argument",
                "sandbox.network.max_connections must be an integer from 1 to 4096",
            ),
            (
                with(&["sandbox", "network", "connect_timeout"], json!(0)),
                "invalid_argument",
                "sandbox.network.connect_timeout must be a number of seconds > 0",
            ),
            (
                with(&["concurrency"], json!(-1)),
                "invalid_body",
                "settings.concurrency",
            ),
            (
                with(&["sandbox", "memory_limit_bytes"], json!("big")),
                "invalid_body",
                "settings.sandbox.memory_limit_bytes",
            ),
        ];
        let rev = revision(&app).await;
        for (settings, code, text) in cases {
            let (s, e) = deploy(
                &app,
                DEPLOY_A,
                json!({"settings": settings, "digest": digest}),
            )
            .await;
            assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{server} {text}: {e}");
            assert_eq!(e["code"], code, "{text}: {e}");
            assert!(
                e["message"].as_str().unwrap_or_default().contains(text),
                "{server}: expected {text:?} in {e}"
            );
        }
        assert_eq!(revision(&app).await, rev, "{server}: nothing written");
    }
}
