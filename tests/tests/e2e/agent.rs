//! The `agent` guest (world `onestep:handler@0.2.0`) through a real worker against a loopback
//! chat-completions server started by the test: the task's `sandbox.network.headers` injects
//! `Authorization: Bearer ${AGENT_API_KEY}` (the key from the worker's environment), the
//! endpoint and model come from `handler.params` (the model overridable per execution by its
//! metadata). The execution succeeds with the answer the guest computed from the completion;
//! the server got the key; a 500 is retried and then fails (the server's text in the worker's
//! log); the key is in no line of the worker's log.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use onestep_core::ExecutionStatus as S;
use onestep_core::request::SubmitRequest;
use onestep_e2e::{Env, Schedule, guest, on_each_server, statuses};
use serde_json::{Value, json};

const KEY: &str = "sk-e2e-agent-91c3f0";
const LIMIT: Duration = Duration::from_secs(60);

/// The `Authorization` values the server got, in order.
type Seen = Arc<Mutex<Vec<String>>>;

async fn completions(
    State(seen): State<Seen>,
    headers: HeaderMap,
    axum::Json(body): axum::Json<Value>,
) -> Response {
    let auth = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    if let Ok(mut seen) = seen.lock() {
        seen.push(auth.clone());
    }
    if auth != format!("Bearer {KEY}") {
        let error = json!({"error": {"message": "invalid API key"}});
        return (StatusCode::UNAUTHORIZED, axum::Json(error)).into_response();
    }
    let model = body["model"].as_str().unwrap_or_default();
    let question = body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default();
    axum::Json(json!({
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": format!("{model}: {}", question.to_uppercase())}}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7},
    }))
    .into_response()
}

async fn start_server() -> Result<(u16, Seen)> {
    let seen = Seen::default();
    let app = Router::new()
        .route("/v1/chat/completions", post(completions))
        .route(
            "/broken/chat/completions",
            post(|| async {
                let error = json!({"error": {"message": "upstream overloaded"}});
                (StatusCode::INTERNAL_SERVER_ERROR, axum::Json(error))
            }),
        )
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok((port, seen))
}

fn write_config(dir: &Path, port: u16) -> Result<std::path::PathBuf> {
    let agent = guest("agent")?;
    let yaml = format!(
        r#"apiVersion: onestep/v1alpha1
kind: App
app:
  name: agent-e2e
  shutdown_timeout_s: 1.0
  logging: {{level: DEBUG, format: text}}
resources:
  db:
    type: "${{ONESTEP_E2E_BACKEND:-mysql}}"
    dsn: "${{ONESTEP_DSN}}"
  agent_jobs:
    type: "${{ONESTEP_E2E_BACKEND:-mysql}}_execution_source"
    connector: db
    namespace: e2e
    task_names: [agent]
    worker_id: "${{ONESTEP_WORKER_ID:-w1}}"
    lease_duration_s: 6.0
    heartbeat_interval_s: 2.0
    poll_interval_s: 0.2
tasks:
  - name: agent
    source: agent_jobs
    handler:
      component: "{agent}"
      params: {{base_url: "http://127.0.0.1:{port}/v1", model: small-model}}
    concurrency: 2
    timeout_s: 20
    retry: {{type: max_attempts, max_attempts: 2}}
    sandbox:
      network:
        allow: ["http://127.0.0.1:{port}"]
        headers:
          "http://127.0.0.1:{port}": {{Authorization: "Bearer ${{AGENT_API_KEY}}"}}
        request_timeout_s: 15
"#,
        agent = agent.display(),
    );
    let path = dir.join("agent.yaml");
    std::fs::write(&path, yaml)?;
    Ok(path)
}

async fn agent_case(env: Arc<Env>, port: u16, seen: Seen) -> Result<()> {
    let _worker = env.spawn_worker_env("w1", &[("AGENT_API_KEY", KEY)], &[])?;

    let asked = env
        .submit("agent", json!({"prompt": "why is the sky blue"}))
        .await?;
    let done = env.wait_status(asked.id, &[S::Succeeded], LIMIT).await?;
    let result = done.result.context("result")?;
    ensure!(
        result
            == json!({
                "answer": "small-model: WHY IS THE SKY BLUE",
                "model": "small-model",
                "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7},
            }),
        "{result}"
    );

    // The metadata overrides the params' model for this execution.
    let request = SubmitRequest {
        task_name: "agent".into(),
        payload: json!({"prompt": "and the sea"}),
        metadata: Some(json!({"model": "big-model"})),
        ..SubmitRequest::default()
    };
    let big = env.client.submit(&request).await?;
    let done = env.wait_status(big.id, &[S::Succeeded], LIMIT).await?;
    let result = done.result.context("result")?;
    ensure!(result["answer"] == "big-model: AND THE SEA", "{result}");

    // A 500 is retryable: both attempts run, then the execution fails with the server's text.
    let broken = env
        .submit(
            "agent",
            json!({"prompt": "hi", "base_url": format!("http://127.0.0.1:{port}/broken")}),
        )
        .await?;
    let done = env.wait_status(broken.id, &[S::Failed], LIMIT).await?;
    let error = done.error.clone().context("error")?;
    ensure!(done.attempts == 2, "a 500 is retried once: {done:?}");
    ensure!(
        error.kind == "error" && error.exception_type == "HandlerError",
        "{error:?}"
    );
    let attempts = env.db.attempts(broken.id).await?;
    ensure!(
        statuses(&attempts) == ["retrying", "failed"],
        "{attempts:?}"
    );

    let seen = seen.lock().map(|s| s.clone()).unwrap_or_default();
    let injected = seen
        .iter()
        .filter(|a| **a == format!("Bearer {KEY}"))
        .count();
    ensure!(
        injected >= 2,
        "the key did not reach the server on every successful request: {seen:?}"
    );
    let log = env.worker_logs();
    ensure!(
        log.contains("agent: POST http://127.0.0.1"),
        "the guest's log lines are not in the worker's log: {log}"
    );
    ensure!(
        log.contains("chat completions answered 500 Internal Server Error: upstream overloaded"),
        "the handler's error is not in the worker's log: {log}"
    );
    ensure!(
        !log.contains("e2e-agent-91c3f0"),
        "the key is in the worker's log: {log}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_runs_the_agent_with_a_host_injected_key() -> Result<()> {
    let (port, seen) = start_server().await?;
    let dir = tempfile::tempdir()?;
    let config = write_config(dir.path(), port)?;
    on_each_server("agent", &config, Schedule::Concurrent, move |env| {
        agent_case(env, port, seen.clone())
    })
    .await
}
