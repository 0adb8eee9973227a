// js-echo: an onestep handler written in JavaScript (componentize-js, world
// onestep:handler/compute@0.2.0). Returns {"echo": <payload>, "attempt", "task",
// "params": <the task's handler.params>, "language": "js"}; a payload of
// {"fail": "message"} returns a retryable handler error instead.
import { log } from "onestep:handler/host@0.2.0";

export function handle(ctx, payload) {
  const data = JSON.parse(payload);
  if (data !== null && typeof data === "object" && "fail" in data) {
    // A thrown plain object is the `handler-error` (fields in camelCase; u64 as BigInt).
    throw { retryable: true, message: String(data.fail), retryAfterMs: 1000n };
  }
  log("info", `js-echo attempt ${ctx.attempt} of ${ctx.taskName}`);
  return JSON.stringify({
    echo: data,
    attempt: ctx.attempt,
    task: ctx.taskName,
    params: JSON.parse(ctx.params),
    language: "js",
  });
}
