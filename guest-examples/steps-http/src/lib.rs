//! `steps-http`: durable steps (docs/steps.md) whose work is an outbound HTTP
//! request, in world `onestep:handler/handler@0.3.0` (the `steps` guest's
//! world, `compute`, has no `wasi:http`).
//!
//! Payload: `{"n": N, "step_ms": M, "record_url": URL}` (defaults 10 and 20;
//! `record_url` required): N steps `step-0` … `step-{N-1}`. Each step's work
//! waits M ms, then POSTs `{"execution", "key", "attempt", "worker"}` (this
//! execution's id, the step's key, this attempt's number and the worker's id)
//! as JSON to URL, and needs a 2xx answer; the step then records
//! `{"i": i, "attempt": <the attempt that did the work>}`. A later attempt of
//! the same execution loads the recorded steps instead of working again, so
//! the server at URL sees each key once, plus once more for each attempt that
//! stopped between a step's request and its save (the end-to-end crash test,
//! `tests/tests/e2e/steps_chaos.rs`, counts them).
//!
//! Output (as the `steps` guest's): `{"steps": N, "attempts": [a0, a1, …],
//! "ran_here": k}`: which attempt did each step's work, and how many steps'
//! work this attempt did.
//!
//! Errors: a request the sandbox refuses, or an answer other than 2xx, is a
//! fatal handler error naming it; a connection failure is retryable; a refused
//! step call is the error of the `onestep-durable` helper (`fenced` and
//! `unavailable` retryable).

wit_bindgen::generate!({
    path: "../../wit/v0.3",
    world: "onestep:handler/handler@0.3.0",
    generate_all,
});

use onestep::handler::host::{Level, cancel_requested, log, progress};
use onestep_durable::step;
use serde::Serialize;
use std::time::Duration;
use wstd::http::{Body, Client, ErrorCode, Method, Request};

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

#[derive(Serialize, serde::Deserialize)]
struct Done {
    i: u64,
    attempt: u32,
}

/// POSTs `body` to `url`; a 2xx answer is `Ok`.
async fn post(url: &str, body: String) -> Result<(), HandlerError> {
    let request = Request::builder()
        .method(Method::POST)
        .uri(url)
        .header("content-type", "application/json")
        .header("content-length", body.len())
        .body(Body::from(body))
        .map_err(|e| fatal(format!("invalid request to {url}: {e}")))?;
    let response = Client::new().send(request).await.map_err(|e| {
        let code = e
            .chain()
            .find_map(|c| c.downcast_ref::<ErrorCode>())
            .cloned();
        let message = format!(
            "POST {url} failed: {}",
            match &code {
                Some(code) => format!("{code:?}"),
                None => format!("{e:#}"),
            }
        );
        match code {
            Some(ErrorCode::HttpRequestDenied) | None => fatal(message),
            Some(_) => HandlerError {
                retryable: true,
                message,
                retry_after_ms: None,
            },
        }
    })?;
    let status = response.status();
    if !status.is_success() {
        return Err(fatal(format!("POST {url} answered {status}")));
    }
    Ok(())
}

struct StepsHttp;

impl Guest for StepsHttp {
    fn handle(ctx: Context, payload: String) -> Result<String, HandlerError> {
        let v: serde_json::Value =
            serde_json::from_str(&payload).map_err(|e| fatal(format!("invalid payload: {e}")))?;
        let n = v.get("n").and_then(|n| n.as_u64()).unwrap_or(10);
        let step_ms = v.get("step_ms").and_then(|n| n.as_u64()).unwrap_or(20);
        let Some(url) = v.get("record_url").and_then(|u| u.as_str()) else {
            return Err(fatal("payload needs \"record_url\": a string".into()));
        };
        let mut attempts = Vec::with_capacity(n as usize);
        let mut ran_here = 0u64;
        for i in 0..n {
            if cancel_requested() {
                return Err(HandlerError {
                    retryable: true,
                    message: format!("stopped before step {i} of {n}"),
                    retry_after_ms: None,
                });
            }
            progress(i, n, "steps");
            let key = format!("step-{i}");
            let done: Done = step(&key, || -> Result<Done, HandlerError> {
                std::thread::sleep(Duration::from_millis(step_ms));
                let body = serde_json::json!({
                    "execution": ctx.execution_id,
                    "key": key,
                    "attempt": ctx.attempt,
                    "worker": ctx.worker_id,
                });
                wstd::runtime::block_on(post(url, body.to_string()))?;
                ran_here += 1;
                Ok(Done {
                    i,
                    attempt: ctx.attempt,
                })
            })?;
            attempts.push(done.attempt);
        }
        log(
            Level::Info,
            &format!("attempt {}: {ran_here} of {n} steps ran here", ctx.attempt),
        );
        Ok(
            serde_json::json!({ "steps": n, "attempts": attempts, "ran_here": ran_here })
                .to_string(),
        )
    }
}

export!(StepsHttp);
