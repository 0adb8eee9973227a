//! `countdown`: a long task that sleeps in steps and checks
//! `cancel-requested` between them.
//! Payload: `{"steps": N, "step_ms": M}` (defaults 10 and 100).

wit_bindgen::generate!({ path: "../../wit", world: "handler" });

use onestep::handler::host::{Level, cancel_requested, log, progress};
use std::time::Duration;

struct Countdown;

impl Guest for Countdown {
    fn handle(_ctx: Context, payload: String) -> Result<String, HandlerError> {
        let v: serde_json::Value = serde_json::from_str(&payload).map_err(|e| HandlerError {
            retryable: false,
            message: format!("invalid payload: {e}"),
            retry_after_ms: None,
        })?;
        let steps = v.get("steps").and_then(|n| n.as_u64()).unwrap_or(10);
        let step_ms = v.get("step_ms").and_then(|n| n.as_u64()).unwrap_or(100);
        for i in 0..steps {
            if cancel_requested() {
                log(Level::Info, &format!("cancel requested at step {i}"));
                return Err(HandlerError {
                    retryable: true,
                    message: format!("cancelled at step {i} of {steps}"),
                    retry_after_ms: None,
                });
            }
            progress(i, steps, "counting down");
            std::thread::sleep(Duration::from_millis(step_ms));
        }
        Ok(serde_json::json!({ "steps": steps, "step_ms": step_ms }).to_string())
    }
}

export!(Countdown);
