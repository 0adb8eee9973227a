//! `flaky`: fails with a retryable error until attempt N, then succeeds.
//! Payload: `{"succeed_on_attempt": N}` (default 3).

wit_bindgen::generate!({ path: "../../wit", world: "handler" });

use onestep::handler::host::{Level, log};

struct Flaky;

impl Guest for Flaky {
    fn handle(ctx: Context, payload: String) -> Result<String, HandlerError> {
        let v: serde_json::Value = serde_json::from_str(&payload).map_err(|e| HandlerError {
            retryable: false,
            message: format!("invalid payload: {e}"),
            retry_after_ms: None,
        })?;
        let n = v
            .get("succeed_on_attempt")
            .and_then(|n| n.as_u64())
            .unwrap_or(3);
        if u64::from(ctx.attempt) < n {
            log(
                Level::Warn,
                &format!("attempt {} < {n}: failing", ctx.attempt),
            );
            return Err(HandlerError {
                retryable: true,
                message: format!("flaky: attempt {} of {n}", ctx.attempt),
                retry_after_ms: Some(10),
            });
        }
        Ok(serde_json::json!({ "attempt": ctx.attempt, "succeeded": true }).to_string())
    }
}

export!(Flaky);
