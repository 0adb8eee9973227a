//! `agent`: a handler of world `onestep:handler/handler@0.3.0` that runs an
//! agent loop against an OpenAI-compatible chat-completions endpoint (with the
//! `wstd` HTTP client over `wasi:http`), every model call and every round of
//! tool calls a durable step (docs/steps.md), so that an attempt that stops
//! (a crash, a lost lease, a retryable error) resumes at the turn it was on:
//! the next attempt loads the recorded turns instead of asking the model again.
//!
//! Payload: `{"prompt": "...", "system"?: "...", "max_tokens"?: N,
//! "base_url"?: "...", "model"?: "...", "tools"?: ["add"], "max_turns"?: N}`.
//! `base_url` and `model` are looked up in the payload, then in the
//! execution's metadata, then in the task's `handler.params` (the usual place:
//! one endpoint and model per task, a caller overriding them per execution);
//! `system`, `max_tokens`, `tools` and `max_turns` in the payload, then in the
//! params. Each turn is `POST {base_url}/chat/completions` with `{"model",
//! "messages", "max_tokens"?, "tools"?}`, recorded as the step `model-{turn}`
//! (the assistant's message, the model the server named and its usage).
//!
//! Without `tools` the loop is one turn: the model's answer. With `tools`
//! (built-in tools by name; the one there is, `add`, adds two numbers `a` and
//! `b`) the request offers them as OpenAI `tools`; when the model's message
//! asks for tool calls, the handler runs them, records their results as the
//! step `tool-{turn}`, appends the assistant's message and the `tool` messages
//! to the conversation and asks again, up to `max_turns` model calls (default
//! 8). A tool's bad arguments or an unknown tool become the tool's answer
//! (`error: ...`) for the model to read, not a handler error.
//!
//! The guest never holds the API key: the task's
//! `sandbox.network.headers` makes the host add `Authorization` to requests
//! for that origin, and this guest sets no such header itself.
//!
//! Output: `{"answer": the last message's content, "model": the model the
//! server names in its last answer (else the one asked for), "usage": the
//! server's usage (summed over the turns; null when it gave none), "turns":
//! model calls of the conversation, "tool_calls": tool calls run,
//! "model_calls": {"made": asked by this attempt, "loaded": recorded by an
//! earlier attempt}}`. Errors: a 429 or 5xx answer is retryable
//! (`retry-after-ms` from a `Retry-After: <seconds>` header when there is
//! one), any other non-2xx is fatal; a request the sandbox refuses (an origin
//! not allowed) is fatal and says so; connection failures and timeouts are
//! retryable; no answer within `max_turns` is fatal; a refused step call is
//! the `onestep-durable` helper's error (`fenced` and `unavailable`
//! retryable).

wit_bindgen::generate!({
    path: "../../wit/v0.3",
    world: "onestep:handler/handler@0.3.0",
    generate_all,
});

use onestep::handler::host::{Level, cancel_requested, log, progress};
use onestep_durable::step;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use wstd::http::{Body, Client, ErrorCode, Method, Request, StatusCode};

struct Agent;

/// How much of an error answer's text goes into the handler error.
const ERROR_TEXT_CHARS: usize = 300;

/// Model calls of one conversation when the task and the payload set no `max_turns`.
const DEFAULT_MAX_TURNS: u64 = 8;

/// A refused step call (the `onestep-durable` crate's error) as this handler's error.
impl From<onestep_durable::Error> for HandlerError {
    fn from(e: onestep_durable::Error) -> Self {
        HandlerError {
            retryable: e.retryable,
            message: e.message,
            retry_after_ms: None,
        }
    }
}

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

/// What the conversation is made of, each value from the first place that has it.
struct Ask {
    url: String,
    model: String,
    /// The request without `messages` (`model`, `max_tokens`, `tools`).
    body: Value,
    /// The conversation so far: the system message (if any) and the prompt.
    messages: Vec<Value>,
    /// Whether tools are offered (the model may then ask for tool calls).
    tools: bool,
    max_turns: u64,
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
    let mut body = json!({"model": model});
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
    let mut tools = Vec::new();
    if let Some((name, value)) = first_value("tools", &settings) {
        let names = value.as_array().ok_or_else(|| {
            fatal(format!(
                "{name}.tools must be an array of tool names, got {value}"
            ))
        })?;
        for tool in names {
            match tool.as_str().and_then(tool_spec) {
                Some(spec) => tools.push(spec),
                None => {
                    return Err(fatal(format!(
                        "{name}.tools: no built-in tool {tool} (there is: \"add\")"
                    )));
                }
            }
        }
    }
    let max_turns = match first_value("max_turns", &settings) {
        None => DEFAULT_MAX_TURNS,
        Some((_, Value::Number(n))) if n.as_u64().is_some_and(|n| n > 0) => {
            n.as_u64().unwrap_or(DEFAULT_MAX_TURNS)
        }
        Some((name, other)) => {
            return Err(fatal(format!(
                "{name}.max_turns must be a positive integer, got {other}"
            )));
        }
    };
    let has_tools = !tools.is_empty();
    if has_tools {
        body["tools"] = Value::Array(tools);
    }
    let url = format!("{}/chat/completions", base_url.trim_end_matches('/'));
    Ok(Ask {
        url,
        model,
        body,
        messages,
        tools: has_tools,
        max_turns,
    })
}

/// `key` from the first of `sources` that has it (not null), with the source's name.
fn first_value<'a>(
    key: &str,
    sources: &[(&'a str, &'a Map<String, Value>)],
) -> Option<(&'a str, &'a Value)> {
    sources
        .iter()
        .find_map(|(name, map)| map.get(key).filter(|v| !v.is_null()).map(|v| (*name, v)))
}

/// The OpenAI `tools` entry of the built-in tool `name`.
fn tool_spec(name: &str) -> Option<Value> {
    match name {
        "add" => Some(json!({
            "type": "function",
            "function": {
                "name": "add",
                "description": "Adds two numbers and returns the sum.",
                "parameters": {
                    "type": "object",
                    "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                    "required": ["a", "b"],
                },
            },
        })),
        _ => None,
    }
}

/// Runs one tool call of the model (`{"id", "function": {"name", "arguments"}}`) and
/// returns the `tool` message answering it. A bad call is answered with `error: ...`.
fn run_tool(call: &Value) -> Value {
    let id = call["id"].as_str().unwrap_or_default();
    let name = call.pointer("/function/name").and_then(Value::as_str);
    let arguments = call
        .pointer("/function/arguments")
        .and_then(Value::as_str)
        .unwrap_or("{}");
    let content = match name {
        Some("add") => add(arguments).unwrap_or_else(|e| format!("error: {e}")),
        Some(other) => format!("error: no tool named {other}"),
        None => "error: the tool call names no function".to_string(),
    };
    log(
        Level::Info,
        &format!("agent: tool {} -> {content}", name.unwrap_or("?")),
    );
    json!({"role": "tool", "tool_call_id": id, "content": content})
}

/// The `add` tool: `{"a": number, "b": number}` → their sum (an integer when both are).
fn add(arguments: &str) -> Result<String, String> {
    let args: Value =
        serde_json::from_str(arguments).map_err(|e| format!("arguments are not JSON: {e}"))?;
    let (a, b) = (&args["a"], &args["b"]);
    if let (Some(a), Some(b)) = (a.as_i64(), b.as_i64())
        && let Some(sum) = a.checked_add(b)
    {
        return Ok(sum.to_string());
    }
    match (a.as_f64(), b.as_f64()) {
        (Some(a), Some(b)) => Ok((a + b).to_string()),
        _ => Err(format!("add needs numbers a and b, got {args}")),
    }
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

/// One model call: the step `model-{turn}`'s value.
#[derive(Serialize, Deserialize)]
struct Reply {
    /// The assistant's message (`content`, and `tool_calls` when it asks for tools).
    message: Value,
    /// The model the server named (else the one asked for).
    model: String,
    /// The server's usage, or null.
    usage: Value,
}

impl Reply {
    /// The tool calls the message asks for (none when it answers).
    fn tool_calls(&self) -> &[Value] {
        self.message["tool_calls"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
    }
}

async fn call(ask: &Ask, messages: &[Value]) -> Result<Reply, HandlerError> {
    let mut body = ask.body.clone();
    body["messages"] = Value::from(messages);
    let text = body.to_string();
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
    let Some(message) = answer.pointer("/choices/0/message").cloned() else {
        return Err(fatal(format!(
            "chat completions answered {status} without choices[0].message"
        )));
    };
    let model = answer
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or(&ask.model)
        .to_string();
    let usage = answer.get("usage").cloned().unwrap_or(Value::Null);
    let reply = Reply {
        message,
        model,
        usage,
    };
    let asks_tools = ask.tools && !reply.tool_calls().is_empty();
    let Some(content) = reply.message["content"].as_str() else {
        if asks_tools {
            log(
                Level::Info,
                &format!(
                    "agent: {status}, {} tool call(s) asked",
                    reply.tool_calls().len()
                ),
            );
            return Ok(reply);
        }
        return Err(fatal(format!(
            "chat completions answered {status} without choices[0].message.content"
        )));
    };
    log(
        Level::Info,
        &format!(
            "agent: {status}, answer of {} characters, usage {}",
            content.chars().count(),
            reply.usage
        ),
    );
    Ok(reply)
}

/// Adds `usage` into `total`: the first usage as it is, then each top-level count summed.
fn add_usage(total: &mut Value, usage: &Value) {
    let (Some(sum), Some(more)) = (total.as_object_mut(), usage.as_object()) else {
        if total.is_null() {
            *total = usage.clone();
        }
        return;
    };
    for (key, value) in more {
        if let (Some(a), Some(b)) = (sum.get(key).and_then(Value::as_u64), value.as_u64()) {
            sum.insert(key.clone(), Value::from(a.saturating_add(b)));
        }
    }
}

/// The agent loop: each model call is the step `model-{turn}`, each round of tool calls
/// the step `tool-{turn}`; recorded turns are loaded, not asked again.
fn converse(ask: Ask) -> Result<String, HandlerError> {
    let mut messages = ask.messages.clone();
    let mut usage = Value::Null;
    let (mut made, mut tool_calls) = (0u64, 0u64);
    for turn in 0..ask.max_turns {
        if cancel_requested() {
            return Err(retryable(format!("stopped before turn {turn}"), None));
        }
        progress(turn, ask.max_turns, "turns");
        let reply: Reply = step(&format!("model-{turn}"), || {
            made += 1;
            wstd::runtime::block_on(call(&ask, &messages))
        })?;
        add_usage(&mut usage, &reply.usage);
        let calls = if ask.tools { reply.tool_calls() } else { &[] };
        if calls.is_empty() {
            let answer = reply.message["content"].as_str().unwrap_or_default();
            let turns = turn + 1;
            log(
                Level::Info,
                &format!(
                    "agent: answered after {turns} turn(s): {made} model call(s) made, {} loaded",
                    turns - made
                ),
            );
            return Ok(json!({
                "answer": answer,
                "model": reply.model,
                "usage": usage,
                "turns": turns,
                "tool_calls": tool_calls,
                "model_calls": {"made": made, "loaded": turns - made},
            })
            .to_string());
        }
        let results: Vec<Value> = step(&format!("tool-{turn}"), || {
            Ok::<_, HandlerError>(calls.iter().map(run_tool).collect())
        })?;
        tool_calls += calls.len() as u64;
        messages.push(reply.message.clone());
        messages.extend(results);
    }
    Err(fatal(format!(
        "no answer after max_turns = {} model calls",
        ask.max_turns
    )))
}

impl Guest for Agent {
    fn handle(ctx: Context, payload: String) -> Result<String, HandlerError> {
        converse(ask(&ctx, &payload)?)
    }
}

export!(Agent);
