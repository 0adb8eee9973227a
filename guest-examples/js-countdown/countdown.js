// js-countdown: a long-running onestep handler in JavaScript (componentize-js, world
// onestep:handler/compute@0.2.0). Payload {"steps": N, "step_ms": M}: works N steps of about
// M ms each, reporting `progress` after each step and polling `cancel-requested` between
// steps; when asked to stop it returns a retryable "cancelled" handler error. Output:
// {"steps_done": N, "language": "js"}.
import { cancelRequested, log, progress } from "onestep:handler/host@0.2.0";

// Busy-waits about `ms` milliseconds (the guest has clocks; a JS timer would need an event
// loop that a synchronous export does not run).
function work(ms) {
  const until = Date.now() + ms;
  while (Date.now() < until) {
    // spin
  }
}

export function handle(ctx, payload) {
  const { steps = 10, step_ms = 100 } = JSON.parse(payload);
  log("info", `js-countdown: ${steps} steps of ${step_ms} ms`);
  for (let i = 0; i < steps; i++) {
    if (cancelRequested()) {
      log("warn", `js-countdown: cancelled after ${i} steps`);
      throw { retryable: true, message: `cancelled after ${i} of ${steps} steps` };
    }
    work(step_ms);
    progress(BigInt(i + 1), BigInt(steps), `step ${i + 1}`);
  }
  return JSON.stringify({ steps_done: steps, language: "js" });
}
