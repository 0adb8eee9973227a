//! Test plumbing: a per-test MariaDB database, the router over the real MySQL backend, request
//! helpers, and a check of every response against the OpenAPI document the router serves.
//!
//! `ONESTEP_TEST_MARIADB_URL` (e.g. `mysql://root@127.0.0.1:3306/`, printed by
//! `scripts/test-db.sh up`) must be set: a missing variable fails the test.
#![allow(dead_code)]

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use http_body_util::BodyExt;
use mysql_async::Pool;
use mysql_async::prelude::Queryable;
use onestep_api::{ApiSettings, ApiState, Tenancy, TokenTable, router};

/// What a test app is started with: who may call it and what requests may do.
#[derive(Debug, Clone)]
pub struct AppSettings {
    pub tenancy: Tenancy,
    pub api: ApiSettings,
}
use onestep_core::Limits;
use onestep_mysql::{MySqlBackend, StoreOptions};
use serde_json::Value;
use tower::ServiceExt;
use uuid::Uuid;

use crate::schema::check_against_openapi;

/// Token of tenant A (namespace `tenant-a`).
pub const TOKEN_A: &str = "token-aaaaaaaaaaaaaaaaaaaaaaaa";
/// Token of tenant B (namespace `tenant-b`).
pub const TOKEN_B: &str = "token-bbbbbbbbbbbbbbbbbbbbbbbb";

/// The admin URL (no database), without a trailing slash.
pub fn admin_url() -> String {
    match std::env::var("ONESTEP_TEST_MARIADB_URL") {
        Ok(v) if !v.trim().is_empty() => v.trim().trim_end_matches('/').to_owned(),
        _ => panic!(
            "ONESTEP_TEST_MARIADB_URL is not set: run `set -a; eval \"$(scripts/test-db.sh up)\"; \
             set +a` first (e.g. ONESTEP_TEST_MARIADB_URL=mysql://root@127.0.0.1:3306/)"
        ),
    }
}

/// The servers the operator tests run on: MariaDB always, and Oracle MySQL
/// (`ONESTEP_TEST_MYSQL_URL`) unless `ONESTEP_TEST_SKIP_MYSQL=1` (a missing URL fails the test).
pub fn servers() -> Vec<(&'static str, String)> {
    let mut out = vec![("mariadb", admin_url())];
    if std::env::var("ONESTEP_TEST_SKIP_MYSQL").as_deref() != Ok("1") {
        match std::env::var("ONESTEP_TEST_MYSQL_URL") {
            Ok(v) if !v.trim().is_empty() => {
                out.push(("mysql", v.trim().trim_end_matches('/').to_owned()));
            }
            _ => panic!(
                "ONESTEP_TEST_MYSQL_URL is not set (set ONESTEP_TEST_SKIP_MYSQL=1 to skip MySQL)"
            ),
        }
    }
    out
}

/// A database created for one test and dropped when the value is dropped (also on panic).
pub struct TestDb {
    pub name: String,
    pub url: String,
    admin: String,
}

impl TestDb {
    /// Creates `onestep_t_<random>` on MariaDB.
    pub async fn create() -> TestDb {
        Self::create_on(&admin_url()).await
    }

    /// Creates `onestep_t_<random>` on the server of `admin` (URL without a database).
    pub async fn create_on(admin: &str) -> TestDb {
        let admin = admin.to_owned();
        let name = format!("onestep_t_{}", &Uuid::new_v4().simple().to_string()[..16]);
        let pool = Pool::new(format!("{admin}/").as_str());
        let mut c = pool.get_conn().await.expect("admin connection to MariaDB");
        c.query_drop(format!("CREATE DATABASE `{name}` CHARACTER SET utf8mb4"))
            .await
            .expect("create database");
        drop(c);
        let _ = pool.disconnect().await;
        TestDb {
            url: format!("{admin}/{name}"),
            name,
            admin,
        }
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let admin = self.admin.clone();
        let name = self.name.clone();
        // Async work cannot run in Drop: use a private runtime on a scoped thread.
        let _ = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async move {
                let pool = Pool::new(format!("{admin}/").as_str());
                if let Ok(mut c) = pool.get_conn().await {
                    let _ = c
                        .query_drop(format!("DROP DATABASE IF EXISTS `{name}`"))
                        .await;
                }
                let _ = pool.disconnect().await;
            });
        })
        .join();
    }
}

/// Settings used by most tests: one namespace, tasks `echo` and `run_agent`, small limits.
pub fn single_settings() -> AppSettings {
    AppSettings {
        tenancy: Tenancy::Single("local".into()),
        api: ApiSettings {
            allowed_tasks: vec!["echo".into(), "run_agent".into()],
            max_body_bytes: 4096,
            limits: Limits {
                max_payload_bytes: 1000,
                max_metadata_bytes: 500,
                max_result_bytes: 1000,
            },
            metrics_public: false,
            max_wait_s: 60,
            ..ApiSettings::default()
        },
    }
}

/// Like [`single_settings`] with tenants A and B.
pub fn tenant_settings() -> AppSettings {
    let table =
        TokenTable::from_pairs([(TOKEN_A, "tenant-a"), (TOKEN_B, "tenant-b")]).expect("tokens");
    AppSettings {
        tenancy: Tenancy::Tokens(table),
        ..single_settings()
    }
}

/// A router over a real backend on a fresh database.
pub struct TestApp {
    pub db: TestDb,
    pub backend: MySqlBackend,
    /// A pool of its own on the test database, to inspect or damage the tables directly.
    pub pool: Pool,
    pub router: Router,
    /// The router's state (e.g. the webhook metrics its `/metrics` shows).
    pub state: ApiState,
    doc: Value,
}

impl TestApp {
    /// Opens the backend (creating the tables) and builds the router with `settings`.
    pub async fn start(settings: AppSettings) -> TestApp {
        Self::start_on(&admin_url(), settings).await
    }

    /// Like [`TestApp::start`] on the server of `admin`.
    pub async fn start_on(admin: &str, settings: AppSettings) -> TestApp {
        let db = TestDb::create_on(admin).await;
        let mut opts = StoreOptions::new(db.url.clone());
        opts.limits = settings.api.limits;
        opts.pool_max = 24;
        let backend = MySqlBackend::open(opts).await.expect("open backend");
        let state = ApiState::new(
            Arc::new(backend.clone()),
            Arc::new(backend.clone()),
            settings.tenancy,
            settings.api,
        )
        .expect("state")
        .with_insights(Arc::new(backend.clone()))
        .with_callbacks(Arc::new(backend.clone()))
        .with_steps(Arc::new(backend.clone()));
        let router = router(state.clone());
        let doc = serde_json::to_value(onestep_api::openapi_document()).expect("openapi");
        let pool = Pool::new(db.url.as_str());
        TestApp {
            db,
            backend,
            pool,
            router,
            state,
            doc,
        }
    }

    /// Sends a request; returns status and JSON body, after checking both against the OpenAPI
    /// document.
    pub async fn send(&self, req: Request<Body>) -> (StatusCode, Value) {
        let method = req.method().clone();
        let path = req.uri().path().to_owned();
        let resp = self
            .router
            .clone()
            .oneshot(req)
            .await
            .expect("infallible router");
        let status = resp.status();
        let ct = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let bytes = resp.into_body().collect().await.expect("body").to_bytes();
        assert!(
            ct.starts_with("application/json"),
            "{method} {path} -> {status}: content-type {ct:?}, body {:?}",
            String::from_utf8_lossy(&bytes)
        );
        let body: Value = serde_json::from_slice(&bytes).expect("JSON body");
        check_against_openapi(&self.doc, &method, &path, status, &body);
        (status, body)
    }

    /// Rows in the executions table.
    pub async fn count_rows(&self) -> i64 {
        let mut c = self.pool.get_conn().await.expect("conn");
        let n: Option<i64> = c
            .query_first(format!(
                "SELECT COUNT(*) FROM `{}`",
                self.backend.tables().executions
            ))
            .await
            .expect("count");
        n.unwrap_or(-1)
    }

    /// Rows in the attempts table.
    pub async fn count_attempts(&self) -> i64 {
        let mut c = self.pool.get_conn().await.expect("conn");
        let n: Option<i64> = c
            .query_first(format!(
                "SELECT COUNT(*) FROM `{}`",
                self.backend.tables().attempts
            ))
            .await
            .expect("count");
        n.unwrap_or(-1)
    }

    /// Submits `{task_name, payload}` with `key` (and `token`); asserts 202; returns the view.
    pub async fn submit(
        &self,
        token: Option<&str>,
        key: &str,
        task: &str,
        payload: Value,
    ) -> Value {
        let body = serde_json::json!({"task_name": task, "payload": payload});
        let (status, v) = self
            .send(
                req(Method::POST, "/v1/executions", token)
                    .header("idempotency-key", key)
                    .json(&body),
            )
            .await;
        assert_eq!(status, StatusCode::ACCEPTED, "{v}");
        v
    }
}

/// A request builder with JSON helpers.
pub struct Req(axum::http::request::Builder);

/// Starts a request with an optional bearer token.
pub fn req(method: Method, uri: &str, token: Option<&str>) -> Req {
    let mut b = Request::builder().method(method).uri(uri);
    if let Some(t) = token {
        b = b.header("authorization", format!("Bearer {t}"));
    }
    Req(b)
}

impl Req {
    /// Adds a header.
    pub fn header(self, name: &str, value: &str) -> Req {
        Req(self.0.header(name, value))
    }

    /// A JSON body.
    pub fn json(self, body: &Value) -> Request<Body> {
        self.raw("application/json", body.to_string())
    }

    /// A raw body with a content type.
    pub fn raw(self, content_type: &str, body: impl Into<Body>) -> Request<Body> {
        self.0
            .header("content-type", content_type)
            .body(body.into())
            .expect("request")
    }

    /// No body. A state-changing request still names the JSON content type, as every one must
    /// (docs/http-api.md#request-bodies); [`Req::bare`] sends none.
    pub fn empty(self) -> Request<Body> {
        let safe = self
            .0
            .method_ref()
            .is_some_and(|m| matches!(*m, Method::GET | Method::HEAD | Method::OPTIONS));
        if safe {
            self.bare()
        } else {
            self.raw("application/json", Body::empty())
        }
    }

    /// No body and no content type.
    pub fn bare(self) -> Request<Body> {
        self.0.body(Body::empty()).expect("request")
    }
}

/// The execution id of a view.
pub fn id_of(view: &Value) -> Uuid {
    view["id"]
        .as_str()
        .and_then(|s| Uuid::parse_str(s).ok())
        .expect("id")
}

impl TestApp {
    /// Sends a request and returns status, content type and body text (for the dashboard's HTML).
    pub async fn send_text(&self, req: Request<Body>) -> (StatusCode, String, String) {
        let resp = self
            .router
            .clone()
            .oneshot(req)
            .await
            .expect("infallible router");
        let status = resp.status();
        let ct = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let bytes = resp.into_body().collect().await.expect("body").to_bytes();
        (status, ct, String::from_utf8_lossy(&bytes).into_owned())
    }
}
