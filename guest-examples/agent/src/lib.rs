//! `agent`: a handler of world `onestep:handler/handler@0.2.0` that asks an
//! OpenAI-compatible chat-completions endpoint one question (with the `wstd`
//! HTTP client over `wasi:http`) and returns the answer.
//!
//! Payload: `{"prompt": "...", "system"?: "...", "max_tokens"?: N,
//! "base_url"?: "...", "model"?: "..."}`. `base_url` and `model` are looked
//! up in the payload, then in the execution's metadata, then in the task's
//! `handler.params` (the usual place: one endpoint and model per task, a
//! caller overriding them per execution); `system` and `max_tokens` in the
//! payload, then in the params. The request is
//! `POST {base_url}/chat/completions` with `{"model", "messages",
//! "max_tokens"?}`.
//!
//! The guest never holds the API key: the task's
//! `sandbox.network.headers` makes the host add `Authorization` to requests
//! for that origin, and this guest sets no such header itself.
//!
//! Output: `{"answer": choices[0].message.content, "model": the model the
//! server names (else the one asked for), "usage": the server's usage or
//! null}`. Errors: a 429 or 5xx answer is retryable (`retry-after-ms` from a
//! `Retry-After: <seconds>` header when there is one), any other non-2xx is
//! fatal; a request the sandbox refuses (an origin not allowed) is fatal and
//! says so; connection failures and timeouts are retryable.

wit_bindgen::generate!({
    path: "../../wit/v0.2",
    world: "onestep:handler/handler@0.2.0",
    generate_all,
});

use onestep::handler::host::{Level, log};
use serde_json::{Map, Value, json};
use wstd::http::{Body, Client, ErrorCode, Method, Request, StatusCode};

struct Agent;

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

fn parse_object(what: &str, text: &str) -> Result<Map<String, Value>, HandlerError> {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(other) => Err(fatal(format!("{what} is not a JSON object: {other}"))),
        Err(e) => Err(fatal(format!("{what} is not JSON: {e}"))),
    }
}

/// What the request is made of, each value from the first place that has it.
struct Ask {
    url: String,
    model: String,
    body: Value,
}

/// `key` as a string from the first of `sources` that has it (a non-string
/// value is an error naming where it was found).
fn first_string(
    key: &str,
    sources: &[(&str, &Map<String, Value>)],
) -> Result<Option<String>, HandlerError> {
    for (name, map) in sources {
        match map.get(key) {
            None | Some(Value::Null) => continue,
            Some(Value::String(s)) => return Ok(Some(s.clone())),
            Some(other) => {
                return Err(fatal(format!("{name}.{key} must be a string, got {other}")));
            }
        }
    }
    Ok(None)
}

fn ask(ctx: &Context, payload: &str) -> Result<Ask, HandlerError> {
    let payload = parse_object("payload", payload)?;
    let metadata = parse_object("metadata", &ctx.metadata)?;
    let params = parse_object("params", &ctx.params)?;
    let endpoint = [
        ("payload", &payload),
        ("metadata", &metadata),
        ("params", &params),
    ];
    let settings = [("payload", &payload), ("params", &params)];
    let Some(prompt) = first_string("prompt", &[("payload", &payload)])? else {
        return Err(fatal("payload needs \"prompt\": a string".into()));
    };
    let base_url = first_string("base_url", &endpoint)?.ok_or_else(|| {
        fatal(
            "no base_url: set handler.params.base_url (or base_url in the payload or the metadata)"
                .into(),
        )
    })?;
    let model = first_string("model", &endpoint)?.ok_or_else(|| {
        fatal("no model: set handler.params.model (or model in the payload or the metadata)".into())
    })?;
    let mut messages = Vec::new();
    if let Some(system) = first_string("system", &settings)? {
        messages.push(json!({"role": "system", "content": system}));
    }
    messages.push(json!({"role": "user", "content": prompt}));
    let mut body = json!({"model": model, "messages": messages});
    for (name, map) in settings {
        match map.get("max_tokens") {
            None | Some(Value::Null) => continue,
            Some(Value::Number(n)) if n.is_u64() => {
                body["max_tokens"] = Value::Number(n.clone());
                break;
            }
            Some(other) => {
                return Err(fatal(format!(
                    "{name}.max_tokens must be a positive integer, got {other}"
                )));
            }
        }
    }
    let url = format!("{}/chat/completions", base_url.trim_end_matches('/'));
    Ok(Ask { url, model, body })
}

/// A failed request: fatal when the sandbox refused it or it can never
/// succeed as it is; retryable when the connection or the server may do
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
        | ErrorCode::ConnectionLimitReached
        | ErrorCode::HttpResponseIncomplete
        | ErrorCode::HttpResponseTimeout => {
            retryable(format!("request to {url} failed: {code:?}"), None)
        }
        other => fatal(format!("request to {url} failed: {other:?}")),
    }
}

/// The error an answer other than 2xx becomes: the status and the server's
/// `error.message` (or the start of its body).
fn status_error(status: StatusCode, retry_after_ms: Option<u64>, body: &[u8]) -> HandlerError {
    let detail = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| {
            v.pointer("/error/message")
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .unwrap_or_else(|| String::from_utf8_lossy(body).into_owned());
    let detail: String = detail.chars().take(ERROR_TEXT_CHARS).collect();
    let message = format!("chat completions answered {status}: {detail}");
    if status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error() {
        retryable(message, retry_after_ms)
    } else {
        fatal(message)
    }
}

async fn call(ask: Ask) -> Result<String, HandlerError> {
    let text = ask.body.to_string();
    let request = Request::builder()
        .method(Method::POST)
        .uri(ask.url.as_str())
        .header("content-type", "application/json")
        .header("accept", "application/json")
        .header("content-length", text.len())
        .body(Body::from(text))
        .map_err(|e| fatal(format!("invalid request to {}: {e}", ask.url)))?;
    log(
        Level::Info,
        &format!("agent: POST {} (model {})", ask.url, ask.model),
    );
    let response = Client::new()
        .send(request)
        .await
        .map_err(|e| request_failed(&ask.url, &e))?;
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
        .map_err(|e| request_failed(&ask.url, &e))?;
    if !status.is_success() {
        return Err(status_error(status, retry_after_ms, bytes));
    }
    let answer: Value = serde_json::from_slice(bytes).map_err(|e| {
        fatal(format!(
            "chat completions answered {status} with non-JSON: {e}"
        ))
    })?;
    let Some(content) = answer
        .pointer("/choices/0/message/content")
        .and_then(Value::as_str)
    else {
        return Err(fatal(format!(
            "chat completions answered {status} without choices[0].message.content"
        )));
    };
    let model = answer
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or(&ask.model);
    let usage = answer.get("usage").cloned().unwrap_or(Value::Null);
    log(
        Level::Info,
        &format!(
            "agent: {status}, answer of {} characters, usage {usage}",
            content.chars().count()
        ),
    );
    Ok(json!({"answer": content, "model": model, "usage": usage}).to_string())
}

impl Guest for Agent {
    fn handle(ctx: Context, payload: String) -> Result<String, HandlerError> {
        let ask = ask(&ctx, &payload)?;
        wstd::runtime::block_on(call(ask))
    }
}

export!(Agent);
