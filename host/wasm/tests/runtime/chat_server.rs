//! A loopback stand-in for an OpenAI-compatible chat-completions API (axum
//! on 127.0.0.1, a random port), for the `agent` guests' tests.
//!
//! `POST /v1/chat/completions` wants `Authorization: Bearer <key>` (401 with
//! an OpenAI-style error body otherwise) and answers with one choice whose
//! content is computed from the request: `"<model> heard: <last user
//! message>"`, plus `system=<…>` and `max_tokens=<…>` when the request had
//! them, and a `usage` of word counts. `POST /status/{code}/chat/completions`
//! answers `code` with an error body (and `Retry-After: 2` on 429). Every
//! request's `Authorization` header and JSON body are recorded.
//!
//! A request that offers `tools` plays a tool loop ([`sum_turn`]): the user
//! message lists numbers, and the server adds them one `add` tool call per
//! turn, then answers `the sum is <sum>`. A model named `fail-once-at-<k>`
//! gets a 503 the first time a conversation reaches turn `k` (the number of
//! assistant messages in the request).

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

/// One request the server got.
#[derive(Clone, Debug)]
pub struct Seen {
    pub authorization: Option<String>,
    pub body: Value,
}

struct Shared {
    key: String,
    seen: Mutex<Vec<Seen>>,
    /// The (prompt, turn) pairs already failed once for a `fail-once-at-<k>` model.
    failed: Mutex<Vec<(String, usize)>>,
}

/// The turn of a chat-completions request: how many assistant messages it holds.
pub fn turn_of(body: &Value) -> usize {
    body["messages"]
        .as_array()
        .map(|m| m.iter().filter(|m| m["role"] == "assistant").count())
        .unwrap_or(0)
}

/// The assistant message of a tool-loop turn: the user message's numbers are added one
/// `add` call per turn (the running sum is the last `tool` message's content), then the
/// answer `the sum is <sum>`.
pub fn sum_turn(messages: &[Value]) -> Value {
    let numbers: Vec<i64> = messages
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    let results: Vec<i64> = messages
        .iter()
        .filter(|m| m["role"] == "tool")
        .filter_map(|m| m["content"].as_str()?.parse().ok())
        .collect();
    let done = results.len();
    let sum = results
        .last()
        .copied()
        .unwrap_or_else(|| numbers.first().copied().unwrap_or(0));
    match numbers.get(done + 1) {
        Some(next) => json!({
            "role": "assistant",
            "content": null,
            "tool_calls": [{
                "id": format!("call-{done}"),
                "type": "function",
                "function": {"name": "add", "arguments": json!({"a": sum, "b": next}).to_string()},
            }],
        }),
        None => json!({"role": "assistant", "content": format!("the sum is {sum}")}),
    }
}

pub struct ChatServer {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
}

impl ChatServer {
    pub fn origin(&self) -> String {
        format!("http://127.0.0.1:{}", self.addr.port())
    }

    /// The `base_url` of the working endpoint.
    pub fn base_url(&self) -> String {
        format!("{}/v1", self.origin())
    }

    /// A `base_url` whose completions answer `code`.
    pub fn failing_base_url(&self, code: u16) -> String {
        format!("{}/status/{code}", self.origin())
    }

    /// Every request so far, oldest first.
    pub fn seen(&self) -> Vec<Seen> {
        self.shared
            .seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

fn error_body(status: StatusCode, message: &str) -> Response {
    let body = json!({"error": {"message": message, "type": "test_error"}});
    (status, axum::Json(body)).into_response()
}

fn record(shared: &Shared, headers: &HeaderMap, body: &Value) {
    let authorization = headers
        .get(header::AUTHORIZATION)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    shared
        .seen
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(Seen {
            authorization,
            body: body.clone(),
        });
}

fn words(text: &str) -> usize {
    text.split_whitespace().count()
}

async fn completions(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    axum::Json(body): axum::Json<Value>,
) -> Response {
    record(&shared, &headers, &body);
    let expected = format!("Bearer {}", shared.key);
    if headers
        .get(header::AUTHORIZATION)
        .is_none_or(|v| v.as_bytes() != expected.as_bytes())
    {
        return error_body(
            StatusCode::UNAUTHORIZED,
            "You didn't provide a valid API key.",
        );
    }
    let model = body["model"].as_str().unwrap_or("?");
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    if body.get("tools").is_some() {
        let turn = turn_of(&body);
        if let Some(k) = model.strip_prefix("fail-once-at-") {
            let prompt = messages
                .iter()
                .find(|m| m["role"] == "user")
                .map(|m| m["content"].to_string())
                .unwrap_or_default();
            let mut failed = shared.failed.lock().unwrap_or_else(|e| e.into_inner());
            if k.parse() == Ok(turn) && !failed.contains(&(prompt.clone(), turn)) {
                failed.push((prompt, turn));
                return error_body(
                    StatusCode::SERVICE_UNAVAILABLE,
                    &format!("the test server fails turn {turn} once"),
                );
            }
        }
        return axum::Json(json!({
            "model": model,
            "choices": [{"index": 0, "message": sum_turn(&messages)}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }))
        .into_response();
    }
    let content_of = |role: &str| {
        messages
            .iter()
            .rev()
            .find(|m| m["role"] == role)
            .and_then(|m| m["content"].as_str())
            .map(str::to_string)
    };
    let mut answer = format!("{model} heard: {}", content_of("user").unwrap_or_default());
    if let Some(system) = content_of("system") {
        answer.push_str(&format!(" system={system}"));
    }
    if let Some(max) = body.get("max_tokens") {
        answer.push_str(&format!(" max_tokens={max}"));
    }
    let prompt_tokens: usize = messages
        .iter()
        .filter_map(|m| m["content"].as_str())
        .map(words)
        .sum();
    let completion_tokens = words(&answer);
    axum::Json(json!({
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "model": format!("{model}-0613"),
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": answer},
            "finish_reason": "stop",
        }],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }))
    .into_response()
}

async fn failing(
    State(shared): State<Arc<Shared>>,
    Path(code): Path<u16>,
    headers: HeaderMap,
    axum::Json(body): axum::Json<Value>,
) -> Response {
    record(&shared, &headers, &body);
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = error_body(status, &format!("the test server fails with {code}"));
    if status == StatusCode::TOO_MANY_REQUESTS {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, header::HeaderValue::from_static("2"));
    }
    response
}

/// Starts the server on the current tokio runtime; `key` is the API key it accepts.
pub async fn start(key: &str) -> ChatServer {
    let shared = Arc::new(Shared {
        key: key.to_string(),
        seen: Mutex::new(Vec::new()),
        failed: Mutex::new(Vec::new()),
    });
    let app = Router::new()
        .route("/v1/chat/completions", post(completions))
        .route("/status/{code}/chat/completions", post(failing))
        .with_state(shared.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the chat test server");
    let addr = listener.local_addr().expect("local addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    ChatServer { addr, shared }
}
