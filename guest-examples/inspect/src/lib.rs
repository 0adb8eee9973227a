//! `inspect`: a handler of world `onestep:handler/compute@0.2.0` (no network) that returns what
//! it was given: `{"params": <the task's handler.params>, "payload": <payload>, "attempt",
//! "task", "namespace", "metadata"}`. The host's tests use it to check what reaches the guest;
//! a task reads its configuration from `params` like this.

wit_bindgen::generate!({
    path: "../../wit/v0.2",
    world: "onestep:handler/compute@0.2.0",
});

use onestep::handler::host::{Level, log};
use serde_json::{Value, json};

struct Inspect;

fn parse(what: &str, text: &str) -> Result<Value, HandlerError> {
    serde_json::from_str(text).map_err(|e| HandlerError {
        retryable: false,
        message: format!("{what} is not JSON: {e}"),
        retry_after_ms: None,
    })
}

impl Guest for Inspect {
    fn handle(ctx: Context, payload: String) -> Result<String, HandlerError> {
        let params = parse("params", &ctx.params)?;
        log(Level::Info, &format!("inspect: params {params}"));
        Ok(json!({
            "params": params,
            "payload": parse("payload", &payload)?,
            "attempt": ctx.attempt,
            "task": ctx.task_name,
            "namespace": ctx.namespace,
            "metadata": parse("metadata", &ctx.metadata)?,
        })
        .to_string())
    }
}

export!(Inspect);
