//! The deployments API (docs/http-api.md#deployments) against real MariaDB and MySQL, with the
//! real load check (the WebAssembly runtime) and real components from guest-examples/out:
//! upload, deploy, repeat, rollback, deactivate, audit, every refusal (roles, another
//! namespace, over the ceilings, unknown secret, garbage and unlinkable components, oversized
//! uploads, deployments not enabled), each changing nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use async_trait::async_trait;
use axum::http::{Method, StatusCode};
use onestep_api::auth::Role;
use onestep_api::deploy::DeployApi;
use onestep_api::{Tenancy, TokenTable, router};
use onestep_core::deploy_policy::{DeploymentPolicy, DeploymentSettings, PolicyCeiling};
use onestep_core::deployments::ComponentVetter;
use onestep_core::network::OriginPattern;
use onestep_core::ports::Readiness;
use serde_json::{Value, json};

use crate::support::{AppSettings, TestApp, req, servers, single_settings};

pub(crate) const DEPLOY_A: &str = "deploy-aaaaaaaaaaaaaaaaaaaaaaaa";
pub(crate) const READ_A: &str = "read-aaaaaaaaaaaaaaaaaaaaaaaaaa";
pub(crate) const SUBMIT_A: &str = "submit-aaaaaaaaaaaaaaaaaaaaaaaa";
pub(crate) const OPERATE_A: &str = "operate-aaaaaaaaaaaaaaaaaaaaaaa";
pub(crate) const DEFAULT_A: &str = "default-aaaaaaaaaaaaaaaaaaaaaaa";
pub(crate) const DEPLOY_B: &str = "deploy-bbbbbbbbbbbbbbbbbbbbbbbb";

/// The real load check: what `onestep serve` wires (host/cli/src/wiring/vet.rs), on the same
/// runtime call.
pub(crate) struct RuntimeVetter;

#[async_trait]
impl ComponentVetter for RuntimeVetter {
    async fn vet(&self, bytes: &[u8], settings: &DeploymentSettings) -> Result<(), String> {
        let bytes = bytes.to_vec();
        let settings = settings.clone();
        tokio::task::spawn_blocking(move || {
            let rt = onestep_wasm::Runtime::new(onestep_wasm::RuntimeSettings {
                pooling: onestep_wasm::PoolingMode::Off,
                ..onestep_wasm::RuntimeSettings::default()
            })
            .map_err(|e| e.to_string())?;
            rt.load_bytes_for("t.wasm", &bytes, &settings.sandbox)
                .map(|_| ())
                .map_err(|e| format!("{e} ({})", e.kind()))
        })
        .await
        .map_err(|e| e.to_string())?
    }
}

pub(crate) fn component(name: &str) -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../guest-examples/out")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

pub(crate) fn origin(text: &str) -> OriginPattern {
    OriginPattern::parse(text).expect("origin")
}

/// Namespace `tenant-a` may deploy (components up to 1 MB, 128 MiB, concurrency 4, 3 attempts,
/// api.openai.com with secret `openai`); `tenant-b` has no policy.
pub(crate) fn policy() -> DeploymentPolicy {
    let ceiling = PolicyCeiling {
        memory_limit_bytes: 128 << 20,
        concurrency: 4,
        max_attempts: 3,
        max_component_bytes: 1_000_000,
        allow: vec![origin("https://api.openai.com")],
        secrets: BTreeMap::from([("openai".to_owned(), vec![origin("https://api.openai.com")])]),
        ..PolicyCeiling::default()
    };
    DeploymentPolicy {
        default: None,
        namespaces: BTreeMap::from([("tenant-a".to_owned(), ceiling)]),
        secret_names: BTreeSet::from(["openai".to_owned(), "github".to_owned()]),
    }
}

pub(crate) fn tenancy() -> Tenancy {
    Tenancy::Tokens(
        TokenTable::from_entries([
            (DEPLOY_A, "tenant-a", Role::Deploy),
            (READ_A, "tenant-a", Role::Read),
            (SUBMIT_A, "tenant-a", Role::Submit),
            (OPERATE_A, "tenant-a", Role::Operate),
            (DEFAULT_A, "tenant-a", Role::Default),
            (DEPLOY_B, "tenant-b", Role::Deploy),
        ])
        .expect("tokens"),
    )
}

/// An app over `admin` with the deployments API wired (`policy` `None`: not enabled).
pub(crate) async fn start(admin: &str, policy: Option<DeploymentPolicy>) -> TestApp {
    let settings = AppSettings {
        tenancy: tenancy(),
        ..single_settings()
    };
    let mut app = TestApp::start_on(admin, settings).await;
    use onestep_core::backend::Backend;
    let state = app.state.clone().with_deployments(DeployApi {
        components: app.backend.components(),
        deployments: app.backend.deployments(),
        vetter: Arc::new(RuntimeVetter),
        policy,
    });
    app.router = router(state.clone());
    app.state = state;
    app
}

/// Typed settings as `onestep deploy` sends them: `extra` merged into a minimal manifest's,
/// read as the typed settings and written back.
pub(crate) fn settings(task: &str, extra: Value) -> Value {
    let mut v = json!({"namespace": "tenant-a", "task": task, "sandbox": {}, "concurrency": 1});
    if let (Some(m), Some(e)) = (v.as_object_mut(), extra.as_object()) {
        for (k, x) in e {
            m.insert(k.clone(), x.clone());
        }
    }
    let typed: DeploymentSettings = serde_json::from_value(v).expect("typed settings");
    serde_json::to_value(&typed).expect("json")
}

pub(crate) async fn upload(app: &TestApp, token: &str, bytes: Vec<u8>) -> (StatusCode, Value) {
    app.send(req(Method::POST, "/v1/components", Some(token)).raw("application/wasm", bytes))
        .await
}

pub(crate) async fn deploy(app: &TestApp, token: &str, body: Value) -> (StatusCode, Value) {
    app.send(req(Method::POST, "/v1/deployments", Some(token)).json(&body))
        .await
}

pub(crate) async fn revision(app: &TestApp) -> i64 {
    use onestep_core::backend::Backend;
    app.backend
        .deployments()
        .revision()
        .await
        .expect("revision")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deploy_repeat_rollback_deactivate_and_audit() {
    for (server, admin) in servers() {
        let app = start(&admin, Some(policy())).await;
        assert!(app.backend.ready().await.is_ok());
        let echo = component("echo.wasm");
        let (s, c) = upload(&app, DEPLOY_A, echo.clone()).await;
        assert_eq!(s, StatusCode::CREATED, "{server}: {c}");
        assert_eq!(c["bytes"], echo.len() as u64);
        assert_eq!(c["created"], true);
        let digest1 = c["digest"].as_str().expect("digest").to_owned();
        assert!(digest1.starts_with("sha256:"));
        let (s, c2) = upload(&app, DEPLOY_A, echo.clone()).await;
        assert_eq!((s, &c2["created"]), (StatusCode::OK, &json!(false)), "{c2}");
        assert_eq!(c2["digest"], digest1.as_str());

        let body1 =
            json!({"settings": settings("echo", json!({})), "digest": digest1, "note": "first"});
        let (s, d1) = deploy(&app, DEPLOY_A, body1.clone()).await;
        assert_eq!(s, StatusCode::CREATED, "{server}: {d1}");
        assert_eq!(d1["created"], true);
        assert_eq!(d1["deployment"]["version"], 1);
        assert_eq!(d1["deployment"]["state"], "active");
        assert_eq!(d1["deployment"]["deployed_by"], "deploy@tenant-a");
        assert_eq!(d1["deployment"]["note"], "first");
        // What a worker reads back is the typed settings.
        let stored: DeploymentSettings =
            serde_json::from_value(d1["deployment"]["settings"].clone()).expect("typed back");
        assert_eq!(stored.task, "echo");

        // A repeat writes nothing.
        let rev = revision(&app).await;
        let (s, again) = deploy(&app, DEPLOY_A, body1).await;
        assert_eq!(s, StatusCode::OK, "{again}");
        assert_eq!(again["created"], false);
        assert_eq!(again["deployment"]["version"], 1);
        assert_eq!(revision(&app).await, rev);

        // v2: other component, other settings.
        let (_, c) = upload(&app, DEPLOY_A, component("countdown.wasm")).await;
        let digest2 = c["digest"].as_str().expect("digest").to_owned();
        let (s, d2) = deploy(
            &app,
            DEPLOY_A,
            json!({"settings": settings("echo", json!({"concurrency": 2})), "digest": digest2}),
        )
        .await;
        assert_eq!(s, StatusCode::CREATED, "{d2}");
        assert_eq!(d2["deployment"]["version"], 2);
        assert_eq!(d2["deployment"]["previous_version"], 1);
        assert_eq!(d2["deployment"]["previous_digest"], digest1.as_str());

        // Every role reads.
        for token in [READ_A, SUBMIT_A, OPERATE_A, DEFAULT_A, DEPLOY_A] {
            let (s, t) = app
                .send(req(Method::GET, "/v1/deployments/echo", Some(token)).empty())
                .await;
            assert_eq!(s, StatusCode::OK, "{t}");
            assert_eq!(t["active"]["version"], 2);
            assert_eq!(t["versions"].as_array().map(Vec::len), Some(2));
        }
        // Another namespace sees nothing.
        let (s, t) = app
            .send(req(Method::GET, "/v1/deployments/echo", Some(DEPLOY_B)).empty())
            .await;
        assert_eq!(s, StatusCode::NOT_FOUND, "{t}");
        assert_eq!(t["code"], "deployment_not_found");
        let (s, t) = app
            .send(req(Method::GET, "/v1/deployments", Some(DEPLOY_B)).empty())
            .await;
        assert_eq!(s, StatusCode::OK);
        assert_eq!(t["items"], json!([]));

        // Rollback to v1.
        let (s, r) = app
            .send(
                req(
                    Method::POST,
                    "/v1/deployments/echo/versions/1/activate",
                    Some(DEPLOY_A),
                )
                .json(&json!({"note": "v2 is broken"})),
            )
            .await;
        assert_eq!(s, StatusCode::OK, "{r}");
        assert_eq!((&r["version"], &r["state"]), (&json!(1), &json!("active")));
        let (s, r) = app
            .send(
                req(
                    Method::POST,
                    "/v1/deployments/echo/versions/9/activate",
                    Some(DEPLOY_A),
                )
                .empty(),
            )
            .await;
        assert_eq!(s, StatusCode::NOT_FOUND, "{r}");
        assert_eq!(r["code"], "deployment_not_found");

        // History, newest first; paging.
        let (s, h) = app
            .send(
                req(
                    Method::GET,
                    "/v1/deployments?task=echo&limit=1",
                    Some(READ_A),
                )
                .empty(),
            )
            .await;
        assert_eq!(s, StatusCode::OK, "{h}");
        assert_eq!(h["items"][0]["version"], 2);
        let before = h["next_before"].as_i64().expect("more");
        let (_, h2) = app
            .send(
                req(
                    Method::GET,
                    &format!("/v1/deployments?task=echo&before={before}"),
                    Some(READ_A),
                )
                .empty(),
            )
            .await;
        assert_eq!(h2["items"][0]["version"], 1);
        assert_eq!(h2["items"][0]["state"], "active");

        // Deactivate, then again: nothing active.
        let (s, r) = app
            .send(
                req(
                    Method::POST,
                    "/v1/deployments/echo/deactivate",
                    Some(DEPLOY_A),
                )
                .empty(),
            )
            .await;
        assert_eq!(s, StatusCode::OK, "{r}");
        assert_eq!(r["state"], "inactive");
        let (s, r) = app
            .send(
                req(
                    Method::POST,
                    "/v1/deployments/echo/deactivate",
                    Some(DEPLOY_A),
                )
                .empty(),
            )
            .await;
        assert_eq!(s, StatusCode::CONFLICT, "{r}");
        assert_eq!(r["code"], "no_active_deployment");

        // The audit: deploy v1, deploy v2, activate v1 (from v2), deactivate v1.
        let (s, ev) = app
            .send(
                req(
                    Method::GET,
                    "/v1/deployments/events?task=echo",
                    Some(OPERATE_A),
                )
                .empty(),
            )
            .await;
        assert_eq!(s, StatusCode::OK, "{ev}");
        let actions: Vec<(String, i64, Option<i64>)> = ev["items"]
            .as_array()
            .expect("items")
            .iter()
            .map(|e| {
                (
                    e["action"].as_str().unwrap_or_default().to_owned(),
                    e["version"].as_i64().unwrap_or(0),
                    e["from_version"].as_i64(),
                )
            })
            .collect();
        assert_eq!(
            actions,
            [
                ("deactivate".to_owned(), 1, Some(1)),
                ("activate".to_owned(), 1, Some(2)),
                ("deploy".to_owned(), 2, Some(1)),
                ("deploy".to_owned(), 1, None),
            ],
            "{server}"
        );
        assert_eq!(ev["items"][1]["note"], "v2 is broken");
        assert_eq!(ev["items"][1]["actor"], "deploy@tenant-a");

        // whoami tells who may deploy.
        let (_, w) = app
            .send(req(Method::GET, "/v1/whoami", Some(DEPLOY_A)).empty())
            .await;
        assert_eq!(
            (&w["role"], &w["can_deploy"], &w["can_submit"]),
            (&json!("deploy"), &json!(true), &json!(false))
        );
        let (_, w) = app
            .send(req(Method::GET, "/v1/whoami", Some(OPERATE_A)).empty())
            .await;
        assert_eq!(w["can_deploy"], false);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_name_the_reason_and_change_nothing() {
    for (server, admin) in servers() {
        let app = start(&admin, Some(policy())).await;
        let echo = component("echo.wasm");
        let (_, c) = upload(&app, DEPLOY_A, echo.clone()).await;
        let digest = c["digest"].as_str().expect("digest").to_owned();

        // Roles other than deploy may not upload or change deployments.
        for token in [READ_A, SUBMIT_A, OPERATE_A, DEFAULT_A] {
            let (s, e) = upload(&app, token, echo.clone()).await;
            assert_eq!(s, StatusCode::FORBIDDEN, "{server} {token}: {e}");
            assert!(
                e["message"]
                    .as_str()
                    .unwrap_or_default()
                    .contains("role 'deploy' only"),
                "{e}"
            );
            let (s, e) = deploy(
                &app,
                token,
                json!({"settings": settings("echo", json!({})), "digest": digest}),
            )
            .await;
            assert_eq!(s, StatusCode::FORBIDDEN, "{e}");
            let (s, _) = app
                .send(req(Method::POST, "/v1/deployments/echo/deactivate", Some(token)).empty())
                .await;
            assert_eq!(s, StatusCode::FORBIDDEN);
        }
        // Deploy tokens cannot submit.
        let (s, _) = app
            .send(
                req(Method::POST, "/v1/executions", Some(DEPLOY_A))
                    .header("idempotency-key", "k1")
                    .json(&json!({"task_name": "echo", "payload": {}})),
            )
            .await;
        assert_eq!(s, StatusCode::FORBIDDEN);

        let rev = revision(&app).await;
        // Another namespace.
        let mut other = settings("echo", json!({}));
        other["namespace"] = json!("tenant-b");
        let (s, e) = deploy(&app, DEPLOY_A, json!({"settings": other, "digest": digest})).await;
        assert_eq!(s, StatusCode::FORBIDDEN, "{e}");
        assert_eq!(e["violations"][0]["kind"], "namespace_mismatch", "{e}");
        // A namespace no policy covers cannot even upload.
        let (s, e) = upload(&app, DEPLOY_B, echo.clone()).await;
        assert_eq!(s, StatusCode::FORBIDDEN, "{e}");
        assert_eq!(e["violations"][0]["kind"], "no_policy", "{e}");

        // Over the ceilings: every limit listed with the asked value and the ceiling.
        let over = settings(
            "echo",
            json!({
                "concurrency": 5,
                "sandbox": {"memory_limit_bytes": 268435456u64},
                "retry": {"type": "max_attempts", "max_attempts": 4},
            }),
        );
        let (s, e) = deploy(&app, DEPLOY_A, json!({"settings": over, "digest": digest})).await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{e}");
        assert_eq!(e["code"], "policy_violation");
        let limits: BTreeSet<String> = e["violations"]
            .as_array()
            .expect("violations")
            .iter()
            .map(|v| v["limit"].as_str().unwrap_or_default().to_owned())
            .collect();
        assert_eq!(
            limits,
            BTreeSet::from([
                "concurrency".to_owned(),
                "sandbox.memory_limit_bytes".to_owned(),
                "retry.max_attempts".to_owned()
            ]),
            "{e}"
        );
        let msg = e["message"].as_str().unwrap_or_default();
        assert!(
            msg.contains("sandbox.memory_limit_bytes: asked 268435456, the ceiling for namespace \"tenant-a\" is 134217728"),
            "{msg}"
        );

        // Unknown secret, and one the namespace may not reference.
        let secret = |name: &str| {
            settings(
                "echo",
                json!({
                    "sandbox": {"network": {"allow": [{"origin": "https://api.openai.com"}]}},
                    "headers": [{"origin": "https://api.openai.com", "name": "Authorization", "value": {"secret": name}}],
                }),
            )
        };
        let (s, e) = deploy(
            &app,
            DEPLOY_A,
            json!({"settings": secret("nope"), "digest": digest}),
        )
        .await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{e}");
        assert_eq!(e["violations"][0]["kind"], "secret_not_allowed", "{e}");
        let (s, e) = deploy(
            &app,
            DEPLOY_A,
            json!({"settings": secret("github"), "digest": digest}),
        )
        .await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{e}");
        assert_eq!(e["violations"][0]["kind"], "secret_not_allowed", "{e}");

        // Garbage and unlinkable components: stored as blobs, refused at deploy by the load
        // check with the loader's reason.
        let (s, g) = upload(&app, DEPLOY_A, b"\0asm garbage, not a component".to_vec()).await;
        assert_eq!(s, StatusCode::CREATED, "{g}");
        let (s, e) = deploy(
            &app,
            DEPLOY_A,
            json!({"settings": settings("echo", json!({})), "digest": g["digest"]}),
        )
        .await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{e}");
        assert_eq!(e["code"], "component_unloadable");
        let (_, b) = upload(&app, DEPLOY_A, component("bad-import.wasm")).await;
        let (s, e) = deploy(
            &app,
            DEPLOY_A,
            json!({"settings": settings("echo", json!({})), "digest": b["digest"]}),
        )
        .await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{e}");
        assert_eq!(e["code"], "component_unloadable");
        let msg = e["message"].as_str().unwrap_or_default();
        assert!(
            msg.contains("cannot be linked") && msg.contains("missing-import"),
            "{msg}"
        );
        // Outbound HTTP without an allow-list: the worker would refuse it.
        let (_, f) = upload(&app, DEPLOY_A, component("fetch.wasm")).await;
        let (s, e) = deploy(
            &app,
            DEPLOY_A,
            json!({"settings": settings("fetch", json!({})), "digest": f["digest"]}),
        )
        .await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{e}");
        assert!(
            e["message"]
                .as_str()
                .unwrap_or_default()
                .contains("(sandbox)"),
            "{e}"
        );

        // A digest that is not stored; a malformed one; bad settings.
        let missing = onestep_core::components::ComponentDigest::of(b"never stored");
        let (s, e) = deploy(
            &app,
            DEPLOY_A,
            json!({"settings": settings("echo", json!({})), "digest": missing.as_str()}),
        )
        .await;
        assert_eq!(
            (s, &e["code"]),
            (
                StatusCode::UNPROCESSABLE_ENTITY,
                &json!("unknown_component")
            ),
            "{e}"
        );
        let (s, e) = deploy(
            &app,
            DEPLOY_A,
            json!({"settings": settings("echo", json!({})), "digest": "md5:x"}),
        )
        .await;
        assert_eq!(
            (s, &e["code"]),
            (StatusCode::UNPROCESSABLE_ENTITY, &json!("invalid_argument")),
            "{e}"
        );
        let (s, e) = deploy(
            &app,
            DEPLOY_A,
            json!({"settings": {"namespace": "tenant-a"}, "digest": digest}),
        )
        .await;
        assert_eq!(
            (s, &e["code"]),
            (StatusCode::UNPROCESSABLE_ENTITY, &json!("invalid_body")),
            "{e}"
        );
        let (s, e) = deploy(
            &app,
            DEPLOY_A,
            json!({"settings": settings("echo", json!({"concurrency": 0})), "digest": digest}),
        )
        .await;
        assert_eq!(
            (s, &e["code"]),
            (StatusCode::UNPROCESSABLE_ENTITY, &json!("invalid_argument")),
            "{e}"
        );
        assert!(
            e["message"]
                .as_str()
                .unwrap_or_default()
                .contains("concurrency"),
            "{e}"
        );

        // Oversized upload: over the namespace's ceiling of 1,000,000 bytes.
        let (s, e) = upload(&app, DEPLOY_A, vec![7u8; 1_000_001]).await;
        assert_eq!(s, StatusCode::PAYLOAD_TOO_LARGE, "{e}");
        assert!(
            e["message"]
                .as_str()
                .unwrap_or_default()
                .contains("1000000"),
            "{e}"
        );
        // Wrong content type, empty body.
        let (s, _) = app
            .send(
                req(Method::POST, "/v1/components", Some(DEPLOY_A)).raw("text/plain", echo.clone()),
            )
            .await;
        assert_eq!(s, StatusCode::UNSUPPORTED_MEDIA_TYPE);
        let (s, _) = upload(&app, DEPLOY_A, Vec::new()).await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);

        // Nothing of it moved the revision or wrote a version.
        assert_eq!(revision(&app).await, rev, "{server}");
        let (_, h) = app
            .send(req(Method::GET, "/v1/deployments", Some(DEPLOY_A)).empty())
            .await;
        assert_eq!(h["items"], json!([]), "{server}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_deployments_section_changes_are_refused() {
    let admin = crate::support::admin_url();
    let app = start(&admin, None).await;
    let (s, e) = upload(&app, DEPLOY_A, component("echo.wasm")).await;
    assert_eq!(s, StatusCode::CONFLICT, "{e}");
    assert_eq!(e["code"], "deployments_disabled");
    assert!(
        e["message"]
            .as_str()
            .unwrap_or_default()
            .contains("no deployments: section"),
        "{e}"
    );
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
    assert_eq!(
        (s, &e["code"]),
        (StatusCode::CONFLICT, &json!("deployments_disabled"))
    );
    // Reads still answer.
    let (s, _) = app
        .send(req(Method::GET, "/v1/deployments", Some(READ_A)).empty())
        .await;
    assert_eq!(s, StatusCode::OK);
}

/// The dashboard's deployments view and the version of each attempt on the detail page
/// (docs/ui.md#deployments).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deploy_view_lists_versions_and_names_the_version_of_an_attempt() {
    use onestep_core::diagnostics::{AttemptDiagnostics, RunFacts};
    use onestep_core::ports::LeaseStore;
    use onestep_core::request::ClaimRequest;
    use onestep_core::{Completion, ErrorObject};

    let admin = crate::support::admin_url();
    let app = start(&admin, Some(policy())).await;
    let (status, _, _) = app
        .send_text(req(Method::GET, "/ui/fragments/deployments", None).empty())
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _, empty) = app
        .send_text(req(Method::GET, "/ui/fragments/deployments", Some(READ_A)).empty())
        .await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        empty.contains("No deployments in this namespace"),
        "{empty}"
    );

    let echo = component("echo.wasm");
    let (_, c) = upload(&app, DEPLOY_A, echo.clone()).await;
    let digest = c["digest"].as_str().expect("digest").to_owned();
    let note = "<b>first</b>";
    let (s, _) = deploy(
        &app,
        DEPLOY_A,
        json!({"settings": settings("echo", json!({})), "digest": digest, "note": note}),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED);
    let (s, _) = deploy(
        &app,
        DEPLOY_A,
        json!({"settings": settings("echo", json!({"concurrency": 2})), "digest": digest}),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED);

    let (status, ct, page) = app
        .send_text(req(Method::GET, "/ui/fragments/deployments", Some(READ_A)).empty())
        .await;
    assert_eq!(status, StatusCode::OK);
    assert!(ct.starts_with("text/html"), "{ct}");
    assert!(page.contains("active: v2"), "{page}");
    assert!(
        page.contains(">v1<") && page.contains(">superseded<"),
        "{page}"
    );
    let hex = digest.trim_start_matches("sha256:");
    assert!(page.contains(&hex[..12]), "{page}");
    assert!(page.contains("deploy@tenant-a"), "{page}");
    // The note is escaped, and the audit lists both deploys.
    assert!(
        page.contains("&lt;b&gt;first&lt;") && !page.contains(note),
        "{page}"
    );
    assert_eq!(page.matches("<td>deploy</td>").count(), 2, "{page}");
    // Another namespace sees none of it.
    let (_, _, other) = app
        .send_text(req(Method::GET, "/ui/fragments/deployments", Some(DEPLOY_B)).empty())
        .await;
    assert!(
        other.contains("No deployments in this namespace"),
        "{other}"
    );
    // The shell page.
    let (status, _, shell) = app
        .send_text(req(Method::GET, "/ui/deployments", None).empty())
        .await;
    assert_eq!(status, StatusCode::OK);
    assert!(shell.contains("id=\"deployments\""), "{shell}");

    // An attempt that ran the deployed component names versions 1 and 2 (same bytes).
    let view = app
        .submit(Some(SUBMIT_A), "k-deployed", "echo", json!({"n": 1}))
        .await;
    let id = crate::support::id_of(&view);
    let leases = app
        .backend
        .claim(&ClaimRequest {
            namespaces: onestep_core::request::NamespaceScope::One("tenant-a".into()),
            fair: Default::default(),
            task_names: vec!["echo".into()],
            limit: 1,
            lease_duration_s: 30.0,
            worker_id: "w-deploy".into(),
            max_running: None,
        })
        .await
        .expect("claim");
    app.backend
        .complete(
            &leases[0].lease_ref(),
            &Completion::failed(ErrorObject::new("error", "HandlerError", Some("handler")))
                .with_diagnostics(AttemptDiagnostics {
                    message: None,
                    progress: None,
                    log: None,
                    facts: RunFacts {
                        trap_kind: None,
                        component_digest: Some(hex.to_owned()),
                        fuel_consumed: None,
                        peak_memory_bytes: None,
                    },
                }),
        )
        .await
        .expect("complete");
    let (status, _, detail) = app
        .send_text(
            req(
                Method::GET,
                &format!("/ui/fragments/executions/{id}"),
                Some(READ_A),
            )
            .empty(),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        detail.contains("<small class=\"deployed\">v1, v2</small>"),
        "{detail}"
    );
}
