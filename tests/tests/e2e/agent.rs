//! The `agent` guest (world `onestep:handler@0.3.0`) through a real worker against a loopback
//! chat-completions server started by the test: the task's `sandbox.network.headers` injects
//! `Authorization: Bearer ${AGENT_API_KEY}` (the key from the worker's environment), the
//! endpoint and model come from `handler.params` (the model overridable per execution by its
//! metadata). The execution succeeds with the answer the guest computed from the completion;
//! the server got the key; a 500 is retried and then fails (the server's text in the worker's
//! log); the key is in no line of the worker's log.
//!
//! Resume ([`a_killed_agent_resumes_at_the_turn_it_was_on`]): a tool-loop conversation (the
//! server adds the prompt's numbers one `add` tool call per turn) whose worker is SIGKILLed
//! while the model is "thinking" about turn 2: the next worker's attempt loads turns 0 and 1
//! from the steps table, asks the model only for turns 2 and 3, and answers as an
//! uninterrupted run does.

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
use onestep_e2e::{Env, Schedule, guest, on_each_server, statuses, wait_for};
use serde_json::{Value, json};

const KEY: &str = "sk-e2e-agent-91c3f0";
const LIMIT: Duration = Duration::from_secs(60);

/// The `Authorization` values the server got, in order.
type Seen = Arc<Mutex<Vec<String>>>;

/// A model of this name hangs (does not answer for a minute) the first time a conversation
/// reaches turn 2: the test kills the worker meanwhile.
const HANG_AT_2: &str = "hang-once-at-2";

/// Tool-loop requests: `(prompt, turn)` of each, in arrival order.
type Turns = Arc<Mutex<Vec<(String, usize)>>>;

/// The server's state: the `Authorization` values and the tool-loop turns it got.
#[derive(Clone, Default)]
struct Fake {
    seen: Seen,
    turns: Turns,
}

/// A tool-loop turn (the request offers `tools`): the numbers of the user message are added
/// one `add` call per turn (the running sum is the last `tool` message), then the answer
/// `the sum is <sum>`. The turn is the number of assistant messages in the request.
async fn tool_turn(turns: &Turns, model: &str, messages: &[Value]) -> Value {
    let prompt = messages
        .iter()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default();
    let turn = messages.iter().filter(|m| m["role"] == "assistant").count();
    let first_visit = match turns.lock() {
        Ok(mut turns) => {
            let first = !turns.iter().any(|(p, t)| p == prompt && *t == turn);
            turns.push((prompt.to_owned(), turn));
            first
        }
        Err(_) => false,
    };
    if model == HANG_AT_2 && turn == 2 && first_visit {
        tokio::time::sleep(Duration::from_secs(60)).await;
    }
    let numbers: Vec<i64> = prompt
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    let results: Vec<i64> = messages
        .iter()
        .filter(|m| m["role"] == "tool")
        .filter_map(|m| m["content"].as_str()?.parse().ok())
        .collect();
    let sum = results
        .last()
        .copied()
        .unwrap_or_else(|| numbers.first().copied().unwrap_or(0));
    let message = match numbers.get(results.len() + 1) {
        Some(next) => json!({
            "role": "assistant",
            "content": null,
            "tool_calls": [{
                "id": format!("call-{turn}"),
                "type": "function",
                "function": {"name": "add", "arguments": json!({"a": sum, "b": next}).to_string()},
            }],
        }),
        None => json!({"role": "assistant", "content": format!("the sum is {sum}")}),
    };
    json!({
        "model": model,
        "choices": [{"index": 0, "message": message}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    })
}

async fn completions(
    State(fake): State<Fake>,
    headers: HeaderMap,
    axum::Json(body): axum::Json<Value>,
) -> Response {
    let seen = fake.seen;
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
    if body.get("tools").is_some() {
        let messages = body["messages"].as_array().cloned().unwrap_or_default();
        return axum::Json(tool_turn(&fake.turns, model, &messages).await).into_response();
    }
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

async fn start_server() -> Result<(u16, Fake)> {
    let fake = Fake::default();
    let app = Router::new()
        .route("/v1/chat/completions", post(completions))
        .route(
            "/broken/chat/completions",
            post(|| async {
                let error = json!({"error": {"message": "upstream overloaded"}});
                (StatusCode::INTERNAL_SERVER_ERROR, axum::Json(error))
            }),
        )
        .with_state(fake.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok((port, fake))
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
                "turns": 1,
                "tool_calls": 0,
                "model_calls": {"made": 1, "loaded": 0},
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
    let (port, fake) = start_server().await?;
    let dir = tempfile::tempdir()?;
    let config = write_config(dir.path(), port)?;
    on_each_server("agent", &config, Schedule::Concurrent, move |env| {
        agent_case(env, port, fake.seen.clone())
    })
    .await
}

/// How many requests of `prompt` the server got at each turn.
fn per_turn(turns: &Turns, prompt: &str) -> Vec<usize> {
    let mut counts = Vec::new();
    for (_, turn) in turns
        .lock()
        .map(|t| t.clone())
        .unwrap_or_default()
        .into_iter()
        .filter(|(p, _)| p == prompt)
    {
        if counts.len() <= turn {
            counts.resize(turn + 1, 0);
        }
        counts[turn] += 1;
    }
    counts
}

/// The steps table of `id` as `(key, attempt_no)` in first-save order.
async fn steps_of(env: &Env, id: uuid::Uuid) -> Result<Vec<(String, u32)>> {
    Ok(env
        .steps()
        .list(id)
        .await?
        .into_iter()
        .map(|r| (r.key, r.attempt_no))
        .collect())
}

async fn resume_case(env: Arc<Env>, turns: Turns) -> Result<()> {
    // The server is shared by the servers' cases: each conversation has its own prompt.
    let prompt = format!("sum on {}: 1 2 3 4", env.server());
    let payload = |model: &str| json!({"prompt": prompt, "model": model, "tools": ["add"]});
    let mut w1 = env.spawn_worker_env("w1", &[("AGENT_API_KEY", KEY)], &[])?;
    let e = env.submit("agent", payload(HANG_AT_2)).await?;
    // Turn 2 reached the model (which hangs): turns 0 and 1 are recorded.
    wait_for(
        &format!("[{}] the model asked for turn 2", env.server()),
        LIMIT,
        || async { Ok((per_turn(&turns, &prompt).len() == 3).then_some(())) },
    )
    .await?;
    let recorded = steps_of(&env, e.id).await?;
    let want = |keys: &[&str], attempt: u32| -> Vec<(String, u32)> {
        keys.iter().map(|k| (k.to_string(), attempt)).collect()
    };
    ensure!(
        recorded == want(&["model-0", "tool-0", "model-1", "tool-1"], 1),
        "{recorded:?}"
    );
    w1.signal("KILL")?;
    ensure!(
        w1.wait_exit(Duration::from_secs(10))?.is_none(),
        "w1 was killed"
    );
    let _w2 = env.spawn_worker_env("w2", &[("AGENT_API_KEY", KEY)], &[])?;
    let done = env.wait_status(e.id, &[S::Succeeded], LIMIT).await?;
    let result = done.result.context("result")?;
    ensure!(result["answer"] == "the sum is 10", "{result}");
    ensure!(
        result["turns"] == 4 && result["tool_calls"] == 3,
        "{result}"
    );
    // Attempt 2 asked the model for turns 2 and 3 only.
    ensure!(
        result["model_calls"] == json!({"made": 2, "loaded": 2}),
        "{result}"
    );
    let counts = per_turn(&turns, &prompt);
    ensure!(counts == [1, 1, 2, 1], "requests per turn: {counts:?}");
    let mut all = want(&["model-0", "tool-0", "model-1", "tool-1"], 1);
    all.extend(want(&["model-2", "tool-2", "model-3"], 2));
    let steps = steps_of(&env, e.id).await?;
    ensure!(steps == all, "{steps:?}");
    let attempts = env.db.attempts(e.id).await?;
    ensure!(
        statuses(&attempts) == ["lease_lost", "succeeded"],
        "{attempts:?}"
    );

    // An uninterrupted run of the same conversation answers the same, in one attempt.
    let steady_prompt = format!("steady {prompt}");
    let steady = env
        .submit(
            "agent",
            json!({"prompt": steady_prompt, "model": "steady", "tools": ["add"]}),
        )
        .await?;
    let done = env.wait_status(steady.id, &[S::Succeeded], LIMIT).await?;
    let steady = done.result.context("result")?;
    ensure!(steady["answer"] == result["answer"], "{steady}");
    ensure!(
        steady["model_calls"] == json!({"made": 4, "loaded": 0}) && done.attempts == 1,
        "{steady}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_agent_resumes_at_the_turn_it_was_on() -> Result<()> {
    let (port, fake) = start_server().await?;
    let dir = tempfile::tempdir()?;
    let config = write_config(dir.path(), port)?;
    on_each_server("agent resume", &config, Schedule::Concurrent, move |env| {
        resume_case(env, fake.turns.clone())
    })
    .await
}
