//! The `{{name}}` onestep handler: a WebAssembly component of world
//! `onestep:handler/handler@0.3.0` (the WIT is in `wit/`) that asks an OpenAI-compatible
//! chat-completions endpoint one question over `wasi:http` (the `wstd` client) and returns the
//! assistant's answer.
//!
//! Each model call is a durable step (`src/steps.rs`) keyed by its place in the work, `model-0`
//! (an agent loop's next calls: `model-1`, `model-2`, …): a retried or resumed attempt of the
//! same execution loads the recorded answer and does not pay for the call again.
//!
//! Payload `{"prompt": "...", "system"?: "...", "model"?: "...", "max_tokens"?: N}`; the endpoint
//! is `handler.params.base_url` and the default model `handler.params.model` (handler.yaml). It
//! sends `POST {base_url}/chat/completions` with a `Content-Length`.
//!
//! The guest never holds the API key: `sandbox.network.headers` in handler.yaml makes the host
//! add `Authorization` to the requests for that origin, from the worker's environment.
//!
//! Output `{"answer", "model", "usage"}` (`usage` null when the server sends none). Errors: 429
//! and 5xx answers are retryable (`retry-after-ms` from `Retry-After: <seconds>`), other non-2xx
//! answers fatal; a refused origin is fatal; connection failures and timeouts are retryable; a
//! cancel before the request, or noticed when the answer arrives, is retryable.

wit_bindgen::generate!({ path: "wit", world: "onestep:handler/handler@0.3.0", generate_all });

mod steps;

use onestep::handler::host::{Level, cancel_requested, log};
use serde_json::{Map, Value, json};
use steps::step;
use wstd::http::{Body, Client, ErrorCode, Method, Request, StatusCode};

struct Component;

/// How much of an error answer's text goes into the handler error.
const ERROR_TEXT_CHARS: usize = 300;

fn fatal(message: String) -> HandlerError {
    HandlerError {
        retryable: false,
        message,
        retry_after_ms: None,
    }
}

fn retryable(message: String, retry_after_ms: Option<u64>) -> HandlerError {
    HandlerError {
        retryable: true,
        message,
        retry_after_ms,
    }
}

fn object(what: &str, text: &str) -> Result<Map<String, Value>, HandlerError> {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(other) => Err(fatal(format!("{what} is not a JSON object: {other}"))),
        Err(e) => Err(fatal(format!("{what} is not JSON: {e}"))),
    }
}

/// `key` as a string from the payload, else the params.
fn setting(
    key: &str,
    payload: &Map<String, Value>,
    params: &Map<String, Value>,
) -> Result<Option<String>, HandlerError> {
    for (name, map) in [("payload", payload), ("params", params)] {
        match map.get(key) {
            None | Some(Value::Null) => continue,
            Some(Value::String(s)) => return Ok(Some(s.clone())),
            Some(other) => return Err(fatal(format!("{name}.{key} must be a string, got {other}"))),
        }
    }
    Ok(None)
}

/// The URL and the JSON body of the request.
fn build(ctx: &Context, payload: &str) -> Result<(String, String, Value), HandlerError> {
    let payload = object("payload", payload)?;
    let params = object("params", &ctx.params)?;
    let Some(Value::String(prompt)) = payload.get("prompt") else {
        return Err(fatal("the payload needs a string `prompt`".into()));
    };
    let Some(Value::String(base_url)) = params.get("base_url") else {
        return Err(fatal("handler.params.base_url must be a string".into()));
    };
    let model = setting("model", &payload, &params)?
        .ok_or_else(|| fatal("no model: set handler.params.model".into()))?;
    let mut messages = Vec::new();
    if let Some(system) = setting("system", &payload, &params)? {
        messages.push(json!({"role": "system", "content": system}));
    }
    messages.push(json!({"role": "user", "content": prompt}));
    let mut body = json!({"model": model, "messages": messages});
    match payload.get("max_tokens").or_else(|| params.get("max_tokens")) {
        None | Some(Value::Null) => {}
        Some(Value::Number(n)) if n.is_u64() => body["max_tokens"] = Value::Number(n.clone()),
        Some(other) => {
            return Err(fatal(format!(
                "max_tokens must be a positive integer, got {other}"
            )));
        }
    }
    let url = format!("{}/chat/completions", base_url.trim_end_matches('/'));
    Ok((url, model, body))
}

/// A failed request: fatal when the sandbox refused it, retryable when the network may do
/// better next time.
fn request_failed(url: &str, e: &wstd::http::Error) -> HandlerError {
    let Some(code) = e.chain().find_map(|c| c.downcast_ref::<ErrorCode>()) else {
        return fatal(format!("request to {url} failed: {e:#}"));
    };
    match code {
        ErrorCode::HttpRequestDenied => fatal(format!(
            "request to {url} denied by the sandbox (ErrorCode::HttpRequestDenied): its origin \
             is not in the task's sandbox.network.allow"
        )),
        ErrorCode::DnsTimeout
        | ErrorCode::DnsError(_)
        | ErrorCode::DestinationUnavailable
        | ErrorCode::ConnectionRefused
        | ErrorCode::ConnectionTerminated
        | ErrorCode::ConnectionTimeout
        | ErrorCode::ConnectionReadTimeout
        | ErrorCode::ConnectionWriteTimeout
        | ErrorCode::HttpResponseIncomplete
        | ErrorCode::HttpResponseTimeout => {
            retryable(format!("request to {url} failed: {code:?}"), None)
        }
        other => fatal(format!("request to {url} failed: {other:?}")),
    }
}

/// The error of an answer other than 2xx: the status and the server's `error.message` (or the
/// start of its body); 429 and 5xx are retryable.
fn status_error(status: StatusCode, retry_after_ms: Option<u64>, body: &[u8]) -> HandlerError {
    let detail = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v.pointer("/error/message").and_then(Value::as_str).map(str::to_owned))
        .unwrap_or_else(|| String::from_utf8_lossy(body).into_owned());
    let detail: String = detail.chars().take(ERROR_TEXT_CHARS).collect();
    let message = format!("chat completions answered {status}: {detail}");
    if status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error() {
        retryable(message, retry_after_ms)
    } else {
        fatal(message)
    }
}

async fn call(url: String, model: String, body: Value) -> Result<Value, HandlerError> {
    let text = body.to_string();
    // With Content-Length the body goes out in one piece; without, chunked.
    let request = Request::builder()
        .method(Method::POST)
        .uri(url.as_str())
        .header("content-type", "application/json")
        .header("accept", "application/json")
        .header("content-length", text.len())
        .body(Body::from(text))
        .map_err(|e| fatal(format!("invalid request to {url}: {e}")))?;
    log(Level::Info, &format!("POST {url} (model {model})"));
    let response = Client::new()
        .send(request)
        .await
        .map_err(|e| request_failed(&url, &e))?;
    let status = response.status();
    let retry_after_ms = response
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(|s| s.saturating_mul(1000));
    let mut body = response.into_body();
    let bytes = body
        .contents()
        .await
        .map_err(|e| request_failed(&url, &e))?;
    if !status.is_success() {
        return Err(status_error(status, retry_after_ms, bytes));
    }
    if cancel_requested() {
        return Err(retryable("cancelled".into(), None));
    }
    let answer: Value = serde_json::from_slice(bytes)
        .map_err(|e| fatal(format!("chat completions answered {status} with non-JSON: {e}")))?;
    let Some(content) = answer
        .pointer("/choices/0/message/content")
        .and_then(Value::as_str)
    else {
        return Err(fatal(format!(
            "chat completions answered {status} without choices[0].message.content"
        )));
    };
    let model = answer.get("model").and_then(Value::as_str).unwrap_or(&model);
    let usage = answer.get("usage").cloned().unwrap_or(Value::Null);
    log(Level::Info, &format!("{status}, usage {usage}"));
    Ok(json!({"answer": content, "model": model, "usage": usage}))
}

impl Guest for Component {
    fn handle(ctx: Context, payload: String) -> Result<String, HandlerError> {
        let (url, model, body) = build(&ctx, &payload)?;
        // The model call as the step `model-0`: recorded when it succeeds, loaded (no request)
        // by any later attempt of this execution. An agent loop keys turn N `model-{N}`.
        let turn = 0;
        let reply: Value = step(&format!("model-{turn}"), || {
            if cancel_requested() {
                return Err(retryable("cancelled before the request".into(), None));
            }
            // A cancel while the request is in flight stops the attempt (after the task's
            // sandbox.cancel_grace_ms), even while it waits for the answer.
            wstd::runtime::block_on(call(url, model, body))
        })?;
        Ok(reply.to_string())
    }
}

export!(Component);
