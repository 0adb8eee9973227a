//! The `{{name}}` onestep handler: a WebAssembly component of world
//! `onestep:handler/handler@0.3.0` (the WIT is in `wit/`) that fetches one URL over `wasi:http`
//! with the `wstd` client and returns what it got. The fetch is a durable step, `fetch`
//! (`src/steps.rs`): a later attempt of the same execution returns what an earlier one fetched
//! instead of fetching again.
//!
//! The URL is the payload's `url`, else `handler.params.url` (handler.yaml). The host sends the
//! request only if its origin is under the task's `sandbox.network.allow`.
//!
//! Output: `{"url", "status", "content_type", "bytes", "text"}` (`text`: the body as UTF-8, its
//! first 2000 characters). A 429 or 5xx answer is a retryable error; any other answer is the
//! result. A refused origin is a fatal error; connection failures and timeouts are retryable.

wit_bindgen::generate!({ path: "wit", world: "onestep:handler/handler@0.3.0", generate_all });

mod steps;

use onestep::handler::host::{Level, cancel_requested, log};
use serde_json::{Value, json};
use steps::step;
use wstd::http::{Body, Client, ErrorCode, Method, Request};

struct Component;

/// How much of the body goes into the result.
const TEXT_CHARS: usize = 2000;

fn error(retryable: bool, message: String) -> HandlerError {
    HandlerError {
        retryable,
        message,
        retry_after_ms: None,
    }
}

/// A failed request: fatal when the sandbox refused it, retryable when the network may do
/// better next time.
fn request_failed(url: &str, e: &wstd::http::Error) -> HandlerError {
    let Some(code) = e.chain().find_map(|c| c.downcast_ref::<ErrorCode>()) else {
        return error(false, format!("request to {url} failed: {e:#}"));
    };
    match code {
        ErrorCode::HttpRequestDenied => error(
            false,
            format!(
                "request to {url} denied by the sandbox (ErrorCode::HttpRequestDenied): its \
                 origin is not in the task's sandbox.network.allow"
            ),
        ),
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
            error(true, format!("request to {url} failed: {code:?}"))
        }
        other => error(false, format!("request to {url} failed: {other:?}")),
    }
}

async fn fetch(url: String) -> Result<Value, HandlerError> {
    let request = Request::builder()
        .method(Method::GET)
        .uri(url.as_str())
        .body(Body::empty())
        .map_err(|e| error(false, format!("invalid request to {url}: {e}")))?;
    log(Level::Info, &format!("GET {url}"));
    let response = Client::new()
        .send(request)
        .await
        .map_err(|e| request_failed(&url, &e))?;
    let status = response.status();
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let mut body = response.into_body();
    let bytes = body
        .contents()
        .await
        .map_err(|e| request_failed(&url, &e))?;
    if status.as_u16() == 429 || status.is_server_error() {
        return Err(error(true, format!("{url} answered {status}")));
    }
    let text: String = String::from_utf8_lossy(bytes).chars().take(TEXT_CHARS).collect();
    Ok(json!({
        "url": url,
        "status": status.as_u16(),
        "content_type": content_type,
        "bytes": bytes.len(),
        "text": text,
    }))
}

impl Guest for Component {
    fn handle(ctx: Context, payload: String) -> Result<String, HandlerError> {
        let params: Value = serde_json::from_str(&ctx.params)
            .map_err(|e| error(false, format!("params are not JSON: {e}")))?;
        let payload: Value = serde_json::from_str(&payload)
            .map_err(|e| error(false, format!("the payload is not JSON: {e}")))?;
        let Some(url) = payload
            .get("url")
            .or_else(|| params.get("url"))
            .and_then(Value::as_str)
        else {
            return Err(error(
                false,
                "no url: give a string `url` in the payload or in handler.params".into(),
            ));
        };
        if cancel_requested() {
            return Err(error(true, "cancelled before the request".into()));
        }
        // A cancel while the request is in flight stops the attempt (after the task's
        // sandbox.cancel_grace_ms), even while it waits for the network. The result is recorded
        // as the step `fetch`; an error (a 5xx to retry) records nothing.
        let fetched: Value = step("fetch", || wstd::runtime::block_on(fetch(url.to_owned())))?;
        Ok(fetched.to_string())
    }
}

export!(Component);
