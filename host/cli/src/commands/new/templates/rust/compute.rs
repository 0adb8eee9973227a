//! The `{{name}}` onestep handler: a WebAssembly component of world
//! `onestep:handler/compute@0.3.0` (the WIT is in `wit/`). It gets the payload and a context
//! (execution id, attempt, task, namespace, metadata, and the task's `params` from
//! handler.yaml) and returns JSON output or a handler error.
//!
//! Payload `{"name": "world"}` -> `{"message": "Hello, world!", "attempt": 1}`, with the greeting
//! from `params.greeting`. The message is made in a durable step, `greeting` (`src/steps.rs`):
//! a later attempt of the same execution loads it instead of making it again.

wit_bindgen::generate!({ path: "wit", world: "onestep:handler/compute@0.3.0" });

mod steps;

use onestep::handler::host::{Level, log};
use serde_json::{Value, json};
use steps::step;

struct Component;

/// An error not worth retrying: the same input fails the same way.
fn fatal(message: String) -> HandlerError {
    HandlerError {
        retryable: false,
        message,
        retry_after_ms: None,
    }
}

impl Guest for Component {
    fn handle(ctx: Context, payload: String) -> Result<String, HandlerError> {
        let params: Value = serde_json::from_str(&ctx.params)
            .map_err(|e| fatal(format!("params are not JSON: {e}")))?;
        let payload: Value = serde_json::from_str(&payload)
            .map_err(|e| fatal(format!("the payload is not JSON: {e}")))?;
        let Some(name) = payload.get("name").and_then(Value::as_str) else {
            return Err(fatal("the payload needs a string `name`".into()));
        };
        let greeting = params
            .get("greeting")
            .and_then(Value::as_str)
            .unwrap_or("Hello");
        log(
            Level::Info,
            &format!("attempt {} of execution {}", ctx.attempt, ctx.execution_id),
        );
        // A unit of work recorded as a step: real handlers put their expensive or side-effecting
        // work here (a download, a model call, a payment with an idempotency key).
        let message: String = step("greeting", || Ok(format!("{greeting}, {name}!")))?;
        Ok(json!({"message": message, "attempt": ctx.attempt}).to_string())
    }
}

export!(Component);
