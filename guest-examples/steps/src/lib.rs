//! `steps`: a handler of world `onestep:handler/compute@0.3.0` that does its
//! work as durable steps (docs/steps.md), with the `onestep-durable` helper
//! (`guest-examples/durable`) so that a step reads like
//! `let page = step("fetch-page-3", || fetch(3))?;`.
//!
//! Payload: `{"n": N, "step_ms": M}` (defaults 10 and 100): N steps
//! `step-0` … `step-{N-1}`, each "working" M ms, then recording
//! `{"i": i, "attempt": <the attempt that did the work>}`. A later attempt
//! of the same execution (after a crash or a lost lease) loads the recorded
//! steps instead of working again, so the output tells which attempt did each
//! step's work: `{"steps": N, "attempts": [a0, a1, …], "ran_here": k}`
//! (`ran_here`: steps whose work this attempt did).
//!
//! `{"value_bytes": B}` saves one step of a B-byte string (to reach the
//! host's caps); a refused save is the handler error
//! `step 'big' not saved: <step-error>`.
//!
//! Sleeping (docs/steps.md#sleep): with `"sleep_ms": S` the handler sleeps S
//! ms under the key `nap` after step `sleep_after` (default N / 2), and with
//! `"sleep_until_ms": T` until T ms after the Unix epoch (key `nap-until`).
//! The first attempt records steps `step-0` … up to the sleep and parks: its
//! worker slot and lease are freed. At the wake time the execution runs again
//! from the top: the recorded steps load, the same sleep call finds its wake
//! time passed and returns, and the remaining steps run. The output then also
//! holds `"woke_in_attempt": <the attempt that went on after the sleep>`.

wit_bindgen::generate!({
    path: "../../wit/v0.3",
    world: "onestep:handler/compute@0.3.0",
});

use onestep::handler::host::{Level, cancel_requested, log, progress};
use onestep_durable::{sleep, sleep_until, step};
use serde::Serialize;
use std::time::Duration;

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

struct Steps;

impl Guest for Steps {
    fn handle(ctx: Context, payload: String) -> Result<String, HandlerError> {
        let v: serde_json::Value =
            serde_json::from_str(&payload).map_err(|e| fatal(format!("invalid payload: {e}")))?;
        if let Some(bytes) = v.get("value_bytes").and_then(|n| n.as_u64()) {
            let big: String = step("big", || Ok::<_, HandlerError>("x".repeat(bytes as usize)))?;
            return Ok(serde_json::json!({ "saved": big.len() }).to_string());
        }
        let n = v.get("n").and_then(|n| n.as_u64()).unwrap_or(10);
        let step_ms = v.get("step_ms").and_then(|n| n.as_u64()).unwrap_or(100);
        let sleep_ms = v.get("sleep_ms").and_then(|n| n.as_u64());
        let sleep_until_ms = v.get("sleep_until_ms").and_then(|n| n.as_u64());
        let sleep_after = v
            .get("sleep_after")
            .and_then(|n| n.as_u64())
            .unwrap_or(n / 2);
        let mut attempts = Vec::with_capacity(n as usize);
        let mut ran_here = 0u64;
        let mut woke_in_attempt = None;
        for i in 0..n {
            if i == sleep_after && (sleep_ms.is_some() || sleep_until_ms.is_some()) {
                // The first call records the wake time and does not return: the
                // attempt parks. At the wake time this same call returns `ok`.
                match (sleep_ms, sleep_until_ms) {
                    (Some(ms), _) => sleep("nap", ms),
                    (None, Some(at)) => sleep_until("nap-until", at),
                    (None, None) => Ok(()),
                }?;
                log(
                    Level::Info,
                    &format!("attempt {}: awake after the sleep", ctx.attempt),
                );
                woke_in_attempt = Some(ctx.attempt);
            }
            if cancel_requested() {
                return Err(HandlerError {
                    retryable: true,
                    message: format!("stopped before step {i} of {n}"),
                    retry_after_ms: None,
                });
            }
            progress(i, n, "steps");
            let done: Done = step(&format!("step-{i}"), || -> Result<Done, HandlerError> {
                std::thread::sleep(Duration::from_millis(step_ms));
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
        let mut out = serde_json::json!({ "steps": n, "attempts": attempts, "ran_here": ran_here });
        if let Some(a) = woke_in_attempt {
            out["woke_in_attempt"] = a.into();
        }
        Ok(out.to_string())
    }
}

export!(Steps);
